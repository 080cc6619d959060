"""The trainer's GPU paths on a CUDA device (skipped elsewhere, CI included): the torch
generator's replayed CUDA graph against transformers and against itself without the graph,
and a training run on stored features under bf16 autocast with the chunked head loss. A tiny
random llama built in memory stands in for the target, so these need no model file."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from train import fast_decode  # noqa: E402
from train.config import DraftConfig  # noqa: E402
from train.draft import Draft  # noqa: E402
from train.fast_decode import Decoder  # noqa: E402
from train.features import FeatureStore  # noqa: E402
from train.fit import FitSettings, block_loss, fit, position_weights  # noqa: E402
from train.seqs import build  # noqa: E402
from train.target import Target  # noqa: E402

pytestmark = [pytest.mark.train,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _llama(dtype=None, **extra):
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=2048,
                                      tie_word_embeddings=True, **extra)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().requires_grad_(False)
    return model.to(device="cuda", dtype=dtype or torch.float32)


def _prompts(n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(20, 500, size=8 + 5 * i) for i in range(n)]


@pytest.mark.parametrize("attention", ["bmm", "split", "sdpa", "auto"])
def test_the_cuda_graph_decoder_gives_transformers_greedy_tokens(attention: str, monkeypatch):
    monkeypatch.setattr(fast_decode, "SPLIT", 16)  # 4 pieces of the 64 columns
    model = _llama()
    decoder = Decoder(model, dtype=torch.float32, attention=attention)
    prompts = _prompts()
    ours = decoder.greedy(prompts, 24, ())
    assert decoder.graph_error is None and decoder.timing.steps == 23
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = torch.from_numpy(p)
        mask[r, width - len(p):] = 1
    gen = model.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=24,
                         do_sample=False, pad_token_id=0, eos_token_id=None)
    assert ours == gen[:, width:].tolist()


def test_auto_drops_an_attention_whose_step_cannot_be_captured(monkeypatch):
    """``auto`` races only captured steps: a kind whose capture fails is dropped for this
    and every later batch, the others keep their graphs, and the failed capture's warm-up
    leaves no trace in the tokens."""
    model = _llama()
    decoder = Decoder(model, dtype=torch.float32, attention="auto")
    capture = Decoder._capture

    def failing(one_step, *rest):
        if decoder._kind != "sdpa":
            return capture(one_step, *rest)

        def broken():  # fails after a warm-up step has moved the batch's state
            one_step()
            raise RuntimeError("capture refused\nsecond line")
        return capture(broken, *rest)

    monkeypatch.setattr(Decoder, "_capture", staticmethod(failing))
    prompts = _prompts()
    for _ in range(2):
        rows = decoder.greedy(prompts, 40, ())
        assert decoder.graph_error is None and decoder.dropped == {"sdpa": "capture refused"}
        assert list(decoder.timing.step_ms) == ["bmm", "split"]
    assert rows == Decoder(model, dtype=torch.float32).greedy(prompts, 40, ())


def _ending_rows() -> tuple[object, list[np.ndarray], tuple[int, ...], list[list[int]]]:
    """(model, prompts, end-of-generation ids, the whole batch's rows decoded eagerly): rows
    that end from step 1 to never (on CPU: 1, 2, 3, 5, 18, 40, 47 and 60 tokens)."""
    model = _llama(initializer_range=0.1)
    prompts = _prompts(8)
    free = Decoder(model, dtype=torch.float32, graphs=False).greedy(prompts, 60, (), compact=0)
    eos = tuple({row[k] for row, k in zip(free, (2, 3, 5, 9, 30, 40), strict=False)})
    whole = Decoder(model, dtype=torch.float32, graphs=False).greedy(prompts, 60, eos,
                                                                     compact=0)
    ends = sorted(len(r) for r in whole)
    assert ends[3] < 8 and ends[-1] == 60, ends
    return model, prompts, eos, whole


@pytest.mark.parametrize("attention", ["bmm", "auto"])
def test_a_compacted_batch_recaptures_its_step_and_gives_the_same_tokens(attention: str):
    """Under CUDA graphs, dropping ended rows (twice or more) captures the step again for
    the rows left; the tokens are those of the whole batch decoded eagerly."""
    model, prompts, eos, whole = _ending_rows()
    graphed = Decoder(model, dtype=torch.float32, attention=attention)
    assert graphed.greedy(prompts, 60, eos, check_every=4, compact_min_steps=4) == whole
    assert graphed.graph_error is None and len(graphed.timing.compacted) >= 2


def test_a_failed_capture_after_a_compaction_costs_only_that_batch_its_graph(monkeypatch):
    """The step captured again for fewer rows may fail (an OOM, say): the batch goes on
    eagerly with the same tokens, and the next batch captures its graphs as before."""
    model, prompts, eos, whole = _ending_rows()
    decoder = Decoder(model, dtype=torch.float32)
    capture, calls = Decoder._capture, []

    def second_fails(*args):
        calls.append(len(calls))
        if len(calls) == 2:
            raise RuntimeError("out of memory")
        return capture(*args)

    monkeypatch.setattr(Decoder, "_capture", staticmethod(second_fails))
    assert decoder.greedy(prompts, 60, eos, check_every=4, compact_min_steps=4) == whole
    assert decoder.graph_error is None and decoder.dropped == {}
    before = len(calls)
    assert decoder.greedy(prompts, 60, eos, check_every=4, compact_min_steps=4) == whole
    assert len(calls) > before and decoder.graph_error is None


def test_bf16_decoding_is_the_same_with_and_without_the_graph():
    model = _llama()
    prompts = _prompts(9)
    graphed = Decoder(model)
    assert graphed.dtype == torch.bfloat16
    assert graphed.greedy(prompts, 40, ()) == Decoder(model, graphs=False).greedy(prompts, 40, ())
    assert graphed.graph_error is None


def test_training_on_stored_features_under_autocast_lowers_the_loss(tmp_path: Path):
    model = _llama(torch.bfloat16)
    target = Target(model=model, embed=model.get_input_embeddings().weight,
                    head=model.get_output_embeddings().weight, eos_ids=())
    decoder = Decoder(model)
    prompts = _prompts(12)
    rows = decoder.greedy(prompts, 48, ())
    seqs = build([np.concatenate([p, np.asarray(r)]) for p, r in zip(prompts, rows,
                                                                      strict=True)],
                 [len(p) for p in prompts], ["coding:t"] * 12, [False] * 12)
    config = DraftConfig(n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, n_layer=1,
                         eps=1e-6, n_vocab=512, target_layers=(1, 3), mask_id=5)
    torch.manual_seed(0)
    draft = Draft(config).cuda()
    index = list(range(12))
    store = FeatureStore(target, seqs, index, config.target_layers)
    anchors = np.asarray([[int(seqs.plens[i]) + k for k in range(8)] for i in index])
    weights = position_weights(config, 7.0, target.device)
    with torch.no_grad():
        before, _ = block_loss(draft, target, seqs, index, anchors, weights, store)
    lines: list[str] = []
    fit(draft, target, seqs, index, tmp_path / "run",
        FitSettings(steps=40, batch_seqs=4, anchors=8, lr=3e-3, warmup=4, ckpt_every=0,
                    log_every=100), log=lines.append, features=store, profile_steps=5)
    with torch.no_grad():
        after, _ = block_loss(draft, target, seqs, index, anchors, weights, store)
    assert float(after) < float(before) - 0.05, (float(before), float(after))
    assert any(re.search(r"over 5 profiled steps: batch", x) for x in lines), lines
