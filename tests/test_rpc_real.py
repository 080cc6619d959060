"""RPC workers for real on one machine: two ``agent backend worker`` processes (real
``rpc-server``, CPU) on 127.0.0.1 hold SmolLM2's layers for ``agent backend up --rpc``; the
served tokens are the local server's at temperature 0, ``agent run`` works over them, a worker
killed mid-request is named in one line and nothing hangs, a worker stops cleanly on SIGTERM
and Ctrl-C, and the engine refuses a worker of another RPC protocol before anything runs."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import psutil
import pytest

from agent.client import ServerClient, ServerUnavailable
from backend.engine.registry import Engine
from backend.serve import rpc
from backend.serve.exits import crash_report
from backend.serve.process import pick_port, stop
from backend.serve.records import ServerState, current
from tests.conftest import home_env
from tests.rpc_standin import StandinWorker

AGENT = [sys.executable, "-m", "agent"]
PROMPT = "The three primary colors are"
THREADS = "2"
"""CPU threads of the local reference server and of each worker: on CPU the greedy text
depends on the thread count (a local server at -t 1 and at -t 2 part ways after ~800
characters of the seed prompts, measured), so the two sides compute with the same count."""


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}


def _agent(*args: str, home: Path, cwd: Path | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(home), cwd=cwd, stdin=subprocess.DEVNULL)


@pytest.fixture
def rpc_home(engine: Engine, smollm2: Path, tmp_path: Path) -> Path:
    """A private home holding the session's engine (linked, with its rpc-server) and a greedy
    SmolLM2 preset without speculation."""
    assert engine.rpc_server is not None and engine.rpc_server.is_file(), \
        "the default engine is built with RPC"
    home = tmp_path / "home"
    (home / "cache" / "engines").mkdir(parents=True)
    (home / "cache" / "engines" / engine.key).symlink_to(engine.binary.parent.parent)
    (home / "config").mkdir()
    (home / "config" / "presets.toml").write_text(
        f'[smol]\nmodel = "{smollm2}"\nprofile = "baseline"\nctx_size = 2048\n'
        # -v: the log then says which device each layer went to.
        f'extra_flags = ["-v", "-t", "{THREADS}"]\n[smol.sampling]\ntemperature = 0.0\n')
    return home


class Worker:
    """An ``agent backend worker`` process and what it printed."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([*AGENT, "backend", "worker", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**_env(home), **(env or {})},
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.ended: tuple[int, str] | None = None
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.address = self.wait_for("worker listening on").split()[3]
        except BaseException:
            self.end()  # SIGTERM: the worker stops its rpc-server, which is in its own session
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 300) -> str:
        """The first line holding ``text``; fails when the worker ends or stays silent."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"the worker printed no {text!r} in {timeout} s: {self.seen}")
            if line is None:
                pytest.fail(f"the worker ended before {text!r}: {self.seen}")
            self.seen.append(line)
            if text in line:
                return line

    def rpc_server(self) -> psutil.Process:
        """The worker's rpc-server child."""
        (child,) = psutil.Process(self.proc.pid).children()
        return child

    def end(self, sig: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
        """Signal the worker (unless it ended already); returns its exit status and the rest
        of its output."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        rest = []
        while (line := self.lines.get(timeout=30)) is not None:
            rest.append(line)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.ended = code, "\n".join(rest)
        return self.ended


@contextmanager
def workers(home: Path, count: int = 2) -> Iterator[list[Worker]]:
    """``count`` workers of :data:`THREADS` CPU threads each; each must stop cleanly (exit 0,
    its rpc-server gone) on SIGTERM afterwards."""
    started: list[Worker] = []
    try:
        for _ in range(count):
            started.append(Worker(home, "--threads", THREADS))
        yield started
    finally:
        for w in (w for w in started if w.ended is None):
            child = w.rpc_server()
            code, rest = w.end()
            assert code == 0 and "worker stopped" in rest, (code, rest)
            assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def _greedy_tokens(base_url: str) -> tuple[list[int], float]:
    """48 greedy tokens of :data:`PROMPT` and the decode speed (tok/s) the server reported."""
    body = httpx2.post(f"{base_url}/completion", timeout=300, json={
        "prompt": PROMPT, "n_predict": 48, "temperature": 0, "return_tokens": True,
        "cache_prompt": False}).json()
    return body["tokens"], body["timings"]["predicted_per_second"]


def test_two_loopback_workers_serve_the_local_servers_greedy_tokens_and_agent_run_works(
        rpc_home: Path, real_server, tmp_path: Path):
    local_tokens, _ = _greedy_tokens(real_server("baseline", ("-t", THREADS)).base_url)
    with workers(rpc_home) as (a, b):
        assert "RPC protocol 7.0.0" in a.seen[0] and "MiB free of" in a.seen[0]
        try:
            up = _agent("backend", "up", "--preset", "smol", "--rpc",
                        f"{a.address},{b.address}", home=rpc_home)
            assert up.returncode == 0, up.stderr
            assert f"over RPC workers {a.address},{b.address}" in up.stdout
            with home_env(rpc_home):
                state = current()
            assert state is not None and state.plan.rpc == (a.address, b.address)
            log = state.log.read_text()
            # The layers went to both workers, split by their free memory.
            assert f"using device RPC0 ({a.address})" in log, log[:3000]
            assert f"using device RPC1 ({b.address})" in log, log[:3000]
            assert "layer   0 assigned to device RPC0" in log, log[:3000]
            assert "layer  29 assigned to device RPC1" in log, log[:3000]
            status = json.loads(_agent("backend", "status", "--json", home=rpc_home).stdout)
            assert status[0]["rpc"] == [a.address, b.address]
            tokens, _ = _greedy_tokens(state.base_url)
            assert tokens == local_tokens
            (tmp_path / "work").mkdir()
            run = _agent("run", "say hi", "--preset", "smol", "--max-steps", "1", "--no-git",
                         "--repo", str(tmp_path / "work"), home=rpc_home)
            said = run.stdout + run.stderr
            assert run.returncode in (0, 1), said  # 1: one step was not enough for SmolLM2
            assert f"reusing llama-server at {state.base_url}" in said, said
            assert f"over RPC workers {a.address},{b.address}" in said, said
            assert "error" not in run.stderr.lower(), said
        finally:
            _agent("backend", "down", "--all", home=rpc_home)


def _up_over(home: Path, *over: Worker) -> ServerState:
    """``agent backend up --preset smol --rpc`` over the workers ``over``; the started
    server's state."""
    up = _agent("backend", "up", "--preset", "smol", "--rpc",
                ",".join(w.address for w in over), home=home)
    assert up.returncode == 0, up.stderr
    with home_env(home):
        state = current()
    assert state is not None
    return state


def test_a_worker_killed_mid_request_is_named_in_one_line_and_nothing_hangs(rpc_home: Path):
    with workers(rpc_home) as (a, b):
        state = _up_over(rpc_home, a, b)
        try:
            client = ServerClient(state.base_url, idle_timeout=120,
                                  explain=lambda: crash_report(state))
            streaming = threading.Event()
            outcome: list[BaseException | object] = []

            def ask() -> None:
                try:
                    outcome.append(client.complete(
                        [{"role": "user", "content": "Count from 1 to 1000, one per line."}],
                        sampling={"temperature": 0}, max_tokens=900,
                        on_text=lambda _: streaming.set()))
                except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                    outcome.append(exc)
                    streaming.set()

            asker = threading.Thread(target=ask, daemon=True)
            asker.start()
            assert streaming.wait(timeout=300), "no token streamed"
            b.rpc_server().kill()
            asker.join(timeout=300)
            assert not asker.is_alive(), "the request hung after its worker died"
            (error,) = outcome
            assert isinstance(error, ServerUnavailable), error
            first_report_line = str(error).splitlines()[1]
            assert f"lost its RPC worker {b.address}" in first_report_line, str(error)
            assert a.address not in first_report_line.split("(")[0]
            assert not psutil.pid_exists(state.pid) or \
                psutil.Process(state.pid).status() == psutil.STATUS_ZOMBIE
        finally:
            with home_env(rpc_home):
                stop(state)
        # The killed worker's process noticed: it exits with rpc-server's status, said in
        # one line (the workers() cleanup then finds it already ended).
        code, rest = b.end()
        assert code == 3 and "error: rpc-server was killed by SIGKILL" in rest, rest


def test_a_worker_of_another_rpc_protocol_is_refused_before_the_launch(rpc_home: Path):
    with StandinWorker(version=(4, 0, 0)) as old:
        proc = _agent("backend", "up", "--preset", "smol", "--rpc", old.address, home=rpc_home)
    _refused_as_protocol_4(proc, old.address, rpc_home)


def _refused_as_protocol_4(proc: subprocess.CompletedProcess, address: str,
                           home: Path) -> None:
    """``up --rpc address`` was refused in one line naming the worker's protocol (4) and the
    engine's (7), and nothing was started."""
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith(f"error: RPC worker {address} speaks RPC protocol 4.0.0 and "
                           "this engine speaks 7.0.0"), line
    assert json.loads(_agent("backend", "status", "--json", home=home).stdout) == []


@pytest.mark.beellama
def test_a_real_worker_of_another_build_is_refused_naming_both_protocols(
        bee_old: Engine, rpc_home: Path, tmp_path: Path):
    """BeeLlama v0.3.1's own rpc-server (built with --rpc: RPC protocol 4) as the worker, the
    upstream engine (7) as the server: refused before the launch, as with the stand-in."""
    assert bee_old.rpc_server is not None and bee_old.rpc_server.is_file()
    bee_home = tmp_path / "bee-home"
    (bee_home / "cache" / "engines").mkdir(parents=True)
    (bee_home / "cache" / "engines" / bee_old.key).symlink_to(bee_old.binary.parent.parent)
    worker = Worker(bee_home, "--threads", "1")
    address = worker.address
    try:
        assert "(RPC protocol 4.0.0)" in worker.seen[-1], worker.seen
        proc = _agent("backend", "up", "--preset", "smol", "--rpc", address, home=rpc_home)
    finally:
        code, rest = worker.end()
    _refused_as_protocol_4(proc, address, rpc_home)
    assert code == 0 and "worker stopped" in rest, rest


def test_a_worker_that_is_not_there_is_refused_naming_it(rpc_home: Path):
    address = f"127.0.0.1:{pick_port('127.0.0.1', 0)}"
    proc = _agent("backend", "up", "--preset", "smol", "--rpc", address, home=rpc_home)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"error: RPC worker {address} is not reachable")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_worker_stops_cleanly_on_ctrl_c(rpc_home: Path):
    worker = Worker(rpc_home)
    child = worker.rpc_server()
    code, rest = worker.end(signal.SIGINT)
    assert code == 0 and "worker stopped" in rest, rest
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_a_worker_off_loopback_prints_the_warning(rpc_home: Path):
    worker = Worker(rpc_home, "--host", "0.0.0.0")
    try:
        warning = next(line for line in worker.seen if line.startswith("WARNING:"))
        assert "no authentication" in warning and "private network" in warning
    finally:
        assert worker.end()[0] == 0


def test_a_worker_asked_for_a_device_it_lacks_says_so_in_one_line(rpc_home: Path):
    proc = _agent("backend", "worker", "--port", "0", "--device", "NOPE", home=rpc_home)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("error: rpc-server exited with status 1: ")
    assert "unknown device: NOPE" in proc.stderr or "No devices found" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_worker_with_cache_gives_rpc_server_its_file_cache(rpc_home: Path, tmp_path: Path):
    worker = Worker(rpc_home, "--cache", env={"LLAMA_CACHE": str(tmp_path / "llama-cache")})
    try:
        log = Path(worker.wait_for("log: ").split()[1].rstrip(";"))
        assert f"local cache    : {tmp_path / 'llama-cache' / 'rpc'}" in log.read_text()
    finally:
        assert worker.end()[0] == 0


def _hello_bytes() -> bytes:
    """A HELLO (plain TCP) then a device count request, as ggml-rpc frames them."""
    hello = struct.pack("<BQ", rpc._CMD_HELLO, rpc._CONN_CAPS) + bytes(rpc._CONN_CAPS)
    return hello + struct.pack("<BQ", rpc._CMD_DEVICE_COUNT, 0)


def test_a_client_gone_before_the_worker_answers_it_does_not_kill_the_worker(rpc_home: Path):
    """What a launch's probe leaves when the worker is busy: its HELLO waits in the worker's
    queue and the probe gives up. Once the busy client leaves, rpc-server takes the dead
    connection and writes its answer into it: with SIGPIPE's default action that killed the
    worker (a user met it running `agent backend down` after a refused `up`)."""
    with workers(rpc_home, count=1) as (worker,):
        host, port = worker.address.rsplit(":", 1)
        busy = socket.create_connection((host, int(port)), timeout=10)
        rpc._call(busy, rpc._CMD_HELLO, bytes(rpc._CONN_CAPS), 4 + rpc._CONN_CAPS)
        # a probe that queues behind it and gives up (rpc-server's backlog holds one)
        gone = socket.create_connection((host, int(port)), timeout=10)
        gone.sendall(_hello_bytes())
        gone.close()
        busy.close()
        time.sleep(2)
        assert worker.proc.poll() is None, worker.seen
        assert worker.rpc_server().is_running()
        assert rpc.probe(worker.address).protocol is not None


def test_a_worker_killed_outright_takes_its_rpc_server_with_it(rpc_home: Path):
    worker = Worker(rpc_home, "--threads", "1")
    child = worker.rpc_server()
    worker.proc.kill()
    code, _ = worker.end()  # reaps it and closes its output
    assert code == -signal.SIGKILL
    gone, alive = psutil.wait_procs([child], timeout=15)
    for leftover in alive:
        leftover.kill()
    assert gone and not alive, "rpc-server outlived its worker process"
    assert not rpc.probe(worker.address).reachable


def _up_then_lose_a_worker(home: Path, a: Worker, b: Worker):
    """``agent backend up`` over workers ``a`` and ``b``, then ``b`` crashes (its rpc-server
    killed) while the server is idle; returns the server's state."""
    state = _up_over(home, a, b)
    b.rpc_server().kill()
    b.proc.wait(timeout=60)
    code, rest = b.end()
    assert code == 3 and "killed by SIGKILL" in rest, rest
    return state


def test_status_names_a_worker_that_died_while_its_server_is_idle_and_a_crashed_server(
        rpc_home: Path):
    """An idle server does not notice its worker is gone (it aborts at its next request):
    ``backend status`` checks each worker and says so in one line; once the server has
    crashed, status says it is gone and why, and removes its stale state file."""
    with workers(rpc_home) as (a, b):
        state = _up_then_lose_a_worker(rpc_home, a, b)
        record = rpc_home / "state" / "servers" / f"{state.config_hash}.json"
        try:
            status = _agent("backend", "status", home=rpc_home)
            assert status.returncode == 0, status.stderr
            problems = [x for x in status.stdout.splitlines() if x.startswith("  problem ")]
            assert problems == [
                f"  problem RPC worker {b.address} of llama-server pid {state.pid} does not "
                "listen any more: the server fails at its next request; start the worker again "
                "(`agent backend worker` on that machine), then `agent backend down` and "
                f"`agent backend up --rpc {a.address},{b.address}`"], status.stdout
            [info] = json.loads(_agent("backend", "status", "--json", home=rpc_home).stdout)
            assert info["rpc_lost"] == [b.address] and info["pid"] == state.pid
            with pytest.raises(httpx2.HTTPError):  # the server aborts at this request
                httpx2.post(f"{state.base_url}/completion", timeout=120,
                            json={"prompt": PROMPT, "n_predict": 8}).raise_for_status()
            psutil.wait_procs([psutil.Process(state.pid)], timeout=60) \
                if psutil.pid_exists(state.pid) else None
            assert record.is_file()  # nothing has looked yet
            gone = _agent("backend", "status", home=rpc_home)
            lines = gone.stdout.splitlines()
            assert lines[0].startswith(f"removed the stale state file of llama-server pid "
                                       f"{state.pid} ({state.base_url}): llama-server lost "
                                       f"its RPC worker {b.address} "), gone.stdout
            assert lines[1:] == ["no managed server is running (start one with `agent "
                                 "backend up`)"], gone.stdout
            assert not record.exists()
            again = _agent("backend", "status", home=rpc_home)
            assert again.stdout.splitlines() == lines[1:]
        finally:
            with home_env(rpc_home):
                stop(state)


def test_up_does_not_reuse_a_server_whose_worker_went_away(rpc_home: Path):
    """``backend up`` used to answer "reusing" for an idle server whose worker was gone (it
    answers /health), which then aborted at the first request: it is launched again, and the
    missing worker named."""
    with workers(rpc_home) as (a, b):
        state = _up_then_lose_a_worker(rpc_home, a, b)
        try:
            again = _agent("backend", "up", "--preset", "smol", "--rpc",
                           f"{a.address},{b.address}", home=rpc_home)
            assert again.returncode == 3, again.stdout + again.stderr
            assert again.stderr.startswith(f"error: RPC worker {b.address} is not reachable")
            assert len(again.stderr.strip().splitlines()) == 1, again.stderr
            assert not psutil.pid_exists(state.pid) or \
                psutil.Process(state.pid).status() == psutil.STATUS_ZOMBIE
        finally:
            with home_env(rpc_home):
                stop(state)
