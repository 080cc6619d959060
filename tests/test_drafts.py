"""Draft format vs engine flavour, checked before launch; old-format drafts converted once."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from backend.engine.registry import Engine
from backend.models.drafts import DraftError, draft_for, gguf_architecture
from backend.models.presets import get_preset
from backend.serve.launch import plan_for
from tests.conftest import greedy_timings


def test_an_old_draft_is_converted_once_for_upstream_and_kept_for_bee_old(
        tiny_dflash: dict[str, Path]):
    notes: list[str] = []
    converted = draft_for(tiny_dflash["old"], "upstream", notes.append)
    assert converted != tiny_dflash["old"] and gguf_architecture(converted) == "dflash"
    layers = gguf.GGUFReader(converted).fields["dflash.target_layers"].contents()
    assert list(layers) == [1, 2]  # stored as HF ids (0, 1); upstream reads ids + 1
    assert len(notes) == 1 and "converting it once" in notes[0]
    assert draft_for(tiny_dflash["old"], "bee-new", notes.append) == converted
    assert len(notes) == 1  # reused, not converted again
    assert draft_for(tiny_dflash["old"], "bee-old") == tiny_dflash["old"]


def test_an_upstream_draft_runs_upstream_and_is_converted_for_bee_old(
        tiny_dflash: dict[str, Path]):
    for flavour in ("upstream", "bee-new"):
        assert draft_for(tiny_dflash["draft"], flavour) == tiny_dflash["draft"]
    # BeeLlama v0.3.1 reads an earlier upstream key set (dflash.target_layer_ids, hidden_norm),
    # not b11434's: it gets the draft in its own format (ids - 1).
    notes: list[str] = []
    old = draft_for(tiny_dflash["draft"], "bee-old", notes.append)
    assert old != tiny_dflash["draft"] and gguf_architecture(old) == "dflash-draft"
    ids = gguf.GGUFReader(old).fields["dflash-draft.dflash.target_layer_ids"].contents()
    assert list(ids) == [0, 1] and "converting it once to 'dflash-draft'" in notes[0]
    assert draft_for(tiny_dflash["draft"], "bee-old", notes.append) == old and len(notes) == 1


def test_an_old_draft_that_cannot_be_converted_is_refused_with_the_fix(
        tiny_dflash: dict[str, Path], tmp_path: Path):
    reader = gguf.GGUFReader(tiny_dflash["old"])
    broken = tmp_path / "no-layer-ids.gguf"
    writer = gguf.GGUFWriter(broken, "dflash-draft")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in (
                "general.architecture", "dflash-draft.dflash.target_layer_ids"):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(DraftError, match=r"cannot be converted .*target_layer_ids.*"
                       r"Fix: use a BeeLlama v0.3.x engine"):
        draft_for(broken, "upstream")
    assert draft_for(broken, "bee-old") == broken  # bee-old loads it as it is


def test_a_non_draft_or_broken_file_is_refused(tiny_dflash: dict[str, Path], tmp_path: Path):
    with pytest.raises(DraftError, match="architecture 'llama', not a DFlash draft"):
        draft_for(tiny_dflash["target"], "upstream")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(DraftError, match="not a readable GGUF"):
        draft_for(junk, "upstream")
    assert junk.read_bytes() == b"not a gguf at all"


def test_a_preset_with_an_old_format_draft_launches_dflash_upstream(
        tiny_dflash: dict[str, Path], engine: Engine, agent_home: Path):
    config = agent_home / "config"
    config.mkdir(parents=True)
    (config / "presets.toml").write_text(
        f'[tiny-old]\nmodel = "{tiny_dflash["target"]}"\ndraft = "{tiny_dflash["old"]}"\n'
        'profile = "dflash"\nctx_size = 1024\n')
    plan = plan_for(get_preset("tiny-old"), engine)
    assert plan.draft is not None and gguf_architecture(plan.draft) == "dflash"
    assert greedy_timings(plan).get("draft_n", 0) > 0
