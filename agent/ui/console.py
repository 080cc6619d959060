"""Terminal-safe output: text from untrusted sources (model replies, tool output, file names,
MCP results, skills) shown with every control character made visible, and writes to a terminal
that went away dropped."""

from __future__ import annotations

import errno
import sys
from typing import IO, Any

from rich.console import Console
from rich.text import Text

_SHOWN = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_SHOWN[0x7F] = 0x2421
_SHOWN.update({c: 0xFFFD for c in (*range(0x80, 0xA0), *range(0x202A, 0x202F),
                                   *range(0x2066, 0x206A))})


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on replaced by a visible one of the
    same length: C0 controls but tab and newline become their control pictures (ESC → ␛,
    CR → ␍), DEL → ␡, C1 controls and the bidirectional overrides (U+202A–U+202E,
    U+2066–U+2069) → U+FFFD.

    Model replies, tool output, file names, MCP results and skills are untrusted: an escape
    sequence in them could clear the screen, rewrite the clipboard (OSC 52) or hide part of a
    command from the approval prompt (``rm -rf ~\\x1b[2K\\recho hi`` shows as ``echo hi``).
    One character for one keeps rich's style spans in place."""
    return text.translate(_SHOWN)


class SafeConsole(Console):
    """A rich :class:`~rich.console.Console` whose printed strings and :class:`Text` pass
    through :func:`printable` (rich itself strips only BEL, BS, VT, FF and CR), and whose
    writes to a terminal that went away are dropped (:class:`_GoneTerminalSafe`)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: D102 (rich's own)
        super().print(*(_printable(o) for o in objects), **kwargs)

    @property
    def file(self) -> IO[str]:  # noqa: D102 (rich's own)
        return _GoneTerminalSafe(Console.file.fget(self))  # type: ignore[attr-defined]

    @file.setter
    def file(self, new_file: IO[str]) -> None:
        Console.file.fset(self, new_file)  # type: ignore[attr-defined]


_GONE = frozenset({errno.EIO, errno.EPIPE, errno.ENXIO})
"""What writing to a closed terminal (EIO, ENXIO) or a closed pipe (EPIPE) raises."""


class _GoneTerminalSafe:
    """A text stream whose writes to a terminal or pipe that went away (a closed terminal, a
    dropped ssh, ``| head``) are dropped instead of raised. A hang-up ends a command like
    Ctrl-C does, and its clean-up (answering the pending call, ending the session log) prints
    as it goes: a closed terminal made that an internal error with a crash log."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if exc.errno not in _GONE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _printable(obj: Any) -> Any:
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, Text):
        shown = obj.copy()
        shown.plain = printable(obj.plain)
        return shown
    return obj


def echo(text: str, nl: bool = True) -> None:
    """:func:`typer.echo` of :func:`printable` text (command output that can hold file names,
    skill or MCP server text); ``nl``: end with a newline."""
    sys.stdout.write(printable(text) + ("\n" if nl else ""))
    sys.stdout.flush()

