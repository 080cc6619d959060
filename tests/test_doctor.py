"""``agent backend doctor`` run as a user runs it, against working and broken environments."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import git
import psutil
import pytest

from backend.engine.registry import Engine, register_system
from backend.serve.process import pick_port
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerState
from tests.fake_tools import DRIVER_FAILURE, fake_nvidia_smi


def doctor(*args: str, home: Path, path: str | None = None, **env: str
           ) -> tuple[int, dict[str, dict], str]:
    """Run ``agent backend doctor --json``; returns (exit code, checks by name, stderr)."""
    full_env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", **env}
    if path is not None:
        full_env["PATH"] = path
    proc = subprocess.run([sys.executable, "-m", "agent", "backend", "doctor", "--json", *args],
                          capture_output=True, text=True, timeout=300, env=full_env,
                          stdin=subprocess.DEVNULL)
    checks = {c["name"]: c for c in json.loads(proc.stdout)} if proc.stdout.strip() else {}
    return proc.returncode, checks, proc.stderr


def bare_path(tmp_path: Path) -> str:
    """A PATH with git only (the CLI needs it at import): no cmake, compilers, nvcc or
    nvidia-smi."""
    folder = tmp_path / "barebin"
    folder.mkdir()
    git = shutil.which("git")
    assert git, "git is needed on PATH"
    (folder / "git").symlink_to(git)
    return str(folder)


@pytest.fixture
def with_engine(engine: Engine, agent_home: Path) -> Engine:
    """The real engine registered in this test's home."""
    return register_system(engine.binary)


def test_human_output_has_a_line_per_check_and_a_summary(with_engine, agent_home: Path):
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "agent", "backend", "doctor"],
                          capture_output=True, text=True, timeout=300, env=env)
    lines = proc.stdout.splitlines()
    for name in ("gpu", "cuda", "cmake", "c compiler", "c++ compiler", "disk", "ram", "engine",
                 "models", "server"):
        assert any(line[6:].startswith(name) for line in lines), (name, proc.stdout)
    assert "failed," in lines[-1] and "ok" in lines[-1]
    assert "upstream" in proc.stdout  # the engine's flavour


def test_no_cmake_and_no_compiler_without_an_engine_fail(agent_home: Path, tmp_path: Path):
    code, checks, _ = doctor(home=agent_home, path=bare_path(tmp_path))
    assert code == 3
    assert checks["cmake"]["status"] == "fail" and "no engine is installed" in \
        checks["cmake"]["detail"]
    assert "install cmake" in checks["cmake"]["fix"]
    assert checks["c++ compiler"]["status"] == "fail"
    assert "build-essential" in checks["c++ compiler"]["fix"]
    assert checks["engine"]["status"] == "warn" and "agent backend build" in \
        checks["engine"]["fix"]
    assert checks["gpu"]["status"] == "warn"  # no nvidia-smi: CPU only, not an error


def test_no_cmake_with_an_engine_only_warns(with_engine, agent_home: Path, tmp_path: Path):
    code, checks, _ = doctor(home=agent_home, path=bare_path(tmp_path))
    assert checks["cmake"]["status"] == "warn" and "only a rebuild" in checks["cmake"]["detail"]
    assert checks["engine"]["status"] == "ok"
    assert code == (3 if any(c["status"] == "fail" for c in checks.values()) else 0)


def test_failing_nvidia_smi_is_a_failure(agent_home: Path, tmp_path: Path):
    fake = fake_nvidia_smi(tmp_path / "bin", "", 9, DRIVER_FAILURE)
    code, checks, _ = doctor(home=agent_home, path=f"{fake}:{os.environ['PATH']}")
    assert code == 3
    gpu = checks["gpu"]
    assert gpu["status"] == "fail" and "exit 9" in gpu["detail"]
    assert "communicate with the NVIDIA driver" in gpu["detail"]
    assert "reinstall" in gpu["fix"]


def test_working_gpu_is_described(agent_home: Path, tmp_path: Path):
    fake = fake_nvidia_smi(tmp_path / "bin")
    _, checks, _ = doctor(home=agent_home, path=f"{fake}:{os.environ['PATH']}")
    assert checks["gpu"]["status"] == "ok"
    assert "RTX 4090 (driver 550.54.14, 23800 of 24564 MiB free)" in checks["gpu"]["detail"]


def test_full_disk_by_env_and_by_option(agent_home: Path):
    code, checks, _ = doctor(home=agent_home, DFLASH_AGENT_MIN_FREE_DISK_MIB=str(10**12))
    assert code == 3
    assert checks["disk"]["status"] == "fail" and "below the 1000000000000 MiB minimum" in \
        checks["disk"]["detail"]
    assert "agent backend cache rm" in checks["disk"]["fix"]
    code, checks, _ = doctor("--min-free-disk", "1e12", home=agent_home)
    assert code == 3 and checks["disk"]["status"] == "fail"
    _, checks, _ = doctor("--min-free-disk", "1", home=agent_home)
    assert checks["disk"]["status"] in {"ok", "warn"}


def test_bad_disk_threshold_value(agent_home: Path):
    code, checks, _ = doctor(home=agent_home, DFLASH_AGENT_MIN_FREE_DISK_MIB="lots")
    assert code == 3 and "is not a number" in checks["disk"]["detail"]


def test_engine_binary_that_does_not_run(agent_home: Path, tmp_path: Path):
    fake = tmp_path / "llama-server"
    fake.write_text("not a program")
    fake.chmod(0o644)
    folder = agent_home / "cache" / "engines" / "broken"
    folder.mkdir(parents=True)
    (folder / "engine.json").write_text(json.dumps({
        "engine": "system", "version": "unknown", "key": "broken", "binary": str(fake),
        "configure_flags": [], "installed_at": time.time()}))
    code, checks, _ = doctor(home=agent_home)
    assert code == 3
    assert checks["engine"]["status"] == "fail" and "does not run" in checks["engine"]["detail"]
    assert "agent backend cache rm broken" in checks["engine"]["fix"]


def test_unhealthy_server_is_a_failure(agent_home: Path, smollm2: Path):
    # A live process recorded as our server, listening nowhere: what a hung server looks like
    # (it runs the record's binary and writes to the log beside the record, as ours do).
    servers = agent_home / "state" / "servers"
    servers.mkdir(parents=True)
    with (servers / "feedfacefeedface.log").open("w") as log:
        sleeper = subprocess.Popen(["sleep", "300"], stdout=log)
    try:
        port = pick_port("127.0.0.1", 0)
        plan = LaunchPlan(binary=Path("/bin/sleep"), model=smollm2, profile="baseline",
                          ctx_size=1024)
        state = ServerState(pid=sleeper.pid, create_time=psutil.Process(sleeper.pid).create_time(),
                            host="127.0.0.1", port=port, config_hash="feedfacefeedface",
                            plan=plan, argv=["sleep", "300"], log=servers / "feedfacefeedface.log",
                            started_at=time.time())
        (servers / "feedfacefeedface.json").write_text(state.model_dump_json())
        code, checks, _ = doctor(home=agent_home)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert code == 3
    assert checks["server"]["status"] == "fail"
    assert f"pid {sleeper.pid}" in checks["server"]["detail"] and "no answer" in \
        checks["server"]["detail"]
    assert "agent backend down --all" in checks["server"]["fix"]


def test_healthy_server_and_cached_model(real_server, shared_home: Path):
    state = real_server("baseline")
    _, checks, _ = doctor(home=shared_home)
    assert checks["server"]["status"] == "ok" and state.base_url in checks["server"]["detail"]
    assert checks["models"]["status"] == "ok" and "SmolLM2" in checks["models"]["detail"]


def test_empty_home_has_no_models(agent_home: Path):
    _, checks, _ = doctor(home=agent_home)
    assert checks["models"]["status"] == "warn"
    assert "agent backend download" in checks["models"]["fix"]


def agent_exit(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The real ``agent`` command in ``cwd`` with ``home``, no terminal."""
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, stdin=subprocess.DEVNULL,
                          env={**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"})


def test_config_files_are_checked_as_the_commands_load_them(
        agent_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DFLASH_AGENT_PRESET")  # the suite's own (tests/conftest.py)
    config = agent_home / "config"
    config.mkdir(parents=True, exist_ok=True)
    code, checks, _ = doctor(home=agent_home)
    assert [checks[n]["status"] for n in ("presets", "config", "mcp config")] == ["ok"] * 3
    assert f"no {config / 'presets.toml'}" in checks["presets"]["detail"]
    # A preset table without a model: `agent run` refuses it (exit 3), and so does the doctor.
    (config / "presets.toml").write_text("[tiny]\nctx_size = 1024\n")
    repo = tmp_path / "repo"
    git.Repo.init(repo)
    run = agent_exit("run", "say hi", home=agent_home, cwd=repo)
    assert run.returncode == 3 and "preset 'tiny': model: Field required" in run.stderr
    (config / "config.toml").write_text("max_steps = 0\n")
    (config / "mcp.json").write_text('{"mcpServers": {"time": {"args": []}}')
    code, checks, _ = doctor(home=agent_home)
    assert code == 3
    presets = checks["presets"]
    assert presets["status"] == "fail"
    assert presets["detail"] == f"{config / 'presets.toml'}: preset 'tiny': model: Field required"
    assert f"fix that table in {config / 'presets.toml'}" in presets["fix"]
    settings = checks["config"]
    assert settings["status"] == "fail"
    assert settings["detail"].startswith(f"{config / 'config.toml'}: max_steps: ")
    assert "defaults.toml" in settings["fix"]
    mcp = checks["mcp config"]
    assert mcp["status"] == "fail" and f"{config / 'mcp.json'}: not valid JSON" in mcp["detail"]
    assert f"fix those entries in {config / 'mcp.json'}" in mcp["fix"]
    # Valid files, but a server entry without a command and a preset nobody defines.
    (config / "presets.toml").write_text("")
    (config / "config.toml").write_text('preset = "nope"\n')
    (config / "mcp.json").write_text('{"mcpServers": {"time": {"args": []}}}')
    code, checks, _ = doctor(home=agent_home)
    assert code == 3
    assert checks["presets"]["status"] == "ok"
    assert checks["config"]["status"] == "fail"
    assert "preset 'nope'" in checks["config"]["detail"] and "smollm2-135m" in \
        checks["config"]["detail"]
    assert "server 'time': a stdio server needs a 'command'" in checks["mcp config"]["detail"]
    (config / "config.toml").write_text('preset = "smollm2-135m"\n')
    (config / "mcp.json").write_text('{"mcpServers": {}}')
    code, checks, _ = doctor(home=agent_home)
    assert [checks[n]["status"] for n in ("presets", "config", "mcp config")] == ["ok"] * 3


def test_nvcc_without_a_gpu_says_builds_default_to_cpu(tmp_path: Path):
    path = bare_path(tmp_path)
    nvcc = Path(path) / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    _, checks, _ = doctor(home=tmp_path / "home", path=path)
    assert checks["gpu"]["status"] == "warn"
    assert checks["cuda"]["status"] == "ok"
    assert "nvcc 13.0" in checks["cuda"]["detail"]
    assert "no GPU here, so builds default to CPU" in checks["cuda"]["detail"]
