"""A command's output with a ceiling on disk and in memory (issue 28 item 10).

The command writes into a pipe; a reader thread streams it into the spill file up to
:data:`SPILL_HEAD` bytes and keeps only the newest :data:`SPILL_TAIL` bytes after that in
memory; what lies between is counted, not kept. When the output ends, the tail follows a marker
line in the file. So a chatty command running to its timeout leaves at most head + marker + tail
on disk, and memory holds at most twice the tail (it is trimmed in bulk) and one read, however
much it printed. What the model is shown (:meth:`Spill.shown`) comes from the first and last
:data:`SHOWN_BYTES`, never from reading the file back.
"""

from __future__ import annotations

import codecs
import os
import select
import threading
import time
from pathlib import Path

OUTPUT_CAP = 16_000
"""Characters of output returned to the model (head and tail halves)."""
SPILL_HEAD = 8 * 1024 * 1024
"""Bytes of the output's start kept in the spill file."""
SPILL_TAIL = 2 * 1024 * 1024
"""Bytes of the output's end kept (in memory while it runs, then in the spill file)."""
SHOWN_BYTES = 4 * OUTPUT_CAP + 1536
"""Bytes kept of each end for what the model is shown: enough for :data:`OUTPUT_CAP`
characters of UTF-8 (up to 4 bytes each)."""
READ_BYTES = 64 * 1024
QUIET_S = 0.1
"""After :meth:`Spill.close`, the reader stops once the pipe is this quiet (a process that left
the command's group still holds it open)."""
GRACE_S = 1.0
"""After :meth:`Spill.close`, the reader stops after this long even if the pipe never goes quiet
(something still floods it: the pipe is closed under it)."""


class Spill:
    """A command's output streamed from a pipe into ``path``, capped.

    Hand :attr:`fd` to the command as its stdout and stderr, then call :meth:`detach`; call
    :meth:`close` once the command and its processes are gone (it also ends by itself when the
    pipe's last writer closes it, e.g. a background job that exits)."""

    def __init__(self, path: Path):
        self.path = path
        self.total = 0
        """Bytes the command wrote."""
        self.chars = 0
        """Characters they decode to (UTF-8; each invalid byte counts as one replacement)."""
        # The name is predictable: whatever an earlier command left there (a symlink out of
        # the workspace) is removed, and the file created afresh, never followed.
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        self._file = os.fdopen(fd, "wb")
        self._head_left = SPILL_HEAD
        self._tail = bytearray()
        self._first = bytearray()
        self._last = bytearray()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._stop_by = 0.0
        read_fd, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, args=(read_fd,), daemon=True,
                                        name=f"spill {path.name}")
        self._thread.start()

    def detach(self) -> None:
        """Close this process's copy of the write end: the command holds it now (else the pipe
        never reports its end)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Read what is left and finish the file: the tail after a marker when the middle was
        dropped. Returns once the reader is done (at most about :data:`GRACE_S`)."""
        self.detach()
        self._stop_by = time.monotonic() + GRACE_S
        self._closing.set()
        self._thread.join()

    @property
    def dropped(self) -> bool:
        """True when part of the output was not kept (the file holds its head and tail)."""
        return self.total > SPILL_HEAD + SPILL_TAIL

    def recent(self, limit: int) -> str:
        """The last ``limit`` bytes of output so far, decoded (a running job's latest lines)."""
        with self._lock:
            return bytes(self._last[-limit:]).decode("utf-8", errors="replace")

    def shown(self, name: str) -> str:
        """What the model is told, after :meth:`close`: the whole output when it is at most
        :data:`OUTPUT_CAP` characters, else its head and tail halves around a note naming the
        file, which is then called ``name`` (in the same folder). A short output's file is
        deleted."""
        if self.chars <= OUTPUT_CAP:
            self.path.unlink(missing_ok=True)
            # At most 4 bytes a character: all of it is in the first bytes kept.
            return bytes(self._first).decode("utf-8", errors="replace")
        kept = self.path.replace(self.path.with_name(name))
        half = OUTPUT_CAP // 2
        head = bytes(self._first).decode("utf-8", errors="replace")[:half]
        tail = bytes(self._last).decode("utf-8", errors="replace")[-half:]
        where = (f"the output was {self.total} bytes, too much to keep: its first "
                 f"{_size(SPILL_HEAD)} and last {_size(SPILL_TAIL)} are in {kept.name}"
                 if self.dropped else f"the full output is in {kept.name}")
        return (f"{head}\n[... {self.chars - 2 * half} characters omitted; {where} under "
                f".dflash-agent/ — use the view tool with view_range on "
                f".dflash-agent/{kept.name} ...]\n{tail}")

    def _pump(self, fd: int) -> None:
        # poll, not select: select refuses descriptors above 1023 (a session with many MCP
        # servers and files open).
        waiter = select.poll()
        waiter.register(fd, select.POLLIN)
        try:
            while True:
                if not waiter.poll(QUIET_S * 1000):
                    if self._closing.is_set():
                        break
                    continue
                data = os.read(fd, READ_BYTES)
                if not data:
                    break
                self._feed(data)
                if self._closing.is_set() and time.monotonic() > self._stop_by:
                    break
        finally:
            os.close(fd)
            self._finish()

    def _feed(self, data: bytes) -> None:
        with self._lock:
            self.total += len(data)
            self.chars += len(self._decoder.decode(data))
            if len(self._first) < SHOWN_BYTES:
                self._first += data[:SHOWN_BYTES - len(self._first)]
            self._last += data
            if len(self._last) > 2 * SHOWN_BYTES:
                del self._last[:-SHOWN_BYTES]
            if self._head_left:
                head = data[:self._head_left]
                self._file.write(head)
                self._head_left -= len(head)
                data = data[len(head):]
            if data:
                self._tail += data
                # Trimmed in bulk, not per read: memory stays under twice the tail.
                if len(self._tail) > 2 * SPILL_TAIL:
                    del self._tail[:-SPILL_TAIL]

    def _finish(self) -> None:
        with self._lock:
            self.chars += len(self._decoder.decode(b"", final=True))
            tail = bytes(self._tail[-SPILL_TAIL:])
            if self.dropped:
                # Start the tail at a line, so the file's lines after the marker are whole.
                newline = tail.find(b"\n", 0, 4096)
                tail = tail[newline + 1:]
                gap = self.total - SPILL_HEAD - len(tail)
                self._file.write(f"\n[... {gap} bytes dropped here: the output was "
                                 f"{self.total} bytes; its first {_size(SPILL_HEAD)} and last "
                                 f"{_size(len(tail))} are kept ...]\n".encode())
            self._file.write(tail)
            self._file.close()
            self._tail = bytearray()


def _size(n: int) -> str:
    """``n`` bytes for people: MiB or KiB when whole, else bytes."""
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"
