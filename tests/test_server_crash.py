"""Every llama-server crash names its cause and the fix: at start, while serving, and in the
doctor's engine run. A stand-in server (registered as the ``system`` engine) kills itself with
each signal; the engine run and the bench's own servers use the real engine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.engine.registry import Engine, register_system
from backend.serve import exits, records
from backend.serve.exits import exit_cause, explain_exit, meaningful_lines
from backend.serve.process import pick_port
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerError
from backend.serve.server import up
from tests.conftest import recorded_stand_in
from tests.fake_tools import fake_llama_server

EXPECTED = {
    signal.SIGSEGV: ("SIGSEGV", "--no-repack"),
    signal.SIGILL: ("SIGILL", "rebuild the engine for this CPU"),
    signal.SIGBUS: ("SIGBUS", "fetch the model again"),
    signal.SIGABRT: ("SIGABRT", "GGML_ASSERT"),
    signal.SIGKILL: ("SIGKILL", "smaller --ctx-size"),
}


def _agent(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("sig", list(EXPECTED), ids=lambda s: s.name)
def test_a_server_that_dies_at_start_names_the_signal_the_fix_and_the_log(
        sig: signal.Signals, tmp_path: Path):
    fake = fake_llama_server(tmp_path / "llama-server", sig)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    plan = LaunchPlan(binary=fake, model=model, profile="baseline", ctx_size=4096)
    with pytest.raises(ServerError) as caught:
        up(plan, port=pick_port("127.0.0.1", 0), timeout=60)
    name, fix = EXPECTED[sig]
    message = str(caught.value)
    assert f"crashed with {name}" in message and fix in message, message
    assert "llama threadpool init" in caught.value.tail
    assert "warmup" in caught.value.tail


def test_the_cli_shows_the_crash_cause_and_the_last_log_lines(tmp_path: Path, agent_home: Path):
    fake = fake_llama_server(tmp_path / "llama-server", signal.SIGSEGV)
    assert _agent("backend", "build", "--server-bin", str(fake), home=agent_home).returncode == 0
    model = tmp_path / "model.gguf"
    from backend.engine.probe_model import write_probe_model

    write_probe_model(model)
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[probe]\nmodel = "{model}"\nprofile = "baseline"\nctx_size = 512\n')
    proc = _agent("backend", "up", "--preset", "probe", home=agent_home)
    assert proc.returncode == 3, proc.stderr
    assert "crashed with SIGSEGV" in proc.stderr and "--no-repack" in proc.stderr
    assert "llama threadpool init" in proc.stderr
    assert "exited unexpectedly; read the last log lines above" not in proc.stderr


def test_a_server_that_dies_while_serving_is_named_by_the_next_request(
        tmp_path: Path, agent_home: Path):
    fake = fake_llama_server(tmp_path / "llama-server", signal.SIGBUS, mode="serve")
    assert _agent("backend", "build", "--server-bin", str(fake), home=agent_home).returncode == 0
    from backend.engine.probe_model import write_probe_model

    model = write_probe_model(tmp_path / "model.gguf")
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[probe]\nmodel = "{model}"\nprofile = "baseline"\nctx_size = 4096\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    proc = _agent("run", "say hi", "--preset", "probe", "--no-git", "--repo", str(repo),
                  home=agent_home)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "crashed with SIGBUS" in proc.stderr, proc.stderr
    assert "fetch the model again" in proc.stderr


def test_a_dying_server_that_is_no_longer_provably_ours_is_not_called_another_homes(
        tmp_path: Path):
    """A server dying of SIGBUS stops being provably ours (its executable and log leave
    /proc) a moment before it is gone: CI once read that moment as "writes another home's
    log" instead of the crash. Stand-in: a live process whose record names another binary
    and no log it has open, with the launcher's exit record already written."""
    with recorded_stand_in(tmp_path / "home", tmp_path) as state:
        dying = state.model_copy(update={"plan": state.plan.model_copy(
            update={"binary": tmp_path / "llama-server"})})
        assert not records.is_ours(dying)
        dying.log.with_suffix(".exit").write_text(
            exits.ExitRecord(returncode=-signal.SIGBUS).model_dump_json())
        why = exits.why_gone(dying, "", wait=1.0)
    assert "another home" not in why and "crashed with SIGBUS" in why, why


def test_oom_kills_exit_codes_and_stops_from_outside_are_told_apart():
    assert "out-of-memory killer" in explain_exit(-9, "", oom_killed=True)
    assert "kill -9" in explain_exit(-9, "")
    why, fix = exit_cause(1, "error loading model: tensor data is not within file bounds")
    assert why.startswith("llama-server exited with status 1: the model file could not be "
                          "loaded") and "agent backend download" in fix
    assert "stopped by SIGTERM from outside" in explain_exit(-15, "")
    assert "signal 77" in explain_exit(-77, "")
    # A server someone stopped with `kill <pid>` handles it and exits 0: a field trial read
    # "exited with status 0: no known cause in its log".
    assert explain_exit(0, "srv    operator(): cleaning up before exit...\n") == (
        "llama-server shut down cleanly: something outside dflash-agent stopped it (a SIGTERM "
        "or Ctrl-C it handled); start it again (`agent backend up`)")


def test_meaningful_lines_keep_the_assertion_above_the_tail():
    log = "\n".join(["load: ok"] * 3 + ["/src/ggml.c:123: GGML_ASSERT(n > 0) failed"]
                    + [f"line {i}" for i in range(20)] + ["", "  "])
    lines = meaningful_lines(log, limit=5)
    assert lines[0].endswith("GGML_ASSERT(n > 0) failed")
    assert lines[1:] == [f"line {i}" for i in range(15, 20)]


def test_the_doctor_runs_the_engine_and_generates_a_token(engine: Engine, agent_home: Path):
    """With no model cached the doctor writes its tiny probe model and really generates."""
    register_system(engine.binary)
    from tests.test_doctor import doctor

    _, checks, stderr = doctor(home=agent_home)
    run = checks["engine run"]
    assert run["status"] == "ok", (run, stderr)
    assert "generated a token" in run["detail"] and "probe model" in run["detail"]


def test_the_doctor_names_an_engine_crash_with_its_cause_and_fix(tmp_path: Path,
                                                                agent_home: Path):
    fake = fake_llama_server(tmp_path / "llama-server", signal.SIGILL)
    assert _agent("backend", "build", "--server-bin", str(fake), home=agent_home).returncode == 0
    from tests.test_doctor import doctor

    code, checks, _ = doctor(home=agent_home)
    run = checks["engine run"]
    assert code != 0 and run["status"] == "fail"
    assert "SIGILL" in run["detail"] and "llama threadpool init" in run["detail"]
    assert "rebuild the engine for this CPU" in run["fix"]


def _bench_server_pids(home: Path) -> set[int]:
    import json

    pids = set()
    for path in (home / "state" / "servers").glob("*.json"):
        try:
            pids.add(json.loads(path.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
    return pids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_bench_stopped_by_a_signal_stops_its_servers(sig: signal.Signals, engine: Engine,
                                                       smollm2: Path, agent_home: Path,
                                                       tmp_path: Path):
    register_system(engine.binary)
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[small]\nmodel = "{smollm2}"\nprofile = "baseline"\nctx_size = 2048\n')
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Write a long story about a lighthouse keeper.\n")
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home)}
    bench = subprocess.Popen([sys.executable, "-m", "agent", "backend", "bench", "--preset",
                              "small", "--profiles", "baseline", "--prompts", str(prompts),
                              "--temperatures", "0", "--max-tokens", "2000", "--repeats", "50"],
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    pids: set[int] = set()
    deadline = time.monotonic() + 240
    while not pids and time.monotonic() < deadline and bench.poll() is None:
        pids = {p for p in _bench_server_pids(agent_home) if psutil.pid_exists(p)}
        time.sleep(0.2)
    assert pids, bench.communicate()[0] if bench.poll() is not None else "no server started"
    time.sleep(1.0)
    bench.send_signal(sig)
    out, _ = bench.communicate(timeout=60)
    assert bench.returncode == 130, out
    for pid in pids:
        # Its watcher reaps it, so a stopped server leaves no zombie behind.
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(20)
        assert not psutil.pid_exists(pid), f"bench server {pid} still running after {sig.name}"


@pytest.mark.parametrize(("preset", "expected"), [
    ('model = "/nowhere/model.gguf"', "model file not found"),
    ('model = "{model}"\nextra_flags = ["--no-such-flag"]', "would reject the launch command"),
    ('model = "ftp://host/model.gguf"', "unsupported source scheme 'ftp://'"),
], ids=["missing-model", "flag-the-build-lacks", "bad-source"])
def test_an_ordinary_mistake_is_one_error_line_without_a_crash_log(
        preset: str, expected: str, tmp_path: Path, agent_home: Path):
    """Field case 22: crash logs (and the `details:` line) are for internal errors."""
    fake = fake_llama_server(tmp_path / "llama-server", signal.SIGSEGV)
    assert _agent("backend", "build", "--server-bin", str(fake), home=agent_home).returncode == 0
    from backend.engine.probe_model import write_probe_model

    model = write_probe_model(tmp_path / "model.gguf")
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        "[mine]\n" + preset.format(model=model) + '\nprofile = "baseline"\nctx_size = 512\n')
    proc = _agent("backend", "up", "--preset", "mine", home=agent_home)
    assert proc.returncode == 3, proc.stderr
    assert expected in proc.stderr
    assert "details:" not in proc.stderr
    assert not list((agent_home / "state" / "crashes").glob("*.log"))


def test_a_crash_after_a_refusal_names_the_refusal_not_the_signals_usual_cause():
    # BeeLlama v0.3.1 rejects some configurations and then segfaults on its way out: the
    # report had blamed AMX and -march=native.
    why, fix = exit_cause(-11, "main: error: the draft model failed to load\n"
                                "srv    operator(): cleaning up before exit...\n")
    assert why == ("llama-server crashed with SIGSEGV right after it logged an error: "
                   "'main: error: the draft model failed to load'")
    assert "AMX" not in why + fix
    why, fix = exit_cause(-11, "error while handling argument \"-ctk\": unsupported type\n")
    assert why.startswith("llama-server crashed with SIGSEGV after it failed: llama-server "
                          "rejected a command-line flag") and "extra_flags" in fix
    # No error line: the signal's own cause (the AMX note) stays.
    benign = "load_backend: failed to find ggml_backend_init in libggml-cpu.so\nwarmup\n"
    assert "AMX" in exit_cause(-11, benign)[0]
