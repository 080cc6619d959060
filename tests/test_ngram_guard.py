"""n-gram lookup never slower: its lengths per device (backend.serve.tuning.with_ngram_lengths)
and the per-request guard (backend.serve.ngram_guard), in logic and on the real patched engine
with SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.client import ServerClient
from backend.engine.build import PER_REQUEST_DRAFT_CAP, Engine
from backend.models.presets import NgramLengths, ServerOptions
from backend.serve import ngram_guard, tuning
from backend.serve.ngram_guard import NgramGuard
from backend.serve.profiles import LaunchPlan, server_argv


def _plan(tmp_path: Path, profile: str = "ngram", patched: bool = True,
          options: ServerOptions | None = None, draft: Path | None = None) -> LaunchPlan:
    engine = tmp_path / "engines" / "llama.cpp-x"
    (engine / "bin").mkdir(parents=True, exist_ok=True)
    (engine / "engine.json").write_text(json.dumps(
        {"patches": [PER_REQUEST_DRAFT_CAP] if patched else []}))
    return LaunchPlan(binary=engine / "bin" / "llama-server", model=tmp_path / "m.gguf",
                      profile=profile, ctx_size=4096, draft=draft,
                      options=options or ServerOptions())


def _timings(tokens: int, tok_s: float) -> dict:
    return {"predicted_n": tokens, "predicted_ms": tokens / tok_s * 1000}


def test_drafting_turns_off_when_it_measures_slower_and_back_on_when_a_probe_pays(
        tmp_path: Path):
    notes: list[str] = []
    guard = NgramGuard(_plan(tmp_path), notes.append)
    assert guard.longest == ngram_guard.NGRAM_DEFAULT_N_MAX  # llama.cpp's (a CPU's lengths)
    sent = []

    def request(drafting_rate: float, plain_rate: float) -> int:
        n_max = guard.next_n_max()
        sent.append(n_max)
        guard.observe(n_max, _timings(100, drafting_rate if n_max else plain_rate))
        return n_max

    assert request(80, 100) == 64  # the first request drafts
    assert request(80, 100) == 0  # the second is the first plain one: 80 < 100 → off
    assert not guard.on and "n-gram lookup off: 80.0 tok/s drafting against 100.0" in notes[0]
    while len(sent) < 8:  # off: only the probe requests draft
        request(80, 100)
    assert sent == [64, 0, 0, 64, 0, 0, 0, 64] and not guard.on
    for _ in range(12):  # the text turns predictable: probes measure 300 tok/s
        request(300, 100)
    assert guard.on and notes[-1].startswith("n-gram lookup on:")
    assert guard.rate(True) > guard.rate(False)
    # On: one request in REFERENCE_EVERY decodes plain, to keep the reference current.
    before = len(sent)
    for _ in range(2 * ngram_guard.REFERENCE_EVERY):
        request(300, 100)
    assert sent[before:].count(0) == 2 and guard.on


def test_short_replies_and_broken_timings_are_no_evidence(tmp_path: Path):
    guard = NgramGuard(_plan(tmp_path, options=ServerOptions(
        ngram=NgramLengths(n_match=6, n_min=2, n_max=16))))
    assert guard.longest == 16  # the launch's own n_max
    for timings in (None, "garbage", {"predicted_n": "many", "predicted_ms": 5},
                    {"predicted_n": 500, "predicted_ms": 0}, {"predicted_n": -3},
                    _timings(ngram_guard.MIN_TOKENS - 1, 1.0), {}):
        guard.observe(0, timings)  # type: ignore[arg-type]
        guard.observe(16, timings)  # type: ignore[arg-type]
    assert guard.rate(True) is None and guard.rate(False) is None and guard.on
    guard.observe(16, _timings(200, 50.0))
    assert guard.on  # one mode alone decides nothing
    assert guard.rate(True) == pytest.approx(50.0)


def test_which_requests_are_guarded(tmp_path: Path):
    assert isinstance(tuning.request_control(_plan(tmp_path)), NgramGuard)
    assert tuning.request_control(_plan(tmp_path, patched=False)) is None  # a user's build
    assert tuning.request_control(_plan(tmp_path, "ngram-fixed")) is None  # the reference
    assert tuning.request_control(_plan(tmp_path, "baseline")) is None


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
    assert tuning.with_ngram_lengths(both).options.ngram == tuning.NGRAM_GPU


@pytest.mark.server
def test_the_guard_sends_off_and_on_requests_to_the_real_patched_engine(
        engine: Engine, real_server, tmp_path: Path):
    state = real_server("ngram")
    assert tuning.takes_length_per_request(engine.binary)  # the product's own build
    assert isinstance(tuning.request_control(state.plan), NgramGuard)
    notes: list[str] = []
    guard = NgramGuard(state.plan, notes.append)
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
    assert drafted[0] > 0 and drafted[1] == 0  # speculative.n_max 0: nothing drafted
    assert all(t.timings.predicted_n >= ngram_guard.MIN_TOKENS for t in turns)
    drafting, plain = guard.rate(True), guard.rate(False)
    assert drafting is not None and plain is not None
    assert guard.on == (drafting >= plain)  # the real rates decided
    assert not notes or notes[-1].startswith(f"n-gram lookup {'on' if guard.on else 'off'}:")
