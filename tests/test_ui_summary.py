"""What a command prints when it ends (agent/ui/summary.py), read from the objects the command
line passes in: a new project's result and an undo's restore plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.loop import LoopResult
from agent.newproject.recipe import Recipe
from agent.newproject.result import ProjectResult
from agent.newproject.runners import TestReport
from agent.sessions.checkpoints.restores import RestorePlan
from agent.ui.summary import (
    commit_line,
    left_running,
    nothing_undone,
    print_project_summary,
    session_footer,
    undo_notes,
    undo_summary,
)


def test_a_session_footer_says_how_to_undo_and_when_there_is_nothing_to_undo() -> None:
    assert session_footer("s1", 2, True, None) == ["session s1 (undo: agent undo s1)"]
    assert session_footer("s1", 1, False, None, "committed abc") == [
        "session s1 (no git: no undo); committed abc"]
    assert session_footer("s1", 0, True, None)[0].startswith("session s1 (no task ran: ")
    assert left_running(None) is None


def test_a_commit_line_names_what_it_left_out_and_the_nested_repositories() -> None:
    assert commit_line("0123456789abcdef", [], [], how="x") == "committed 0123456789"
    line = commit_line(None, ["a.py"], ["sub"], how="--include-user-changes commits them too")
    assert line.startswith("nothing to commit (left out, changed by you before the task: a.py; "
                           "--include-user-changes commits them too)")
    assert "nested repositories sub (commit them there with git)" in line


def test_undo_lines_from_a_restore_plan() -> None:
    plan = RestorePlan(changed=["a.py", "new.py"], removed=["new.py"],
                       commits_since=["abc123 add tests"], not_restored=["stash@{0}: kept"])
    assert undo_summary(plan) == "restored: a.py; removed: new.py"
    notes = undo_notes(plan)
    assert notes[0].startswith("note: the undo put files back only; the commits made since the "
                               "task started stay (abc123 add tests)")
    assert notes[1] == "note: not put back: stash@{0}: kept"
    assert nothing_undone(RestorePlan()) == "nothing to undo: the task changed no files"
    assert undo_summary(RestorePlan(not_restored=["x"])) == nothing_undone(
        RestorePlan(not_restored=["x"])) == ("nothing was put back: the files below are left "
                                             "as they are")


def test_the_project_summary_reads_a_project_result(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    result = ProjectResult(directory=tmp_path / "calc", session_id="s1", log=tmp_path / "s1.jsonl",
                           loop=LoopResult(text="", reason="interrupted", steps=3),
                           tests=TestReport(status="failed", detail="1 failed\nE assert",
                                            runner="pytest", counts="1 failed"),
                           files=["calc.py"], recipe=Recipe(name="simple", reason="small model"))
    print_project_summary(result, result.stats(), {"pid": 7, "url": "http://127.0.0.1:8080"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        f"Project: {tmp_path / 'calc'}",
        "Recipe: simple (small model)",
        "Files: calc.py",
        "Tests (run by dflash-agent): failed (pytest; 1 failed)",
        "    1 failed",
        "    E assert",
        "Steps: 3 (stop: interrupted); tokens: 0 prefilled, 0 cached, 0 decoded at n/a",
        f"Commit: (not committed: interrupted); session log: {tmp_path / 's1.jsonl'}",
        "Server: llama-server pid 7 is still running at http://127.0.0.1:8080 (the next command "
        "reuses it); stop it with `agent backend down`"]
