"""Draft format vs engine flavour, checked before launch; old-format drafts converted once."""

from __future__ import annotations

from pathlib import Path

import gguf
import httpx2
import pytest

from backend.drafts import DraftError, draft_for, gguf_architecture
from backend.engines import Engine
from backend.launch import plan_for
from backend.presets import get_preset
from backend.server import pick_port, stop, up
from tests.dflash_fixture import (
    write_old_format_draft,
    write_tiny_dflash_draft,
    write_tiny_target,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("drafts")
    target = write_tiny_target(root / "target.gguf", tokenizer_from=smollm2)
    return {"target": target,
            "new": write_tiny_dflash_draft(root / "draft.gguf", target),
            "old": write_old_format_draft(root / "draft-old.gguf", target)}


def test_an_old_draft_is_converted_once_for_upstream_and_kept_for_bee_old(
        models: dict[str, Path]):
    notes: list[str] = []
    converted = draft_for(models["old"], "upstream", notes.append)
    assert converted != models["old"] and gguf_architecture(converted) == "dflash"
    layers = gguf.GGUFReader(converted).fields["dflash.target_layers"].contents()
    assert list(layers) == [1, 2]  # stored as HF ids (0, 1); upstream reads ids + 1
    assert len(notes) == 1 and "converting it once" in notes[0]
    assert draft_for(models["old"], "bee-new", notes.append) == converted
    assert len(notes) == 1  # reused, not converted again
    assert draft_for(models["old"], "bee-old") == models["old"]


def test_bee_old_refuses_an_upstream_draft_with_the_cause_and_the_fix(models: dict[str, Path]):
    assert draft_for(models["new"], "upstream") == models["new"]
    with pytest.raises(DraftError, match=r"loads only 'dflash-draft'.*Fix: use an upstream"):
        draft_for(models["new"], "bee-old")


def test_a_non_draft_or_broken_file_is_refused(models: dict[str, Path], tmp_path: Path):
    with pytest.raises(DraftError, match="architecture 'llama', not a DFlash draft"):
        draft_for(models["target"], "upstream")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(DraftError, match="not a readable GGUF"):
        draft_for(junk, "upstream")
    assert junk.read_bytes() == b"not a gguf at all"


def test_a_preset_with_an_old_format_draft_launches_dflash_upstream(
        models: dict[str, Path], engine: Engine, agent_home: Path):
    config = agent_home / "config"
    config.mkdir(parents=True)
    (config / "presets.toml").write_text(
        f'[tiny-old]\nmodel = "{models["target"]}"\ndraft = "{models["old"]}"\n'
        'profile = "dflash"\nctx_size = 1024\n')
    plan = plan_for(get_preset("tiny-old"), engine)
    assert plan.draft is not None and gguf_architecture(plan.draft) == "dflash"
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=180)
    try:
        body = httpx2.post(f"{state.base_url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "count: 1 2 3 4 5 6 7 8"}],
            "max_tokens": 48, "temperature": 0}).json()
    finally:
        stop(state)
    assert body["timings"].get("draft_n", 0) > 0
