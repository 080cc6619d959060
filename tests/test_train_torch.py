"""The trainer's torch stages on CPU (marker ``train``; skipped without torch, as in CI, whose
``.[test]`` install has none): HF generation, a tiny real training run whose loss goes down,
an exact resume, the exported draft drafting on the real server, and the torch draft agreeing
with llama-server's own DFlash graph on v1's first block."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import httpx2  # noqa: E402

from backend.engine.registry import Engine  # noqa: E402
from backend.serve.process import pick_port, stop  # noqa: E402
from backend.serve.profiles import LaunchPlan  # noqa: E402
from backend.serve.server import up  # noqa: E402
from train import fast_decode, hf_gen, llama  # noqa: E402
from train.accept import acceptance  # noqa: E402
from train.batches import IGNORE, make_batch, padded_ids  # noqa: E402
from train.cli import _load_draft  # noqa: E402
from train.config import draft_config  # noqa: E402
from train.draft import Draft  # noqa: E402
from train.errors import InputError, TrainError  # noqa: E402
from train.fast_decode import Decoder  # noqa: E402
from train.features import FeatureStore  # noqa: E402
from train.fit import FitSettings, batch_index, block_loss, fit, position_weights  # noqa: E402
from train.head_loss import head_cross_entropy  # noqa: E402
from train.requests import ChatRequest  # noqa: E402
from train.seqs import build, save  # noqa: E402
from train.target import load_target  # noqa: E402

pytestmark = pytest.mark.train
ROOT = Path(__file__).resolve().parent.parent
V1 = ROOT.parent / "shared" / "dflash" / "smollm2-135m-dflash-v1.gguf"
LAYERS = (1, 2)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A shared 2-core machine: torch on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tiny_dflash: dict[str, Path]):
    """(target path, loaded target, target-greedy sequences): 12 random prompts of 24–46 ids
    continued 40 tokens by the tiny random llama through HF generation (3 held out)."""
    path = tiny_dflash["target"]
    target = load_target(path, "cpu")
    rng = np.random.default_rng(0)
    ids = [rng.integers(100, 40_000, size=24 + 2 * i) for i in range(12)]
    prompts = build(ids, [len(x) for x in ids], ["coding:t"] * 9 + ["agent-text:s"] * 3,
                    [i % 4 == 3 for i in range(12)])
    seqs, stats, skipped = hf_gen.generate(target, prompts, max_new=40, batch=4)
    return path, target, seqs, stats, skipped


def _draft(path: Path) -> Draft:
    torch.manual_seed(0)
    return Draft(draft_config(path, target_layers=LAYERS))


def _settings(**kw) -> FitSettings:
    base = {"steps": 12, "batch_seqs": 3, "anchors": 4, "lr": 2e-2, "warmup": 2,
            "ckpt_every": 0, "log_every": 100}
    return FitSettings(**(base | kw))


def test_hf_generation_continues_every_prompt_and_measures_its_rate(tiny):
    _, _, seqs, stats, skipped = tiny
    assert len(seqs) == 12 and skipped == 0
    assert (seqs.lengths() - seqs.plens <= 40).all() and seqs.response_tokens() > 12 * 4
    assert stats.engine == "hf" and stats.response_tokens == seqs.response_tokens()
    assert "response tokens a minute" in stats.line()
    assert seqs.heldout.sum() == 3


def test_hf_batches_stay_within_their_row_and_token_limits(tiny):
    _, _, seqs, _, _ = tiny
    index = list(range(len(seqs)))
    cut = hf_gen.batches(seqs, index, batch=5, batch_tokens=4 * 90, max_new=40)
    assert sorted(i for b in cut for i in b) == index
    for b in cut:
        width = max(int(seqs.plens[i]) for i in b) + 40
        assert len(b) <= 5 and (len(b) == 1 or len(b) * width <= 4 * 90)


def test_each_pass_uses_every_training_sequence_once_in_batches_of_similar_length():
    lengths = np.random.default_rng(1).integers(10, 5000, size=1000)
    settings = FitSettings(batch_seqs=8)
    passes = [[i for step in range(p * 125, (p + 1) * 125)
               for i in batch_index(step, lengths, settings)] for p in range(2)]
    assert all(sorted(seen) == list(range(1000)) for seen in passes)
    assert passes[0] != passes[1]
    spread = [np.ptp(lengths[batch_index(step, lengths, settings)]) for step in range(125)]
    assert np.median(spread) < np.ptp(lengths) / 10


def test_a_few_training_steps_lower_the_block_loss(tiny, tmp_path: Path):
    path, target, seqs, _, _ = tiny
    draft = _draft(path)
    train = [i for i in range(len(seqs)) if not seqs.heldout[i]]
    anchors = np.asarray([[int(seqs.plens[i]) + k for k in range(4)] for i in train])
    weights = position_weights(draft.config, 5.0, target.device)
    with torch.no_grad():
        before, _ = block_loss(draft, target, seqs, train, anchors, weights)
    state = fit(draft, target, seqs, train, tmp_path / "run", _settings(steps=30),
                log=lambda _: None)
    with torch.no_grad():
        after, _ = block_loss(draft, target, seqs, train, anchors, weights)
    assert state.step == 30
    assert float(after) < float(before) - 0.05, (float(before), float(after))
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    assert (tmp_path / "run" / "draft.npz").is_file()


def test_a_resumed_run_ends_with_the_same_weights_as_one_that_never_stopped(tiny,
                                                                           tmp_path: Path):
    path, target, seqs, _, _ = tiny
    train = [i for i in range(len(seqs)) if not seqs.heldout[i]]
    straight = _draft(path)
    fit(straight, target, seqs, train, tmp_path / "a", _settings(), log=lambda _: None)
    staged = _draft(path)
    first = fit(staged, target, seqs, train, tmp_path / "b", _settings(), stop_at=5,
                log=lambda _: None)
    assert first.step == 5
    resumed = _draft(path)  # a fresh process: nothing but the checkpoint carries over
    lines: list[str] = []
    last = fit(resumed, target, seqs, train, tmp_path / "b", _settings(), resume=True,
               log=lines.append)
    assert last.step == 12 and lines[0].startswith("[fit] resumed at step 5")
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


def test_acceptance_counts_every_drafted_block(tiny):
    path, target, seqs, _, _ = tiny
    draft = _draft(path)
    held = [i for i in range(len(seqs)) if seqs.heldout[i]]
    result = acceptance(draft, target, seqs, held, group=2)
    assert sum(result.histogram) == result.blocks > 0
    assert result.drafted == 15 * result.blocks
    # Each block moves decoding on by its accepted tokens plus one, to the last position.
    responses = sum(int(seqs.lengths()[i] - seqs.plens[i]) for i in held)
    assert result.accepted + result.blocks == responses - len(held)
    capped = acceptance(draft, target, seqs, held, max_blocks=2)
    assert capped.blocks == 2 * len(held)


def test_fit_from_the_command_line_exports_a_draft_the_server_drafts_with(
        tiny, engine: Engine, tmp_path: Path):
    path, _, seqs, _, _ = tiny
    data = save(seqs, tmp_path / "seqs.npz")
    runs = tmp_path / "runs.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "train", "fit", "--target", str(path), "--data", str(data),
         "--out", str(tmp_path / "run"), "--device", "cpu", "--layers", "1,2", "--steps", "8",
         "--batch-seqs", "3", "--anchors", "4", "--warmup", "2", "--runs", str(runs)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\[accept\] coding \(\d+ held-out sequences\): [0-9.]+ tokens accepted "
                     r"per 15-token block", proc.stdout), proc.stdout
    (record,) = [json.loads(line) for line in runs.read_text().splitlines()]
    assert record["stage"] == "fit" and record["steps"] == 8 and record["finished"]
    assert set(record["heldout"]) == {"coding", "agent-text"}
    assert record["heldout"]["coding"]["blocks"] > 0
    plan = LaunchPlan(binary=engine.binary, model=path, profile="dflash",
                      draft=tmp_path / "run" / "draft.gguf", ctx_size=1024)
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
    try:
        resp = httpx2.post(state.base_url + "/v1/chat/completions", timeout=300, json={
            "messages": [{"role": "user", "content": "Write a poem."}], "max_tokens": 24,
            "temperature": 0})
        resp.raise_for_status()
        assert resp.json()["timings"]["draft_n"] > 0
    finally:
        stop(state)


def test_the_torch_draft_agrees_with_llama_servers_dflash_on_v1s_first_block(
        engine: Engine, smollm2: Path):
    """shared/dflash/README.md's check, on our torch draft: llama-server's logged draft
    candidates (``-lv 5``) for the first block against the torch draft's top choices on the
    same sequence. The server's target computes in Q4_1 and renormalises over its top 10, so
    a near-tie may flip: the server's pick must be the torch top-1 or a close runner-up."""
    if not V1.is_file():
        pytest.skip(f"{V1} is not here")
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="dflash", draft=V1,
                      ctx_size=2048, extra_flags=("-lv", "5"))
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
    try:
        request = ChatRequest(messages=[{"role": "user", "content": (
            "Write a Python function `is_prime(n)` that returns True when n is prime. "
            "Return only the code.")}], source="t")
        prompt = llama.tokenize(state.base_url, llama.apply_template(state.base_url, request))
        mark = len(state.log.read_bytes())
        out = llama.complete_ids(state.base_url, prompt, 24)
        log = state.log.read_bytes()[mark:].decode("utf-8", "replace")
    finally:
        stop(state)
    server: dict[int, int] = {}
    for m in re.finditer(r"draft candidate +0, pos +(\d+): +(\d+) ", log):
        if int(m.group(1)) in server:
            break
        server[int(m.group(1))] = int(m.group(2))
    assert sorted(server) == list(range(15)), log[-2000:]
    target = load_target(smollm2, "cpu")
    draft = _load_draft(V1, smollm2, "cpu")
    seqs = build([prompt + out], [len(prompt)], ["t"], [False])
    batch = make_batch(seqs, [0], np.asarray([[len(prompt)]]), target, draft.config)
    with torch.no_grad():
        logits = draft(batch.ctx, batch.ctx_pos, batch.blk, batch.blk_pos, batch.mask)[0] \
            @ target.head.T
    agree = 0
    for k in range(15):
        values, ids = logits[k + 1].topk(10)
        probs = values.softmax(-1)
        if int(ids[0]) == server[k]:
            agree += 1
        else:
            assert int(ids[1]) == server[k] and float(probs[0] - probs[1]) < 0.15, (k, server)
    assert agree >= 12, (agree, server)


@pytest.mark.parametrize("attention", ["bmm", "split", "sdpa", "auto"])
def test_the_torch_generator_gives_transformers_own_greedy_tokens(tiny, attention: str,
                                                                   monkeypatch):
    """The static-cache decoder (float32 on CPU) against transformers' ``generate`` on the
    same left-padded batches: prompts of 24–46 ids, so every batch pads some rows; with each
    decode attention (``split`` in 16-column pieces, so a row spans several). Each progress
    line says where its batch's time went and which attention ran."""
    monkeypatch.setattr(fast_decode, "SPLIT", 16)
    _, target, seqs, _, _ = tiny
    prompts = seqs.select(range(len(seqs)))
    prompts = build([prompts.prompt(i) for i in range(len(prompts))],
                    [int(x) for x in prompts.plens], [prompts.source(i) for i in
                                                       range(len(prompts))],
                    [bool(x) for x in prompts.heldout])
    lines: list[str] = []
    fast, stats, skipped = hf_gen.generate(target, prompts, max_new=40, batch=4,
                                           engine="torch", attention=attention,
                                           progress=lines.append)
    assert stats.engine == "torch" and skipped == 0 and len(fast) == len(seqs)
    for i in range(len(seqs)):
        assert fast.ids(i).tolist() == seqs.ids(i).tolist(), i
    timed = [re.search(r"batch of (\d+) rows, prompts up to (\d+) tokens: prefill "
                       r"[\d.]+ s, (\d+) decode steps [\d.]+ s by (\w+)(?: \(auto still "
                       r"probing\))?(; ms a step[^;]*)?"
                       r"(; ended rows dropped(, \d+ rows on after step \d+)+)?\)$",
                       line) for line in lines]
    assert all(timed) and sum(int(m[1]) for m in timed) == len(seqs)
    assert all(0 < int(m[3]) <= 39 for m in timed)
    if attention == "auto":  # each probed for 8 steps: 24 of the 39 a batch may run
        assert all(m[4] in fast_decode.ATTENTION for m in timed)
        probed = r"; ms a step, bmm [\d.]+, split [\d.]+, sdpa [\d.]+"
        assert any(re.fullmatch(probed, m[5] or "") for m in timed), lines
    else:
        assert all(m[4] == attention and m[5] is None for m in timed)


def test_auto_keeps_the_attention_its_probes_timed_fastest(tiny):
    """``auto`` on a batch long enough for every probe: each attention's ms a step is
    recorded, the fastest runs the rest, and the tokens are ``bmm``'s (float32)."""
    _, target, _, _, _ = tiny
    rng = np.random.default_rng(5)
    prompts = [rng.integers(100, 40_000, size=n) for n in (7, 30, 12)]
    plain = Decoder(target.model, attention="bmm").greedy(prompts, 40, ())
    auto = Decoder(target.model, attention="auto")
    assert auto.greedy(prompts, 40, ()) == plain
    timing = auto.timing
    assert list(timing.step_ms) == list(fast_decode.ATTENTION) and timing.steps == 39
    assert timing.kind == min(timing.step_ms, key=timing.step_ms.__getitem__)
    assert not timing.probing
    assert all(ms > 0 for ms in timing.step_ms.values())


@pytest.mark.parametrize("attention", ["bmm", "auto"])
def test_a_batch_drops_its_ended_rows_and_gives_the_same_tokens(tiny, attention: str):
    """Rows ending at different steps: once at most half run, the batch goes on with those
    alone (twice here), and every row's tokens are those of the batch run whole."""
    _, target, _, _, _ = tiny
    rng = np.random.default_rng(11)
    prompts = [rng.integers(100, 40_000, size=n) for n in (5, 9, 14, 6, 21, 8, 11, 3)]
    free = Decoder(target.model).greedy(prompts, 60, (), compact=0)
    # each row ends at the first of these ids it writes: rows end from step 2 to never
    eos = tuple({row[k] for row, k in zip(free, (2, 3, 5, 9, 30, 40), strict=False)})
    whole = Decoder(target.model).greedy(prompts, 60, eos, compact=0)
    ends = sorted(len(r) for r in whole)
    assert ends[0] < 8 and ends[-1] == 60, ends  # some rows end early, one runs to the cap
    decoder = Decoder(target.model, attention=attention)
    assert decoder.greedy(prompts, 60, eos, check_every=4, compact_min_steps=4) == whole
    compacted = decoder.timing.compacted
    assert len(compacted) >= 2, compacted
    if attention == "auto":  # no compaction while the attentions are probed
        assert compacted[0][0] >= 3 * fast_decode.PROBE_STEPS
    # compact=1 would drop rows at every check: only a check where a row has ended does
    again = Decoder(target.model)
    assert again.greedy(prompts, 60, eos, check_every=4, compact=1.0,
                        compact_min_steps=4) == whole
    assert len(again.timing.compacted) == len({n for _, n in again.timing.compacted})


def test_auto_names_the_attention_that_ran_the_last_step(tiny):
    """A batch that ends where a probe does (step 16, when every row has ended) names the
    attention that ran its last steps, not the next one it was about to try."""
    _, target, _, _, _ = tiny
    rng = np.random.default_rng(3)
    prompts = [rng.integers(100, 40_000, size=n) for n in (5, 9)]
    free = Decoder(target.model).greedy(prompts, 30, ())
    decoder = Decoder(target.model, attention="auto")
    decoder.greedy(prompts, 30, (free[0][2], free[1][2]))
    assert (decoder.timing.steps, decoder.timing.kind) == (16, "split")
    assert list(decoder.timing.step_ms) == ["bmm", "split"] and decoder.timing.probing


@pytest.mark.parametrize("attention", ["split", "auto"])
def test_one_token_prompts_decode_under_split(tiny, attention: str, monkeypatch):
    """A batch of one-token prompts prefills through the decode step's path: ``split`` (in
    ``auto``, the last batch's choice) has no pieces to cut there, and crashed."""
    monkeypatch.setattr(fast_decode, "SPLIT", 16)
    _, target, _, _, _ = tiny
    prompts = [np.asarray([101]), np.asarray([7_000])]
    decoder = Decoder(target.model, attention=attention)
    decoder._kind = "split"
    assert decoder.greedy(prompts, 30, ()) == Decoder(target.model).greedy(prompts, 30, ())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without CUDA")
def test_a_cuda_device_on_a_machine_without_one_is_one_line_before_loading(tmp_path: Path):
    """``--device`` defaults to cuda: on a CPU-only machine ``generate`` loaded the target,
    then ended in a driver traceback."""
    save(build([np.arange(5)], [5], ["coding:t"], [False]), tmp_path / "none.npz")
    proc = subprocess.run([sys.executable, "-m", "train", "generate", "--engine", "torch",
                           "--prompts", str(tmp_path / "none.npz"), "--target",
                           str(tmp_path / "none.gguf"), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == ("error: --device cuda: torch sees no CUDA device here; "
                                   "pass --device cpu")


def test_the_generate_command_offers_every_attention_and_auto():
    from train.cli import ATTENTION_CHOICES

    assert ("auto", *fast_decode.ATTENTION) == ATTENTION_CHOICES


def test_the_torch_generator_refuses_an_unknown_attention(tiny):
    _, target, _, _, _ = tiny
    with pytest.raises(TrainError,
                       match="unknown decode attention 'flash'.*bmm, split, sdpa, auto"):
        Decoder(target.model, attention="flash")


def test_the_torch_generator_cuts_each_row_at_its_end_of_generation(tiny):
    _, target, _, _, _ = tiny
    decoder = Decoder(target.model)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(100, 40_000, size=n) for n in (5, 9)]
    free = decoder.greedy(prompts, 12, ())
    assert [len(r) for r in free] == [12, 12]
    stop_id = free[1][3]
    cut = decoder.greedy(prompts, 12, (stop_id,))
    assert cut[1] == free[1][:free[1].index(stop_id) + 1]
    assert cut[0] == (free[0][:free[0].index(stop_id) + 1] if stop_id in free[0] else free[0])


def test_the_chunked_head_loss_has_the_plain_loss_and_gradient():
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    head = torch.randn(50, 16, dtype=torch.float64)
    labels = torch.randint(0, 50, (37,))
    labels[::5] = IGNORE
    weights = torch.rand(37, dtype=torch.float64)
    ours = head_cross_entropy(hidden, head, labels, chunk=8)
    (ours.double() * weights).sum().backward()
    grad = hidden.grad.clone()
    hidden.grad = None
    plain = torch.nn.functional.cross_entropy(hidden @ head.T, labels, ignore_index=IGNORE,
                                              reduction="none")
    (plain * weights).sum().backward()
    assert torch.allclose(ours.double(), plain, atol=1e-5)
    assert torch.allclose(grad, hidden.grad, atol=1e-5)


def test_stored_features_are_the_targets_own_and_train_the_same(tiny, tmp_path: Path):
    path, target, seqs, _, _ = tiny
    train = [i for i in range(len(seqs)) if not seqs.heldout[i]]
    store = FeatureStore(target, seqs, train, LAYERS, dtype=torch.float32, batch_tokens=150)
    index = train[3:6]
    ids, lengths = padded_ids(seqs, index, target.device)
    assert torch.allclose(store.gather(index), target.features(ids, lengths, LAYERS))
    anchors = np.asarray([[int(seqs.plens[i]) + k for k in range(4)] for i in index])
    draft = _draft(path)
    weights = position_weights(draft.config, 5.0, target.device)
    with torch.no_grad():
        online, _ = block_loss(draft, target, seqs, index, anchors, weights)
        stored, _ = block_loss(draft, target, seqs, index, anchors, weights, store)
    assert torch.allclose(online, stored)
    lines: list[str] = []
    fit(draft, target, seqs, train, tmp_path / "run", _settings(steps=6), log=lines.append,
        features=store, profile_steps=3)
    (profile,) = [x for x in lines if "profiled steps" in x]
    assert re.search(r"over 3 profiled steps: batch [0-9.]+, forward [0-9.]+, loss [0-9.]+, "
                     r"backward [0-9.]+, optimizer [0-9.]+ \(total", profile), profile
    assert re.search(r"\[fit\] 6 steps in [0-9.]+ s: [0-9.]+ steps/s, \d+ block positions/s",
                     lines[-1]), lines


def test_auto_features_train_on_the_sequences_whose_features_fit(tiny, monkeypatch, capsys):
    """Data carried from earlier sessions can outgrow the GPU: ``--features auto`` then stores
    the features of the agent's sequences first and of a seeded share of the rest, within
    the budget, and training keeps to those (before, every batch computed them online)."""
    from train import features
    from train.cli import _feature_store

    _, target, seqs, _, _ = tiny
    train = [i for i in range(len(seqs)) if not seqs.heldout[i]]
    lengths = seqs.lengths()
    per_token = 2 * int(target.embed.shape[1]) * 4  # 2 layers, float32 on CPU
    agent = [i for i in train if seqs.source(i).startswith("agent-")]
    budget = sum(int(lengths[i]) for i in train) * per_token // 2
    monkeypatch.setattr(features, "free_bytes", lambda device: int(budget / features.STORE_SHARE))
    store, kept = _feature_store("auto", target, seqs, train + train[:3], (1, 2))
    assert set(agent) <= set(kept) < set(train)
    assert sum(int(lengths[i]) for i in set(kept)) * per_token <= budget
    assert store.flat.shape[0] == sum(int(lengths[i]) for i in set(kept))
    assert kept == [i for i in train + train[:3] if i in set(kept)]  # repeats kept in order
    assert f"training on the {len(set(kept))} of {len(train)} sequences" in capsys.readouterr().out
    monkeypatch.setattr(features, "free_bytes", lambda device: 1)
    with pytest.raises(InputError, match="use --features online"):
        _feature_store("auto", target, seqs, train, (1, 2))
    assert _feature_store("online", target, seqs, train, (1, 2)) == (None, train)


def test_the_generator_profile_times_each_attention_on_the_generators_batches(tiny, capsys):
    """gen-profile's timings on the tiny target: every attention and ``auto`` on each chosen
    batch, the same tokens, and a profiler table of the last."""
    from train.gen_profile import chosen_batches, profile

    _, target, seqs, _, _ = tiny
    prompts = build([seqs.prompt(i) for i in range(len(seqs))], [int(x) for x in seqs.plens],
                    [seqs.source(i) for i in range(len(seqs))], [False] * len(seqs))
    chosen = chosen_batches(prompts, [1, 3], batch=4, batch_tokens=10_000, max_new=40)
    assert [len(b) for b in chosen.values()] == [4, 4]
    lines: list[str] = []
    timings, table = profile(target, prompts, chosen, steps=5, rows=2, kernels=2,
                             say=lines.append)
    kinds = [*fast_decode.ATTENTION, "auto"]
    assert [(t.batch, t.attention, t.rows, t.steps) for t in timings] == [
        (b, k, 2, 5) for b in (1, 3) for k in kinds]
    assert all(t.rows_same == 2 and t.prefill_s > 0 and t.decode_s > 0 for t in timings)
    assert "aten::" in table and lines[-1].startswith("batch 3, eager (bmm), 2 decode steps")
    with pytest.raises(InputError, match="these prompts make 3 batches"):
        chosen_batches(prompts, [4], batch=4, batch_tokens=10_000, max_new=40)


@pytest.mark.parametrize(("target", "prompts", "words"), [
    ("missing.gguf", None, "target: "),
    ("junk.gguf", None, "not a GGUF file"),
    ("junk.gguf", "junk.npz", "junk.npz"),
    ("junk.gguf", "many", "--batches: these prompts make 1 batches"),
])
def test_the_generator_profile_refuses_broken_inputs_in_one_line(tmp_path: Path, target: str,
                                                                 prompts: str | None,
                                                                 words: str):
    (tmp_path / "junk.gguf").write_bytes(b"junk" * 8)
    (tmp_path / "junk.npz").write_bytes(b"PK not a zip")
    save(build([np.arange(5)], [5], ["coding:t"], [False]), tmp_path / "many.npz")
    args = ["--target", str(tmp_path / target), "--device", "cpu", "--batches", "2"]
    if prompts:
        args += ["--prompts", str(tmp_path / (prompts if "." in prompts else f"{prompts}.npz"))]
    proc = subprocess.run([sys.executable, "-m", "train", "gen-profile", *args],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
