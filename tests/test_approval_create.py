"""``create`` over a file that exists is shown as what it is, a replacement: the approval
prompt and the terminal show a diff against the file, with the lines it removes. A field trial
found both showing only ``+`` lines, as for a new file, while a user's uncommitted function was
removed (an injected model could widen what the user approved that way)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from agent.events import ToolCall
from agent.sessions.approval import make_approver
from agent.ui import Reporter
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply
from tests.test_cli_ux import agent
from tools.registry import Registry

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
ONLY_ADD = "def add(a, b):\n    return a + b\n"


def _ask(reg: Registry) -> tuple[list[str], object]:
    """An ``ask``-mode approver that records its prompts and answers no."""
    prompts: list[str] = []
    approve = make_approver("ask", ask=lambda p: prompts.append(p) or "n", interactive=True,
                            preview=reg.preview)
    return prompts, approve


def _reporter() -> tuple[Reporter, io.StringIO]:
    out = io.StringIO()
    reporter = Reporter()
    reporter.console = Console(file=out, force_terminal=False, width=200, soft_wrap=True)
    return reporter, out


def _show(reporter: Reporter, reg: Registry, args: dict) -> None:
    """The call as the loop shows it: with the registry's preview."""
    reporter.event(ToolCall(session_id="s", step=1, call_id="c", name="create", arguments=args,
                            preview=reg.preview("create", args)))


def test_the_approval_prompt_for_a_create_over_a_file_shows_the_lines_it_removes(
        ws: Path, reg: Registry):
    (ws / "calc.py").write_text(CALC)
    prompts, approve = _ask(reg)
    assert approve({"name": "create", "arguments": {"path": "calc.py",
                                                    "file_text": ONLY_ADD}}) == "n"
    prompt = prompts[0]
    assert prompt.startswith("create calc.py (2 lines) replaces the existing file:\n"
                             "--- a/calc.py\n+++ b/calc.py\n@@ -1,6 +1,2 @@\n")
    assert "\n-def sub(a, b):\n-    return a - b\nAllow create? " in prompt, prompt
    assert "\n def add(a, b):\n" in prompt  # kept lines are context, not "+" lines
    assert (ws / "calc.py").read_text() == CALC


def test_a_long_new_file_in_the_approval_prompt_says_how_many_lines_are_left_out(
        ws: Path, reg: Registry):
    prompts, approve = _ask(reg)
    text = "".join(f"line {n}\n" for n in range(1, 31))
    approve({"name": "create", "arguments": {"path": "long.txt", "file_text": text}})
    assert prompts[0].startswith("create long.txt:\n+line 1\n")  # a new file: as before
    assert "+line 20\n… 10 more lines\nAllow create? " in prompts[0], prompts[0]
    assert "+line 21" not in prompts[0]


def test_a_create_over_a_file_with_its_own_content_says_nothing_changes(ws: Path,
                                                                        reg: Registry):
    (ws / "calc.py").write_text(CALC)
    prompts, approve = _ask(reg)
    approve({"name": "create", "arguments": {"path": "calc.py", "file_text": CALC}})
    assert prompts[0].startswith("create calc.py (6 lines) would leave the existing file as "
                                 "it is (the same content)\nAllow create? "), prompts[0]
    reporter, out = _reporter()
    _show(reporter, reg, {"path": "calc.py", "file_text": CALC})
    assert out.getvalue() == "create calc.py (6 lines, the same content as the file)\n"


def test_the_display_of_a_create_over_a_file_shows_the_diff(ws: Path, reg: Registry):
    (ws / "calc.py").write_text(CALC)
    reporter, out = _reporter()
    _show(reporter, reg, {"path": "calc.py", "file_text": ONLY_ADD})
    assert out.getvalue() == ("create calc.py (2 lines), replacing the existing file\n"
                              "@@ -1,6 +1,2 @@\n def add(a, b):\n     return a + b\n-\n-\n"
                              "-def sub(a, b):\n-    return a - b\n")


def test_a_long_diff_of_a_create_says_how_many_lines_are_left_out(ws: Path, reg: Registry):
    (ws / "big.txt").write_text("".join(f"old {n}\n" for n in range(1, 51)))
    reporter, out = _reporter()
    _show(reporter, reg, {"path": "big.txt", "file_text": "new\n"})
    lines = out.getvalue().splitlines()
    # The heading, a hunk header, 50 "-" lines and a "+" line: 40 shown, 12 counted.
    assert lines[1:4] == ["@@ -1,50 +1 @@", "-old 1", "-old 2"]
    assert lines[-1] == "… 12 more lines of diff" and len(lines) == 42


def test_a_new_file_keeps_its_one_line_display(ws: Path, reg: Registry):
    reporter, out = _reporter()
    _show(reporter, reg, {"path": "new.py", "file_text": "x = 1\ny = 2\n"})
    assert out.getvalue() == "create new.py (2 lines)\n"


@pytest.mark.parametrize("path", ["link.txt", "linkdir/secret.txt", "../outside/secret.txt"])
def test_the_create_preview_reads_nothing_outside_the_workspace(ws: Path, reg: Registry,
                                                                 path: str, tmp_path: Path):
    """The diff would show a file outside the workspace: the path is refused before anything
    is read, and the prompt shows the call as one that writes no existing file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE-SECRET\n")
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    (ws / "linkdir").symlink_to(outside)
    read: list[Path] = []
    workspace = reg.tools["create"].ctx.workspace
    real = workspace.read_bytes
    workspace.read_bytes = lambda full: read.append(full) or real(full)  # type: ignore[method-assign]
    args = {"path": path, "file_text": "guess\n"}
    assert reg.preview("create", args) is None
    prompts, approve = _ask(reg)
    approve({"name": "create", "arguments": args})
    assert "OUTSIDE-SECRET" not in prompts[0] and "replaces" not in prompts[0], prompts[0]
    assert read == []
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"


def test_an_auto_edit_run_shows_the_diff_of_a_create_that_replaces_a_file(
        tmp_path: Path, agent_home: Path):
    """The field trial's run: ``✓ replaced calc.py`` and nothing showed ``sub`` was removed."""
    repo = tmp_path / "repo"
    committed_repo(repo, {"calc.py": CALC}).close()
    # The view first: create over a file the session has not seen is refused (tools.edits).
    script = [reply(json.dumps({"tool": "view", "arguments": {"path": "calc.py"}})),
              reply(json.dumps({"tool": "create", "arguments": {"path": "calc.py",
                                                                "file_text": ONLY_ADD}})),
              # Twice: the first is refused once, as no command checked the edited code.
              reply(json.dumps({"tool": "final_answer", "arguments": {"text": "ok"}})),
              reply(json.dumps({"tool": "final_answer", "arguments": {"text": "ok"}}))]
    with ScriptedModel(script) as model:
        proc = agent("run", "tidy calc", "--tool-protocol", "json", "--approval", "auto-edit",
                     "--base-url", model.url, home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert ("create calc.py (2 lines), replacing the existing file\n@@ -1,6 +1,2 @@\n"
            " def add(a, b):\n     return a + b\n-\n-\n-def sub(a, b):\n-    return a - b\n"
            "  ✓ replaced calc.py (2 lines)\n" in proc.stderr), proc.stderr
