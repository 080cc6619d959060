"""Issue 28 item 7: a copied home stays itself. A home copied with ``cp -r`` (a backup restored,
a home moved to another disk, a container image) runs its own engine binary, and neither lists,
adopts nor stops the live servers of the home it was copied from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from backend.engine.build import default_engine
from backend.engine.registry import Engine, list_engines, write_manifest
from backend.home import home
from backend.serve import records, server
from tests.conftest import home_env, recorded_stand_in
from tests.test_cli_ux import agent

KEY = "llama.cpp-11434-cpu-test-0123456789"


def _copy(original: Path, copy: Path) -> Path:
    subprocess.run(["cp", "-r", str(original), str(copy)], check=True)
    return copy


def _install_engine(root: Path) -> Path:
    """An engine folder as a build leaves it (``bin/llama-server`` and ``engine.json``);
    returns its binary."""
    with home_env(root):
        folder = home().ensure().engines / KEY
    (folder / "bin").mkdir(parents=True)
    binary = folder / "bin" / "llama-server"
    binary.write_text("#!/bin/sh\necho 'version: 11434'\n")
    binary.chmod(0o755)
    return binary


def _engine(binary: Path) -> Engine:
    return Engine(engine="llama.cpp", version="11434", key=KEY, binary=binary,
                  installed_at=time.time(), cpu_features=[])


def test_a_copied_home_runs_its_own_engine_binary(tmp_path: Path):
    original = tmp_path / "original"
    binary = _install_engine(original)
    with home_env(original):
        write_manifest(_engine(binary))
    manifest = json.loads((binary.parent.parent / "engine.json").read_text())
    assert manifest["binary"] == "bin/llama-server"  # relative to the engine's folder
    copy = _copy(original, tmp_path / "copy")
    with home_env(copy):
        assert default_engine().binary == copy / "cache" / "engines" / KEY / "bin" / \
            "llama-server"
    with home_env(original):
        assert default_engine().binary == binary


def test_an_engine_json_with_an_absolute_path_still_loads_and_a_copy_of_it_stays_itself(
        tmp_path: Path):
    # The format written before paths were relative: the absolute path of the binary.
    original = tmp_path / "original"
    binary = _install_engine(original)
    (binary.parent.parent / "engine.json").write_text(_engine(binary).model_dump_json())
    copy = _copy(original, tmp_path / "copy")
    with home_env(original):
        assert default_engine().binary == binary
    with home_env(copy):
        [engine] = list_engines()
        assert engine.binary == copy / "cache" / "engines" / KEY / "bin" / "llama-server"
        assert engine.templates == copy / "cache" / "engines" / KEY / "templates"


def test_a_system_engine_keeps_its_absolute_path(tmp_path: Path):
    original = tmp_path / "original"
    outside = tmp_path / "elsewhere" / "llama-server"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\n")
    outside.chmod(0o755)
    with home_env(original):
        home().ensure()
        write_manifest(Engine(engine="system", version="1", key="system-abc", binary=outside,
                              installed_at=1.0, cpu_features=[]))
    copy = _copy(original, tmp_path / "copy")
    with home_env(copy):
        assert default_engine().binary == outside


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[Path, records.ServerState]]:
    """A live server of the home ``original``, recorded there as ``up`` records it
    (:func:`tests.conftest.recorded_stand_in`)."""
    original = tmp_path / "original"
    with recorded_stand_in(original, tmp_path) as state:
        yield original, state


def test_a_copied_home_neither_lists_adopts_nor_stops_the_servers_of_the_original(
        stand_in: tuple[Path, records.ServerState], tmp_path: Path):
    original, state = stand_in
    record = json.loads((original / "state" / "servers" / f"{state.config_hash}.json")
                        .read_text())
    assert record["log"] == f"{state.config_hash}.log"  # relative to the record's folder
    copy = _copy(original, tmp_path / "copy")
    status = agent("backend", "status", home=copy, cwd=tmp_path)
    assert status.stdout.splitlines() == [
        f"removed the stale state file of llama-server pid {state.pid} (http://127.0.0.1:1): "
        "its process still runs but writes another home's log (this home is a copy): it is "
        "not this home's server",
        "no managed server is running (start one with `agent backend up`)"], status.stdout
    with home_env(copy):
        assert records.current() is None
        assert server.running() == []
        assert server.down() == [] and server.down(all_servers=True) == []
    proc = agent("backend", "down", "--all", home=copy, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert psutil.Process(state.pid).is_running()
    # The original still knows its server, and stops it.
    with home_env(original):
        assert [s.pid for s in server.running()] == [state.pid]
        assert records.current() is not None
        assert [s.pid for s in server.down(all_servers=True)] == [state.pid]
    assert not psutil.pid_exists(state.pid) or psutil.Process(state.pid).status() == "zombie"


def test_a_record_whose_process_runs_another_binary_is_not_ours(
        stand_in: tuple[Path, records.ServerState]):
    original, state = stand_in
    with home_env(original):
        other = state.model_copy(update={"plan": state.plan.model_copy(
            update={"binary": Path(sys.executable)})})
        assert records.is_ours(state) and not records.is_ours(other)
        assert os.path.samefile(state.log, original / "state" / "servers" /
                                f"{state.config_hash}.log")
