"""Decoding and encoding text files while keeping their encoding, line endings and trailing
newline (writes go through :meth:`tools.workspace.Workspace.atomic_write`, which keeps the mode)."""

from __future__ import annotations

from collections.abc import Callable
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


def read_text(path: Path, read: Callable[[Path], bytes] = Path.read_bytes) -> TextFile:
    """Read ``path`` for editing with ``read`` (the workspace's symlink-safe reader); raises
    :class:`ToolError` for missing, binary or huge files."""
    if not path.exists():
        raise ToolError(f"{path} does not exist")
    if path.is_dir():
        raise ToolError(f"{path} is a directory, not a file")
    size = path.stat().st_size
    if size > MAX_EDIT_BYTES:
        raise ToolError(f"{path} is {size / 2**20:.1f} MiB; files over "
                        f"{MAX_EDIT_BYTES // 2**20} MiB cannot be edited with this tool")
    data = read(path)
    if looks_binary(data):
        raise ToolError(f"{path} is a binary file ({size} bytes); it cannot be edited as text")
    return decode(data)


def encode(tf: TextFile, text: str) -> bytes:
    """Bytes for ``text`` in ``tf``'s encoding, line endings and BOM.

    A file that is not UTF-8 had its encoding guessed (cp1252, else latin-1): a non-ASCII
    character the file does not already hold would be written as a guess (``€`` as byte 0x80
    in cp1252), so it is refused with the encoding named. Raises :class:`ToolError`.
    """
    # CRLF already in ``text`` (sent by the model) must not become CR CR LF.
    body = text.replace("\r\n", "\n").replace("\n", tf.newline) if tf.newline != "\n" else text
    try:
        data = body.encode(tf.encoding)
    except UnicodeEncodeError as exc:
        # Re-encoding the whole file as UTF-8 would change bytes outside the edit.
        bad = exc.object[exc.start:exc.end]
        raise ToolError(f"the file is {tf.encoding}-encoded and cannot hold {bad!r}; use "
                        f"characters that {tf.encoding} supports") from exc
    if tf.encoding != "utf-8":
        new = sorted({c for c in text if ord(c) > 127} - set(tf.text))
        if new:
            shown = "".join(new[:10])
            raise ToolError(f"the file is not UTF-8; it was read as {tf.encoding} (a guess), "
                            f"so writing {shown!r} would guess its bytes; use ASCII (or the "
                            "characters the file already has), or convert the file to UTF-8 "
                            "with the bash tool first")
    return (_BOM if tf.bom else b"") + data
