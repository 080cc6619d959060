"""The exercism-python suite (issue 50): 40 exercises of Exercism's Python track, and
polyglot-python, the 33 Python exercises of Aider's polyglot benchmark, vendored with their
licence by benchmarks/tasks/vendor_exercism.py; each task's hidden tests fail on the track's
stub and pass on its example solution."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.tasks import ROOT
from benchmarks.tasks.tasks import select, verify
from benchmarks.tasks.vendor_exercism import REQUEST, main, vendor, vendor_polyglot

SUITE = select(ROOT, "exercism-python")
POLYGLOT = select(ROOT, "polyglot-python")
FOLDER = ROOT / "exercism-python"


def test_the_suite_has_forty_exercises_across_difficulties_and_keeps_the_licence():
    assert len(SUITE) >= 40
    levels = {tag for t in SUITE for tag in t.tags if tag.startswith("difficulty-")}
    assert len(levels) >= 5, levels
    assert "MIT License" in (FOLDER / "LICENSE").read_text()
    assert "Copyright (c) 2021 Exercism" in (FOLDER / "LICENSE").read_text()
    assert "exercism/python" in (FOLDER / "SOURCE.md").read_text()
    for task in SUITE:
        [stub] = task.files()
        # The tests are hidden: the agent sees the stub and the instructions only.
        assert not any(p.name.endswith("_test.py") for p in task.repo_dir.iterdir()), task.key
        assert task.instruction.rstrip().endswith(REQUEST.format(files=stub).rstrip())


def test_the_polyglot_python_exercises_are_all_there_under_the_tracks_licence():
    assert len(POLYGLOT) >= 30
    folder = ROOT / "polyglot-python"
    assert "Copyright (c) 2021 Exercism" in (folder / "LICENSE").read_text()
    assert "Aider-AI/polyglot-benchmark" in (folder / "SOURCE.md").read_text()
    assert all("polyglot" in t.tags for t in POLYGLOT)


@pytest.mark.parametrize("task", SUITE + POLYGLOT, ids=[t.key for t in SUITE + POLYGLOT])
def test_check_fails_on_the_stub_and_passes_on_the_example(task, tmp_path: Path):
    start, solved = verify(task, tmp_path)
    assert start.status == "failed", start.tail
    assert solved.status == "passed", solved.tail


def fake_track(root: Path) -> Path:
    """A track of four exercises: one to vendor, one deprecated, one with two test files and
    one whose stub already passes its tests (the last three are left out)."""
    config = {"exercises": {"practice": [
        {"slug": "echo", "difficulty": 1},
        {"slug": "gone", "difficulty": 2, "status": "deprecated"},
        {"slug": "pair", "difficulty": 3},
        {"slug": "done", "difficulty": 4}]}}
    (root / "config.json").parent.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    (root / "LICENSE").write_text("MIT License\n")
    for slug, tests in (("echo", ["echo_test.py"]), ("pair", ["pair_test.py", "util.py"]),
                        ("done", ["done_test.py"])):
        ex = root / "exercises" / "practice" / slug
        (ex / ".docs").mkdir(parents=True)
        (ex / ".meta").mkdir()
        (ex / ".docs" / "instructions.md").write_text(f"# {slug}\n\nSay \"it\".\n")
        (ex / ".meta" / "config.json").write_text(json.dumps({"files": {
            "solution": [f"{slug}.py"], "test": tests, "example": [".meta/example.py"]}}))
        stub = "def f():\n    return 'it'\n" if slug == "done" else "def f():\n    pass\n"
        (ex / f"{slug}.py").write_text(stub)
        (ex / ".meta" / "example.py").write_text("def f():\n    return 'it'\n")
        for t in tests:
            (ex / t).write_text(f"from {slug} import f\n\n\ndef test_f():\n"
                                "    assert f() == 'it'\n")
    return root


def test_vendoring_skips_deprecated_multi_file_and_already_passing_exercises(tmp_path: Path):
    out = tmp_path / "suite"
    written = vendor(fake_track(tmp_path / "track"), 1, out)
    assert written == ["echo"]
    [task] = select(tmp_path, "suite")
    assert task.instruction.startswith('# echo\n\nSay "it".')
    start, solved = verify(task, tmp_path / "work")
    assert (start.status, solved.status) == ("failed", "passed")


def test_polyglot_takes_every_python_exercise_of_its_checkout(tmp_path: Path):
    track = fake_track(tmp_path / "track")
    practice = tmp_path / "polyglot" / "python" / "exercises"
    practice.mkdir(parents=True)
    (track / "exercises" / "practice").rename(practice / "practice")
    written = vendor_polyglot(tmp_path / "polyglot", track / "LICENSE", tmp_path / "suite")
    assert written == ["echo"]  # pair: two test files; done: its stub passes already
    assert (tmp_path / "suite" / "LICENSE").read_text() == "MIT License\n"


def test_a_folder_that_is_not_a_track_is_one_error_line(tmp_path: Path, capsys):
    assert main([str(tmp_path)]) == 3
    assert capsys.readouterr().err == (f"error: {tmp_path}: no config.json (not a checkout of "
                                       "exercism/python)\n")
    track = fake_track(tmp_path / "track")
    assert main([str(track), "--polyglot", str(tmp_path / "nowhere")]) == 3
    assert "not a checkout of Aider-AI/polyglot-benchmark" in capsys.readouterr().err


def test_the_vendoring_tool_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.tasks.vendor_exercism", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "exercism" in proc.stdout.lower()
