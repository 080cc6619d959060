"""What speculation keeps in ``<state>/speculation/``: the cost model per engine, target, draft
and device (``costs/``), and the draft's observations per engine, target, draft and kind of
speculation (``acceptance/``); the identities they are keyed by, and the stated default costs
where nothing was calibrated."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from filelock import FileLock
from pydantic import ValidationError

from backend import machine
from backend.errors import StatedError
from backend.home import home
from backend.serve.profiles import LaunchPlan, get_profile
from backend.serve.speculation.costs import AcceptanceRecord, CostModel, Observation

MAX_OBSERVATIONS = 50
"""Observations kept per (engine, model, draft); the newest win."""

# Step cost at K drafted tokens with nothing accepted, in plain steps: SmolLM2-135M with a
# 1-layer DFlash draft, the most expensive rows measured (a larger target's steps cost less
# relative to plain, so these do not overstate a gain there). CPU: about the highest of four
# calibrations on the 2-core Xeon VM (benchmarks/RESULTS.md, section "Speculation that pays on
# the 2-core CPU"); GPU: `agent backend calibrate` on an H200 (section "Speculation that pays:
# tuned draft length vs fixed 15, on an NVIDIA H200"). 0.85 = the low end of the measured
# efficiency at partial acceptance (docs/design/speculation-costs.md).
_DEFAULT_RATIOS = {"cpu": {1: 2.3, 2: 2.8, 3: 3.2, 5: 4.8, 7: 5.5, 15: 8.3},
                   "gpu": {1: 1.81, 2: 1.96, 3: 1.93, 5: 2.36, 7: 2.64, 15: 4.76}}
_DEFAULT_EFFICIENCY = 0.85


class TuningError(StatedError, RuntimeError):
    """A stored cost model or acceptance record could not be read or written."""


def file_id(path: Path) -> str:
    """Name, size and modification time: a retrained draft of the same name and shape (same
    size) must not inherit the old one's record."""
    try:
        st = path.stat()
        return f"{path.name}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return path.name


def _installed(binary: Path) -> bool:
    """True for a binary the product built into the home (``<engines>/<key>/bin/…``)."""
    return binary.parent.name == "bin" and binary.parent.parent.parent == home().engines


def engine_key(binary: Path) -> str:
    """The engine's key: its install folder's name (build, CPU tag or CUDA) for an engine the
    product built, else the binary's path, size and time (a registered system engine, which
    can be upgraded in place)."""
    return binary.parent.parent.name if _installed(binary) else f"{binary}:{file_id(binary)}"


def device_id(binary: Path) -> str:
    """The device a server of ``binary`` decodes on: GPU names for a CUDA build (or any
    binary the product did not build, when the machine has a GPU), else 'cpu'."""
    if _installed(binary) and "cuda" not in engine_key(binary).lower():
        return "cpu"
    gpus = machine.gpu_names()
    return "; ".join(gpus) if gpus else "cpu"


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _speculation_dir() -> Path:
    return home().state / "speculation"


def costs_path(plan: LaunchPlan, device: str) -> Path:
    """Where the cost model of ``plan``'s engine, target and draft on ``device`` is stored."""
    draft = file_id(plan.draft) if plan.draft else "-"
    return _speculation_dir() / "costs" / (
        _key(engine_key(plan.binary), file_id(plan.model), draft, device) + ".json")


def acceptance_path(plan: LaunchPlan) -> Path:
    """Where the observations of ``plan``'s draft with its target are stored, per kind of
    speculation: a ``dflash+ngram`` server's ``draft_n`` counts n-gram drafts too, so its
    record is its own; ``dflash`` and ``dflash-fixed`` (the draft model alone) share one."""
    draft = file_id(plan.draft) if plan.draft else "-"
    kinds = ",".join(get_profile(plan.profile).spec_types)
    return _speculation_dir() / "acceptance" / (
        _key(engine_key(plan.binary), file_id(plan.model), draft, kinds) + ".json")


def _offloads(plan: LaunchPlan) -> bool:
    """True unless the preset keeps the target or the draft on the CPU (``gpu_layers`` or
    ``draft_gpu_layers`` 0)."""
    return all(v is None or v != "0" for v in (plan.options.gpu_layers,
                                                plan.options.draft_gpu_layers))


def default_costs(plan: LaunchPlan, device: str) -> CostModel:
    """The stated default cost model (the most expensive rows measured, see above): the CPU's
    unless the plan decodes on a GPU with both models offloaded."""
    ratios = _DEFAULT_RATIOS["gpu" if device != "cpu" and _offloads(plan) else "cpu"]
    return CostModel(source="default", engine=engine_key(plan.binary),
                     model=file_id(plan.model),
                     draft=file_id(plan.draft) if plan.draft else "-", device=device,
                     step_ratio=dict(ratios),
                     efficiency={k: _DEFAULT_EFFICIENCY for k in ratios})


def _write_json(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file of its own, then a rename)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise TuningError(f"cannot write {path}: {exc}") from exc


def save_costs(costs: CostModel, plan: LaunchPlan) -> Path:
    """Store ``costs`` for ``plan`` (keyed by engine, target, draft, device); returns the path.
    Raises :class:`TuningError`."""
    path = costs_path(plan, costs.device)
    _write_json(path, costs.model_dump_json(indent=2))
    return path


def load_costs(plan: LaunchPlan, device: str,
               note: Callable[[str], None] | None = None) -> CostModel:
    """The calibrated cost model for ``plan`` on ``device``, else :func:`default_costs`.

    A stored file that cannot be read is said through ``note`` and the default is used: a
    damaged file never stops a launch.
    """
    path = costs_path(plan, device)
    if path.is_file():
        try:
            return CostModel.model_validate_json(path.read_text("utf-8"))
        except (OSError, ValueError, ValidationError) as exc:
            if note:
                note(f"ignoring the damaged cost model {path} ({type(exc).__name__}); "
                     "run `agent backend calibrate` again")
    return default_costs(plan, device)


def load_observations(plan: LaunchPlan,
                      note: Callable[[str], None] | None = None) -> list[Observation]:
    """The stored observations of ``plan``'s draft, oldest first; a damaged record is said
    through ``note`` and treated as empty."""
    path = acceptance_path(plan)
    if not path.is_file():
        return []
    try:
        return AcceptanceRecord.model_validate_json(path.read_text("utf-8")).observations
    except (OSError, ValueError, ValidationError) as exc:
        if note:
            note(f"ignoring the damaged acceptance record {path} ({type(exc).__name__})")
        return []


def record(plan: LaunchPlan, new: Iterable[Observation]) -> None:
    """Append observations of ``plan``'s draft (the newest :data:`MAX_OBSERVATIONS` kept).
    Raises :class:`TuningError` when the record cannot be written."""
    new = [o for o in new if o.draft_n > 0 or o.tokens > 0 or o.failed]
    if not new or plan.draft is None:
        return
    path = acceptance_path(plan)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire(timeout=30)
    except (OSError, TimeoutError) as exc:
        raise TuningError(f"cannot lock {path}: {exc}") from exc
    try:  # sessions ending together must not lose each other's observations
        kept = (load_observations(plan) + new)[-MAX_OBSERVATIONS:]
        _write_json(path, AcceptanceRecord(observations=kept).model_dump_json())
    finally:
        lock.release()


def record_turns(plan: LaunchPlan, timings: Iterable[dict], source: Literal[
        "bench", "session"] = "session", n_max: int | None = None,
        temperature: float | None = None) -> int:
    """Record llama-server ``timings`` of requests served by ``plan`` (a server that drafted
    with length ``plan.draft_n_max``, or ``n_max`` when the requests carried that length
    themselves: :func:`per_request_cap`), sampled at ``temperature``; returns how many
    carried drafts. Requests that drafted nothing count too (their tokens, at zero
    acceptance). Raises :class:`TuningError`."""
    k = effective_n_max(plan) if n_max is None else n_max
    if not k:
        return 0
    now = datetime.now(UTC)
    obs = []
    for t in timings:
        try:
            obs.append(Observation(source=source, n_max=k, draft_n=int(t.get("draft_n") or 0),
                                   accepted=int(t.get("draft_n_accepted") or 0),
                                   tokens=int(t.get("predicted_n") or 0),
                                   decode_ms=float(t.get("predicted_ms") or 0.0), at=now,
                                   temperature=temperature))
        except (TypeError, ValueError, ValidationError):
            continue  # a malformed timings object is not evidence either way
    record(plan, obs)
    return sum(1 for o in obs if o.draft_n)


def effective_n_max(plan: LaunchPlan) -> int:
    """The draft length a server of ``plan`` drafts with (0 when it loads no draft); for a
    server that takes the length per request, the longest a request may ask for."""
    profile = get_profile(plan.profile)
    if not profile.needs_draft or plan.draft is None:
        return 0
    return plan.draft_n_max if plan.draft_n_max is not None else (profile.draft_n_max or 0)
