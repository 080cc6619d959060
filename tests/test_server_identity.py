"""A live server this home started stays recognised as its own (:func:`records.is_ours`), and a
record whose process runs is never silently forgotten: forgetting it left a llama-server
running unrecorded, holding its memory and port, and the next command started a second one
for the same plan beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from backend.serve import records, server
from tests.conftest import home_env, recorded_stand_in
from tests.test_cli_ux import agent


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[Path, records.ServerState]]:
    """A live server of the home ``home``, recorded as ``up`` records it
    (:func:`tests.conftest.recorded_stand_in`)."""
    root = tmp_path / "home"
    with recorded_stand_in(root, tmp_path) as state:
        yield root, state


def test_a_wall_clock_step_does_not_disown_a_running_server(
        stand_in: tuple[Path, records.ServerState], monkeypatch: pytest.MonkeyPatch):
    """psutil's create time is the boot time (``btime``, whole seconds derived from the wall
    clock) plus the start after boot: a clock step (NTP, a resumed virtual machine) moves the
    create time of a running process by a second or more."""
    root, state = stand_in
    stepped = psutil.boot_time() + 1.0
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: stepped)
    with home_env(root):
        assert abs(psutil.Process(state.pid).create_time() - state.create_time) >= 1.0
        assert records.is_ours(state)
        assert [s.pid for s in server.running()] == [state.pid]
        assert [s.pid for s in server.down(all_servers=True)] == [state.pid]
    assert not psutil.pid_exists(state.pid) or psutil.Process(state.pid).status() == "zombie"


def test_a_pid_reused_by_another_process_is_still_not_ours(
        stand_in: tuple[Path, records.ServerState]):
    _, state = stand_in
    other = state.model_copy(update={"start_ticks": state.start_ticks + 100})
    assert not records.is_ours(other)
    assert records.start_ticks(state.pid) == state.start_ticks


def test_a_running_server_that_cannot_be_proven_ours_keeps_its_record(
        stand_in: tuple[Path, records.ServerState]):
    """Its log removed (the process writes to a deleted file): not provably ours, not provably
    another home's either. Its record stays, and ``up`` for its plan refuses to start a second
    server beside it, saying how to stop it."""
    root, state = stand_in
    record = root / "state" / "servers" / f"{state.config_hash}.json"
    state.log.unlink()
    with home_env(root):
        assert not records.is_ours(state)
        assert server.running() == []
        assert record.is_file()
        with pytest.raises(records.ServerError, match=f"kill {state.pid}"):
            server.up(state.plan, port=0, timeout=5)
        assert record.is_file()
    for verb in (("backend", "status"), ("backend", "status", "--json"),
                 ("backend", "down", "--all")):
        proc = agent(*verb, home=root, cwd=root.parent)
        said = " ".join((proc.stdout + proc.stderr).split())
        assert f"llama-server pid {state.pid} (http://127.0.0.1:1) of this home's record still " \
            "runs but cannot be proven to be this home's server" in said, (verb, said)
        assert f"`kill {state.pid}`" in said
    assert record.is_file()
    assert psutil.Process(state.pid).is_running()
