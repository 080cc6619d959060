"""Engines from other sources: BeeLlama cloned at a tag (gitpython), a local --source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import git
import pytest

from backend.engine.build import build_beellama
from backend.engine.registry import BuildError
from backend.engine.sources import check_source

AGENT = [sys.executable, "-m", "agent"]
TINY_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(tiny C)
add_executable(llama-server main.c)
set_target_properties(llama-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
"""


def _agent(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=1800, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A git repository shaped like a llama.cpp fork (CMakeLists.txt, ggml/) whose
    ``llama-server`` prints which tag it was built from; tags v0.3.2 and v0.4.7."""
    root = tmp_path / "beellama.cpp"
    (root / "ggml").mkdir(parents=True)
    (root / "ggml" / "README").write_text("ggml\n")
    (root / "CMakeLists.txt").write_text(TINY_CMAKE)
    repo = git.Repo.init(root)
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "T").set_value("user", "email", "t@example.com")
    for tag in ("v0.3.2", "v0.4.7"):
        (root / "main.c").write_text('#include <stdio.h>\nint main(void) { '
                                     f'puts("version: 1 ({tag})"); return 0; }}\n')
        repo.index.add(["CMakeLists.txt", "main.c", "ggml/README"])
        repo.index.commit(tag)
        repo.create_tag(tag)
    return root


def test_beellama_is_cloned_at_the_requested_tag_and_built(fork: Path):
    engine = build_beellama("v0.3.2", cuda=False, git_url=str(fork))
    assert engine.engine == "beellama" and engine.version == "v0.3.2"
    out = subprocess.run([str(engine.binary)], capture_output=True, text=True).stdout
    assert out.strip() == "version: 1 (v0.3.2)"
    log = (engine.binary.parent.parent / "build.log").read_text()
    assert "git clone --depth 1 --branch v0.3.2" in log
    assert build_beellama("v0.3.2", cuda=False, git_url=str(fork)) == engine  # a no-op


def test_the_cli_builds_beellama_at_another_tag(fork: Path, agent_home: Path):
    proc = _agent("backend", "build", "--engine", "beellama", "--ref", "v0.4.7", "--cpu",
                  "--git-url", str(fork), home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert "engine beellama-v0.4.7-bee-new-cpu-" in proc.stdout


def test_a_clone_failure_names_the_tag_and_the_way_out(fork: Path, tmp_path: Path):
    with pytest.raises(BuildError) as info:
        build_beellama("v9.9.9", cuda=False, git_url=str(fork))
    assert info.value.step == "clone"
    assert "at 'v9.9.9'" in str(info.value) and "--source DIR" in str(info.value)
    with pytest.raises(BuildError, match="could not clone"):
        build_beellama("v0.4.7", cuda=False, git_url=str(tmp_path / "no-such-repo"))


def test_a_folder_that_is_not_a_source_tree_is_refused(tmp_path: Path, agent_home: Path):
    with pytest.raises(BuildError, match="not a llama.cpp source tree"):
        check_source(tmp_path)
    proc = _agent("backend", "build", "--source", str(tmp_path), "--cpu", home=agent_home)
    assert proc.returncode == 3 and "not a llama.cpp source tree" in proc.stderr
    proc = _agent("backend", "build", "--engine", "beellama", "--sdist", "x.tar.gz",
                  home=agent_home)
    assert proc.returncode == 2 and "BeeLlama builds from" in proc.stderr


def _tiny_tree(root: Path, message: str) -> Path:
    """A folder shaped like a llama.cpp tree (CMakeLists.txt, ggml/) whose ``llama-server``
    prints ``message``."""
    (root / "ggml").mkdir(parents=True)
    (root / "ggml" / "README").write_text("ggml\n")
    (root / "CMakeLists.txt").write_text(TINY_CMAKE)
    (root / "main.c").write_text(f'#include <stdio.h>\nint main(void) {{ puts("{message}"); '
                                 "return 0; }\n")
    return root


def test_a_local_source_tree_is_built_out_of_tree_and_rebuilt_only_when_it_changes(
        tmp_path: Path, agent_home: Path):
    # A tiny tree: the recipe (configure, build, install) compiles real llama.cpp trees in the
    # session's engine build and BeeLlama's archive build (extracted to a folder, then built
    # as this one); a third real compile here cost CI ~8 minutes for nothing new.
    src = _tiny_tree(tmp_path / "llama.cpp", "built from a folder")
    before = {p.relative_to(src): p.stat().st_mtime_ns for p in src.rglob("*")}
    proc = _agent("backend", "build", "--source", str(src), "--cpu", home=agent_home)
    assert proc.returncode == 0, proc.stderr
    binary = Path(proc.stdout.split(": ", 1)[1].strip())
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    assert run.stdout.strip() == "built from a folder"
    assert {p.relative_to(src): p.stat().st_mtime_ns for p in src.rglob("*")} == before
    again = _agent("backend", "build", "--source", str(src), "--cpu", home=agent_home)
    assert again.returncode == 0 and again.stdout == proc.stdout  # reused, not rebuilt
    (src / "main.c").write_text('#include <stdio.h>\nint main(void) { puts("changed"); '
                                "return 0; }\n")
    changed = _agent("backend", "build", "--source", str(src), "--cpu", home=agent_home)
    assert changed.returncode == 0, changed.stderr
    rebuilt = Path(changed.stdout.split(": ", 1)[1].strip())
    assert rebuilt != binary and binary.is_file()  # a new engine; the old one stays
    assert subprocess.run([str(rebuilt)], capture_output=True, text=True).stdout.strip() \
        == "changed"
