"""Sharing one server between sessions without thrashing its prompt cache.

Each server slot keeps one prompt cache. A session holds a slot for a whole task (a file lock
per server and slot under the home), so two sessions never interleave turns on one slot: on a
single-slot server the second session waits, with a message; with ``-np N`` (``agent backend
up --parallel N``) each session takes a slot of its own and pins ``id_slot`` to it. A session
goes back to the slot it used last (its cache is there) and otherwise takes the slot least
recently used by anyone, so alternating sessions do not evict each other.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from backend.home import home

if TYPE_CHECKING:
    from agent.client import ServerClient


def _paths(base_url: str, slot: int) -> tuple[Path, Path]:
    digest = hashlib.sha256(base_url.encode()).hexdigest()[:16]
    folder = home().ensure().servers
    return folder / f"slot-{digest}-{slot}.lock", folder / f"slot-{digest}-{slot}.owner"


def _owner(path: Path) -> tuple[str, float]:
    try:
        session, stamp = path.read_text("utf-8").split()
        return session, float(stamp)
    except (OSError, ValueError):
        return "", 0.0


def _order(base_url: str, total: int, session_id: str) -> list[int]:
    owners = {i: _owner(_paths(base_url, i)[1]) for i in range(total)}
    mine = [i for i, (who, _) in owners.items() if who == session_id]
    others = sorted((i for i in owners if i not in mine), key=lambda i: owners[i][1])
    return mine + others


@contextmanager
def hold_slot(base_url: str, total_slots: int, note: Callable[[str], None],
              session_id: str = "", poll: float = 0.5) -> Iterator[int]:
    """Yield a slot id of the server at ``base_url`` that no other session is using, waiting
    (and saying so once) while all ``total_slots`` are busy."""
    total = max(1, total_slots)
    said = False
    while True:
        for slot in _order(base_url, total, session_id):
            lock_path, owner_path = _paths(base_url, slot)
            lock = FileLock(str(lock_path))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                owner_path.write_text(f"{session_id or '-'} {time.time()}", "utf-8")
                yield slot
            finally:
                lock.release()
            return
        if not said:
            note(f"the server at {base_url} is busy with another session's task; waiting for "
                 "it (start the server with --parallel N to run sessions side by side)")
            said = True
        time.sleep(poll)


@contextmanager
def server_slot(client: ServerClient, note: Callable[[str], None],
                session_id: str = "") -> Iterator[int | None]:
    """:func:`hold_slot` on llama-server (its ``/props`` ``total_slots``); on another engine
    (vLLM, SGLang: no ``/props``) no slot is held and None is yielded: such an engine batches
    concurrent requests and shares its prefix cache between them, so sessions need not wait
    for each other, and it takes no ``id_slot``."""
    if not client.is_llama_server():
        yield None
        return
    total = int(client.props().get("total_slots") or 1)
    with hold_slot(client.base_url, total, note, session_id) as slot:
        yield slot
