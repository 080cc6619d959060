"""RPC workers without a real rpc-server: worker addresses, the wire probe against a scripted
worker (another protocol version, a busy one, one that hangs up), the refusals, the fit check
counting the workers' memory, the argv, the build's RPC pieces, and every broken input a user
can give on the command line as one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from backend.engine.cmake import configure_flags
from backend.engine.cpu import CpuTarget
from backend.engine.registry import BuildError, engine_key
from backend.engine.sources import rpc_protocol, rpc_server_target
from backend.models.presets import ServerOptions, parse_workers
from backend.serve.fit import estimate, gather, preset_fit
from backend.serve.process import port_is_free
from backend.serve.profiles import LaunchPlan, server_argv
from backend.serve.rpc import (
    RpcError,
    check_workers,
    lost_worker_cause,
    probe,
    protocol_refusal,
)
from backend.serve.server import plan_differences
from backend.serve.worker import WorkerError, exposure_warning, is_loopback, resolve_port
from tests.rpc_standin import StandinWorker

CPU = CpuTarget(["-DGGML_NATIVE=OFF"], [], "x86-64")


def _agent(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_worker_addresses_are_read_as_host_port_pairs():
    assert parse_workers("127.0.0.1:50052, 10.0.0.2:50053") == ("127.0.0.1:50052",
                                                                "10.0.0.2:50053")
    assert parse_workers("[::1]:50052,gpu-box:7000") == ("[::1]:50052", "gpu-box:7000")


@pytest.mark.parametrize("text, said", [
    ("10.0.0.2", "is not host:port"),
    ("10.0.0.2:", "is not host:port"),
    (":50052", "is not host:port"),
    ("10.0.0.2:http", "is not host:port"),
    ("10.0.0.2:70000", "is not host:port"),
    ("10.0.0.2:50052,,10.0.0.3:50052", "empty worker address"),
    ("::1:50052", "IPv6 host in brackets"),
    ("a:1,a:1", "named twice"),
])
def test_a_broken_worker_list_names_the_entry(text: str, said: str):
    with pytest.raises(ValueError, match=said):
        parse_workers(text)


def test_the_probe_reads_a_workers_protocol_and_memory():
    with StandinWorker(version=(7, 0, 0), free=3 * 2**30, total=4 * 2**30) as worker:
        info = probe(worker.address)
    assert info.reachable and info.problem is None
    assert info.protocol == "7.0.0" and (info.free_mib, info.total_mib) == (3072, 4096)


def test_a_worker_of_another_protocol_is_refused_naming_both_versions():
    with StandinWorker(version=(4, 0, 0)) as worker:
        infos = [probe(worker.address)]
    with pytest.raises(RpcError) as caught:
        check_workers(infos, "7.0.0")
    message = str(caught.value)
    assert worker.address in message and "4.0.0" in message and "7.0.0" in message
    assert "different llama.cpp versions" in message and "\n" not in message


def test_ggmls_version_rule_is_the_one_applied():
    assert protocol_refusal("7.0.0", "7.0.3") is None  # patch levels agree
    assert protocol_refusal("7.1.0", "7.0.0") is None  # an older minor is accepted by ggml
    assert protocol_refusal("7.0.0", "7.1.0") is not None  # a newer one is not
    assert protocol_refusal("7.0.0", "6.9.9") is not None


def test_a_busy_worker_is_refused_saying_why():
    # llama-server would wait on it until its start timeout: refused before the launch.
    with StandinWorker(mode="silent") as worker:
        info = probe(worker.address, timeout=0.5)
    assert info.reachable and info.protocol is None and not info.devices
    with pytest.raises(RpcError, match="one client at a time") as caught:
        check_workers([info], "7.0.0")
    assert worker.address in str(caught.value) and "\n" not in str(caught.value)
    # A silent listener may as well be something else (a user pointed --rpc at a web server).
    assert "or what listens there is not an rpc-server" in str(caught.value)


def test_a_worker_that_answers_the_handshake_but_not_its_memory_is_a_note():
    with StandinWorker(version=(7, 0, 0)) as worker:
        info = probe(worker.address)
    partial = replace(info, devices=(), problem="broke off the memory query (closed)")
    notes = check_workers([partial], "7.0.0")
    assert len(notes) == 1 and worker.address in notes[0] and "memory query" in notes[0]


def test_a_worker_that_hangs_up_at_the_handshake_is_said_so():
    with StandinWorker(mode="hang-up") as worker:
        info = probe(worker.address)
    assert info.reachable and "broke off the handshake" in (info.problem or "")


def test_a_worker_nobody_listens_at_is_refused_with_how_to_start_one():
    with StandinWorker() as worker:
        address = worker.address
    info = probe(address)
    assert not info.reachable
    with pytest.raises(RpcError, match="agent backend worker") as caught:
        check_workers([info], "7.0.0")
    assert address in str(caught.value)


def test_a_lost_worker_is_named_after_the_server_died_of_it():
    text = "... GGML_ABORT: Remote RPC server crashed or returned malformed response\n"
    with StandinWorker() as alive:
        with StandinWorker() as gone:
            pass
        cause = lost_worker_cause((alive.address, gone.address), text)
        assert cause is not None and gone.address in cause.split("(")[0]
        assert alive.address not in cause.split("(")[0]
        assert lost_worker_cause((alive.address,), "no rpc trouble here") is None


def test_the_fit_check_counts_each_workers_memory(smollm2: Path):
    with StandinWorker(free=3 * 2**30, total=4 * 2**30) as big, \
            StandinWorker(free=2**30, total=2**30) as small:
        report = preset_fit(smollm2, None, ServerOptions(), 4096,
                            workers=(big.address, small.address), protocol="7.0.0")
    assert report.fits and report.offload_free_mib >= 4096
    assert report.need("gpu") > 0  # the layers go to the workers, not this machine's RAM
    table = report.table()
    assert f"worker {big.address}: 3072 MiB free of 4096" in table
    assert "CUDA context" not in table  # CPU workers: no GPU runtime is assumed


def test_a_plan_over_workers_too_small_does_not_fit_and_says_which(smollm2: Path):
    with StandinWorker(free=2**20, total=2**20) as tiny:
        report = preset_fit(smollm2, None, ServerOptions(), 4096, workers=(tiny.address,),
                            protocol="7.0.0")
    assert not report.fits and report.gpu_shortfall > 0
    message = report.message()
    assert f"worker {tiny.address}: 1 MiB free of 1" in message and "short by" in message
    with StandinWorker(version=(7, 0, 0)) as worker:
        said = replace(probe(worker.address), devices=(), problem="broke off the memory query")
    unknown = estimate(replace(gather(smollm2, None, ServerOptions())[0], workers=(said,)), 4096)
    assert f"worker {worker.address}: memory unknown, counted as 0" in unknown.message()


def test_the_server_is_launched_over_the_workers(tmp_path: Path):
    plan = LaunchPlan(binary=tmp_path / "llama-server", model=tmp_path / "m.gguf",
                      profile="baseline", ctx_size=1024, rpc=("127.0.0.1:50052", "h:1"))
    argv = server_argv(plan, "127.0.0.1", 8000)
    assert argv[argv.index("--rpc") + 1] == "127.0.0.1:50052,h:1"
    local = plan.model_copy(update={"rpc": ()})
    assert "--rpc" not in server_argv(local, "127.0.0.1", 8000)
    # The same model served over workers or not gives a session the same tokens.
    assert plan_differences(local, plan) == []


def test_an_rpc_build_adds_ggml_rpc_and_gets_its_own_key():
    plain, rpc = configure_flags(None, cpu=CPU), configure_flags(None, cpu=CPU, rpc=True)
    assert "-DGGML_RPC=ON" in rpc and "-DGGML_RPC=ON" not in plain
    assert engine_key("llama.cpp", "11434", plain) != engine_key("llama.cpp", "11434", rpc)


def test_the_rpc_target_and_protocol_are_read_from_the_tree(tmp_path: Path):
    (tmp_path / "tools" / "rpc").mkdir(parents=True)
    (tmp_path / "ggml" / "include").mkdir(parents=True)
    with pytest.raises(BuildError, match="no tools/rpc/CMakeLists.txt"):
        rpc_server_target(tmp_path)
    (tmp_path / "tools" / "rpc" / "CMakeLists.txt").write_text("add_executable(x y.cpp)\n")
    with pytest.raises(BuildError, match="names no target"):
        rpc_server_target(tmp_path)
    (tmp_path / "tools" / "rpc" / "CMakeLists.txt").write_text("set(TARGET ggml-rpc-server)\n")
    assert rpc_server_target(tmp_path) == "ggml-rpc-server"
    assert rpc_protocol(tmp_path) is None
    (tmp_path / "ggml" / "include" / "ggml-rpc.h").write_text(
        "#define RPC_PROTO_MAJOR_VERSION    7\n#define RPC_PROTO_MINOR_VERSION    0\n"
        "#define RPC_PROTO_PATCH_VERSION    0\n")
    assert rpc_protocol(tmp_path) == "7.0.0"


def test_a_worker_off_loopback_warns_about_the_missing_authentication():
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"))
    assert exposure_warning("127.0.0.1") is None
    warning = exposure_warning("0.0.0.0")
    assert warning and "no authentication" in warning and "private network" in warning


def test_a_taken_worker_port_is_said_before_rpc_server_runs():
    with StandinWorker() as worker:
        port = int(worker.address.rsplit(":", 1)[1])
        assert not port_is_free("127.0.0.1", port)
        with pytest.raises(WorkerError, match=f"port {port} on 127.0.0.1 is already in use"):
            resolve_port("127.0.0.1", port)
    assert resolve_port("127.0.0.1", 0) > 0
    with pytest.raises(WorkerError, match="must be an address of this machine"):
        resolve_port("192.0.2.1", 50052)  # TEST-NET-1: never this machine's


@pytest.mark.parametrize("args, said", [
    (["backend", "up", "--rpc", "localhost"], "--rpc: worker address 'localhost' is not "
                                              "host:port"),
    (["backend", "up", "--rpc", ""], "--rpc: empty worker address"),
    (["backend", "up", "--print-cmd", "--rpc", "a:1,a:1"], "named twice"),
    (["backend", "worker", "--port", "70000"], "--port 70000: use 1 to 65535"),
    (["backend", "worker", "--host", " "], "--host is empty"),
])
def test_broken_rpc_arguments_are_one_usage_line(args: list[str], said: str, agent_home: Path):
    proc = _agent(*args, home=agent_home)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("rpc", "said"), [
    ('["10.0.0.2"]', "worker address '10.0.0.2' is not host:port"),
    ('["127.0.0.1:99999"]', "worker address '127.0.0.1:99999' is not host:port"),
    ('[":0"]', "worker address ':0' is not host:port"),
    ('["::1:5000"]', "write an IPv6 host in brackets"),
    ('["h:1", "h:1"]', "worker h:1 is named twice"),
    ('[""]', "empty worker address"),
    ('"10.0.0.2:50052"', "rpc: Input should be a valid list"),
])
def test_a_preset_with_a_broken_worker_list_names_the_file_the_preset_and_the_key(
        agent_home: Path, rpc: str, said: str):
    # Checked when the file is read, like every other key: the file named, no --rpc (the
    # user gave none), no pattern, the exit of a broken presets file (3) for every case.
    (agent_home / "config").mkdir(parents=True)
    path = agent_home / "config" / "presets.toml"
    path.write_text(f'[split]\nmodel = "m.gguf"\nrpc = {rpc}\n')
    proc = _agent("backend", "up", "--preset", "split", "--print-cmd", home=agent_home)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"error: {path}: preset 'split': rpc")
    assert said in proc.stderr, proc.stderr
    assert "--rpc" not in proc.stderr and "pattern" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_print_cmd_shows_the_preset_workers(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "presets.toml").write_text(
        '[split]\nmodel = "m.gguf"\nrpc = ["10.0.0.2:50052", "10.0.0.3:50052"]\n')
    proc = _agent("backend", "up", "--preset", "split", "--print-cmd", home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert "--rpc 10.0.0.2:50052,10.0.0.3:50052" in proc.stdout
    over = _agent("backend", "up", "--preset", "split", "--print-cmd", "--rpc", "h:1",
                  home=agent_home)
    assert "--rpc h:1" in over.stdout and "10.0.0.2" not in over.stdout
