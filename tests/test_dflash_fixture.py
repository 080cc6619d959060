"""The DFlash path on CPU: tiny random target + draft GGUFs launched through the product."""

from __future__ import annotations

from pathlib import Path

import gguf
import httpx2
import pytest

from backend.engine.registry import Engine
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerError, ServerState
from backend.serve.server import up


def _launch(engine: Engine, model: Path, profile: str,
            draft: Path | None = None) -> ServerState:
    """``up`` the tiny model with ``profile`` on a free port (context 1024)."""
    plan = LaunchPlan(binary=engine.binary, model=model, profile=profile, draft=draft,
                      ctx_size=1024)
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=180)
    return state


def _post(base_url: str, **extra: object) -> httpx2.Response:
    """A greedy 32-token chat completion with ``extra`` fields in the body."""
    return httpx2.post(base_url + "/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
        "max_tokens": 32, "temperature": 0, **extra})


def _chat(base_url: str, **extra: object) -> dict:
    """A greedy 32-token chat completion; the parsed response body."""
    resp = _post(base_url, **extra)
    resp.raise_for_status()
    return resp.json()


def test_the_fixture_writes_the_upstream_dflash_keys_and_shapes(tiny_dflash: dict[str, Path]):
    reader = gguf.GGUFReader(tiny_dflash["draft"])
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]) == b"dflash"
    assert fields["dflash.block_size"].contents() == 16
    assert fields["dflash.target_layers"].contents() == [1, 2]
    assert "tokenizer.ggml.mask_token_id" in fields
    for key in ("dflash.block_size", "dflash.embedding_length", "dflash.block_count",
                "dflash.attention.head_count", "tokenizer.ggml.mask_token_id"):
        assert fields[key].types == [gguf.GGUFValueType.UINT32], key
    tensors = {t.name: t for t in reader.tensors}
    assert list(tensors["fc.weight"].shape) == [2 * 64, 64]  # ggml {ne0, ne1}
    assert {"enc.output_norm.weight", "output_norm.weight", "blk.0.ffn_norm.weight",
            "blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"} <= set(tensors)
    assert "token_embd.weight" not in tensors and "output.weight" not in tensors
    target_tokens = gguf.GGUFReader(tiny_dflash["target"]).fields["tokenizer.ggml.tokens"]
    assert len(fields["tokenizer.ggml.tokens"].data) == len(target_tokens.data) == 49152


def test_the_old_format_draft_uses_beellama_names_and_hf_layer_ids(
        tiny_dflash: dict[str, Path]):
    reader = gguf.GGUFReader(tiny_dflash["old"])
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]) == b"dflash-draft"
    assert fields["dflash-draft.dflash.target_layer_ids"].contents() == [0, 1]
    assert fields["dflash-draft.dflash.block_size"].contents() == 16
    assert "dflash-draft.dflash.mask_token_id" in fields
    assert "tokenizer.ggml.mask_token_id" not in fields
    names = {t.name for t in reader.tensors}
    assert {"dflash_fc.weight", "dflash_hidden_norm.weight",
            "blk.0.post_attention_norm.weight"} <= names
    assert not names & {"fc.weight", "enc.output_norm.weight", "blk.0.ffn_norm.weight",
                        "token_embd.weight", "output.weight"}


def test_the_tiny_target_loads_alone_with_the_baseline_profile(
        engine: Engine, tiny_dflash: dict[str, Path]):
    state = _launch(engine, tiny_dflash["target"], "baseline")
    try:
        body = _chat(state.base_url)
        assert body["timings"]["predicted_n"] > 0
        assert "draft_n" not in body["timings"]
    finally:
        stop(state)


def test_the_dflash_profile_drafts_with_the_tiny_draft_on_cpu_and_each_request_can_cap_it(
        engine: Engine, tiny_dflash: dict[str, Path]):
    state = _launch(engine, tiny_dflash["target"], "dflash", draft=tiny_dflash["draft"])
    try:
        timings = _chat(state.base_url)["timings"]
        assert timings["draft_n"] > 0  # random weights: acceptance is ~0, drafting is the point
        log = state.log.read_text("utf-8", errors="replace")
        assert "adding speculative implementation 'draft-dflash'" in log
        # The engine's patch (backend/engine/patches/): speculative.n_max caps one request's
        # drafts, 0 = none at all, on the server launched at 15; the next request drafts again.
        # (ignore_eos: 32 tokens, so 15-token drafts add up to far more than 2-token ones.)
        off = _chat(state.base_url, ignore_eos=True, **{"speculative.n_max": 0})["timings"]
        assert off["predicted_n"] == 32 and off.get("draft_n", 0) == 0
        two = _chat(state.base_url, ignore_eos=True, **{"speculative.n_max": 2})["timings"]
        assert 0 < two["draft_n"] <= 2 * 32
        full = _chat(state.base_url, ignore_eos=True)["timings"]
        assert full["draft_n"] > 2 * 32
        bad = _post(state.base_url, **{"speculative.n_max": -1})
        assert bad.status_code == 400 and "speculative.n_max" in bad.text
    finally:
        stop(state)


def test_upstream_refuses_an_old_format_draft_so_it_needs_converting(
        engine: Engine, tiny_dflash: dict[str, Path]):
    with pytest.raises(ServerError, match="model file could not be loaded") as info:
        _launch(engine, tiny_dflash["target"], "dflash", draft=tiny_dflash["old"])
    assert info.value.log is not None
    assert "unknown model architecture: 'dflash-draft'" in info.value.log.read_text("utf-8")


def test_convert_draft_makes_the_old_format_load_upstream_with_layer_ids_plus_one(
        engine: Engine, tiny_dflash: dict[str, Path], tmp_path: Path, agent_home: Path):
    import subprocess
    import sys

    out = tmp_path / "converted.gguf"
    proc = subprocess.run([sys.executable, "-m", "agent", "backend", "convert-draft",
                           str(tiny_dflash["old"]), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "target_layers [1, 2]" in proc.stdout
    reader = gguf.GGUFReader(out)
    assert bytes(reader.fields["general.architecture"].parts[-1]) == b"dflash"
    assert reader.fields["dflash.target_layers"].contents() == [1, 2]  # old HF ids [0, 1]
    assert "tokenizer.ggml.mask_token_id" in reader.fields
    names = {t.name for t in reader.tensors}
    assert {"fc.weight", "enc.output_norm.weight", "blk.0.ffn_norm.weight"} <= names
    assert not any("post_attention_norm" in n or n.startswith("dflash_") for n in names)
    state = _launch(engine, tiny_dflash["target"], "dflash", draft=out)
    try:
        timings = _chat(state.base_url)["timings"]
    finally:
        stop(state)
    assert timings.get("draft_n", 0) > 0


def test_convert_draft_refuses_bad_inputs(tiny_dflash: dict[str, Path], tmp_path: Path):
    from backend.models.convert import ConvertError, convert_draft

    with pytest.raises(ConvertError, match="already an upstream 'dflash' draft"):
        convert_draft(tiny_dflash["draft"], tmp_path / "x.gguf")
    with pytest.raises(ConvertError, match="architecture 'llama'"):
        convert_draft(tiny_dflash["target"], tmp_path / "x.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(ConvertError, match="not a readable GGUF"):
        convert_draft(junk, tmp_path / "x.gguf")
    taken = tmp_path / "taken.gguf"
    taken.write_bytes(b"keep me")
    with pytest.raises(ConvertError, match="exists"):
        convert_draft(tiny_dflash["old"], taken)
    assert taken.read_bytes() == b"keep me"


def test_the_dflash_ngram_profile_runs_both_drafters_on_cpu(
        engine: Engine, tiny_dflash: dict[str, Path]):
    state = _launch(engine, tiny_dflash["target"], "dflash+ngram", draft=tiny_dflash["draft"])
    try:
        assert "--spec-type draft-dflash,ngram-mod --spec-draft-n-max 15" in " ".join(state.argv)
        # The random tiny target falls into a loop at temperature 0: the random draft accepts
        # nothing of it (measured: 0 of 4,365 with the dflash profile), n-gram lookup copies it.
        resp = httpx2.post(state.base_url + "/v1/chat/completions", timeout=600, json={
            "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
            "max_tokens": 200, "temperature": 0})
        resp.raise_for_status()
        timings = resp.json()["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0
        assert "adding speculative implementation 'draft-dflash'" in \
            state.log.read_text("utf-8", errors="replace")
        metrics = httpx2.get(state.base_url + "/metrics", timeout=30).text
        # Tokens accepted past position 14 came from ngram-mod: DFlash drafts 15 at most.
        late = [line for line in metrics.splitlines()
                if line.startswith("llamacpp:spec_decode_num_accepted_tokens_per_pos_total")
                and int(line.split('position="')[1].split('"')[0]) >= 15
                and float(line.rsplit(" ", 1)[1]) > 0]
        assert late, metrics
    finally:
        stop(state)


def test_the_dflash_ngram_profile_is_refused_on_bee_old_with_the_reason(
        tiny_dflash: dict[str, Path]):
    from backend.serve.profiles import server_argv

    plan = LaunchPlan(binary=Path("llama-server"), model=tiny_dflash["target"],
                      profile="dflash+ngram", draft=tiny_dflash["old"], ctx_size=1024)
    with pytest.raises(ValueError, match="not proven on BeeLlama <= 0.3 .*use the dflash "
                       "profile"):
        server_argv(plan, "127.0.0.1", 8080, "bee-old")
    assert "--spec-type dflash " in " ".join(server_argv(
        plan.model_copy(update={"profile": "dflash"}), "127.0.0.1", 8080, "bee-old")) + " "
