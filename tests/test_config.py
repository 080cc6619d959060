from pathlib import Path

import pytest

from agent.config import ConfigError, load_settings


def test_packaged_defaults_use_the_embedded_preset_and_auto_protocol():
    settings = load_settings()
    assert settings.preset == "smollm2-135m"
    assert settings.tool_protocol == "auto"


def test_precedence_user_then_project_then_env_then_cli(agent_home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "config.toml").write_text("max_steps = 5\nmax_time = 10.0\n"
                                                       "ctx_size = 1024\n")
    repo = tmp_path / "repo"
    (repo / ".agents").mkdir(parents=True)
    (repo / ".agents" / "config.toml").write_text("max_steps = 6\nctx_size = 2048\n")
    monkeypatch.setenv("DFLASH_AGENT_CTX_SIZE", "3072")
    settings = load_settings(project=repo, cli={"max_time": 99.0, "preset": None})
    assert settings.max_steps == 6  # project over user
    assert settings.ctx_size == 3072  # env over project
    assert settings.max_time == 99.0  # cli over user
    assert settings.preset == "smollm2-135m"  # a None flag changes nothing


def test_project_config_cannot_widen_approval_or_run_programs(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / ".agents").mkdir(parents=True)
    (repo / ".agents" / "config.toml").write_text('approval = "full-auto"\n'
                                                  'engine_sdist = "/x.tar.gz"\n')
    with pytest.raises(ConfigError, match="approval, engine_sdist may only be set"):
        load_settings(project=repo)


def test_broken_user_config_names_the_file(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    bad = agent_home / "config" / "config.toml"
    bad.write_text("max_steps = [unclosed\n")
    with pytest.raises(ConfigError, match="config.toml: not valid TOML"):
        load_settings()


def test_unknown_and_invalid_settings_are_reported_with_their_origin(
        agent_home: Path, monkeypatch: pytest.MonkeyPatch):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "config.toml").write_text("max_stepz = 3\n")
    with pytest.raises(ConfigError, match="unknown setting.*max_stepz"):
        load_settings()
    (agent_home / "config" / "config.toml").write_text("")
    monkeypatch.setenv("DFLASH_AGENT_MAX_STEPS", "lots")
    with pytest.raises(ConfigError, match="DFLASH_AGENT_MAX_STEPS: Input should be"):
        load_settings()


def test_tool_turns_default_to_temperature_zero_and_can_be_changed(
        monkeypatch: pytest.MonkeyPatch):
    assert load_settings().tool_temperature == 0.0
    monkeypatch.setenv("DFLASH_AGENT_TOOL_TEMPERATURE", "0.7")
    assert load_settings().tool_temperature == 0.7
