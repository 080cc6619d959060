"""n-gram lookup never slower: its lengths per device (backend.serve.tuning.with_ngram_lengths)
and the per-request guard (backend.serve.speculation.ngram_guard), in logic and on the real patched
engine with SmolLM2."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from agent.client import ServerClient
from backend.engine.registry import Engine
from backend.engine.sources import PER_REQUEST_DRAFT_CAP
from backend.models.presets import NgramLengths, ServerOptions
from backend.serve import tuning
from backend.serve.profiles import LaunchPlan, server_argv
from backend.serve.speculation import ngram_guard
from backend.serve.speculation.control import (
    RequestControl,
    request_control,
    takes_length_per_request,
)
from backend.serve.speculation.draft_cap import DraftCap
from backend.serve.speculation.ngram_guard import NgramGuard
from tests.gitrepo import committed_repo
from tests.test_bench import AGENT, make_home, run


def _plan(tmp_path: Path, profile: str = "ngram", patched: bool = True,
          options: ServerOptions | None = None, draft: Path | None = None) -> LaunchPlan:
    engine = tmp_path / "engines" / "llama.cpp-x"
    (engine / "bin").mkdir(parents=True, exist_ok=True)
    (engine / "engine.json").write_text(json.dumps(
        {"patches": [PER_REQUEST_DRAFT_CAP] if patched else []}))
    return LaunchPlan(binary=engine / "bin" / "llama-server", model=tmp_path / "m.gguf",
                      profile=profile, ctx_size=4096, draft=draft,
                      options=options or ServerOptions())


def _timings(tokens: int, tok_s: float, context: int = 1000) -> dict:
    return {"predicted_n": tokens, "predicted_ms": tokens / tok_s * 1000, "cache_n": context,
            "prompt_n": 0}


def test_drafting_turns_off_when_it_measures_slower_and_back_on_when_probes_pay(
        tmp_path: Path):
    notes: list[str] = []
    guard = NgramGuard(_plan(tmp_path), notes.append)
    assert guard.longest == ngram_guard.NGRAM_DEFAULT_N_MAX  # llama.cpp's (a CPU's lengths)
    assert guard.label(0) == "n-gram lookup off (a plain reference to time it against)"
    sent: list[int] = []

    def request(drafting_rate: float, plain_rate: float = 100.0) -> None:
        n_max = guard.next_n_max()
        sent.append(n_max)
        guard.observe(n_max, _timings(100, drafting_rate if n_max else plain_rate))

    for _ in range(4):
        request(80)  # 0.8x: off once three drafting requests say so
    assert sent == [64, 0, 64, 64] and not guard.on
    assert notes == ["n-gram lookup off: drafting measured 0.80x plain decoding on this "
                     "session's requests"]
    assert guard.label(0) == "n-gram lookup off (it measured slower than plain here)"
    assert guard.label(64) == "n-gram lookup"
    while len(sent) < 4 + 3 * ngram_guard.PROBE_EVERY:
        request(80)  # off: one request in PROBE_EVERY drafts, and stays off at 0.8x
    assert sent[4:].count(64) == 3 and not guard.on and len(notes) == 1
    while not guard.on and len(sent) < 60:
        request(300)  # the text turns predictable: the probes measure 3x
    assert guard.on and notes[-1].startswith("n-gram lookup on: drafting measured")
    before = len(sent)
    for _ in range(2 * ngram_guard.REFERENCE_EVERY):
        request(300)  # on: one request in REFERENCE_EVERY decodes plain
    assert sent[before:].count(0) == 2 and guard.on
    guard.on = False
    guard.restart()  # a new session (the replay benchmark's next conversation)
    assert guard.on and guard.speedup() is None
    assert [guard.next_n_max(), guard.next_n_max()] == [64, 0]


def test_a_scheduled_plain_request_too_short_to_measure_is_sent_again(tmp_path: Path):
    guard = NgramGuard(_plan(tmp_path))
    assert guard.next_n_max() == 64
    guard.observe(64, _timings(100, 100))
    assert guard.next_n_max() == 0  # the second request: the plain reference
    guard.observe(0, _timings(ngram_guard.MIN_TOKENS - 1, 100))  # a short tool call
    assert guard.next_n_max() == 0  # still wanted
    guard.observe(0, _timings(200, 100))
    assert guard.next_n_max() == 64


def _session(true_speedup: float, seed: int) -> tuple[float, int]:
    """A 60-request session whose context grows 600 tokens a request (a plain token costs
    10 ms at no context, twice that at 10,000), replies of 40-300 tokens, and drafting's
    speedup ``true_speedup`` times a per-request factor in 0.7-1.3 (what is decoded varies):
    returns the session's speedup over plain decoding under the guard, and its flips."""
    rng = random.Random(seed)
    notes: list[str] = []
    guard = NgramGuard(LaunchPlan(binary=Path("/x"), model=Path("/m"), profile="ngram",
                                  ctx_size=65536), notes.append)
    guarded = plain = 0.0
    for i in range(60):
        n_max = guard.next_n_max()
        tokens, per_token = rng.choice([40, 80, 150, 300]), 10 * (1 + 600 * i / 10000)
        spent = tokens * per_token / (true_speedup * rng.uniform(0.7, 1.3) if n_max else 1)
        guard.observe(n_max, {"predicted_n": tokens, "predicted_ms": spent,
                              "cache_n": 600 * i, "prompt_n": 50})
        guarded, plain = guarded + spent, plain + tokens * per_token
    return plain / guarded, len(notes)


def test_a_growing_context_and_noisy_replies_do_not_fool_it():
    # Plain tokens get dearer as the context grows: the guard compares each drafting request
    # with the plain reference nearest in context, and flips only past a margin.
    runs = {true: [_session(true, seed) for seed in range(1, 11)] for true in (0.85, 1.15)}
    slow = sum(speedup for speedup, _ in runs[0.85]) / 10
    fast = sum(speedup for speedup, _ in runs[1.15]) / 10
    assert 0.93 < slow < 1.0  # 0.85 unguarded; what is left is the probes' cost
    assert fast > 1.05  # most of 1.15 kept (one request in six is a plain reference)
    assert max(flips for _, flips in runs[0.85] + runs[1.15]) <= 8  # of 60 requests


def test_short_replies_and_broken_timings_are_no_evidence(tmp_path: Path):
    guard = NgramGuard(_plan(tmp_path, options=ServerOptions(
        ngram=NgramLengths(n_match=6, n_min=2, n_max=16))))
    assert guard.longest == 16  # the launch's own n_max
    for timings in (None, "garbage", {"predicted_n": "many", "predicted_ms": 5},
                    {"predicted_n": 500, "predicted_ms": 0}, {"predicted_n": -3},
                    {"predicted_n": 500, "predicted_ms": float("nan")},
                    {"predicted_n": 500, "predicted_ms": 9, "cache_n": "x"},
                    _timings(ngram_guard.MIN_TOKENS - 1, 1.0), {}):
        guard.observe(0, timings)  # type: ignore[arg-type]
        guard.observe(16, timings)  # type: ignore[arg-type]
    assert guard.speedup() is None and guard.on
    for _ in range(3):
        guard.observe(16, _timings(200, 50.0))
    assert guard.on and guard.speedup() is None  # drafting alone decides nothing
    extra = _plan(tmp_path, options=ServerOptions()).model_copy(
        update={"extra_flags": ("--spec-ngram-mod-n-max", "96")})
    assert NgramGuard(extra).longest == 96  # a preset that raised it with extra flags


def test_which_requests_are_guarded(tmp_path: Path):
    assert isinstance(request_control(_plan(tmp_path)), NgramGuard)
    assert request_control(_plan(tmp_path, patched=False)) is None  # a user's build
    assert request_control(_plan(tmp_path, "ngram-fixed")) is None  # the reference
    assert request_control(_plan(tmp_path, "baseline")) is None
    draft = tmp_path / "d.gguf"
    assert request_control(_plan(tmp_path, "dflash+ngram", draft=draft)) is None


def test_both_controllers_have_the_face_the_client_types_against(tmp_path: Path):
    draft = tmp_path / "d.gguf"
    guard, cap = (request_control(_plan(tmp_path)),
                  request_control(_plan(tmp_path, "dflash", draft=draft)))
    assert isinstance(guard, NgramGuard) and isinstance(cap, DraftCap)
    assert isinstance(guard, RequestControl) and isinstance(cap, RequestControl)


def test_ngram_lengths_follow_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    plan = _plan(tmp_path)
    monkeypatch.setattr(tuning, "device_id", lambda binary: "cpu")
    assert tuning.with_ngram_lengths(plan) == plan  # a CPU keeps llama.cpp's lengths
    assert "--spec-ngram-mod-n-match" not in server_argv(plan, "h", 1)
    monkeypatch.setattr(tuning, "device_id", lambda binary: "NVIDIA H200, 143771 MiB")
    gpu = tuning.with_ngram_lengths(plan)
    assert gpu.options.ngram == tuning.NGRAM_GPU
    argv = " ".join(server_argv(gpu, "h", 1))
    assert "--spec-ngram-mod-n-match 6 --spec-ngram-mod-n-min 2 --spec-ngram-mod-n-max 64" in argv
    on_cpu = plan.model_copy(update={"options": ServerOptions(gpu_layers="0")})
    assert tuning.with_ngram_lengths(on_cpu).options.ngram is None  # the preset keeps the CPU
    own = NgramLengths(n_match=12, n_min=8, n_max=32)
    mine = plan.model_copy(update={"options": ServerOptions(ngram=own)})
    assert tuning.with_ngram_lengths(mine).options.ngram == own
    fixed = plan.model_copy(update={"profile": "ngram-fixed"})
    assert tuning.with_ngram_lengths(fixed) == fixed
    both = _plan(tmp_path, "dflash+ngram", draft=tmp_path / "d.gguf")
    assert tuning.with_ngram_lengths(both) == both  # not measured at other lengths
    draft_on_cpu = plan.model_copy(update={"options": ServerOptions(draft_gpu_layers="0")})
    assert tuning.with_ngram_lengths(draft_on_cpu).options.ngram == tuning.NGRAM_GPU


@pytest.mark.server
def test_the_guard_sends_off_and_on_requests_to_the_real_patched_engine(
        engine: Engine, real_server, tmp_path: Path):
    state = real_server("ngram")
    assert takes_length_per_request(engine.binary)  # the product's own build
    guard = request_control(state.plan)
    assert isinstance(guard, NgramGuard)
    client = ServerClient(state.base_url, draft_cap=guard)
    text = "\n".join(f"def step_{i}(x):\n    return x * {i} + {i * i}" for i in range(12))
    messages = [{"role": "user", "content": f"Repeat this code exactly:\n\n{text}"}]
    try:
        turns = [client.complete(messages, max_tokens=96, sampling={"temperature": 0.0})
                 for _ in range(2)]
    finally:
        client.close()
    assert [t.draft_n_max for t in turns] == [64, 0]
    drafted = [t.timings.draft_n or 0 for t in turns]
    assert drafted[0] > 0 and drafted[1] == 0  # speculative.n_max 0: n-gram lookup drafted nothing
    assert all(t.timings.predicted_n >= ngram_guard.MIN_TOKENS for t in turns)
    assert guard.on and guard.speedup() is None  # one drafting request decides nothing yet


@pytest.mark.server
def test_an_agent_session_on_the_ngram_profile_carries_the_guards_lengths(
        engine: Engine, smollm2: Path, tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tiny]\nmodel = "{smollm2}"\nprofile = "ngram"\n'
                                       'ctx_size = 4096\n[tiny.sampling]\ntemperature = 0.0\n')
    repo = tmp_path / "repo"
    committed_repo(repo, {"README.md": "hello\n"})
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    try:
        session = subprocess.run(
            [*AGENT, "run", "--preset", "tiny", "--max-steps", "2", "--approval", "ask",
             "Show me README.md, then say what it contains."], cwd=repo, capture_output=True,
            text=True, timeout=900, env=env, stdin=subprocess.DEVNULL)
    finally:
        run("backend", "down", home=home)
    assert session.returncode in (0, 1), session.stderr
    steps = [line for line in session.stderr.splitlines() if line.startswith("step ")]
    # The guard chose the first request's length (the plain reference, the second request,
    # is shown at client level above: SmolLM2 often runs on to the token limit in one step).
    assert steps and steps[0].endswith("· n-gram lookup"), session.stderr
    for line in steps[1:2]:
        assert line.endswith("· n-gram lookup off (a plain reference to time it against)"), \
            session.stderr


def test_launch_plans_and_the_printed_command_carry_the_gpus_lengths(
        engine: Engine, smollm2: Path, monkeypatch: pytest.MonkeyPatch):
    from backend.models.presets import Preset
    from backend.serve.launch import plan_for
    preset = Preset(name="p", model=str(smollm2), profile="ngram")
    monkeypatch.setattr(tuning, "device_id", lambda binary: "cpu")
    assert plan_for(preset, engine).options.ngram is None
    monkeypatch.setattr(tuning, "device_id", lambda binary: "NVIDIA H200, 143771 MiB")
    assert plan_for(preset, engine).options.ngram == tuning.NGRAM_GPU
    assert plan_for(preset, engine, "ngram-fixed").options.ngram is None
    from backend.serve.preview import preview_command
    argv = " ".join(preview_command(preset, engine, "127.0.0.1", 8642).argv)
    assert "--spec-ngram-mod-n-match 6 --spec-ngram-mod-n-min 2 --spec-ngram-mod-n-max 64" in argv
