"""Reading and atomically writing text files while keeping their encoding, line endings,
trailing newline and mode."""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tools.base import ToolError

MAX_EDIT_BYTES = 5 * 2**20
_BOM = b"\xef\xbb\xbf"


@dataclass
class TextFile:
    """A decoded text file. ``text`` uses ``\\n`` line endings whatever the file had."""

    text: str
    encoding: str
    newline: str
    bom: bool


def looks_binary(data: bytes) -> bool:
    """True when the first 8 KiB contain a NUL byte (git's heuristic)."""
    return b"\x00" in data[:8192]


def decode(data: bytes) -> TextFile:
    """Decode bytes: UTF-8 (with or without BOM), else cp1252, else latin-1 (lossless)."""
    bom = data.startswith(_BOM)
    body = data[len(_BOM):] if bom else data
    for encoding in ("utf-8", "cp1252", "latin-1"):
        try:
            text = body.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    newline = "\r\n" if "\r\n" in text else "\n"
    return TextFile(text=text.replace("\r\n", "\n"), encoding=encoding, newline=newline, bom=bom)


def read_text(path: Path) -> TextFile:
    """Read ``path`` for editing; raises :class:`ToolError` for missing, binary or huge files."""
    if not path.exists():
        raise ToolError(f"{path} does not exist")
    if path.is_dir():
        raise ToolError(f"{path} is a directory, not a file")
    size = path.stat().st_size
    if size > MAX_EDIT_BYTES:
        raise ToolError(f"{path} is {size / 2**20:.1f} MiB; files over "
                        f"{MAX_EDIT_BYTES // 2**20} MiB cannot be edited with this tool")
    data = path.read_bytes()
    if looks_binary(data):
        raise ToolError(f"{path} is a binary file ({size} bytes); it cannot be edited as text")
    return decode(data)


def encode(tf: TextFile, text: str) -> bytes:
    """Bytes for ``text`` in ``tf``'s encoding, line endings and BOM."""
    # CRLF already in ``text`` (sent by the model) must not become CR CR LF.
    body = text.replace("\r\n", "\n").replace("\n", tf.newline) if tf.newline != "\n" else text
    try:
        data = body.encode(tf.encoding)
    except UnicodeEncodeError as exc:
        # Re-encoding the whole file as UTF-8 would change bytes outside the edit.
        bad = exc.object[exc.start:exc.end]
        raise ToolError(f"the file is {tf.encoding}-encoded and cannot hold {bad!r}; use "
                        f"characters that {tf.encoding} supports") from exc
    return (_BOM if tf.bom else b"") + data


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename; keeps the file's mode."""
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
