"""Review of the z-lab drafter support (issue 24): secrets kept from the converter venv's
package builds, the acceptance cause when the server separates the reasoning, and cached
conversions that are not trusted blindly."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from backend import secret_store

SECRET = "hf_review_secret_token_123"

_BACKEND = '''"""An in-tree PEP 517 backend that records the environment its build runs in."""
import json
import os
import os
from pathlib import Path


def get_requires_for_build_wheel(config_settings=None):
    Path(os.environ["REVIEW_ENV_DUMP"]).write_text(json.dumps(dict(os.environ)))
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise SystemExit("recorded; no wheel on purpose")
'''


def test_package_builds_in_the_converter_venv_never_see_the_hf_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """pip runs build code of the packages it installs (sdists): that code, and the pip process
    whose /proc/PID/environ any same-user process reads, must not get HF_TOKEN or other secrets
    of the agent's store. A private index's credentials (PIP_INDEX_URL) still reach pip."""
    from backend.models.converter import REQUIREMENTS, TORCH_ENV, ConverterError, ensure_python

    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "probe_backend"\nbackend-path = ["."]\n'
        '[project]\nname = "probe-pkg"\nversion = "0"\n')
    (pkg / "probe_backend.py").write_text(_BACKEND)
    tree = tmp_path / "tree"
    (tree / "requirements").mkdir(parents=True)
    (tree / "gguf-py").mkdir()
    (tree / REQUIREMENTS).write_text("# nothing from an index\n")
    (tree / "gguf-py" / "pyproject.toml").write_text("[project]\ndependencies = []\n")
    dump = tmp_path / "env.json"
    monkeypatch.setenv("REVIEW_ENV_DUMP", str(dump))
    monkeypatch.setenv(TORCH_ENV, str(pkg))  # the one requirement: the probe, no download
    private = "https://user:pw@index.invalid/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.invalid/simple")  # as start() leaves it
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing from the network
    monkeypatch.setattr(secret_store, "_values", {"HF_TOKEN": SECRET, "OPENAI_API_KEY": "sk-x",
                                                  "PIP_INDEX_URL": private})
    with pytest.raises(ConverterError, match="installing the DFlash converter's packages failed"):
        ensure_python(tree)
    env = json.loads(dump.read_text())
    assert SECRET not in json.dumps(env) and "sk-x" not in json.dumps(env)
    assert "HF_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert env["PIP_INDEX_URL"] == private  # pip's own credentials are pip's to use


def test_a_collapse_whose_reasoning_came_separately_names_thinking():
    """llama-server (b11434, --jinja) streams a thinking model's reasoning as
    ``reasoning_content``, never as ``<think>`` in the content, and reports no
    ``reasoning_tokens`` in its usage: the reasoning the client collected must decide."""
    import io

    from rich.console import Console

    from agent.acceptance import collapse_note
    from agent.client import Turn
    from agent.events import ModelTurn, Timings
    from agent.loop import Agent
    from agent.ui import Reporter

    assert "thinking" in (collapse_note(160, 3, "ok", None, "Let me think about it") or "")
    assert "chat template" in (collapse_note(160, 3, "ok", None, "") or "")
    events: list[ModelTurn] = []
    agent = object.__new__(Agent)  # only _log_turn's own attributes
    agent.session_id, agent.steps, agent.emit = "s", 1, events.append
    timings = Timings(prompt_n=10, cache_n=0, predicted_n=50, predicted_per_second=20.0,
                      draft_n=160, draft_n_accepted=2)
    agent._log_turn(Turn(content="done", reasoning="First, the user wants", timings=timings,
                         usage={"completion_tokens": 50}), "text", [])
    out = io.StringIO()
    reporter = Reporter()
    reporter.console = Console(file=out, force_terminal=False, width=300, soft_wrap=True)
    reporter.event(events[0])
    note = [x for x in out.getvalue().splitlines() if x.startswith("note: draft acceptance")]
    assert note and "thinking" in note[0]


def test_offline_a_cached_conversion_is_still_checked_against_the_target(
        tmp_path: Path, tiny_dflash: dict[str, Path], smollm2: Path,
        monkeypatch: pytest.MonkeyPatch):
    """The cache key names the drafter and the tokenizer, not the target: a preset whose model
    changed (SmolLM2 for the tiny target) reuses the conversion offline, so the offline path
    must run the same target check as the online one, not hand a 64-wide draft to a 576-wide
    model."""
    import shutil

    from backend.models.hfdraft import DraftSourceError, cache_path, prepare_draft
    from tests.zlab_fixture import write_tokenizer_folder, write_zlab_drafter

    drafter = str(write_zlab_drafter(tmp_path / "drafter", 49152))
    tok = str(write_tokenizer_folder(tmp_path / "tok", smollm2))
    out = cache_path(drafter, tok, "q8_0")
    out.parent.mkdir(parents=True)
    shutil.copyfile(tiny_dflash["draft"], out)
    out.with_suffix(".json").write_text(json.dumps({"version": 1, "inputs": {}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert prepare_draft(drafter, tok, tiny_dflash["target"]) == out  # its own target: reused
    with pytest.raises(DraftSourceError, match="wide"):
        prepare_draft(drafter, tok, smollm2)


@pytest.mark.parametrize("shard", ["sub/model-1.safetensors", "model.safetensors@other-rev",
                                   "..", ".hidden.safetensors"])
def test_a_shard_name_that_is_no_plain_file_name_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard: str):
    """The index's shard names become paths in the converter's work folder and parts of an
    ``hf://`` source: ``sub/x`` crashed the work folder's symlink (FileNotFoundError, after
    the converter venv was made), ``x@rev`` fetched from another revision. A drafter's shards
    sit beside its config; anything else is refused before a shard is fetched."""
    from backend.models.hfdraft import DraftSourceError, fetch_folder
    from tests.hf_standin import HfStandin
    from tests.zlab_fixture import write_zlab_drafter

    drafter = write_zlab_drafter(tmp_path / "d", 49152)
    weights = (drafter / "model.safetensors").read_bytes()
    (drafter / "model.safetensors").unlink()
    index = json.dumps({"metadata": {}, "weight_map": {"fc.weight": shard}})
    (drafter / "model.safetensors.index.json").write_text(index)
    files = {("z-lab/odd-DFlash", p.name): p.read_bytes() for p in drafter.iterdir()}
    files[("z-lab/odd-DFlash", shard.split("@")[0])] = weights
    with HfStandin(files) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        with pytest.raises(DraftSourceError, match="shard name"):
            fetch_folder("hf://z-lab/odd-DFlash", "drafter", weights=True)
        asked = " ".join(r.path for r in standin.requests)
        assert "sub/" not in asked and "other-rev" not in asked and ".hidden" not in asked
    with pytest.raises(DraftSourceError, match="shard name"):
        fetch_folder(str(drafter), "drafter", weights=True)


_EVIL = '''from pathlib import Path
Path({marker!r}).write_text("ran")


class EvilTokenizer:
    pass
'''


def _fake_converter(python: Path, tree: Path, draft_dir: Path, tokenizer_dir: Path, out: Path,
                    outtype: str, log: Path) -> None:
    """What llama.cpp's converter does to the tokenizer folder that matters here:
    ``AutoTokenizer.from_pretrained(dir, trust_remote_code=True)`` imports the module its
    ``auto_map`` names from the folder."""
    import importlib.util

    auto = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())["auto_map"]
    module = auto["AutoTokenizer"][0].split(".")[0]
    spec = importlib.util.spec_from_file_location(module, tokenizer_dir / f"{module}.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    raise AssertionError("the converter ran on a tokenizer folder with custom code")


def test_a_tokenizer_folder_with_custom_code_is_refused_and_its_code_never_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_home: Path):
    """The converter loads the target tokenizer with trust_remote_code=True: a folder whose
    tokenizer_config.json names its own .py (auto_map) is refused in one line before any
    conversion, and the .py never runs."""
    import subprocess
    import sys

    from backend.models import hfdraft
    from tests.zlab_fixture import write_zlab_drafter

    drafter = write_zlab_drafter(tmp_path / "drafter", 49152)
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    marker = tmp_path / "code-ran"
    (tok / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (tok / "tokenizer_config.json").write_text(json.dumps(
        {"auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}))
    (tok / "tokenization_evil.py").write_text(_EVIL.format(marker=str(marker)))
    monkeypatch.setattr(hfdraft, "ensure_tree", lambda sdist, note: tmp_path / "tree")
    monkeypatch.setattr(hfdraft, "ensure_python", lambda tree, note: Path(sys.executable))
    monkeypatch.setattr(hfdraft, "run_converter", _fake_converter)
    with pytest.raises(hfdraft.DraftSourceError,
                       match="tokenizer_config.json names custom tokenizer code"):
        hfdraft.prepare_draft(str(drafter), str(tok), None)
    assert not marker.exists()

    # The CLI says so in one line, no traceback, and still runs nothing.
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "backend", "convert-draft", str(drafter),
         str(tmp_path / "o.gguf"), "--target-tokenizer", str(tok)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1",
             "COLUMNS": "200"})
    assert proc.returncode == 3, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "tokenizer_config.json names custom tokenizer code" in errors[0]
    assert "Traceback" not in proc.stderr and not marker.exists()


def test_the_engine_sdist_fetch_never_gives_pip_the_hf_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``pip download`` of the engine's sdist runs the sdist's build backend (for its metadata):
    that code, and pip's /proc/PID/environ, must not get HF_TOKEN or the agent's other secrets;
    a private index's credentials (PIP_INDEX_URL) still reach pip."""
    import io
    import tarfile

    from backend.engine.registry import BuildError
    from backend.engine.sources import SDIST_DIST, SDIST_VERSION, fetch_sdist

    links = tmp_path / "links"
    links.mkdir()
    root = f"{SDIST_DIST.replace('-', '_')}-{SDIST_VERSION}"
    files = {"pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "probe_backend"\n'
                               'backend-path = ["."]\n[project]\n'
                               f'name = "{SDIST_DIST}"\nversion = "{SDIST_VERSION}"\n',
             "probe_backend.py": _BACKEND,
             "PKG-INFO": f"Metadata-Version: 2.1\nName: {SDIST_DIST}\nVersion: {SDIST_VERSION}\n"}
    with tarfile.open(links / f"{root}.tar.gz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dump = tmp_path / "env.json"
    monkeypatch.setenv("REVIEW_ENV_DUMP", str(dump))
    private = "https://user:pw@index.invalid/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.invalid/simple")  # as start() leaves it
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing from the network: the sdist above only
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setattr(secret_store, "_values", {"HF_TOKEN": SECRET, "OPENAI_API_KEY": "sk-x",
                                                  "PIP_INDEX_URL": private})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BuildError, match="pip could not download"):
        fetch_sdist(out, tmp_path / "fetch.log")
    env = json.loads(dump.read_text())
    assert SECRET not in json.dumps(env) and "sk-x" not in json.dumps(env)
    assert "HF_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert env["PIP_INDEX_URL"] == private  # pip's own credentials are pip's to use
