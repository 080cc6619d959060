"""Synthetic agent sessions (train/agent_sessions.py): recorded with the agent's real tools in
a real workspace, the same for a seed, loaded and rendered like the fixtures but under their
own source group, held out by a stable fraction, and refused clearly when the input is bad.
No torch, no server."""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from train.agent_requests import session_requests, synthetic_heldout
from train.agent_sessions import build_sessions, module_text, write_sessions
from train.cli import _split, group_of
from train.errors import InputError
from train.seqs import build

ROOT = Path(__file__).resolve().parent.parent

TEXTKIT = '''"""Small text helpers."""

import os
import re

WORD = re.compile(r"\\w+")


def count_words(text, minimum=1):
    """Count the words of ``text``.

    Words shorter than ``minimum`` are left out. The count is an int.
    """
    if minimum < 0:
        raise ValueError("minimum must not be negative")
    return sum(1 for w in WORD.findall(text) if len(w) >= minimum)


def join_paths(base, name, strict=False):
    if strict and not name:
        raise ValueError("name is empty")
    return os.path.join(base, name)


def shout(text, times=2):
    return count_words(text) and text.upper() * times


class Tally:
    def __init__(self, start=0):
        self.value = start

    def add(self, step=1):
        if step == 0:
            raise ValueError("step must not be zero")
        self.value += step
        return self.value
'''


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "textkit.py").write_text(TEXTKIT)
    return src


def _steady(session: dict) -> str:
    """The session's JSON without what pytest prints differently each run (its run time)."""
    return re.sub(r" in \d+\.\d+s", " in Ns", json.dumps(session, sort_keys=True))


def test_sessions_are_recorded_with_the_real_tools_and_the_same_for_a_seed(tmp_path: Path):
    src = _source(tmp_path)
    sessions, stats = build_sessions([src], 4, seed=3, jobs=2)
    assert len(sessions) == 4 and stats["refused by play()"] == 0
    again, _ = build_sessions([src], 4, seed=3, jobs=1)
    assert [_steady(s) for s in again] == [_steady(s) for s in sessions]
    other, _ = build_sessions([src], 4, seed=4, jobs=2)
    assert [_steady(s) for s in other] != [_steady(s) for s in sessions]
    for s in sessions:
        assert re.fullmatch(r"synth-textkit-\d+", s["name"])
        assert s["workspace"] == f"/home/dev/{s['name']}" and s["task"]
        assert 3 <= len(s["turns"]) <= 7
        assert s["turns"][-1]["kind"] == "final" and not s["turns"][-1]["results"]
        for turn in s["turns"][:-1]:
            (call,), (result,) = turn["calls"], turn["results"]
            text = result["text"]
            assert str(tmp_path) not in text and "/tmp/" not in text
            if call["tool"] == "str_replace":
                assert text.startswith(f"edited {call['arguments']['path']}:")
                assert "(matched ignoring" not in text and not result["is_error"]
            if call["tool"] == "view" and call["arguments"]["path"] == "textkit.py":
                # The view tool's own numbered lines of the file as the session had it.
                assert re.search(r"^\s+\d+\t", text, re.M)
            if call["tool"] == "bash":
                code = re.search(r"\[exit code (\d+)\]$", text.rstrip())
                assert code and (code.group(1) != "0") == result["is_error"], text
    kinds = {t["calls"][0]["tool"] for s in sessions for t in s["turns"]}
    assert {"view", "str_replace", "final_answer"} <= kinds


def test_written_sessions_load_from_a_folder_and_render_under_their_own_group(tmp_path: Path):
    sessions, _ = build_sessions([_source(tmp_path)], 2, seed=1)
    folder = tmp_path / "synth"
    paths = write_sessions(sessions, folder)
    assert sorted(p.name for p in paths) == sorted(f"{s['name']}.json" for s in sessions)
    with pytest.raises(InputError, match="already holds 2 session file"):
        write_sessions(sessions, folder)
    requests = session_requests(("text", "json"), holdout=("textstats-errors",),
                                sessions=[str(folder), "textstats-errors"])
    turns = sum(len(s["turns"]) for s in sessions)
    groups = {}
    for r in requests:
        groups.setdefault(group_of(r.source), []).append(r)
    assert len(groups["agent-synth-text"]) == len(groups["agent-synth-json"]) == turns
    assert all(r.source.split(":", 1)[1].startswith("synth-textkit-")
               for r in groups["agent-synth-text"])
    assert not any(r.heldout for g in ("agent-synth-text", "agent-synth-json")
                   for r in groups[g])
    # The fixture keeps its own groups and stays held out.
    assert groups["agent-text"] and all(r.heldout for r in groups["agent-text"])
    assert {r.source for r in groups["agent-text"]} == {"agent-text:textstats-errors"}
    first = groups["agent-synth-text"][0].messages
    # The system prompt names no workspace (any path would be copied by a small model): the
    # same as the fixture's, text protocol both.
    assert first[0]["role"] == "system" and sessions[0]["workspace"] not in first[0]["content"]
    assert first[0] == groups["agent-text"][0].messages[0]
    assert first[1] == {"role": "user", "content": sessions[0]["task"]}
    assert groups["agent-synth-json"][0].schema is not None


def test_a_fraction_of_synthetic_sessions_is_held_out_by_a_stable_hash():
    names = [f"synth-mod-{i}" for i in range(400)]
    held = [n for n in names if synthetic_heldout(n, 0.25)]
    assert 60 < len(held) < 140
    assert held == [n for n in names if synthetic_heldout(n, 0.25)]
    assert not any(synthetic_heldout(n, 0.0) for n in names)
    assert not synthetic_heldout("textstats-errors", 0.99)  # fixtures: only by name
    with pytest.raises(InputError, match=r"in \[0, 1\)"):
        session_requests(("text",), holdout=(), holdout_fraction=1.0)


def test_repeat_agent_repeats_the_fixture_requests_not_the_synthetic_ones():
    ids = [[1, 2, 3]] * 4
    seqs = build(ids, [1] * 4, ["coding:a", "agent-text:todo", "agent-synth-text:synth-x-1",
                                "agent-json:todo"], [False] * 4, [None] * 4)
    train, held = _split(seqs, 3, None)
    assert sorted(train) == [0, 1, 1, 1, 2, 3, 3, 3] and held == []


def test_a_long_module_gives_a_parsable_subset_of_whole_definitions():
    source = TEXTKIT + "".join(f"\n\ndef helper_{i}(value, scale={i}):\n    total = value\n"
                               + "    total += scale\n" * 12 + "    return total\n"
                               for i in range(20))
    assert len(source.splitlines()) > 150
    for seed in range(5):
        text = module_text(source, random.Random(seed), max_lines=80)
        assert text is not None and len(text.splitlines()) <= 80
        tree = ast.parse(text)
        assert any(isinstance(n, ast.FunctionDef) for n in tree.body)
        assert "import re" in text  # the imports come along
    assert module_text("from . import sibling\n\n\ndef f():\n    return sibling\n",
                       random.Random(0)) is None  # would not import outside its package


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL)


def test_bad_input_is_an_input_error_with_one_line(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.json").write_text("{}")
    src = _source(tmp_path)
    cases = [
        (["agent-sessions", "--count", "0", "--out", str(tmp_path / "o")], "at least 1"),
        (["agent-sessions", "--source", str(empty), "--out", str(tmp_path / "o")],
         "no Python source files"),
        (["agent-sessions", "--source", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
         "no such source folder"),
        (["agent-sessions", "--source", str(src), "--out", str(tmp_path / "full")],
         "already holds 1 session file"),
    ]
    for args, words in cases:
        proc = _run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], \
            proc.stderr
    assert not (tmp_path / "o").exists()
    # A folder of sessions: a garbled file is named; an empty folder is refused.
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "synth-a-1.json").write_text('{"name": "synth-a-1", "turns": [')
    with pytest.raises(InputError, match="synth-a-1.json is not valid JSON"):
        session_requests(("text",), holdout=(), sessions=[str(garbled)])
    with pytest.raises(InputError, match="no session files"):
        session_requests(("text",), holdout=(), sessions=[str(empty)])
    with pytest.raises(InputError, match="given twice"):
        session_requests(("text",), holdout=(), sessions=["todo-due-dates", "todo-due-dates"])
