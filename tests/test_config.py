import os
import resource
import subprocess
import sys
from pathlib import Path

import git
import pytest

from agent.config import ConfigError, FlagError, load_settings
from backend.models.configfile import MAX_CONFIG_BYTES, ConfigFileError, read_config_text


def test_packaged_defaults_use_the_auto_protocol():
    assert load_settings().tool_protocol == "auto"


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


def agent_bounded(*args: str, home: Path, cwd: Path,
                  **env: str) -> subprocess.CompletedProcess:
    """The real ``agent`` command held to 1 GiB of address space and 60 s, so that a config file
    read without bounds (before the fix: /dev/zero grew to 23 GB, a FIFO blocked forever) fails
    this test instead of the machine running it."""
    limit = 2**30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, stdin=subprocess.DEVNULL, preexec_fn=cap,
                          env={**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
                               "COLUMNS": "300", **env})


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero and FIFOs")
def test_a_cloned_config_linking_to_a_device_or_a_fifo_is_refused_unread(agent_home: Path,
                                                                         tmp_path: Path):
    repo = tmp_path / "repo"
    git.Repo.init(repo)
    project_file = repo / ".agents" / "config.toml"
    project_file.parent.mkdir()
    project_file.symlink_to("/dev/zero")
    proc = agent_bounded("run", "hi", home=agent_home, cwd=repo)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == (f"error: {project_file} is a character device (it links to "
                           "/dev/zero), not a config file; remove it or make it a plain file\n")
    project_file.unlink()
    os.mkfifo(project_file)
    proc = agent_bounded("run", "hi", home=agent_home, cwd=repo)
    assert proc.returncode == 3, proc.stderr
    assert f"{project_file} is a FIFO (named pipe), not a config file" in proc.stderr
    project_file.unlink()
    # The user's own files are read the same way.
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    os.mkfifo(user_file)
    proc = agent_bounded("run", "hi", home=agent_home, cwd=repo)
    assert proc.returncode == 3 and f"{user_file} is a FIFO" in proc.stderr, proc.stderr
    user_file.unlink()
    presets_file = agent_home / "config" / "presets.toml"
    presets_file.symlink_to("/dev/zero")
    proc = agent_bounded("backend", "presets", home=agent_home, cwd=repo)
    assert proc.returncode == 3 and f"{presets_file} is a character device" in proc.stderr, \
        proc.stderr


def test_config_files_are_read_only_as_small_regular_files(tmp_path: Path):
    real = tmp_path / "real.toml"
    real.write_text("max_steps = 3\n")
    linked = tmp_path / "linked.toml"
    linked.symlink_to(real)
    assert read_config_text(linked) == "max_steps = 3\n"  # a symlink to a plain file is fine
    with pytest.raises(ConfigFileError, match=r"is a directory, not a config file"):
        read_config_text(tmp_path)
    # /dev/null is safe to read if the check ever goes: it is refused as a device, not read.
    null = tmp_path / "null.toml"
    null.symlink_to(os.devnull)
    with pytest.raises(ConfigFileError, match=r"null.toml is a character device \(it links to "):
        read_config_text(null)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigFileError, match=r"big.toml is larger than 1,048,576 bytes, the "
                       "most a config file may be"):
        read_config_text(big)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"x = 1\n\xff\n")
    with pytest.raises(ConfigFileError, match=r"bad.toml: not UTF-8 text \(byte 6\)"):
        read_config_text(bad)


def test_an_unknown_preset_from_a_file_or_variable_names_where_it_was_set(
        agent_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DFLASH_AGENT_PRESET")  # the suite's own (tests/conftest.py)
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('preset = "nope"\n')
    with pytest.raises(ConfigError, match=rf"^{user_file}: preset: unknown preset 'nope' "
                       r"\(known: .*smollm2-135m"):
        load_settings()
    # A flag over it wins; the flag's own name is checked where the preset is used (exit 2).
    assert load_settings(cli={"preset": "other"}).preset == "other"
    repo = tmp_path / "repo"
    (repo / ".agents").mkdir(parents=True)
    (repo / ".agents" / "config.toml").write_text('preset = "nope2"\n')
    user_file.write_text("")
    with pytest.raises(ConfigError, match=rf"^{repo / '.agents' / 'config.toml'}: preset: "
                       "unknown preset 'nope2'"):
        load_settings(project=repo)
    monkeypatch.setenv("DFLASH_AGENT_PRESET", "nope3")
    with pytest.raises(ConfigError, match=r"^DFLASH_AGENT_PRESET: unknown preset 'nope3'"):
        load_settings(project=repo)


def test_an_unknown_preset_in_config_is_exit_3_and_as_a_flag_exit_2(
        agent_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DFLASH_AGENT_PRESET")  # the suite's own (tests/conftest.py)
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('preset = "nope"\n')
    proc = agent_bounded("backend", "up", home=agent_home, cwd=tmp_path)
    assert proc.returncode == 3 and proc.stderr.startswith(
        f"error: {user_file}: preset: unknown preset 'nope'"), proc.stderr
    user_file.write_text("")
    proc = agent_bounded("backend", "up", "--preset", "nope", home=agent_home, cwd=tmp_path)
    assert proc.returncode == 2 and "unknown preset 'nope'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("line, key, message", [
    ("port = true", "port", "Input should be a valid integer"),
    ("ctx_size = true", "ctx_size", "Input should be a valid integer"),
    ("max_time = true", "max_time", "Input should be a valid number"),
    ('max_time = "60"', "max_time", "Input should be a valid number"),
])
def test_a_config_value_of_the_wrong_type_is_refused_not_converted(
        agent_home: Path, line: str, key: str, message: str):
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text(line + "\n")
    with pytest.raises(ConfigError, match=f"^{user_file}: {key}: {message}$"):
        load_settings()


def test_text_from_variables_and_whole_numbers_for_seconds_still_convert(
        agent_home: Path, monkeypatch: pytest.MonkeyPatch):
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("max_time = 60\n")
    monkeypatch.setenv("DFLASH_AGENT_PORT", "9000")
    settings = load_settings()
    assert settings.max_time == 60.0 and settings.port == 9000


def test_an_endless_time_limit_is_refused(agent_home: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(FlagError, match=r"^--max-time inf: Input should be a finite number$"):
        load_settings(cli={"max_time": float("inf")})
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("max_time = inf\n")
    with pytest.raises(ConfigError, match=rf"^{user_file}: max_time: Input should be a finite "):
        load_settings()
    user_file.write_text("")
    for key in ("REQUEST_TIMEOUT", "SERVER_START_TIMEOUT"):
        monkeypatch.setenv(f"DFLASH_AGENT_{key}", "inf")
        with pytest.raises(ConfigError, match=rf"^DFLASH_AGENT_{key}: Input should be a finite"):
            load_settings()
        monkeypatch.delenv(f"DFLASH_AGENT_{key}")


def test_a_base_url_that_is_no_http_url_is_refused_naming_where(agent_home: Path,
                                                                 tmp_path: Path):
    """A field trial: `base_url = "not a url"` in config.toml, or `--base-url ftp://x`, went on
    to a connection attempt: "no server answers at not a url … drop --base-url", exit 3 with a
    crash log. Refused now, naming the file (exit 3) or the flag (exit 2)."""
    user_file = agent_home / "config" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('base_url = "not a url"\n')
    with pytest.raises(ConfigError, match=f"^{user_file}: base_url: .*'not a url' is not an "
                       "http:// or https:// URL with a host$"):
        load_settings()
    user_file.write_text("")
    for bad in ("ftp://x", "http://", "http://h:port"):
        with pytest.raises(FlagError, match=f"^--base-url {bad}: "):
            load_settings(cli={"base_url": bad})
    assert load_settings(cli={"base_url": "http://127.0.0.1:8080/v1"}).base_url == \
        "http://127.0.0.1:8080/v1"
    proc = subprocess.run([sys.executable, "-m", "agent", "run", "x", "--base-url", "ftp://x"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "DFLASH_AGENT_HOME": str(agent_home)})
    assert proc.returncode == 2 and "--base-url ftp://x: " in proc.stderr, proc.stderr
    assert "details:" not in proc.stderr
