"""Leases on a managed server (backend.serve.leases), with real processes: a live holder
counts, a finished one, a reused pid and a damaged lease file do not, and are cleaned away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.serve.leases import hold, holders
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerState


def _state(tmp_path: Path, profile: str = "dflash") -> ServerState:
    plan = LaunchPlan(binary=tmp_path / "llama-server", model=tmp_path / "m.gguf",
                      profile=profile, ctx_size=4096,
                      draft=tmp_path / "d.gguf" if profile == "dflash" else None)
    return ServerState(pid=1, create_time=0.0, host="127.0.0.1", port=1, config_hash="abc",
                       plan=plan, argv=[], log=tmp_path / "log", started_at=0.0)


def test_live_holders_count_and_ended_ones_are_cleaned(agent_home: Path, tmp_path: Path):
    state = _state(tmp_path)
    assert holders(state) == []  # nothing recorded yet: no folder
    mine = hold(state)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hold(state, child.pid)
        assert holders(state) == sorted([os.getpid(), child.pid], key=str)
    finally:
        child.kill()
        child.wait()
    assert holders(state) == [os.getpid()]  # the ended one is gone, its file removed
    assert sorted(p.name for p in mine.parent.iterdir()) == [mine.name]
    # A new lease sweeps those of sessions that ended since.
    (mine.parent / "4194303.json").write_text(json.dumps({"pid": 4194303, "started": 1.0}))
    hold(state)
    assert sorted(p.name for p in mine.parent.iterdir()) == [mine.name]


def test_a_reused_pid_and_a_damaged_lease_are_not_holders(agent_home: Path, tmp_path: Path):
    state = _state(tmp_path)
    lease = hold(state)
    # The same pid started at another time: another process than the one that held it.
    lease.write_text(json.dumps({"pid": os.getpid(), "started": 12.0}), "utf-8")
    damaged = lease.parent / "77.json"
    damaged.write_text("{not json", "utf-8")
    odd = lease.parent / "78.json"
    odd.write_text(json.dumps({"pid": "x", "started": None}), "utf-8")
    assert holders(state) == []
    assert list(lease.parent.glob("*.json")) == []


def test_a_session_holds_a_lease_on_the_server_it_connects_to(agent_home: Path, tmp_path: Path,
                                                               monkeypatch) -> None:
    from agent import runtime
    from agent.config import load_settings
    from agent.ui import Reporter

    state = _state(tmp_path, "baseline")
    monkeypatch.setattr(runtime, "default_engine", lambda: object())
    monkeypatch.setattr(runtime, "launch", lambda *a, **k: (state, True))
    reporter = Reporter()
    runtime.connect(load_settings(cli={"preset": "smollm2-135m"}), reporter)
    assert holders(state) == [os.getpid()]
    assert reporter.draft_model is False  # no draft model on that server (agent.ui)


def test_a_server_without_the_draft_that_fails_to_start_gives_the_old_one_back(
        agent_home: Path, tmp_path: Path, monkeypatch) -> None:
    """unload_draft stops the session's server first (a second copy of a large model may not
    fit beside it); where the server without the draft then fails to start, the one with it is
    started again in its place, and a failure of that too is raised."""
    from backend.serve import launch
    from backend.serve.records import ServerError

    state = _state(tmp_path).model_copy(update={"port": 8080, "preset": "p",
                                                "speculation": "draft length 3 per request"})
    started: list[tuple[int | None, int]] = []

    def up(plan, *, port, host, preset, timeout, progress, speculation):
        started.append((plan.draft_n_max, port))
        if plan.draft_n_max == 0:
            raise ServerError("llama-server exited with code 1\nlog: ...")
        return state.model_copy(update={"pid": 2}), False

    monkeypatch.setattr(launch, "retire", lambda s: started.append(("retired", s.pid)))
    monkeypatch.setattr(launch, "up", up)
    notes: list[str] = []
    again = launch.unload_draft(state, notes.append, "relaunching")
    assert started == [("retired", 1), (0, 8080), (None, 8080)]
    assert again.pid == 2 and holders(again) == [os.getpid()]
    assert notes == ["relaunching", "the server without the draft did not start (llama-server "
                     "exited with code 1); starting the one with it again"]

    def broken(*args, **kwargs):
        raise ServerError("out of memory")

    monkeypatch.setattr(launch, "up", broken)
    with pytest.raises(ServerError, match="out of memory"):
        launch.unload_draft(state, notes.append, "relaunching")
