"""Sharing one server between sessions without thrashing its prompt cache.

Each server slot keeps one prompt cache. A session holds a slot for a whole task (a file lock
per server and slot under the home), so two sessions never interleave turns on one slot: on a
single-slot server the second session waits, with a message; with ``-np N`` (``agent backend
up --parallel N``) each session takes a free slot and pins ``id_slot`` to it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from backend.home import home


def _lock(base_url: str, slot: int) -> FileLock:
    digest = hashlib.sha256(base_url.encode()).hexdigest()[:16]
    folder = home().ensure().servers
    return FileLock(str(folder / f"slot-{digest}-{slot}.lock"))


@contextmanager
def hold_slot(base_url: str, total_slots: int, note: Callable[[str], None],
              poll: float = 0.5) -> Iterator[int]:
    """Yield a slot id of the server at ``base_url`` that no other session is using, waiting
    (and saying so once) while all ``total_slots`` are busy."""
    locks = [_lock(base_url, i) for i in range(max(1, total_slots))]
    said = False
    while True:
        for slot, lock in enumerate(locks):
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield slot
            finally:
                lock.release()
            return
        if not said:
            note(f"the server at {base_url} is busy with another session's task; waiting for "
                 "it (start the server with --parallel N to run sessions side by side)")
            said = True
        time.sleep(poll)
