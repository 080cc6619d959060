"""Speculation that pays, through the real CLI and real llama-servers (the tiny DFlash fixture:
a random target and a random draft that accepts nothing): `backend calibrate` measures and
stores step costs, a tuned `dflash` launch probes the draft and turns drafting off, the bench
shows tuned against fixed and takes `--synth-accept`, a session says the draft length in force
and records what its drafts did. Broken inputs get one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from backend.engine.registry import Engine
from backend.home import HOME_ENV
from backend.measure.bench import different_answers
from backend.measure.calibrate import Calibration
from backend.measure.results import BenchResult
from backend.serve import tuning
from backend.serve.profiles import LaunchPlan
from backend.serve.speculation.costs import CostModel, Observation
from backend.serve.speculation.draft_cap import DraftCap
from backend.serve.speculation.store import (
    TuningError,
    acceptance_path,
    load_costs,
    load_observations,
    record,
    save_costs,
)
from tests.gitrepo import committed_repo
from tests.test_bench import AGENT, PNG_MAGIC, make_home, run

pytestmark = pytest.mark.server


def _presets(fixture: dict, profile: str = "dflash", ctx: int = 1024) -> str:
    return (f'[tinyd]\nmodel = "{fixture["target"]}"\ndraft = "{fixture["draft"]}"\n'
            f'profile = "{profile}"\nctx_size = {ctx}\n[tinyd.sampling]\ntemperature = 0.0\n'
            f'[plain]\nmodel = "{fixture["target"]}"\nctx_size = 1024\n')


def _plan(home: Path, engine: Engine, fixture: dict) -> LaunchPlan:
    return LaunchPlan(binary=engine.binary, model=fixture["target"], profile="dflash",
                      ctx_size=1024, draft=fixture["draft"])


def _calibrated(engine: Engine, fixture: dict, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch, idle_ratio: float = 1.0
                ) -> tuple[Path, LaunchPlan]:
    """A home (``DFLASH_AGENT_HOME`` set) whose tuned ``dflash`` plan has step costs stored,
    the loaded draft measured at ``idle_ratio`` plain tokens a token (1.0: free); returns the
    home and that plan."""
    home = make_home(tmp_path, engine, _presets(fixture))
    monkeypatch.setenv(HOME_ENV, str(home))
    plan = _plan(home, engine, fixture)
    save_costs(CostModel(source="calibrated", engine="e", model="m", draft="d",
                                       device="cpu", plain_ms=5.0, step_ratio={3: 2.0, 15: 8.0},
                                       idle_ratio=idle_ratio), plan)
    return home, plan


COUNT = [{"role": "user", "content": "Count from one to twenty."}]


def _drafting_home(engine: Engine, fixture: dict, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch
                   ) -> tuple[Path, LaunchPlan, Observation]:
    """:func:`_calibrated` with the loaded draft at 0.80x of plain and one stored 64-token
    observation accepting 0.9 a token: the tuned launch drafts 3 tokens per request, and a
    session's first 256-token request (the random draft accepts next to nothing) outweighs it
    and turns drafting off. Returns the home, the plan and that observation."""
    home, plan = _calibrated(engine, fixture, tmp_path, monkeypatch, idle_ratio=1.25)
    good = Observation(source="session", n_max=3, draft_n=60, accepted=54, tokens=64,
                              at=datetime.now(UTC), temperature=0.0)
    record(plan, [good])
    return home, plan, good


def _session(notes: list[str]):
    """A session on the ``tinyd`` server (:func:`agent.runtime.connect`), its notes into
    ``notes``. Its relaunch is priced at a 1 ms start: this tiny server starts in about a
    second and its requests last milliseconds; with the prompt's second prefill, a few
    requests decoded with the draft loaded and off make it due."""
    from agent import runtime
    from agent.config import load_settings
    from agent.ui import Reporter

    reporter = Reporter()
    reporter.note = notes.append
    backend = runtime.connect(load_settings(cli={"preset": "tinyd"}), reporter)
    backend.state = backend.state.model_copy(update={"ready_s": 0.001})
    return backend


def _lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny fixture decodes ~1,000 tokens a second: on a busy test machine its timings
    swing far more than a real model's, so the sanity limits (tests/test_tuning.py tests them
    on fixed rows) are opened for in-process runs that check everything else."""
    from backend.measure import calibrate as cal_mod
    monkeypatch.setattr(cal_mod, "MAX_DRIFT", float("inf"))
    monkeypatch.setattr(cal_mod, "MIN_RATIO", 0.0)
    monkeypatch.setattr(cal_mod, "MIN_EFFICIENCY", 0.0)
    monkeypatch.setattr(cal_mod, "MAX_EFFICIENCY", float("inf"))


def test_calibrate_measures_stores_and_charts_the_cost_model(engine: Engine, tiny_dflash: dict,
                                                             tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    from backend.measure.calibrate import calibrate, plot_calibration, table_lines
    from backend.models.presets import get_preset

    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    monkeypatch.setenv(HOME_ENV, str(home))
    _lenient(monkeypatch)
    cal = calibrate(get_preset("tinyd"), engine, lengths=(1, 3), tokens=24, repeats=1)
    assert [r.name for r in cal.rows] == ["plain (mean of first and last)", "K=1", "K=1 p=0.75",
                                          "K=3", "K=3 p=0.75", "draft loaded, off",
                                          "plain (again)"]
    plain = cal.plain()
    assert plain.drafted == 0 and plain.tokens == 24  # ignore_eos: every token decoded
    for row in cal.rows[1:-2]:
        assert row.drafted > 0, row  # a drafting server, synthetic acceptance applied
        assert (row.accepted == 0) == (row.synth_p == 0.0)
    # The product's engine takes the length per request: the draft loaded, every request at
    # speculative.n_max 0, drafts nothing, and what that costs is stored.
    idle = cal.rows[-2]
    assert idle.drafted == 0 and idle.tokens == 24
    assert cal.costs.idle_ratio == pytest.approx(idle.step_ms / plain.step_ms)
    assert set(cal.costs.step_ratio) == {1, 3} and cal.costs.source == "calibrated"
    assert cal.costs.synthetic and cal.costs.plain_ms == pytest.approx(plain.step_ms)
    # Stored where a launch of the same engine, target and draft on this device finds it.
    stored = load_costs(_plan(home, engine, tiny_dflash), "cpu")
    assert stored.source == "calibrated" and stored.step_ratio == cal.costs.step_ratio
    assert cal.stored is not None and cal.stored.is_file()
    lines = table_lines(cal)
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert any(line.split()[:1] == ["3"] and ("never" in line or "p>" in line)
               for line in lines)
    at = next(i for i, line in enumerate(lines) if line.startswith("draft loaded, off: "))
    assert lines[at].endswith("x plain)") and lines[at + 1].startswith("  off in a session: ")
    png = plot_calibration(cal, tmp_path / "cal.png")
    assert png.read_bytes().startswith(PNG_MAGIC)
    # Its servers were its own: no "current" server is left pointing at one of them.
    assert not (home / "state" / "servers" / "current").exists()


def test_calibrate_from_the_command_line(engine: Engine, tiny_dflash: dict, tmp_path: Path):
    """The command end to end: a table and a stored model, or — when this machine was too busy
    for the fixture's millisecond timings to hold together — a refusal that stores nothing."""
    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    out = tmp_path / "cal.json"
    proc = run("backend", "calibrate", "--preset", "tinyd", "--lengths", "1,3", "--tokens",
               "64", "--json", str(out), home=home)
    stored = list((home / "state" / "speculation").glob("costs/*.json"))
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    if proc.returncode == 0:
        cal = Calibration.model_validate_json(out.read_text("utf-8"))
        assert [p.resolve() for p in stored] == [cal.stored.resolve()]
        assert "break-even" in proc.stdout and f"cost model: {cal.stored}" in proc.stdout
    else:
        assert proc.returncode == 3, proc.stderr
        assert "do not hold together" in proc.stderr and "nothing was stored" in proc.stderr
        assert stored == [] and not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--lengths", "0,99"], "give draft lengths in 1..15"),
    (["--lengths", "three"], "expected numbers like 1,3,7,15"),
    (["--profile", "ngram"], "measure it with `agent backend bench`"),
    (["--preset", "plain"], "has no draft model to calibrate"),
])
def test_calibrate_refuses_bad_input_in_one_line(engine: Engine, tiny_dflash: dict,
                                                  tmp_path: Path, args: list[str],
                                                  message: str):
    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    proc = run("backend", "calibrate", "--preset", "tinyd", *args, home=home)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_a_tuned_launch_probes_a_useless_draft_and_starts_without_it(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """Off is a server without the draft, even where calibration measured a loaded draft as
    free (its features are injected after every batch even when no request drafts: on an H200
    a draft calibrated at 1.01x of plain ran 0.92-0.93x loaded and off, 2026-12-05). Once
    measurements say drafting pays, the next launch keeps the draft loaded on the product's
    patched engine and each request carries the length
    (backend.serve.speculation.draft_cap.DraftCap)."""
    home = make_home(tmp_path, engine, _presets(tiny_dflash, ctx=4096))
    monkeypatch.setenv(HOME_ENV, str(home))
    plan = _plan(home, engine, tiny_dflash).model_copy(update={"ctx_size": 4096})
    try:
        first = run("backend", "up", "--preset", "tinyd", home=home)
        assert first.returncode == 0, first.stderr
        assert "probing the draft's acceptance at length 15" in first.stderr
        assert "speculation: drafting off: acceptance 0.00 per token" in first.stdout
        state = next((home / "state" / "servers").glob("*.json"))
        assert "--spec-draft-model" not in json.loads(state.read_text("utf-8"))["argv"]
        assert run("backend", "down", "--all", home=home).returncode == 0
        # Calibration measured the loaded draft at plain speed: off still starts without it.
        save_costs(CostModel(source="calibrated", engine="e", model="m",
                                           draft="d", device="cpu", plain_ms=5.0,
                                           step_ratio={3: 2.0, 15: 8.0}, idle_ratio=1.0), plan)
        up = run("backend", "up", "--preset", "tinyd", home=home)
        assert up.returncode == 0, up.stderr
        assert "probing" not in up.stderr  # the first launch's probe is stored
        assert "speculation: drafting off: acceptance 0.00 per token" in up.stdout
        state = next((home / "state" / "servers").glob("*.json"))
        assert "--spec-draft-model" not in json.loads(state.read_text("utf-8"))["argv"]
        # The next launch of the same plan reuses it: no second probe.
        again = run("backend", "up", "--preset", "tinyd", home=home)
        assert "reusing" in again.stdout and "probing" not in again.stderr
        printed = run("backend", "up", "--preset", "tinyd", "--print-cmd", home=home)
        assert "--spec-draft-model" not in printed.stdout
        assert "speculation: drafting off: acceptance 0.00" in printed.stderr
        assert "probes the draft first" not in printed.stderr  # the probe is stored
        # The fixed profile still drafts 15 tokens: the reference the tuning is judged by.
        fixed = run("backend", "up", "--preset", "tinyd", "--profile", "dflash-fixed",
                    "--print-cmd", home=home)
        assert "--spec-type draft-dflash --spec-draft-n-max 15" in fixed.stdout
        observations = load_observations(plan)
        assert [o.source for o in observations] == ["probe", "probe"]
        assert sum(o.draft_n for o in observations) > 0
        assert sum(o.accepted for o in observations) == 0
        assert run("backend", "down", "--all", home=home).returncode == 0
        # Later measurements say drafting would pay: the next launch loads the draft at its
        # longest, and the next session's requests draft 3 tokens.
        save_costs(CostModel(source="calibrated", engine="e", model="m",
                                           draft="d", device="cpu", plain_ms=5.0,
                                           step_ratio={3: 2.0}), plan)
        # (Heavy enough to outweigh the probe's thousand-odd rejected drafts.)
        record(plan, [Observation(source="session", n_max=3, draft_n=30000,
                                                accepted=27000, at=datetime.now(UTC))])
        on = run("backend", "up", "--preset", "tinyd", home=home)
        assert on.returncode == 0, on.stderr
        assert "speculation: draft length 3 per request" in on.stdout, on.stdout
        status = json.loads(run("backend", "status", "--json", home=home).stdout)
        assert len(status) == 1 and status[0]["speculation"].startswith("draft length 3 per")
        assert "speculation draft length 3 per request" in run("backend", "status",
                                                               home=home).stdout
        state = next((home / "state" / "servers").glob("*.json"))
        argv = json.loads(state.read_text("utf-8"))["argv"]
        assert argv[argv.index("--spec-draft-n-max") + 1] == "15"  # the longest a request asks
        assert "--spec-draft-model" in argv
        repo = tmp_path / "repo"
        committed_repo(repo, {"README.md": "hello\n"})
        env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
        session = subprocess.run(
            [*AGENT, "run", "--preset", "tinyd", "--max-steps", "1", "--approval", "ask",
             "say hello"], cwd=repo, capture_output=True, text=True, timeout=600, env=env,
            stdin=subprocess.DEVNULL)
        assert session.returncode in (0, 1), session.stderr
        assert "reusing llama-server" in session.stderr
        assert "· draft length 3" in session.stderr, session.stderr
        recorded = load_observations(plan)[len(observations) + 1:]
        assert recorded and {(o.source, o.n_max) for o in recorded} == {("session", 3)}
        assert sum(o.draft_n for o in recorded) > 0
    finally:
        run("backend", "down", "--all", home=home)


def test_a_server_whose_drafting_went_off_is_relaunched_without_its_costly_draft(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """A per-request server keeps its draft loaded when its requests turn drafting off; where
    calibration measured that loaded draft slower than a server without it (an H200 agent
    replay decoded 87 turns at 0.94x of baseline so, 2026-12-04), the next command starts a
    server without the draft, unless another live session holds a lease on the running one:
    then it stays, and the command says so."""
    from backend.serve.leases import hold
    from backend.serve.server import running

    home, plan = _calibrated(engine, tiny_dflash, tmp_path, monkeypatch, idle_ratio=1.09)
    now = datetime.now(UTC)
    record(plan, [Observation(source="session", n_max=3, draft_n=300,
                                            accepted=270, tokens=300, at=now,
                                            temperature=0.0)])
    other = None
    try:
        first = run("backend", "up", "--preset", "tinyd", home=home)
        assert first.returncode == 0, first.stderr
        assert "speculation: draft length 3 per request" in first.stdout
        [drafting] = running()
        assert "--spec-draft-model" in drafting.argv
        # Its sessions' requests then accepted nothing: drafting is off now.
        record(plan, [Observation(source="session", n_max=3, draft_n=30000,
                                                accepted=0, tokens=30000, at=now,
                                                temperature=0.0)])
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        hold(drafting, other.pid)  # another session on it
        kept = run("backend", "up", "--preset", "tinyd", home=home)
        assert kept.returncode == 0, kept.stderr
        assert f"reusing llama-server pid {drafting.pid}" in kept.stdout
        assert "keeps the draft loaded, where calibration measured it decoding at 0.92x" in (
            kept.stderr)
        assert f"it stays up while another session (pid {other.pid}) uses it" in kept.stderr
        other.kill()
        other.wait()
        fresh = run("backend", "up", "--preset", "tinyd", home=home)
        assert fresh.returncode == 0, fresh.stderr
        assert "starting one without the draft" in fresh.stderr
        assert "speculation: drafting off" in fresh.stdout
        [plain] = running()
        assert plain.pid != drafting.pid and "--spec-draft-model" not in plain.argv
        assert not (home / "state" / "servers" / f"{drafting.config_hash}.users").exists()
    finally:
        if other is not None and other.poll() is None:
            other.kill()
        run("backend", "down", "--all", home=home)


def test_a_session_relaunches_its_server_without_a_costly_draft_it_stopped_using(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """Inside one session: once its requests turn drafting off and the loaded draft (measured
    at 0.80x of plain) has cost what starting the server took, the session relaunches the
    server without the draft and the conversation goes on there; while another live session
    holds a lease on the server it stays, once said."""
    from backend.serve.leases import hold, holders
    from backend.serve.server import running

    home, plan, good = _drafting_home(engine, tiny_dflash, tmp_path, monkeypatch)
    notes: list[str] = []
    other = None
    try:
        backend = _session(notes)
        [drafting] = running()
        assert "--spec-draft-model" in drafting.argv and drafting.ready_s is not None
        cap = backend.draft_cap
        assert isinstance(cap, DraftCap) and cap.next_n_max() == 3
        first = backend.client.complete(COUNT, max_tokens=256)
        assert first.draft_n_max == 3 and cap.next_n_max() == 0, cap.choice
        off = backend.client.complete(COUNT, max_tokens=256)
        assert off.draft_n_max == 0 and cap.loaded_off_ms > 0 and backend.draft_cap is cap
        for _ in range(8):  # relaunched before one of them
            after = backend.client.complete(COUNT, max_tokens=256)
            if backend.draft_cap is None:
                break
        assert any("relaunching the server without the draft" in n for n in notes), notes
        [plain] = running()
        assert plain.pid != drafting.pid and "--spec-draft-model" not in plain.argv
        assert backend.state == plain and backend.draft_cap is None
        assert backend.client.base_url == plain.base_url and after.draft_n_max is None
        assert after.content and after.finish_reason  # the conversation goes on there
        assert holders(plain) == [os.getpid()]
        # The session's observations were stored before its draft cap went.
        stored = load_observations(plan.model_copy(update={"profile": "dflash-fixed"}))
        assert [o.n_max for o in stored if o.source == "session"][-1] == 3
        run("backend", "down", "--all", home=home)

        # Another session on the server: it stays, and the session stops asking.
        acceptance_path(plan).unlink()
        record(plan, [good])
        notes.clear()
        backend = _session(notes)
        [shared] = running()
        assert "--spec-draft-model" in shared.argv
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        hold(shared, other.pid)
        for _ in range(10):
            backend.client.complete(COUNT, max_tokens=256)
        assert [n for n in notes if "another session" in n] == [
            f"the server at {shared.base_url} keeps its draft loaded: another session "
            f"(pid {other.pid}) uses it"]
        assert not [n for n in notes if "relaunching" in n]  # none was
        assert backend.draft_cap.keep_loaded and [s.pid for s in running()] == [shared.pid]
    finally:
        if other is not None:
            other.kill()
            other.wait()
        run("backend", "down", "--all", home=home)


def test_a_session_whose_server_without_the_draft_fails_keeps_its_draft_and_stops_trying(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """The server is stopped before the one without the draft starts (a second copy of a large
    model may not fit); where that one fails, the one with the draft is started again and the
    session goes on there, without trying again."""
    from backend.serve import launch
    from backend.serve.records import ServerError
    from backend.serve.server import running

    real_up = launch.up

    def up(plan, **kwargs):
        if plan.draft_n_max == 0:
            raise ServerError("llama-server exited: no memory left for the KV cache")
        return real_up(plan, **kwargs)

    home, _, _ = _drafting_home(engine, tiny_dflash, tmp_path, monkeypatch)
    monkeypatch.setattr(launch, "up", up)
    notes: list[str] = []
    try:
        backend = _session(notes)
        [first] = running()
        backend.client.complete(COUNT, max_tokens=256)
        for _ in range(8):
            backend.client.complete(COUNT, max_tokens=256)
            if backend.state.pid != first.pid:
                break
        [again] = running()
        assert again.pid != first.pid and "--spec-draft-model" in again.argv
        assert backend.state == again and backend.client.base_url == again.base_url
        assert isinstance(backend.draft_cap, DraftCap) and backend.draft_cap.keep_loaded
        for _ in range(3):
            backend.client.complete(COUNT, max_tokens=256)
        assert [n for n in notes if "did not start" in n] == [
            "the server without the draft did not start (llama-server exited: no memory left "
            "for the KV cache); starting the one with it again"]
        assert [s.pid for s in running()] == [again.pid]
    finally:
        run("backend", "down", "--all", home=home)


def test_the_agent_replay_relaunches_without_the_draft_as_a_session_does(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """benchmarks/agent_turns.py measures what a session does: its tuned profile's client
    relaunches the server without a costly draft it stopped using, the run then stops the new
    server, and every request still carries the replay's seed."""
    from backend.serve.server import running
    from benchmarks.agent_turns import REPLAY_SEED, _client, _unloading

    home, plan, _ = _drafting_home(engine, tiny_dflash, tmp_path, monkeypatch)
    try:
        assert run("backend", "up", "--preset", "tinyd", home=home).returncode == 0
        [drafting] = running()
        # A relaunch priced at a 1 ms start, as in a _session.
        states = {"dflash": drafting.model_copy(update={"ready_s": 0.001})}
        client = _client(drafting, temperature=0.0)
        notes: list[str] = []
        servers: list = []
        _unloading(client, states, "dflash", "tinyd", {"temperature": 0.0}, 60.0, notes.append,
                   servers)
        assert client.complete(COUNT, max_tokens=256).draft_n_max == 3
        assert client.complete(COUNT, max_tokens=256).draft_n_max == 0
        for _ in range(8):  # relaunched before one of them
            client.complete(COUNT, max_tokens=256)
            if client.draft_cap is None:
                break
        [plain] = running()
        assert states["dflash"] == plain and "--spec-draft-model" not in plain.argv
        assert client.base_url == plain.base_url and client.draft_cap is None
        assert client.request_extra["seed"] == REPLAY_SEED
        assert any("relaunching the server without the draft" in n for n in notes)
        # the results list the new server beside the first one
        [again] = servers
        assert again.profile == "dflash" and again.argv == plain.argv
        assert again.speculation.startswith("relaunched without the draft")
        stored = load_observations(plan.model_copy(update={"profile": "dflash-fixed"}))
        assert [o.source for o in stored] == ["session"]  # the replay stored none of its own
    finally:
        run("backend", "down", "--all", home=home)


def test_bench_tuned_against_fixed_with_synthetic_acceptance(engine: Engine, tiny_dflash: dict,
                                                             tmp_path: Path, monkeypatch):
    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    # A stored cost model (as `calibrate` writes it) under which length 3 is best at p = 0.9.
    monkeypatch.setenv(HOME_ENV, str(home))
    save_costs(CostModel(source="calibrated", engine="e", model="m", draft="d",
                                       device="cpu", plain_ms=5.0,
                                       step_ratio={3: 2.0, 15: 8.0}),
                      _plan(home, engine, tiny_dflash))
    out = tmp_path / "bench.json"
    proc = run("backend", "bench", "--preset", "tinyd", "--profiles",
               "baseline,dflash,dflash-fixed", "--prompts", "edit", "--temperatures", "0",
               "--max-tokens", "24", "--synth-accept", "0.9", "--json", str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    result = BenchResult.model_validate_json(out.read_text("utf-8"))
    assert result.synth_accept == 0.9
    servers = {s.profile: s for s in result.servers}
    assert servers["dflash-fixed"].speculation is None
    line = servers["dflash"].speculation
    assert line == ("draft length 3 per request: synthetic acceptance 0.90 per token; "
                    "calibrated step costs predict 1.72x at length 3")
    # The draft loaded at 15 (rates for 15 positions), each request capped at 3.
    argv = servers["dflash"].argv
    assert argv[argv.index("--spec-draft-n-max") + 1] == "15"
    assert argv[argv.index("--spec-synth-rates") + 1].startswith("0.9,0.81,0.729,0.6561,")
    tuned = [s for s in result.samples if s.profile == "dflash"]
    assert all(0 < s.draft_n <= 3 * s.completion_tokens for s in tuned)
    fixed = [s for s in result.samples if s.profile == "dflash-fixed"]
    assert all(s.draft_n > 0 for s in fixed) and sum(s.draft_accepted for s in fixed) > 0
    assert f"dflash: {line}" in proc.stderr
    # Synthetic runs say nothing about the real draft: no observations recorded.
    assert not list((home / "state" / "speculation").glob("acceptance/*.json"))


def test_bench_synth_accept_is_checked(engine: Engine, tiny_dflash: dict, tmp_path: Path):
    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    proc = run("backend", "bench", "--preset", "tinyd", "--synth-accept", "1.5", home=home)
    assert proc.returncode == 2 and "--synth-accept" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_session_shows_the_draft_length_and_records_its_drafts(engine: Engine,
                                                                  tiny_dflash: dict,
                                                                  tmp_path: Path, monkeypatch):
    home = make_home(tmp_path, engine, _presets(tiny_dflash, profile="dflash-fixed",
                                                        ctx=4096))
    repo = tmp_path / "repo"
    committed_repo(repo, {"README.md": "hello\n"})
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    try:
        proc = subprocess.run(
            [*AGENT, "run", "--preset", "tinyd", "--max-steps", "1", "--approval", "ask",
             "say hello"], cwd=repo, capture_output=True,
            text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)
    finally:
        run("backend", "down", "--all", home=home)
    assert proc.returncode in (0, 1), proc.stderr  # the random model rarely finishes a task
    assert "· draft length 15" in proc.stderr, proc.stderr
    monkeypatch.setenv(HOME_ENV, str(home))
    plan = _plan(home, engine, tiny_dflash).model_copy(update={"profile": "dflash-fixed",
                                                               "ctx_size": 4096})
    observations = load_observations(plan)
    assert observations and {o.source for o in observations} == {"session"}
    assert all(o.n_max == 15 for o in observations) and sum(o.draft_n for o in observations)


def test_an_engine_without_synthetic_acceptance_times_the_real_draft(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """BeeLlama and older builds have no --spec-synth-rates: calibration times the real draft
    at each length (steps = tokens − accepted) and says so, never a crash."""
    from backend.engine import flavour
    from backend.measure import calibrate as cal_mod
    from backend.models.presets import get_preset

    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    monkeypatch.setenv(HOME_ENV, str(home))
    real = flavour.binary_facts(engine.binary)
    without = real.model_copy(update={"flags": frozenset(
        f for f in real.flags if not f.startswith("--spec-synth"))})
    monkeypatch.setattr(cal_mod, "binary_facts", lambda _binary: without)
    _lenient(monkeypatch)
    notes: list[str] = []
    result = cal_mod.calibrate(get_preset("tinyd"), engine, lengths=(1, 3), tokens=16,
                               repeats=1, note=notes.append)
    assert [r.name for r in result.rows][1:] == ["K=1", "K=3", "draft loaded, off",
                                                 "plain (again)"]
    assert all(r.synth_p is None and r.drafted > 0 for r in result.rows[1:-2])
    assert not result.costs.synthetic and result.costs.efficiency == {}
    assert result.costs.step_ratio[3] > 1.0
    assert any("timing the real draft" in n for n in notes)
    assert "(real draft timed: no synthetic acceptance in this engine)" in \
        cal_mod.table_lines(result)


def test_a_failing_probe_leaves_drafting_off_and_is_not_paid_for_again(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A probe that fails (a draft llama-server refuses, a server that dies) must not stop the
    launch, and the next launches must not pay for it again until a probe is due."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    calls: list[int] = []

    def failing(plan: LaunchPlan, n_max: int, *args: object, **kwargs: object) -> list:
        calls.append(n_max)
        raise TuningError("a probe request got HTTP 500 without timings\n(log: x)")

    monkeypatch.setattr(tuning, "probe", failing)
    plan = _plan(tmp_path, engine, tiny_dflash)
    first, choice = tuning.tune(plan)
    assert calls == [15] and first.draft_n_max == 0
    assert choice.line() == ("drafting off: the acceptance probe failed (a probe request got "
                             "HTTP 500 without timings)")
    second, again = tuning.tune(plan)
    assert calls == [15] and second.draft_n_max == 0  # not probed again
    assert again.reason.startswith("the acceptance probe failed (a probe request got HTTP 500")
    assert "probed again after" in again.reason




def test_bench_serves_each_temperature_the_length_its_own_acceptance_chose(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """One server, two temperatures: greedy requests carry the length greedy observations
    chose, sampled ones the length (here off) sampled observations chose, and what the bench
    saw is recorded with its temperature. Before, one record chose for both (an H200 ran the
    edit set at 1.42x at temperature 0 and 0.84x at 0.7 with the same length)."""
    home, plan = _calibrated(engine, tiny_dflash, tmp_path, monkeypatch)
    now = datetime.now(UTC)
    record(plan, [
        Observation(source="bench", n_max=3, draft_n=30000, accepted=27000, at=now,
                           temperature=0.0),
        Observation(source="bench", n_max=3, draft_n=30000, accepted=0, at=now,
                           temperature=0.7)])
    out = tmp_path / "bench.json"
    proc = run("backend", "bench", "--preset", "tinyd", "--profiles", "baseline,dflash",
               "--prompts", "edit", "--temperatures", "0,0.7", "--max-tokens", "24", "--json",
               str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    assert "probing" not in proc.stderr  # both kinds were measured just now
    result = BenchResult.model_validate_json(out.read_text("utf-8"))
    line = {s.profile: s for s in result.servers}["dflash"].speculation
    assert line.startswith("t=0: draft length 3 per request: acceptance 0.9"), line
    # t=0.7's own launch would start without the draft (off at a launch never keeps it
    # loaded); here it shares t=0's server, at length 0, and the bench says so
    assert "; t=0.7: drafting off: acceptance 0.00" in line
    assert "requests at t=0.7 run on a server with the draft loaded" in proc.stderr
    tuned = [s for s in result.samples if s.profile == "dflash"]
    assert {s.temperature for s in tuned} == {0.0, 0.7}
    assert all(s.draft_n > 0 for s in tuned if s.temperature == 0.0)
    assert all(s.draft_n == 0 for s in tuned if s.temperature == 0.7)
    recorded = load_observations(plan)[2:]
    assert recorded and {(o.source, o.n_max, o.temperature) for o in recorded} == {
        ("bench", 3, 0.0)}
    # Every profile's request at one prompt and repeat carries the same sampling seed: at 0.7,
    # where the tuned server drafts nothing, it samples baseline's very answer (without the
    # seed each server drew its own, and two plain servers read 0.95x of each other).
    by_key = {}
    for s in result.samples:
        by_key.setdefault((s.prompt, s.temperature, s.repeat), {})[s.profile] = s
    assert all(pair["baseline"].seed == pair["dflash"].seed is not None
               for pair in by_key.values())
    sampled = [pair for (_, t, _), pair in by_key.items() if t == 0.7]
    assert sampled and all(pair["baseline"].answer_sha256 == pair["dflash"].answer_sha256
                           is not None for pair in sampled)
    assert not any("t=0.7" in line for line in different_answers(result))


def test_bench_warms_each_server_at_the_length_its_first_requests_draft(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """Before anything is timed, a per-request server decodes a few steps at the length its
    first requests will carry (the first request drafting 3 a step on a fresh H200 server
    decoded at 540 tok/s, the second at 707: its verification batch had never run); a plain
    server warms up plainly. Warm-ups are neither samples nor observations."""
    from backend.measure import bench as bench_mod
    from backend.measure.prompts import load_prompts
    from backend.models.presets import get_preset

    _, plan = _calibrated(engine, tiny_dflash, tmp_path, monkeypatch)
    record(plan, [Observation(source="bench", n_max=3, draft_n=30000,
                                            accepted=27000, at=datetime.now(UTC),
                                            temperature=0.0)])
    sent: list[tuple[str, str, dict]] = []
    real_post = bench_mod._post

    def spy(client, state, profile, prompt, body):
        sent.append((profile, prompt.name, body))
        return real_post(client, state, profile, prompt, body)

    monkeypatch.setattr(bench_mod, "_post", spy)
    _, prompts = load_prompts("edit")
    result = bench_mod.run_bench(get_preset("tinyd"), engine, ["baseline", "dflash"],
                                 prompts[:1], prompt_set="edit", temperatures=[0.0],
                                 max_tokens=8)
    warm = [(profile, body.get("speculative.n_max"), body["max_tokens"])
            for profile, name, body in sent if name == "warm-up"]
    assert sorted(warm, key=str) == [("baseline", None, bench_mod.WARM_UP_TOKENS),
                                     ("dflash", 3, bench_mod.WARM_UP_TOKENS)]
    assert [(p, b["speculative.n_max"]) for p, n, b in sent if n != "warm-up" and p == "dflash"
            ] == [("dflash", 3)]
    assert len(result.samples) == 2 and {s.prompt for s in result.samples} == {prompts[0].name}
    assert len(load_observations(plan)) == 2  # the stored one and the timed request


def test_bench_explores_a_draft_near_break_even_then_follows_what_its_requests_measured(
        engine: Engine, tiny_dflash: dict, tmp_path: Path, monkeypatch):
    """A stored probe that read acceptance just under paying: the tuned server keeps the draft
    loaded (a loaded draft was never measured free here), its first request drafts the best
    length, and the requests' own acceptance (the random draft accepts nothing) turns drafting
    off for the rest, as in a session (DraftCap). On an H200 the two-request probe read
    v4 at 0.58 and kept drafting off, where the bench's requests then accepted 0.71."""
    home = make_home(tmp_path, engine, _presets(tiny_dflash))
    monkeypatch.setenv(HOME_ENV, str(home))
    plan = _plan(home, engine, tiny_dflash)
    save_costs(CostModel(source="calibrated", engine="e", model="m", draft="d",
                                       device="cpu", plain_ms=5.0, step_ratio={3: 2.0, 15: 8.0}),
                      plan)
    record(plan, [Observation(source="probe", n_max=3, draft_n=300, accepted=105,
                                            tokens=48, at=datetime.now(UTC), temperature=0.0)])
    out = tmp_path / "bench.json"
    proc = run("backend", "bench", "--preset", "tinyd", "--profiles", "baseline,dflash",
               "--prompts", "edit", "--temperatures", "0", "--max-tokens", "24", "--json",
               str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    result = BenchResult.model_validate_json(out.read_text("utf-8"))
    line = {s.profile: s for s in result.servers}["dflash"].speculation
    assert line.startswith("drafting off per request: acceptance 0.56"), line
    assert "first 256 tokens draft 3 a step" in line
    tuned = [s for s in result.samples if s.profile == "dflash"]
    assert len(tuned) == 3 and tuned[0].draft_n > 0  # explored
    assert tuned[0].draft_accepted * 10 < tuned[0].draft_n  # the random draft: ~nothing
    assert all(s.draft_n == 0 for s in tuned[1:])  # then off, from what it measured
    recorded = load_observations(plan)[1:]
    assert [(o.source, o.n_max, o.temperature) for o in recorded] == [("bench", 3, 0.0)]
