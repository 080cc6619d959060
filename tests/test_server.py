"""Managed server lifecycle against the real llama-server and SmolLM2 (per-test home)."""

import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import psutil
import pytest

from backend.engine.registry import Engine
from backend.serve.process import pick_port
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerError, ServerState, config_hash, current
from backend.serve.server import describe, down, running, up


@pytest.fixture
def plan(engine: Engine, smollm2: Path) -> LaunchPlan:
    return LaunchPlan(binary=engine.binary, model=smollm2, profile="baseline", ctx_size=2048)


def _free_port() -> int:
    return pick_port("127.0.0.1", 0)


def test_up_starts_a_healthy_server_reuses_it_and_down_stops_it(plan: LaunchPlan,
                                                                agent_home: Path):
    state, reused = up(plan, port=_free_port(), timeout=120)
    try:
        assert not reused
        assert httpx2.get(state.base_url + "/health", timeout=5).status_code == 200
        again, reused_again = up(plan, port=_free_port(), timeout=120)
        assert reused_again and again.pid == state.pid  # no second process
        info = describe(state)
        assert info["n_ctx"] == 2048 and info["profile"] == "baseline"
        assert info["flavour"] == "upstream"
        assert current() == state
        assert state.log.is_file() and state.log.is_relative_to(agent_home)
        usage = json.loads((agent_home / "cache" / "usage.json").read_text())
        assert str(plan.model.resolve()) in usage and str(plan.binary.resolve()) in usage
    finally:
        stopped = down()
    assert [s.pid for s in stopped] == [state.pid]
    assert not psutil.pid_exists(state.pid) or psutil.Process(state.pid).status() == "zombie"
    assert running() == []


def test_a_stale_state_file_is_cleaned_and_a_new_server_started(plan: LaunchPlan,
                                                                agent_home: Path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    servers = agent_home / "state" / "servers"
    servers.mkdir(parents=True)
    stale = ServerState(pid=dead.pid, create_time=1.0, host="127.0.0.1", port=1,
                        config_hash=config_hash(plan), plan=plan, argv=[], log=servers / "x.log",
                        started_at=1.0)
    (servers / f"{stale.config_hash}.json").write_text(stale.model_dump_json())
    state, reused = up(plan, port=_free_port(), timeout=120)
    try:
        assert not reused and state.pid != dead.pid
    finally:
        down(all_servers=True)


def test_a_foreign_process_is_never_signalled_and_its_port_is_avoided(plan: LaunchPlan,
                                                                      agent_home: Path):
    foreign = subprocess.Popen(["sleep", "60"])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    busy = listener.getsockname()[1]
    servers = agent_home / "state" / "servers"
    servers.mkdir(parents=True)
    # A state file naming a live process we did not start (pid reuse): wrong start time.
    claim = ServerState(pid=foreign.pid, create_time=1.0, host="127.0.0.1", port=busy,
                        config_hash=config_hash(plan), plan=plan, argv=[],
                        log=servers / "x.log", started_at=1.0)
    (servers / f"{claim.config_hash}.json").write_text(claim.model_dump_json())
    try:
        state, _ = up(plan, port=busy, timeout=120)
        assert state.port != busy
        assert foreign.poll() is None  # untouched
        down()
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()
        listener.close()


def test_two_concurrent_up_calls_start_one_server(plan: LaunchPlan):
    results: list = []
    port = _free_port()
    threads = [threading.Thread(target=lambda: results.append(up(plan, port=port, timeout=120)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert len(results) == 2
        assert results[0][0].pid == results[1][0].pid
        assert sorted(r[1] for r in results) == [False, True]
    finally:
        down(all_servers=True)


def test_a_missing_model_file_is_diagnosed_from_the_log(engine: Engine, tmp_path: Path):
    plan = LaunchPlan(binary=engine.binary, model=tmp_path / "gone.gguf", profile="baseline",
                      ctx_size=2048)
    started = time.monotonic()
    with pytest.raises(ServerError, match="model file could not be loaded") as info:
        up(plan, port=_free_port(), timeout=120)
    assert time.monotonic() - started < 60  # the crash is noticed, not waited out
    assert info.value.log is not None and "gone.gguf" in info.value.log.read_text()
    assert running() == []


def test_an_unknown_flag_is_refused_before_launch(engine: Engine, smollm2: Path):
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="baseline", ctx_size=2048,
                      extra_flags=("--no-such-flag-xyz",))
    with pytest.raises(ServerError, match="--no-such-flag-xyz: not an option of this build"):
        up(plan, port=_free_port(), timeout=120)
    assert running() == []


def test_a_bad_flag_value_is_diagnosed_from_the_log(engine: Engine, smollm2: Path):
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="baseline", ctx_size=2048,
                      extra_flags=("--flash-attn", "sometimes"))
    with pytest.raises(ServerError, match="rejected a command-line flag"):
        up(plan, port=_free_port(), timeout=120)


def test_the_ngram_profile_launches_with_speculation(engine: Engine, smollm2: Path):
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="ngram", ctx_size=2048)
    state, _ = up(plan, port=_free_port(), timeout=120)
    try:
        assert "--spec-type" in state.argv and "ngram-mod" in state.argv
        slots = httpx2.get(state.base_url + "/slots", timeout=5).json()
        assert slots[0]["speculative"] is True
    finally:
        down()


def test_pick_port_never_returns_zero_or_a_busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        assert pick_port("127.0.0.1", busy) not in (busy, 0)
    assert pick_port("127.0.0.1", 0) != 0


def test_flavour_is_detected_from_help_ignoring_removed_flags():
    from backend.engine.flavour import flavour_from_help

    assert flavour_from_help("--spec-dflash-cross-ctx N  window") == "bee-old"
    assert flavour_from_help("--cache-type-k  f16, q8_0, turbo4") == "bee-old"
    assert flavour_from_help("--spec-dm-controller profit|off") == "bee-new"
    assert flavour_from_help("types: f16, kvarn4") == "bee-new"
    assert flavour_from_help("--spec-dflash-cross-ctx N  has been removed") == "upstream"
    assert flavour_from_help("--spec-type draft-dflash") == "upstream"


def test_the_real_engine_is_upstream_and_the_answer_is_cached(engine: Engine, agent_home: Path):
    from backend.engine.flavour import detect_flavour

    assert detect_flavour(engine.binary) == "upstream"
    cached = list((agent_home / "cache" / "flavours").iterdir())
    assert len(cached) == 1 and "--spec-type" in cached[0].read_text()
    cached[0].write_text("--spec-dflash-cross-ctx N  window\n")  # the cache is what is read
    assert detect_flavour(engine.binary) == "bee-old"


def test_idle_timeout_puts_the_server_to_sleep_and_a_request_wakes_it(engine: Engine,
                                                                     smollm2: Path):
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="baseline", ctx_size=1024,
                      idle_timeout=1)
    state, _ = up(plan, port=_free_port(), timeout=120)
    try:
        assert state.argv[state.argv.index("--sleep-idle-seconds") + 1] == "1"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if httpx2.get(state.base_url + "/props", timeout=5).json().get("is_sleeping"):
                break
            time.sleep(0.3)
        else:
            pytest.fail("the server never went to sleep")
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        resp = httpx2.post(state.base_url + "/v1/chat/completions", json=body, timeout=120)
        assert resp.status_code == 200
    finally:
        down()
