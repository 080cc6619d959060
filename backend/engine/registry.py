"""The installed engines: each in ``<cache>/engines/<key>/`` with an ``engine.json`` manifest;
the key covers engine, version and configure flags (which include the CPU features the build
uses: :mod:`backend.engine.cpu`), so a second build with the same inputs is a no-op and a build
for another CPU gets its own key. An engine whose CPU features this machine lacks is never picked
(it would die with SIGILL). An existing binary can be registered as the ``system`` engine.

The manifest names a built binary relative to the engine's folder, so a copied or moved home
runs its own binary, not the one of the home it came from (issue 28 item 7); a manifest written
before, with the absolute path, is read as relative to its folder too (:func:`read_engine`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from backend.engine.cpu import missing_features
from backend.errors import StatedError
from backend.home import home

EngineName = Literal["llama.cpp", "beellama", "system"]
RPC_SERVER = "rpc-server"
"""The name ``rpc-server`` is installed under beside ``llama-server``."""


class BuildError(StatedError, RuntimeError):
    """A build step failed; carries the step name, the log path and the log's last lines."""

    def __init__(self, step: str, message: str, log: Path | None = None, tail: str = ""):
        self.step, self.log, self.tail = step, log, tail
        where = f" (full log: {log})" if log else ""
        what = "cannot use that binary" if step == "register" else \
            f"engine build failed at step '{step}'"
        super().__init__(f"{what}: {message}{where}")


class Engine(BaseModel):
    """An installed engine, as recorded in its ``engine.json``."""

    @property
    def templates(self) -> Path:
        """Chat templates shipped with the source tree (``<engine>/templates/*.jinja``)."""
        return self.binary.parent.parent / "templates"

    engine: EngineName
    version: str
    key: str
    binary: Path
    configure_flags: list[str] = []
    installed_at: float
    cpu_features: list[str] | None = None
    """CPU features the binary executes (``/proc/cpuinfo`` names); None for a build made before
    engines were keyed by CPU (built with ``-march=native``: unknown, and AMX-enabled)."""
    cpu_tag: str = ""
    source: str = ""
    """What was built: a folder, an archive (with its sha256) or a git URL and ref."""
    patches: list[str] = []
    """The product's patches applied to the source (:data:`SDIST_PATCHES` names)."""
    flavour: str | None = None
    """The flavour the built binary's ``--help`` showed (:mod:`backend.engine.flavour`), or None."""
    rpc_server: Path | None = None
    """The ``rpc-server`` built beside ``llama-server`` (``GGML_RPC=ON``), or None: the engine
    can then neither be a worker nor use workers (:mod:`backend.serve.rpc`)."""
    rpc_protocol: str | None = None
    """The RPC protocol version the source declares (``7.0.0``: ``ggml/include/ggml-rpc.h``);
    a server and its workers must agree on major and minor (ggml-rpc refuses otherwise)."""


def engine_key(engine: str, version: str, flags: list[str], cpu_tag: str = "",
               flavour: str = "", source_digest: str = "") -> str:
    """Directory name for an engine: readable prefix (engine, version, the flavour such as
    ``bee-old`` when known, cpu/cuda, the CPU target's tag such as ``avx512``) plus a hash of the
    flags (which hold every CPU feature option) and of the source (``source_digest``)."""
    digest = hashlib.sha256("\n".join([*flags, source_digest]).encode()).hexdigest()[:10]
    kind = "cuda" if "-DGGML_CUDA=ON" in flags else "cpu"
    return "-".join(part for part in (engine, version, flavour, kind, cpu_tag, digest) if part)


def read_engine(manifest: Path) -> Engine:
    """The engine an ``engine.json`` records, its binary as a path on this machine: a relative
    path is taken from the manifest's folder. Raises ``OSError`` and ``ValueError``."""
    engine = Engine.model_validate_json(manifest.read_text("utf-8"))
    worker = engine.rpc_server
    return engine.model_copy(update={
        "binary": _binary_in(engine, manifest.parent, engine.binary),
        "rpc_server": _binary_in(engine, manifest.parent, worker) if worker else None})


def _binary_in(engine: Engine, folder: Path, binary: Path) -> Path:
    """Where ``binary`` of ``engine``, recorded in ``folder``'s manifest, is."""
    if not binary.is_absolute():
        return folder / binary
    if engine.engine != "system" and engine.key in binary.parts:
        # A manifest written before paths were relative: the absolute path in the home it was
        # built in, which a copied or moved home still names. The part below the engine's
        # folder is where it is in this one.
        parts = binary.parts
        below = parts[len(parts) - parts[::-1].index(engine.key):]
        return folder.joinpath(*below)
    return binary


def list_engines() -> list[Engine]:
    """Installed engines, newest first."""
    found = []
    for manifest in home().engines.glob("*/engine.json"):
        try:
            found.append(read_engine(manifest))
        except ValueError:
            continue
    return sorted(found, key=lambda e: e.installed_at, reverse=True)


def cpu_mismatch(engine: Engine, features: frozenset[str] | None = None) -> str | None:
    """Why ``engine`` cannot run on this CPU (``features``, default the real ones), or None.

    A ``system`` engine is the user's own binary and is not checked.
    """
    if engine.engine == "system":
        return None
    if engine.cpu_features is None:
        return (f"engine {engine.key} was built with -march=native before engines were keyed "
                "by CPU (its instructions are unknown and it enables the crashing AMX path)")
    lacking = missing_features(engine.cpu_features, features)
    if lacking:
        return (f"engine {engine.key} was built for a CPU with {', '.join(lacking)}, which "
                "this CPU lacks (it would die with SIGILL)")
    return None


def unusable_engines(features: frozenset[str] | None = None) -> list[tuple[Engine, str]]:
    """Installed engines that are skipped on this CPU, each with the reason."""
    return [(e, why) for e in list_engines()
            if e.binary.is_file() and (why := cpu_mismatch(e, features)) is not None]


def write_manifest(engine: Engine) -> None:
    """Write ``engine``'s ``engine.json`` atomically, its binaries named relative to the
    engine's folder."""
    target = home().engines / engine.key / "engine.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    if engine.binary.is_relative_to(target.parent):
        # Relative to the engine's folder: the home can be copied or moved as it is.
        engine = engine.model_copy(update={"binary": engine.binary.relative_to(target.parent)})
    if engine.rpc_server is not None and engine.rpc_server.is_relative_to(target.parent):
        engine = engine.model_copy(update={
            "rpc_server": engine.rpc_server.relative_to(target.parent)})
    tmp = target.with_suffix(".tmp")
    tmp.write_text(engine.model_dump_json(indent=2), "utf-8")
    os.replace(tmp, target)


def register_system(binary: Path) -> Engine:
    """Register an existing ``llama-server`` as the ``system`` engine.

    Raises :class:`BuildError` when the path is not an executable that answers ``--version``.
    """
    path = Path(shutil.which(str(binary)) or binary).expanduser().resolve()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BuildError("register", f"{binary} is not an executable file; give the path of "
                         "a llama-server binary")
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError("register", f"{path} --version did not run: {exc}") from exc
    text = proc.stdout + proc.stderr
    match = re.search(r"version:\s*(\S+)", text)
    if proc.returncode != 0 or not match:
        first = (text.strip().splitlines() or ["nothing"])[0][:120]
        raise BuildError("register", f"{binary} does not look like llama-server (its "
                         f"--version printed {first!r}, not 'version: N'); give the path of "
                         "a llama-server binary")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    engine = Engine(engine="system", version=match.group(1), key=f"system-{digest}",
                    binary=path, installed_at=time.time(), cpu_features=[])
    write_manifest(engine)
    return engine
