"""Decoding and encoding text files while keeping their encoding, line endings and trailing
newline (writes go through :meth:`tools.workspace.Workspace.atomic_write`, which keeps the mode)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.base import ToolError
from tools.workspace import display_name

MAX_EDIT_BYTES = 5 * 2**20
_BOM = b"\xef\xbb\xbf"


@dataclass
class TextFile:
    """A decoded text file. ``text`` uses ``\\n`` line endings whatever the file had."""

    text: str
    encoding: str
    newline: str
    bom: bool
    endings: tuple[str, ...] | None = None
    """Each line's own ending (``\r\n`` or ``\n``) in a file that mixes both, else None:
    :func:`encode` keeps them on the lines an edit leaves alone."""


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
    endings = None
    if newline == "\r\n" and text.count("\r\n") < text.count("\n"):
        endings = tuple("\r\n" if line.endswith("\r") else "\n"
                        for line in text.split("\n")[:-1])
    return TextFile(text=text.replace("\r\n", "\n"), encoding=encoding, newline=newline,
                    bom=bom, endings=endings)


def _mixed_endings(tf: TextFile, text: str) -> str:
    """``text`` (``\n`` endings) with each line's ending as ``tf`` had it where the edit left
    the line alone (the lines before and after the one changed region), and the first changed
    line's old ending (else the previous line's) on new lines. A one-line edit of a file that
    mixed CRLF and LF made every line CRLF: a diff of every other line, unreported."""
    assert tf.endings is not None
    old, new = tf.text.split("\n"), text.split("\n")
    same = min(len(old), len(new))
    head = next((i for i in range(same) if old[i] != new[i]), same)
    tail = next((i for i in range(same - head) if old[-1 - i] != new[-1 - i]), same - head)
    fresh = tf.endings[min(head, len(tf.endings) - 1)] if tf.endings else tf.newline
    ends = []
    for j in range(len(new) - 1):
        i = j if j < head else j - len(new) + len(old) if j >= len(new) - tail else -1
        ends.append(tf.endings[i] if 0 <= i < len(tf.endings) else fresh)
    return "".join(line + end for line, end in zip(new[:-1], ends, strict=True)) + new[-1]


def read_text(path: Path, read: Callable[[Path], bytes] = Path.read_bytes,
              shown: str | None = None) -> TextFile:
    """Read ``path`` for editing with ``read`` (the workspace's symlink-safe reader); raises
    :class:`ToolError` for missing, binary or huge files, naming the file ``shown`` (the
    path as the model gave it, :func:`tools.workspace.display_given`), or by default its
    full path as the tools show names (:func:`tools.workspace.display_name`)."""
    shown = display_name(str(path)) if shown is None else shown
    if not path.exists():
        raise ToolError(f"{shown} does not exist")
    if path.is_dir():
        raise ToolError(f"{shown} is a directory, not a file")
    size = path.stat().st_size
    if size > MAX_EDIT_BYTES:
        raise ToolError(f"{shown} is {size / 2**20:.1f} MiB; files over "
                        f"{MAX_EDIT_BYTES // 2**20} MiB cannot be edited with this tool")
    data = read(path)
    if looks_binary(data):
        raise ToolError(f"{shown} is a binary file ({size} bytes); it cannot be edited as text")
    return decode(data)


def encode(tf: TextFile, text: str) -> bytes:
    """Bytes for ``text`` in ``tf``'s encoding, line endings and BOM.

    A file that is not UTF-8 had its encoding guessed (cp1252, else latin-1): a non-ASCII
    character the file does not already hold would be written as a guess (``€`` as byte 0x80
    in cp1252), so it is refused with the encoding named. Raises :class:`ToolError`.
    """
    # CRLF already in ``text`` (sent by the model) must not become CR CR LF.
    if tf.endings is not None:
        body = _mixed_endings(tf, text.replace("\r\n", "\n"))
    elif tf.newline != "\n":
        body = text.replace("\r\n", "\n").replace("\n", tf.newline)
    else:
        body = text
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
