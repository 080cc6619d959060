"""The trainer's torch-free stages against a real llama-server (upstream b11434 CPU, the
suite's engine): prompts rendered by the server's chat template, greedy generation with
several slots, and a GGUF exported from numpy weights loaded by the server as a DFlash draft."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import httpx2
import pytest

from backend.engine.registry import Engine
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.server import up
from train import llama
from train.config import draft_config
from train.export import save_weights, weights_from_gguf
from train.seqs import load, load_many

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "dflash"
V1 = SHARED / "smollm2-135m-dflash-v1.gguf"

pytestmark = pytest.mark.server


def _train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", *args], capture_output=True,
                          text=True, timeout=900, cwd=ROOT, stdin=subprocess.DEVNULL)


def test_prompts_then_generation_on_a_server_with_two_slots(engine: Engine, smollm2: Path,
                                                            tmp_path: Path):
    coding = tmp_path / "p.jsonl"
    coding.write_text("\n".join(json.dumps({"src": "t", "text": t}) for t in (
        "Write a Python function `add(a, b)` that returns the sum. Return only the code.",
        "Write a Python function `is_even(n)`. Return only the code.",
        "Write a Python class `Stack` with push and pop. Return only the code.")))
    runs = tmp_path / "runs.jsonl"
    prompts = tmp_path / "prompts.npz"
    proc = _train("prompts", "--target", str(smollm2), "--coding", str(coding),
                  "--sessions", "textstats-errors", "--holdout-sessions", "textstats-errors",
                  "--server-bin", str(engine.binary), "--out", str(prompts), "--runs", str(runs))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rendered = load(prompts)
    agent = [i for i in range(len(rendered)) if rendered.source(i).startswith("agent-text:")]
    assert len(agent) == 10 and all(rendered.heldout[i] for i in agent)
    assert (rendered.plens == rendered.lengths()).all()
    # The three coding prompts: a quick run (agent turns are thousands of tokens to prefill).
    proc = _train("generate", "--prompts", str(prompts), "--target", str(smollm2),
                  "--limit", "3", "--max-new", "12", "--parallel", "2",
                  "--server-bin", str(engine.binary), "--out", str(tmp_path / "gen"),
                  "--runs", str(runs))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[server -np 2]" in proc.stdout and "response tokens a minute" in proc.stdout
    seqs = load_many([tmp_path / "gen-000.npz"])
    assert len(seqs) == 3
    assert ((seqs.lengths() - seqs.plens) == 12).all()
    for i in range(3):
        assert seqs.prompt(i).tolist() == rendered.prompt(i).tolist()
    # Generating again with --done skips the prompts already done.
    proc = _train("generate", "--prompts", str(prompts), "--target", str(smollm2),
                  "--done", str(tmp_path / "gen-000.npz"), "--limit", "1", "--max-new", "4",
                  "--server-bin", str(engine.binary), "--out", str(tmp_path / "more"),
                  "--runs", str(tmp_path / "more.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 prompts already generated in 3 sequences: skipped" in proc.stdout
    more = load(tmp_path / "more-000.npz")
    assert len(more) == 1 and more.source(0).startswith("agent-text:")
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    assert [r["stage"] for r in records] == ["prompts", "generate"]
    assert records[1]["stats"]["engine"] == "server" and records[1]["stats"]["sequences"] == 3
    # The continuation is the server's greedy one, and the server ran two slots.
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="baseline", ctx_size=8192,
                      parallel=2)
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
    try:
        assert llama.slots(state.base_url) == 2
        again = llama.complete_ids(state.base_url, seqs.prompt(0).tolist(), 12)
    finally:
        stop(state)
    assert again == seqs.ids(0)[int(seqs.plens[0]):].tolist()


def test_v1s_weights_exported_again_are_v1_byte_for_byte_and_draft_on_the_server(
        engine: Engine, smollm2: Path, tmp_path: Path):
    """numpy weights (v1's, read back from its GGUF) → ``python -m train export`` → the same
    file v1's own trainer wrote, which the real server loads as a DFlash draft and drafts with."""
    if not V1.is_file():
        pytest.skip(f"{V1} is not here")
    weights, keys = weights_from_gguf(V1)
    config = draft_config(smollm2)
    assert list(config.target_layers) == keys["dflash.target_layers"] == [2, 15, 28]
    draft = tmp_path / "again.gguf"
    proc = _train("export", "--weights", str(save_weights(weights, config, tmp_path / "w.npz")),
                  "--target", str(smollm2), "--out", str(draft),
                  "--name", "smollm2-135m-dflash-draft")
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "target layers [2, 15, 28]" in proc.stdout
    a, b = gguf.GGUFReader(V1), gguf.GGUFReader(draft)
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        assert ta.tensor_type == tb.tensor_type and ta.data.tobytes() == tb.data.tobytes()
    assert {t.name: t.tensor_type.name for t in b.tensors}["fc.weight"] == "F32"
    assert {k: f.contents() for k, f in a.fields.items() if not k.startswith("GGUF.")} == \
        {k: f.contents() for k, f in b.fields.items() if not k.startswith("GGUF.")}
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="dflash", draft=draft,
                      ctx_size=2048)
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
    try:
        resp = httpx2.post(state.base_url + "/v1/chat/completions", timeout=300, json={
            "messages": [{"role": "user", "content": "Write a Python function `add(a, b)` "
                          "that returns a + b. Return only the code."}],
            "max_tokens": 16, "temperature": 0})
        resp.raise_for_status()
        timings = resp.json()["timings"]
    finally:
        stop(state)
    assert timings["draft_n"] > 0
