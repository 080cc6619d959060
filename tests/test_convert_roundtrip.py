"""``agent backend convert-draft`` both ways: the trained SmolLM2 draft (shared/dflash, upstream
``dflash``) to BeeLlama ≤0.3's ``dflash-draft`` and back; old → new → old gives back the same
keys and tensor bytes; bad inputs are one clear error line. (On the real bee-old binary:
tests/test_beellama_real.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from backend.models.convert import ConvertError, convert_draft

TRAINED = Path(__file__).resolve().parents[2] / "shared" / "dflash" / "smollm2-135m-dflash-v1.gguf"
AGENT = [sys.executable, "-m", "agent"]
needs_trained = pytest.mark.skipif(not TRAINED.is_file(),
                                   reason=f"the trained draft {TRAINED} is not here")


def _agent(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL)


def keys(path: Path) -> dict[str, tuple[list[str], bytes]]:
    """Every key of a GGUF file (``GGUF.*`` header counts aside) with its types and raw
    value bytes."""
    reader = gguf.GGUFReader(path)
    return {f.name: ([t.name for t in f.types], b"".join(bytes(f.parts[i]) for i in f.data))
            for f in reader.fields.values() if not f.name.startswith("GGUF.")}


def tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Every tensor: ggml type, shape and data bytes."""
    return {t.name: (t.tensor_type.name, tuple(int(n) for n in t.shape), bytes(t.data))
            for t in gguf.GGUFReader(path).tensors}


@pytest.fixture(scope="module")
def trained_old(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained draft converted to BeeLlama ≤0.3's format (generated, never committed)."""
    if not TRAINED.is_file():
        pytest.skip(f"the trained draft {TRAINED} is not here")
    out = tmp_path_factory.mktemp("trained") / "smollm2-dflash-draft.gguf"
    convert_draft(TRAINED, out, to="dflash-draft")
    return out


@needs_trained
def test_the_trained_draft_converts_to_the_old_format_on_the_cli(tmp_path: Path,
                                                                 agent_home: Path):
    out = tmp_path / "old.gguf"
    proc = _agent("backend", "convert-draft", str(TRAINED), str(out), home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert "(dflash-draft): target_layer_ids [1, 14, 27], 3 of 14 tensors renamed" in proc.stdout
    meta = gguf.GGUFReader(out).fields
    assert meta["general.architecture"].contents() == "dflash-draft"
    assert meta["dflash-draft.dflash.target_layer_ids"].contents() == [1, 14, 27]  # [2,15,28]-1
    assert meta["dflash-draft.dflash.target_layer_ids"].types[-1] == gguf.GGUFValueType.UINT32
    assert meta["dflash-draft.dflash.n_target_features"].contents() == 3 * 576
    assert meta["dflash-draft.dflash.mask_token_id"].contents() == 16
    assert meta["dflash-draft.dflash.block_size"].contents() == 16
    assert meta["dflash-draft.attention.causal"].contents() is False
    assert "tokenizer.ggml.mask_token_id" not in meta and "dflash.target_layers" not in meta
    names = set(tensors(out))
    assert {"dflash_fc.weight", "dflash_hidden_norm.weight",
            "blk.0.post_attention_norm.weight"} <= names
    assert not {"fc.weight", "enc.output_norm.weight", "blk.0.ffn_norm.weight"} & names


@needs_trained
def test_old_new_old_is_byte_identical(trained_old: Path, tmp_path: Path):
    new, back = tmp_path / "new.gguf", tmp_path / "back.gguf"
    assert convert_draft(trained_old, new, to="auto")["architecture"] == "dflash"
    assert convert_draft(new, back, to="auto")["architecture"] == "dflash-draft"
    assert keys(back) == keys(trained_old)
    assert tensors(back) == tensors(trained_old)
    assert back.read_bytes() == trained_old.read_bytes()  # order and alignment too


@needs_trained
def test_new_old_new_keeps_tensors_and_keys(trained_old: Path, tmp_path: Path):
    again = tmp_path / "again.gguf"
    convert_draft(trained_old, again, to="dflash")
    assert tensors(again) == tensors(TRAINED)
    extra = set(keys(again)) - set(keys(TRAINED))
    assert extra == {"dflash.attention.causal"}  # the old format's explicit non-causal flag
    assert {k: v for k, v in keys(again).items() if k not in extra} == keys(TRAINED)


def test_the_random_old_fixture_round_trips(tiny_dflash: dict[str, Path], tmp_path: Path):
    new, back = tmp_path / "new.gguf", tmp_path / "back.gguf"
    convert_draft(tiny_dflash["old"], new)
    convert_draft(new, back, to="dflash-draft")
    assert keys(back) == keys(tiny_dflash["old"])
    assert tensors(back) == tensors(tiny_dflash["old"])


def test_bad_inputs_are_one_error_line(tiny_dflash: dict[str, Path], tmp_path: Path,
                                       agent_home: Path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but not really")
    layer0 = tmp_path / "layer0.gguf"
    reader = gguf.GGUFReader(tiny_dflash["draft"])
    writer = gguf.GGUFWriter(layer0, "dflash")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        value = [0, 1] if field.name == "dflash.target_layers" else field.contents()
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "out.gguf"
    cases = [
        ((str(junk), str(out)), "is not a readable GGUF file"),
        ((str(tmp_path / "nope.gguf"), str(out)), "does not exist"),
        ((str(tiny_dflash["target"]), str(out)), "architecture 'llama', not a DFlash draft"),
        ((str(tiny_dflash["old"]), str(out), "--to", "dflash-draft"),
         "already a BeeLlama 'dflash-draft' draft"),
        ((str(tiny_dflash["draft"]), str(out), "--to", "dflash"),
         "already an upstream 'dflash' draft"),
        ((str(layer0), str(out)), "target layer 0 (the token embeddings) has no BeeLlama"),
        ((str(tiny_dflash["draft"]), str(tmp_path / "no" / "dir" / "x.gguf")), "cannot write"),
        ((str(tiny_dflash["draft"]), str(tiny_dflash["draft"]), "--force"), "is the input file"),
    ]
    for args, message in cases:
        proc = _agent("backend", "convert-draft", *args, home=agent_home)
        assert proc.returncode == 3, (args, proc.stdout, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert "details:" not in proc.stderr  # a plain mistake: no crash log
    assert not out.exists() and not list(tmp_path.glob("*.part"))
    proc = _agent("backend", "convert-draft", str(junk), str(out), "--to", "gemma",
                  home=agent_home)
    assert proc.returncode == 2 and "--to gemma" in proc.stderr
    with pytest.raises(ConvertError, match="exists"):
        convert_draft(tiny_dflash["draft"], tiny_dflash["old"], to="dflash-draft")
