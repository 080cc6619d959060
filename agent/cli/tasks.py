"""``agent new-project`` and ``agent run``: one task from the command line, then exit with
how it went."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import print_footer, repo_dir, session_settings, typed
from agent.cli.options import (
    Approval,
    BaseUrl,
    CtxSize,
    JsonOut,
    MaxSteps,
    MaxTime,
    NoGit,
    Preset,
    Profile,
    Repo,
    Skills,
    ToolProtocol,
)
from agent.config import load_settings
from agent.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TASK_FAILED, UsageError
from agent.newproject import new_project, slugify
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from agent.ui.summary import commit_line, left_running, print_project_summary


def new_project_cmd(
    description: Annotated[str, typer.Argument(help="What to build, in plain words.",
                                               metavar="DESCRIPTION")],
    dir: Annotated[Path | None, typer.Option("--dir", metavar="DIR", help="Target directory "
                                             "(default: a slug of the description here).")]
    = None,
    preset: Preset = None,
    profile: Profile = None,
    base_url: BaseUrl = None,
    ctx_size: CtxSize = None,
    tool_protocol: ToolProtocol = None,
    max_steps: MaxSteps = None,
    max_time: MaxTime = None,
    force: Annotated[bool, typer.Option(help="Use a non-empty directory: its files are "
                                        "committed first; refused when it holds files git "
                                        "ignores (caches and a virtualenv aside) or "
                                        "uncommitted changes.")] = False,
    json_out: JsonOut = False,
    skill: Skills = None,
    recipe: Annotated[str | None, typer.Option(
        "--recipe", metavar="RECIPE", help="full (the model plans the project: any toolchain "
        "on PATH, the ecosystem's layout), simple (one Python module and its tests, for weak "
        "models) or auto (default: by the model's size).")] = None,
) -> None:
    """Create a project from a description: a plan (toolchain, files, install, tests; the
    model's under the full recipe, checked against this machine), git init, the agent writes
    it in full-auto mode inside the new folder with dependencies in the project (.venv,
    node_modules), then dflash-agent runs the project's own tests itself and commits, saying
    how they went."""
    description = typed(description)
    settings = load_settings(cli={"preset": preset, "profile": profile, "base_url": base_url,
                                  "ctx_size": ctx_size, "tool_protocol": tool_protocol,
                                  "max_steps": max_steps, "max_time": max_time,
                                  "approval": "full-auto", "new_project_recipe": recipe})
    target = dir or Path.cwd() / slugify(description)
    reporter = Reporter(json_mode=json_out)
    try:
        result = new_project(description, target, settings, reporter, force=force,
                             skills=skill or ())
    finally:
        reporter.close()
    stats = result.stats()
    server = left_running(result.server)
    if json_out:
        print(json.dumps({
            "type": "summary", "directory": str(result.directory), "created": result.created,
            "session": result.session_id,
            "session_log": str(result.log), "stop_reason": result.loop.reason,
            "steps": result.loop.steps, "files": result.files, "commit": result.commit,
            "tests": result.tests.status, "test_runner": result.tests.runner,
            "recipe": result.recipe.name if result.recipe else None,
            "plan": result.plan.model_dump() if result.plan else None,
            "unwritten": result.unwritten, **stats, "server": server}))
    else:
        print_project_summary(result, stats, server)
    if result.loop.reason == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
    ok = result.loop.reason == "done" and result.tests.status == "passed"
    raise typer.Exit(EXIT_OK if ok else EXIT_TASK_FAILED)


def _exit_for(reason: str) -> int:
    return {"done": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(reason, EXIT_TASK_FAILED)


def run_cmd(task: Annotated[str, typer.Argument(help="What to do, in plain words.",
                                                metavar="TASK")],
            repo: Repo = Path("."), approval: Approval = None, preset: Preset = None,
            profile: Profile = None, base_url: BaseUrl = None, ctx_size: CtxSize = None,
            tool_protocol: ToolProtocol = None,
            max_steps: MaxSteps = None,
            max_time: MaxTime = None,
            commit: Annotated[bool, typer.Option(help="Commit the task's changes.")] = False,
            include_user_changes: Annotated[bool, typer.Option(
                help="With --commit, also commit files you had modified before the task.")]
            = False,
            no_git: NoGit = False, json_out: JsonOut = False,
            skill: Skills = None) -> None:
    """Run one task in a repository, checkpointed (undo with `agent undo`), then exit."""
    task = typed(task)
    if not task.strip():
        raise UsageError("the task is empty; say what to do")
    repo = repo_dir(repo)
    settings = session_settings(repo, approval=approval, preset=preset, profile=profile,
                                base_url=base_url, ctx_size=ctx_size,
                                tool_protocol=tool_protocol, max_steps=max_steps,
                                max_time=max_time)
    reporter = Reporter(json_mode=json_out)
    session = RepoSession(settings, repo, reporter, no_git=no_git, skills=skill or [])
    committed = ""
    try:
        result = session.run_task(task)
        if commit and result.reason != "done":
            committed = f"not committed: the task did not finish ({result.reason})"
        elif commit:
            committed = commit_line(*session.commit_last(include_user_changes),
                                    how="--include-user-changes commits them too")
    finally:
        session.close()
        reporter.close()
    if not json_out:
        print_footer(session, committed)
    raise typer.Exit(_exit_for(result.reason))
