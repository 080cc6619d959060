"""train/h200.sh's stage exits, run for real with bash on a machine-state folder (no GPU).

A stage that finds the background build still running must say "call again" (exit 75), not
"the build failed" (exit 12): on 2026-12-05 `first` gave up on a build at 337 of 358 steps
with exit 12, and only reading the build log showed it was fine.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "train" / "h200.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stage(tmp_path: Path, stage: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DK_TMP=str(tmp_path / "t"), OUT=str(tmp_path / "out"), DEADLINE="0")
    return subprocess.run(["bash", str(SCRIPT), stage], env=env, capture_output=True,
                          text=True, timeout=60)


def _started_build(tmp_path: Path) -> Path:
    t = tmp_path / "t"
    t.mkdir()
    (t / "build.done").touch()
    (t / "build.log").write_text("build: build 337/358 (5 min 21 s)\n")
    return t


def test_a_build_still_running_is_call_again_not_a_failure(tmp_path: Path) -> None:
    _started_build(tmp_path)
    done = _stage(tmp_path, "rpc")
    assert done.returncode == 75, done.stdout + done.stderr
    assert "the build is still running" in done.stdout
    assert "337/358" in done.stdout


def test_a_failed_build_is_exit_12_with_its_log(tmp_path: Path) -> None:
    t = _started_build(tmp_path)
    (t / "build.rc").write_text("2\n")
    (t / "build.log").write_text("ninja: build stopped: subcommand failed.\n")
    done = _stage(tmp_path, "rpc")
    assert done.returncode == 12, done.stdout + done.stderr
    assert "subcommand failed" in done.stdout


def test_a_fresh_machine_is_exit_10(tmp_path: Path) -> None:
    done = _stage(tmp_path, "rpc")
    assert done.returncode == 10, done.stdout + done.stderr
    assert "FRESH MACHINE" in done.stdout
