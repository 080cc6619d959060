"""The default preset (issue 49): the 1.5B coder model, unless the machine has too little
memory, where SmolLM2-135M is served and one line says why. The suite itself runs SmolLM2 by
``DFLASH_AGENT_PRESET`` (tests/conftest.py), which these tests take away."""

from __future__ import annotations

from pathlib import Path

import pytest

import agent.config
import agent.runtime
from agent.config import load_settings, preset_note
from agent.runtime import connect
from agent.ui import Reporter
from backend.machine import Memory
from backend.models.presets import DEFAULT_MIN_MEMORY, DEFAULT_PRESET, SMALL_PRESET, get_preset

GIB = 1024**3


@pytest.fixture
def packaged(monkeypatch: pytest.MonkeyPatch, agent_home: Path) -> pytest.MonkeyPatch:
    """No preset from any layer but the packaged defaults."""
    monkeypatch.delenv("DFLASH_AGENT_PRESET")
    return monkeypatch


def with_ram(monkeypatch: pytest.MonkeyPatch, total: int) -> None:
    monkeypatch.setattr(agent.config, "memory", lambda: Memory(available=total // 2, total=total))


def test_the_packaged_default_is_the_coder_model(packaged: pytest.MonkeyPatch):
    with_ram(packaged, 24 * GIB)
    settings = load_settings()
    assert settings.preset == DEFAULT_PRESET == "qwen2.5-coder-1.5b"
    assert preset_note(settings) is None
    assert get_preset(DEFAULT_PRESET).model.startswith("pypi-parts://")


def test_a_machine_with_too_little_memory_gets_smollm2_and_is_told(
        packaged: pytest.MonkeyPatch):
    with_ram(packaged, DEFAULT_MIN_MEMORY - GIB)
    settings = load_settings()
    assert settings.preset == SMALL_PRESET
    note = preset_note(settings)
    assert note is not None and "\n" not in note
    assert "3.0 GiB of RAM" in note and DEFAULT_PRESET in note and SMALL_PRESET in note


@pytest.mark.parametrize("layer", ["flag", "environment", "user config"])
def test_a_preset_the_user_named_is_kept_on_a_small_machine(
        packaged: pytest.MonkeyPatch, agent_home: Path, layer: str):
    with_ram(packaged, 2 * GIB)
    cli = {}
    if layer == "flag":
        cli = {"preset": DEFAULT_PRESET}
    elif layer == "environment":
        packaged.setenv("DFLASH_AGENT_PRESET", DEFAULT_PRESET)
    else:
        (agent_home / "config").mkdir(parents=True)
        (agent_home / "config" / "config.toml").write_text(f'preset = "{DEFAULT_PRESET}"\n')
    settings = load_settings(cli=cli)
    assert settings.preset == DEFAULT_PRESET and preset_note(settings) is None


class Stop(Exception):
    pass


def test_the_fallback_is_said_once_before_the_server_starts(packaged: pytest.MonkeyPatch):
    """``connect`` (every task's way to its server) says the line before anything else."""
    with_ram(packaged, 3 * GIB)
    said: list[str] = []
    reporter = Reporter()
    packaged.setattr(reporter, "note", said.append)

    def no_start(request: object, **_: object) -> None:
        said.append(f"launch({request.preset.name})")
        raise Stop

    packaged.setattr(agent.runtime, "launch", no_start)
    packaged.setattr(agent.runtime, "default_engine", lambda: object())
    with pytest.raises(Stop):
        connect(load_settings(), reporter)
    assert len(said) == 2 and "GiB of RAM" in said[0]
    assert said[1] == f"launch({SMALL_PRESET})"
