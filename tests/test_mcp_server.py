"""The agent as an MCP server, in process (``Client(server)``): the tools and their annotations,
a task on the real backend with progress, cancellation and undo, workspace roots, approvals
through MCP elicitation (both protocol generations), new projects, broken inputs.

Loop-logic cases (cancel mid-command, approvals) use the scripted model on loopback; the run
that shows the real backend uses the real llama-server with SmolLM2."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import git
import mcp.types as t
import psutil
import pytest
from mcp import Client

from agent.mcp_server.jobs import FINISHED, NOBODY_TO_ASK, JobManager
from agent.mcp_server.server import Roots, build_server
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply

TOOLS = {"new_project", "run_task", "session_status", "session_result", "cancel", "undo"}


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


WORK = call("bash", command="true")
"""A command that succeeds (full-auto): a final answer stands only after the task changed a
file or ran a command (agent/finish.py)."""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def repo(root: Path) -> Path:
    path = Path(committed_repo(root / "repo", {"app.py": "x = 1\n"}).working_tree_dir)
    (path / "notes.txt").write_text("the user's own notes\n")
    return path


def serve(roots: list[Path], settings: dict[str, Any],
          body: Callable[[Client], Awaitable[None]], **client: Any) -> None:
    """Run ``body`` against a fresh in-process server (backend warmed as `serve` does)."""
    jobs = JobManager(settings)
    server = build_server(Roots(roots), jobs)
    jobs.warm()

    async def main() -> None:
        async with Client(server, **client) as c:
            await body(c)

    try:
        anyio.run(main)
    finally:
        jobs.shutdown()


async def until_finished(c: Client, session_id: str) -> dict[str, Any]:
    while True:
        status = (await c.call_tool("session_status", {"session_id": session_id}))
        if status.structured_content["state"] in FINISHED:
            return status.structured_content
        await anyio.sleep(0.2)


def text(result: t.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, t.TextContent))


def test_tools_are_listed_with_honest_annotations(root: Path):
    seen: dict[str, t.Tool] = {}

    async def body(c: Client) -> None:
        seen.update({tool.name: tool for tool in (await c.list_tools()).tools})

    serve([root], {"base_url": "http://127.0.0.1:9"}, body)
    assert set(seen) == TOOLS
    for name in ("run_task", "new_project", "undo"):
        assert seen[name].annotations.destructive_hint is True
        assert seen[name].annotations.read_only_hint is False
    for name in ("session_status", "session_result"):
        assert seen[name].annotations.read_only_hint is True
    assert seen["cancel"].annotations.destructive_hint is False
    assert all(s.annotations.open_world_hint is False for s in seen.values())
    approval = seen["run_task"].input_schema["properties"]["approval"]
    assert {"ask", "auto-edit", "full-auto"} <= set(json.dumps(approval).split('"'))
    assert "\n" not in seen["run_task"].description


@pytest.mark.server
def test_run_task_on_the_real_backend_sends_progress_until_done(real_server, repo: Path,
                                                                root: Path):
    base_url = real_server("baseline").base_url
    progress: list[tuple[float, str | None]] = []
    out: dict[str, Any] = {}

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {
            "task": "Create a file hello.txt that contains the word hello.",
            "repo_path": str(repo), "approval": "full-auto", "wait": True},
            progress_callback=on_progress)
        assert not result.is_error, text(result)
        out["wait"] = result.structured_content
        sid = out["wait"]["session_id"]
        out["result"] = (await c.call_tool("session_result", {"session_id": sid})
                         ).structured_content
        # Without wait: the id comes back at once, the task runs on in the background.
        quick = await c.call_tool("run_task", {"task": "Say hi.", "repo_path": str(repo),
                                               "approval": "full-auto"})
        out["quick"] = quick.structured_content
        out["quick_end"] = await until_finished(c, quick.structured_content["session_id"])

    serve([root], {"base_url": base_url, "max_steps": 3}, body)
    result = out["wait"]
    assert result["state"] == "done"
    assert result["reason"] in {"done", "max_steps", "format_errors", "repeated_call", "length",
                                "nothing_done", "nothing_changed", "broken_files",
                                "check_failed"}
    assert result["steps"] >= 1
    messages = [m or "" for _, m in progress]
    assert any(m.startswith("connected to the model server") for m in messages)
    assert any(m.startswith("step 1: model replied") for m in messages)
    assert messages[-1] == f"step {result['steps']}: done"
    values = [v for v, _ in progress]
    assert values == sorted(set(values))
    assert out["result"]["session_id"] == result["session_id"]
    assert out["result"]["reason"] == result["reason"]
    assert "undo" in out["result"]
    assert out["quick"]["session_id"] != result["session_id"]
    assert out["quick_end"]["state"] == "done"
    assert (repo / "notes.txt").read_text() == "the user's own notes\n"


def test_a_long_model_step_sends_progress_and_silence_notes_while_it_lasts(repo: Path,
                                                                          root: Path):
    # A terminal shows these lines while a step runs; an MCP-started task sent none, so a long
    # prefill or a hung server looked the same to the host as a task making progress.
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {"task": "Say hi.", "repo_path": str(repo),
                                                "approval": "full-auto", "wait": True},
                                   progress_callback=on_progress)
        assert not result.is_error, text(result)
        assert result.structured_content["state"] == "done"

    # request_timeout 8 s: progress every 2 s, silence reported after 2 s (a quarter of it).
    with ScriptedModel([WORK, {**call("final_answer", text="hi"), "delay": 6.0}]) as model:
        serve([root], {"base_url": model.url, "request_timeout": 8}, body)
    assert any("model step: " in m and "no tokens yet (the server is reading the prompt)" in m
               for m in progress), progress
    assert any("no reply from the server after " in m for m in progress), progress
    assert progress[-1].endswith("done"), progress


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_cancel_mid_command_kills_it_keeps_the_checkpoint_and_undo_restores(repo: Path,
                                                                            root: Path):
    marker = "sleep 613"
    script = [call("str_replace", path="app.py", old_str="x = 1", new_str="x = 2"),
              call("bash", command=f"echo started > started.txt; {marker}", timeout=900),
              call("final_answer", text="never reached")]
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        started = await c.call_tool("run_task", {"task": "edit and wait", "approval":
                                                 "full-auto", "repo_path": str(repo)})
        sid = started.structured_content["session_id"]
        while not (repo / "started.txt").exists() or not _sleepers(marker):
            await anyio.sleep(0.1)
        out["running"] = (await c.call_tool("session_status", {"session_id": sid})
                          ).structured_content
        cancelled = await c.call_tool("cancel", {"session_id": sid})
        out["cancelled"] = cancelled.structured_content
        out["sleepers"] = _sleepers(marker)
        out["app_after_cancel"] = (repo / "app.py").read_text()
        out["result"] = (await c.call_tool("session_result", {"session_id": sid})
                         ).structured_content
        out["undo"] = (await c.call_tool("undo", {"session_id": sid})).structured_content
        again = await c.call_tool("cancel", {"session_id": sid})
        out["cancel_again"] = again.structured_content

    with ScriptedModel(script) as model:
        serve([root], {"base_url": model.url}, body)
    assert out["running"]["state"] == "running" and out["running"]["step"] == 2
    assert out["cancelled"]["state"] == "cancelled"
    assert out["sleepers"] == []
    assert out["app_after_cancel"] == "x = 2\n"
    assert out["result"]["reason"] == "interrupted"
    assert "+x = 2" in out["result"]["diff"]
    assert out["undo"]["restored"] == ["app.py"]
    assert out["undo"]["removed"] == ["started.txt"]  # the task created it
    assert (repo / "app.py").read_text() == "x = 1\n"
    assert not (repo / "started.txt").exists()
    assert (repo / "notes.txt").read_text() == "the user's own notes\n"
    assert out["cancel_again"]["state"] == "cancelled"


def test_paths_outside_the_roots_are_refused(repo: Path, root: Path, tmp_path: Path):
    outside = git.Repo.init(tmp_path / "outside")
    (root / "link").symlink_to(outside.working_tree_dir)
    errors: list[str] = []

    async def body(c: Client) -> None:
        for args in ({"repo_path": str(tmp_path / "outside")}, {"repo_path": "../outside"},
                     {"repo_path": str(root / "link")}):
            result = await c.call_tool("run_task", {"task": "x", "approval": "full-auto",
                                                    **args})
            assert result.is_error
            errors.append(text(result))
        result = await c.call_tool("new_project", {"description": "a thing",
                                                   "directory": str(tmp_path / "elsewhere")})
        assert result.is_error
        errors.append(text(result))

    serve([root], {"base_url": "http://127.0.0.1:9"}, body)
    assert len(errors) == 4
    assert all("outside the workspace roots" in e for e in errors)
    assert not (tmp_path / "elsewhere").exists()


async def run_nothing(c: Client, repo: Path) -> str:
    """The session id of a task "nothing" run to its end in ``repo`` (full-auto)."""
    result = await c.call_tool("run_task", {"task": "nothing", "repo_path": str(repo),
                                            "approval": "full-auto", "wait": True})
    return result.structured_content["session_id"]


def test_a_session_of_another_root_is_refused(repo: Path, root: Path, tmp_path: Path):
    other = tmp_path / "other-root"
    other.mkdir()
    out: dict[str, Any] = {}

    async def first(c: Client) -> None:
        out["sid"] = await run_nothing(c, repo)

    async def second(c: Client) -> None:
        for tool in ("session_status", "session_result", "undo"):
            out[tool] = await c.call_tool(tool, {"session_id": out["sid"]})

    async def third(c: Client) -> None:
        out["same_root"] = await c.call_tool("session_result", {"session_id": out["sid"]})

    with ScriptedModel([WORK, call("final_answer", text="nothing to do")]) as model:
        serve([root], {"base_url": model.url}, first)
        serve([other], {"base_url": model.url}, second)
        serve([root], {"base_url": model.url}, third)
    for tool in ("session_status", "session_result", "undo"):
        assert out[tool].is_error and "outside the workspace roots" in text(out[tool])
    assert not out["same_root"].is_error
    assert out["same_root"].structured_content["answer"] == "nothing to do"


def test_broken_tool_inputs_get_clear_errors(repo: Path, root: Path):
    (root / "plain").mkdir()
    (root / "full").mkdir()
    (root / "full" / "x.txt").write_text("keep me\n")
    results: dict[str, t.CallToolResult] = {}

    async def body(c: Client) -> None:
        calls = {
            "bad_id": ("session_status", {"session_id": "../../etc/passwd"}),
            # `$` matched before a trailing newline: this passed the format check.
            "newline_id": ("session_status", {"session_id": "20260101-000000-abcdef\n"}),
            "unknown_id": ("session_status", {"session_id": "20260101-000000-abcdef"}),
            "unknown_result": ("session_result", {"session_id": "20260101-000000-abcdef"}),
            "unknown_cancel": ("cancel", {"session_id": "20260101-000000-abcdef"}),
            "empty_task": ("run_task", {"task": "  ", "repo_path": str(repo)}),
            "not_git": ("run_task", {"task": "x", "repo_path": str(root / "plain")}),
            "missing": ("run_task", {"task": "x", "repo_path": str(root / "nope")}),
            "bad_approval": ("run_task", {"task": "x", "repo_path": str(repo),
                                          "approval": "yolo"}),
            "non_empty": ("new_project", {"description": "x", "directory": str(root / "full")}),
            "empty_description": ("new_project", {"description": " ", "directory": "new"}),
            "bad_recipe": ("new_project", {"description": "x", "directory": "new",
                                           "recipe": "huge"}),
        }
        for key, (tool, args) in calls.items():
            results[key] = await c.call_tool(tool, args)

    serve([root], {"base_url": "http://127.0.0.1:9"}, body)
    assert all(r.is_error for r in results.values())
    assert "is not a session id" in text(results["bad_id"])
    assert "is not a session id" in text(results["newline_id"])
    for key in ("unknown_id", "unknown_result", "unknown_cancel"):
        assert "no session '20260101-000000-abcdef'" in text(results[key])
    assert "the task is empty" in text(results["empty_task"])
    # the command line's advice names --no-git, which run_task has no argument for
    assert text(results["not_git"]).endswith("is not inside a git repository; run `git init` "
                                             "there (run_task works in git repositories only)")
    assert "is not a directory" in text(results["missing"])
    assert "approval" in text(results["bad_approval"])
    assert "not an empty directory" in text(results["non_empty"])
    assert "description is empty" in text(results["empty_description"])
    assert "recipe" in text(results["bad_recipe"]) and not (root / "new").exists()
    assert (root / "full" / "x.txt").read_text() == "keep me\n"


def test_arguments_of_the_wrong_type_or_name_are_refused_naming_them(repo: Path, root: Path):
    """A field trial: ``"wait": "yes"`` was read as true (pydantic's lax mode), so a host that
    sent a string was never told; ``"0"`` would have read as false. A misspelt argument was
    dropped without a word. Each is now an is_error result naming the argument, and nothing
    starts."""
    results: dict[str, t.CallToolResult] = {}

    async def body(c: Client) -> None:
        calls = {
            "yes": ("run_task", {"task": "x", "repo_path": str(repo), "approval": "full-auto",
                                 "wait": "yes"}),
            "true_text": ("new_project", {"description": "x", "directory": "p1",
                                          "wait": "true"}),
            "zero": ("new_project", {"description": "x", "directory": "p2", "wait": "0"}),
            "one": ("run_task", {"task": "x", "repo_path": str(repo), "wait": 1}),
            "misspelt": ("new_project", {"description": "x", "directory": "p3",
                                         "wiat": True}),
            "number_task": ("run_task", {"task": 5, "repo_path": str(repo)}),
            "missing": ("new_project", {"description": "x"}),
        }
        for key, (tool, args) in calls.items():
            results[key] = await c.call_tool(tool, args)

    serve([root], {"base_url": "http://127.0.0.1:9"}, body)
    said = {key: text(result) for key, result in results.items()}
    assert all(r.is_error for r in results.values()), said
    assert said["yes"] == ("run_task: invalid arguments: 'wait' must be true or false (a JSON "
                           'boolean), not the string "yes"')
    assert "'wait' must be true or false" in said["true_text"]
    assert 'not the string "0"' in said["zero"]
    assert "'wait' must be true or false (a JSON boolean), not the number 1" in said["one"]
    assert said["misspelt"] == ("new_project has no argument 'wiat'; its arguments are "
                                "description, directory, wait, recipe")
    assert "'task' must be a string, not the number 5" in said["number_task"]
    assert said["missing"] == "new_project: invalid arguments: 'directory' is required"
    for shown in said.values():
        assert "\n" not in shown and "pydantic" not in shown and "Arguments" not in shown
    assert not any((root / name).exists() for name in ("p1", "p2", "p3"))
    assert (repo / "app.py").read_text() == "x = 1\n"


def test_an_unreachable_backend_fails_the_session_with_the_cause(repo: Path, root: Path):
    out: dict[str, Any] = {}

    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {"task": "x", "repo_path": str(repo),
                                                "approval": "full-auto", "wait": True},
                                   progress_callback=on_progress)
        out["result"] = result
        out["status"] = (await c.call_tool("session_status", {
            "session_id": result.structured_content["session_id"]})).structured_content

    serve([root], {"base_url": "http://127.0.0.1:9"}, body)
    assert out["result"].is_error
    assert out["status"]["state"] == "failed"
    assert "127.0.0.1:9" in out["status"]["error"]
    assert "warm-up failed" in out["status"]["backend"]
    assert (repo / "app.py").read_text() == "x = 1\n"
    # The first progress line names the session (a host whose wait timed out had no id).
    session_id = out["status"]["session_id"]
    assert progress[0] == (f"session {session_id} started: session_status, cancel and undo "
                           "take this id")
    # A known failure reads as the CLI says it, never as a crash (a field trial's host read
    # "ServerUnavailable: … (crash log: …)").
    assert "crash log" not in out["status"]["error"]
    assert not out["status"]["error"].startswith("ServerUnavailable")


def test_an_unknown_preset_fails_the_session_in_one_plain_line(repo: Path, root: Path,
                                                                agent_home: Path):
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {"task": "x", "repo_path": str(repo),
                                                "approval": "full-auto", "wait": True})
        out["status"] = (await c.call_tool("session_status", {
            "session_id": result.structured_content["session_id"]})).structured_content

    serve([root], {"preset": "nonexistent-preset"}, body)
    assert out["status"]["state"] == "failed"
    assert "unknown preset 'nonexistent-preset'" in out["status"]["error"]
    assert "crash log" not in out["status"]["error"] and "UnknownPreset" not in \
        out["status"]["error"]
    assert not (agent_home / "state" / "crashes").exists() or \
        not list((agent_home / "state" / "crashes").iterdir())


def _elicit_answer(content: dict[str, Any] | None, action: str = "accept"):
    asked: list[str] = []

    async def callback(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        asked.append(params.message)
        return t.ElicitResult(action=action, content=content)

    return callback, asked


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize(("content", "action", "edited"), [
    ({"allow": True}, "accept", True),
    ({"allow": False, "reason": "use 3 instead"}, "accept", False),
    (None, "decline", False),
    ({"allow": "maybe"}, "accept", False),
], ids=["allowed", "refused", "declined", "malformed-answer"])
def test_approval_ask_goes_through_elicitation(repo: Path, root: Path, mode: str,
                                               content: dict[str, Any] | None, action: str,
                                               edited: bool):
    # Two final answers: after the edit the first is refused once (no command checked the
    # code), after a denial the task stops on the second (no call of it succeeded).
    script = [call("str_replace", path="app.py", old_str="x = 1", new_str="x = 2"),
              call("final_answer", text="finished"), call("final_answer", text="finished")]
    callback, asked = _elicit_answer(content, action)
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {"task": "set x to 2", "repo_path": str(repo),
                                                "approval": "ask", "wait": True})
        out["result"] = result

    with ScriptedModel(script) as model:
        serve([root], {"base_url": model.url}, body, mode=mode, elicitation_callback=callback)
        sent = json.dumps(model.requests[-1]["messages"])
    assert not out["result"].is_error, text(out["result"])
    assert out["result"].structured_content["state"] == "done"
    assert len(asked) == 1 and "x = 2" in asked[0] and "str_replace" in asked[0]
    assert ((repo / "app.py").read_text() == "x = 2\n") is edited
    if content == {"allow": False, "reason": "use 3 instead"}:
        assert "denied by the user: use 3 instead" in sent
    assert ("denied by the user" in sent) is not edited


def test_approval_ask_is_refused_without_elicitation_or_without_wait(repo: Path, root: Path):
    results: dict[str, t.CallToolResult] = {}
    callback, _ = _elicit_answer({"allow": True})

    async def no_elicitation(c: Client) -> None:
        results["host"] = await c.call_tool("run_task", {
            "task": "x", "repo_path": str(repo), "approval": "ask", "wait": True})

    async def no_wait(c: Client) -> None:
        results["wait"] = await c.call_tool("run_task", {
            "task": "x", "repo_path": str(repo), "approval": "ask"})

    serve([root], {"base_url": "http://127.0.0.1:9"}, no_elicitation)
    serve([root], {"base_url": "http://127.0.0.1:9"}, no_wait, elicitation_callback=callback)
    assert results["host"].is_error and "supports elicitation" in text(results["host"])
    assert results["wait"].is_error and "needs wait=true" in text(results["wait"])


def test_auto_edit_with_nobody_to_ask_refuses_commands_and_goes_on(repo: Path, root: Path):
    script = [call("bash", command="touch hacked"),
              call("str_replace", path="app.py", old_str="x = 1", new_str="x = 3"),
              # Twice: the first is refused once, as no command checked the edited code.
              call("final_answer", text="edited"), call("final_answer", text="edited")]
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {"task": "x", "repo_path": str(repo),
                                                "approval": "auto-edit", "wait": True})
        out["result"] = result.structured_content

    with ScriptedModel(script) as model:
        serve([root], {"base_url": model.url}, body)
        sent = json.dumps(model.requests[1]["messages"])
    assert out["result"]["state"] == "done" and out["result"]["answer"] == "edited"
    assert not (repo / "hacked").exists()
    assert NOBODY_TO_ASK.split(";")[0] in sent
    assert (repo / "app.py").read_text() == "x = 3\n"


def test_new_project_runs_the_projects_tests_and_commits(root: Path):
    script = [call("create", path="calc.py", file_text="def add(a, b):\n    return a + b\n"),
              call("create", path="tests/test_calc.py",
                   file_text="from calc import add\n\n\ndef test_add():\n"
                             "    assert add(2, 3) == 5\n"),
              # Twice: the first is refused once, as no command checked the edited code.
              call("final_answer", text="calc with tests"),
              call("final_answer", text="calc with tests")]
    progress: list[str] = []
    out: dict[str, Any] = {}

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def body(c: Client) -> None:
        result = await c.call_tool("new_project", {"description": "a calculator",
                                                   "directory": "calc", "wait": True},
                                   progress_callback=on_progress)
        out["result"] = result.structured_content

    with ScriptedModel(script) as model:
        serve([root], {"base_url": model.url}, body)
    result = out["result"]
    assert result["state"] == "done" and result["tests"] == "passed"
    assert result["files"] == [".gitignore", "calc.py", "tests/test_calc.py"]
    assert result["recipe"] == "simple" and result["created"] is True
    assert result["test_runner"].startswith(".venv/bin/python -m pytest")
    assert git.Repo(root / "calc").head.commit.hexsha == result["commit"]
    assert any(m.endswith("project tests: passed") for m in progress)


def _cancel_new_project_midway(c: Client, directory: str, out: dict[str, Any]) -> None:
    """Start new_project with wait, and cancel the call (MCP notifications/cancelled, as a
    host's stop button or timeout sends it) once the model's first file is written."""
    progress: list[str] = []
    stop = anyio.CancelScope()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")
        if "create ok" in (message or ""):
            stop.cancel()

    async def run() -> None:
        with stop:
            await c.call_tool("new_project", {"description": "a calculator",
                                              "directory": directory, "wait": True},
                              progress_callback=on_progress)
        out["cancelled_call"] = stop.cancelled_caught
        out["session_id"] = progress[0].split()[1]

    return run()


SLOW_PROJECT = [call("create", path="calc.py", file_text="def add(a, b):\n    return a + b\n"),
                {**call("final_answer", text="never reached"), "delay": 60}]


@pytest.mark.parametrize("directory", ["calc", "made/for/calc", "empty"])
def test_a_cancelled_new_project_call_removes_the_folder_it_made(root: Path, directory: str):
    """A field trial: the host cancelled a waiting new_project; the task ran on unseen, and
    at the server's stop was left half-made (.git, .venv, a module, no commit, no word). Now
    the task is stopped and what the call made is removed: the folder (with the parents it
    made), or what is in a folder that was there empty. Nothing else is touched."""
    (root / "empty").mkdir()
    (root / "mine.txt").write_text("the user's own\n")
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        await _cancel_new_project_midway(c, directory, out)
        sid = out["session_id"]
        out["midway"] = sorted(p.name for p in (root / directory).iterdir())
        with anyio.move_on_after(30):  # the removal runs in the background
            while "note" not in (status := (await c.call_tool(
                    "session_status", {"session_id": sid})).structured_content):
                await anyio.sleep(0.1)
        out["status"] = status
        out["result"] = (await c.call_tool("session_result", {"session_id": sid})
                         ).structured_content

    with ScriptedModel(SLOW_PROJECT) as model:
        serve([root], {"base_url": model.url}, body)
    assert out["cancelled_call"]
    assert {".git", ".venv", "calc.py"} <= set(out["midway"])  # half-made when cancelled
    assert out["status"]["state"] == "cancelled"
    assert out["result"]["state"] == "cancelled" and out["result"]["note"] == \
        out["status"]["note"]
    top = root / directory.split("/")[0]
    if directory == "empty":
        assert top.is_dir() and list(top.iterdir()) == []
        assert out["status"]["note"].endswith(f"everything the task had written in {top} was "
                                              "removed (the folder was empty before the call, "
                                              "and is again)")
    else:
        assert not top.exists()
        assert out["status"]["note"] == (
            "the host stopped waiting before the project was finished, so the task was "
            f"stopped: {top}, which the call had made, was removed")
    assert sorted(p.name for p in root.iterdir()) == sorted({"empty", "mine.txt"})
    assert (root / "mine.txt").read_text() == "the user's own\n"


def test_a_cancelled_new_project_task_keeps_its_files_and_says_so(root: Path):
    """The cancel tool stops a new project like Ctrl-C: its files stay (as the CLI's do), and
    the status says the project is unfinished and uncommitted, where. While it runs, a second
    new_project into the same folder is refused naming the session (two tasks would write
    each other's project)."""
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        started = await c.call_tool("new_project", {"description": "a calculator",
                                                    "directory": "calc"})
        sid = started.structured_content["session_id"]
        out["second"] = await c.call_tool("new_project", {"description": "again",
                                                          "directory": "calc"})
        while not (root / "calc" / "calc.py").exists():
            await anyio.sleep(0.1)
        out["cancelled"] = (await c.call_tool("cancel", {"session_id": sid})
                            ).structured_content
        out["sid"] = sid

    with ScriptedModel(SLOW_PROJECT) as model:
        serve([root], {"base_url": model.url}, body)
    assert out["second"].is_error
    assert (f"session {out['sid']} is still running in {root / 'calc'}; wait for it to end "
            "or cancel it first, or choose another directory") in text(out["second"])
    assert out["cancelled"]["state"] == "cancelled"
    assert out["cancelled"]["note"] == (f"the project in {root / 'calc'} is unfinished: its "
                                        "files stay as they are, nothing is committed; remove "
                                        "the folder to start again")
    assert (root / "calc" / "calc.py").exists()


def test_new_project_takes_the_recipe_the_host_asks_for(root: Path):
    """A 30 B model gets the full recipe by its size; the host's recipe=simple wins."""
    # A test that passes, checked by a command: a final answer stands only after the task's
    # own check, and a run that found no test would go back to the model.
    script = [call("create", path="calc.py", file_text="def add(a, b):\n    return a + b\n"),
              call("create", path="tests/test_calc.py",
                   file_text="from calc import add\n\n\ndef test_add():\n"
                             "    assert add(2, 3) == 5\n"),
              WORK, call("final_answer", text="calc")]
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        result = await c.call_tool("new_project", {"description": "a calculator",
                                                   "directory": "calc", "wait": True,
                                                   "recipe": "simple"})
        out["result"] = result.structured_content

    with ScriptedModel(script) as model:
        model.models = {"data": [{"meta": {"n_params": 30_700_000_000}}]}  # auto: full
        serve([root], {"base_url": model.url}, body)
    assert out["result"]["state"] == "done" and out["result"]["recipe"] == "simple"
    assert len(model.requests) == 4  # the four scripted steps: no plan turn came first


def test_a_second_task_in_a_repository_with_one_running_is_refused(repo: Path, root: Path):
    """A field trial ran two tasks at once in one repository: each one's diff showed the
    other's edits, and an undo was refused over the other's files."""
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        first = await c.call_tool("run_task", {"task": "wait", "repo_path": str(repo),
                                               "approval": "full-auto"})
        session_id = first.structured_content["session_id"]
        out["second"] = await c.call_tool("run_task", {"task": "also", "repo_path": str(repo),
                                                       "approval": "full-auto"})
        out["session_id"] = session_id
        await c.call_tool("cancel", {"session_id": session_id})
        out["after"] = await until_finished(c, session_id)

    with ScriptedModel([reply("slow", delay=60)]) as model:
        serve([root], {"base_url": model.url}, body)
    assert out["second"].is_error
    assert (f"session {out['session_id']} is still running in {repo}"
            in text(out["second"])), text(out["second"])
    assert out["after"]["state"] == "cancelled"


def test_session_result_diffs_what_the_task_changed_not_what_came_after(repo: Path,
                                                                        root: Path):
    """A field trial: session_result's diff ran from the task's start to now, so it showed the
    user's later edits (and another task's), and nothing once undone."""
    out: dict[str, Any] = {}
    script = [reply(tool_calls=[("create", {"path": "hello.txt", "file_text": "hello\n"})]),
              reply("done")]

    async def body(c: Client) -> None:
        result = await c.call_tool("run_task", {"task": "hello", "repo_path": str(repo),
                                                "approval": "full-auto", "wait": True})
        session_id = result.structured_content["session_id"]
        (repo / "mine.txt").write_text("the user's own, after the task\n")
        out["result"] = (await c.call_tool("session_result", {
            "session_id": session_id})).structured_content
        await c.call_tool("undo", {"session_id": session_id})
        out["undone"] = (await c.call_tool("session_result", {
            "session_id": session_id})).structured_content

    with ScriptedModel(script, supports_tools=True) as model:
        serve([root], {"base_url": model.url, "tool_protocol": "native"}, body)
    for seen in (out["result"], out["undone"]):
        assert "hello.txt" in seen["diff"] and "mine.txt" not in seen["diff"], seen["diff"]


def test_undo_tells_the_host_which_paths_it_unstaged(repo: Path, root: Path):
    """The CLI says "unstaged, as you had it" of a file the task had `git add`ed and the undo
    unstaged; the MCP result listed it only under index_restored, which reads as staged
    again."""
    script = [call("create", path="new.py", file_text="x = 1\n"),
              call("bash", command="git add new.py"),
              call("final_answer", text="added")]
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        started = await c.call_tool("run_task", {"task": "add and stage", "approval":
                                                 "full-auto", "repo_path": str(repo),
                                                 "wait": True})
        sid = started.structured_content["session_id"]
        out["undo"] = (await c.call_tool("undo", {"session_id": sid})).structured_content

    with ScriptedModel(script) as model:
        serve([root], {"base_url": model.url}, body)
    assert out["undo"]["removed"] == ["new.py"]
    assert out["undo"]["index_restored"] == ["new.py"]
    assert out["undo"]["index_unstaged"] == ["new.py"]


def test_undo_conflict_advice_fits_where_it_is_read():
    """The undo tool has no force argument: its host was told to "rerun with --force"."""
    from agent.errors import host_text
    from agent.sessions.checkpoints.restores import RestoreConflict

    conflict = RestoreConflict(["app.py"], "20261205-101237-1ee431")
    assert str(conflict).endswith("nothing was restored. Review them, then rerun with --force "
                                  "to overwrite them")
    assert host_text(conflict).endswith("Review them, then run `agent undo "
                                        "20261205-101237-1ee431 --force` in a terminal to "
                                        "overwrite them")
    assert host_text(ValueError("plain")) == "plain"


def test_an_interrupted_session_of_another_server_reads_cancelled(repo: Path, root: Path):
    """A session another server (or the CLI) ran and that ended interrupted read "done"."""
    from backend.home import home

    out: dict[str, Any] = {}

    async def first(c: Client) -> None:
        out["sid"] = await run_nothing(c, repo)

    async def second(c: Client) -> None:
        for tool in ("session_status", "session_result"):
            out[tool] = (await c.call_tool(tool, {"session_id": out["sid"]})).structured_content

    with ScriptedModel([WORK, call("final_answer", text="stopped")]) as model:
        serve([root], {"base_url": model.url}, first)
        log = home().sessions / f"{out['sid']}.jsonl"
        text_ = log.read_text("utf-8")
        assert text_.count('"reason":"done"') == 1, text_
        log.write_text(text_.replace('"reason":"done"', '"reason":"interrupted"'), "utf-8")
        serve([root], {"base_url": model.url}, second)
    for tool in ("session_status", "session_result"):
        assert out[tool]["state"] == "cancelled", out[tool]
        assert out[tool]["reason"] == "interrupted"


def test_advice_to_an_mcp_host_names_no_command_line_flag(repo: Path, root: Path):
    """A field trial: a merge in progress was answered "or pass --no-git", a new project under
    a file "choose another --dir", and an undo conflict "rerun with --force": flags the tools
    do not have."""
    script = [call("str_replace", path="app.py", old_str="x = 1", new_str="x = 2"),
              call("final_answer", text="done")]
    (root / "afile").write_text("a file\n")
    out: dict[str, Any] = {}

    async def body(c: Client) -> None:
        done = await c.call_tool("run_task", {"task": "bump", "approval": "full-auto",
                                              "repo_path": str(repo), "wait": True})
        sid = done.structured_content["session_id"]
        (repo / "app.py").write_text("x = 3\n")  # the user edits after the agent
        out["undo"] = await c.call_tool("undo", {"session_id": sid})
        out["sid"] = sid
        (Path(repo) / ".git" / "MERGE_HEAD").write_text("0" * 40 + "\n")
        out["merge"] = await c.call_tool("run_task", {"task": "x", "repo_path": str(repo)})
        made = await c.call_tool("new_project", {"description": "x",
                                                 "directory": str(root / "afile" / "sub")})
        out["project"] = await until_finished(c, made.structured_content["session_id"])

    with ScriptedModel(script) as model:
        serve([root], {"base_url": model.url}, body)
    undo = text(out["undo"])
    assert out["undo"].is_error and f"run `agent undo {out['sid']} --force` in a terminal" in undo
    merge = text(out["merge"])
    assert out["merge"].is_error and merge.endswith("`git merge --abort`), then retry"), merge
    assert out["project"]["state"] == "failed", out["project"]
    assert out["project"]["error"].endswith("is a file; choose another directory"), out["project"]
    for said in (undo, merge, out["project"]["error"]):
        assert "--force" not in said.replace(" --force` in a terminal", "") \
            and "--no-git" not in said and "--dir" not in said, said
    assert (repo / "app.py").read_text() == "x = 3\n"


def test_the_result_of_a_session_that_ran_no_task_says_so(repo: Path, root: Path):
    """An empty chat's result was "has no result (it did not finish)", as if a task broke."""
    import subprocess
    import sys

    from backend.home import home

    out: dict[str, Any] = {}
    with ScriptedModel([]) as model:
        subprocess.run([sys.executable, "-m", "agent", "chat", "--base-url", model.url],
                       cwd=repo, stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                       check=True)  # the test's own home (DFLASH_AGENT_HOME)
        [log] = [p for p in home().sessions.glob("2*.jsonl")]

        async def body(c: Client) -> None:
            out["result"] = await c.call_tool("session_result", {"session_id": log.stem})

        serve([root], {"base_url": model.url}, body)
    assert out["result"].is_error
    assert text(out["result"]).endswith(f"session {log.stem} has no result (it ran no task)")
