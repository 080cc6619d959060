"""The ``agent`` command line: wires commands to functions, nothing more."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import tomllib
import traceback
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

# Imported for its side effect: it adds `mcp serve` and `mcp install` to mcp_app.
from agent.cli import mcp_serve  # noqa: F401
from agent.cli.backend import build_cmd, convert_draft_cmd, doctor_cmd, presets_cmd
from agent.cli.mcp import mcp_app
from agent.cli.skills import skills_app
from agent.cli.worker import worker_cmd
from agent.client import ContextOverflow, ServerUnavailable
from agent.config import Settings, load_settings
from agent.context import ContextTooSmall
from agent.errors import (
    CHAT_EXIT_CODES_HELP,
    EXIT_CODES_HELP,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TASK_FAILED,
    EXIT_USAGE,
    UsageError,
    UserError,
    write_crash_log,
)
from agent.newproject import new_project, slugify
from agent.sessions.checkpoints.restores import RestoreConflict, RestorePlan
from agent.sessions.log import SessionSummary, list_sessions
from agent.sessions.record import load_record
from agent.sessions.repo import RepoSession
from agent.sessions.resume import check_resumable
from agent.sessions.undo import diff_session, undo_task
from agent.ui import Reporter, SafeConsole, echo
from backend import secret_store
from backend.cache import list_cache, remove
from backend.engine.registry import Engine
from backend.errors import StatedError
from backend.measure.bench import (
    default_result_path,
    different_answers,
    parse_profiles,
    parse_temperatures,
    run_bench,
    write_result,
)
from backend.measure.calibrate import (
    calibrate,
    parse_lengths,
    plot_calibration,
    table_lines,
)
from backend.measure.calibrate import default_result_path as calibration_path
from backend.measure.prompts import load_prompts
from backend.measure.report import plot_result, require_matplotlib, result_table
from backend.models.drafts import swa_quant_warning
from backend.models.hfdraft import resolve_draft
from backend.models.presets import PresetError, get_preset, parse_workers
from backend.models.requant import requantized
from backend.models.sources import resolve_model
from backend.serve import server
from backend.serve.launch import ensure_engine, preset_workers, profile_for
from backend.serve.pipeline import LaunchRequest, launch, print_command
from backend.serve.records import ServerState, is_ours
from tools import reaper
from tools.workspace import display_name

app = typer.Typer(help="dflash-agent: a local coding agent on its own llama-server with "
                  "speculative decoding.", no_args_is_help=True, epilog=EXIT_CODES_HELP,
                  rich_markup_mode=None, pretty_exceptions_enable=False)
backend_app = typer.Typer(help="The managed inference server: build, download, up, down, "
                          "status.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(backend_app, name="backend")
backend_app.command("build", epilog=EXIT_CODES_HELP)(build_cmd)
backend_app.command("convert-draft", epilog=EXIT_CODES_HELP)(convert_draft_cmd)
backend_app.command("worker", epilog=EXIT_CODES_HELP)(worker_cmd)
cache_app = typer.Typer(help="Engines and models in the cache: list, rm.", no_args_is_help=True,
                        rich_markup_mode=None)
backend_app.add_typer(cache_app, name="cache")
app.add_typer(mcp_app, name="mcp")
app.add_typer(skills_app, name="skills")
err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
CHAT_RECOVERABLE = (UserError, ContextOverflow, ContextTooSmall, ServerUnavailable)
"""Errors after which ``agent chat`` prompts again instead of exiting."""

Preset = Annotated[str | None, typer.Option(help="Model preset (default: qwen2.5-coder-1.5b, "
                                           "smollm2-135m under 4 GiB of RAM, or `preset` in "
                                           "config.toml).")]
Profile = Annotated[str | None, typer.Option(help="Speculation profile: baseline, ngram "
                                             "(n-gram lookup: shorter lengths on a GPU; each "
                                             "request drafts only while that measures faster), "
                                             "ngram-fixed (llama.cpp's lengths, always on), "
                                             "dflash (draft length tuned per launch, off when "
                                             "it would not pay), dflash-fixed (always 15; "
                                             "BeeLlama <=0.3: its own defaults), "
                                             "dflash+ngram.")]
CtxSize = Annotated[int | None, typer.Option("--ctx-size", help="Context size in tokens.")]
# One meaning wherever tasks run: each task's own budget (a chat's second task starts afresh).
MaxSteps = Annotated[int | None, typer.Option(help="Model calls at most, per task (default: "
                                              "max_steps in config.toml, else 30).")]
MaxTime = Annotated[float | None, typer.Option(help="Seconds at most, per task (default: "
                                               "max_time in config.toml, else 1800).")]


def _installed_version() -> str:
    """The installed distribution's version; run from a source tree that was never installed
    (a copy on a machine without network, ``PYTHONPATH=.``), the tree's ``pyproject.toml``."""
    try:
        return metadata.version("dflash-agent")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            version = tomllib.loads(pyproject.read_text("utf-8"))["project"]["version"]
        except (OSError, ValueError, KeyError, TypeError):
            return "unknown (not installed)"
        return f"{version} (source tree, not installed)"


def _version(value: bool) -> None:
    if value:
        echo(f"dflash-agent {_installed_version()}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")]
          = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False,
          ) -> None:
    """--debug is read by :func:`main` before any command runs (tracebacks on errors)."""


@app.command("new-project", epilog=EXIT_CODES_HELP)
def new_project_cmd(
    description: Annotated[str, typer.Argument(help="What to build, in plain words.",
                                               metavar="DESCRIPTION")],
    dir: Annotated[Path | None, typer.Option("--dir", metavar="DIR", help="Target directory "
                                             "(default: a slug of the description here).")]
    = None,
    preset: Preset = None,
    profile: Profile = None,
    base_url: Annotated[str | None, typer.Option(help="Use this OpenAI-compatible server "
                                                 "instead of the managed one.")] = None,
    ctx_size: CtxSize = None,
    tool_protocol: Annotated[str | None, typer.Option(
        help="auto (see agent/protocols/choice.py), text, native, json or whole (files "
        "written whole in fences, commands in bash blocks).")] = None,
    max_steps: MaxSteps = None,
    max_time: MaxTime = None,
    force: Annotated[bool, typer.Option(help="Use a non-empty directory: its files are "
                                        "committed first; refused when it holds files git "
                                        "ignores (caches and a virtualenv aside) or "
                                        "uncommitted changes.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print events as JSON lines.")]
    = False,
    skill: Annotated[list[str] | None, typer.Option(
        "--skill", metavar="NAME", help="Activate this skill (see `agent skills list`) "
        "before the model starts; repeatable.")] = None,
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
    summary = {"directory": str(result.directory), "created": result.created,
               "session": result.session_id,
               "session_log": str(result.log), "stop_reason": result.loop.reason,
               "steps": result.loop.steps, "files": result.files, "commit": result.commit,
               "tests": result.tests.status, "test_runner": result.tests.runner,
               "recipe": result.recipe.name if result.recipe else None,
               "plan": result.plan.model_dump() if result.plan else None,
               "unwritten": result.unwritten, **stats,
               "server": _left_running(result.server)}
    if json_out:
        print(json.dumps({"type": "summary", **summary}))
    else:
        out = SafeConsole(highlight=False, soft_wrap=True)
        made = "" if result.created else " (not created: nothing was written)"
        out.print(f"\n[bold]Project:[/bold] {result.directory}{made}", markup=True)
        if result.recipe is not None:
            out.print(f"Recipe: {result.recipe.name} ({result.recipe.reason})", markup=False)
        if result.plan is not None:
            out.print(f"Toolchain: {result.plan.toolchain} ({result.plan.language})",
                      markup=False)
        out.print(f"Files: {', '.join(result.files) or '(none)'}")
        if result.unwritten:
            out.print(f"Planned but not written: {', '.join(result.unwritten)}", markup=False)
        runner = "; ".join(x for x in (result.tests.runner, result.tests.counts) if x)
        runner = f" ({runner})" if runner else ""
        out.print(f"Tests (run by dflash-agent): {result.tests.status}{runner}", markup=False)
        if result.tests.detail and result.tests.status != "passed":
            # Under its "Tests" line, as in the commit message: at the margin the runner's
            # last line ("no tests ran in 0.01s") read as a line of the summary's own.
            out.print("\n".join(f"    {line}" for line in result.tests.detail.splitlines()),
                      markup=False)
        speed = f"{stats['decode_tok_s']} tok/s" if stats["decode_tok_s"] else "n/a"
        cached = "cache reuse not reported" if stats["cached_tokens"] is None \
            else f"{stats['cached_tokens']} cached"
        out.print(f"Steps: {result.loop.steps} (stop: {result.loop.reason}); tokens: "
                  f"{stats['prompt_tokens']} prefilled, {cached}, "
                  f"{stats['decoded_tokens']} decoded at {speed}")
        if stats["acceptance_rate"] is not None:
            out.print(f"Speculation: {stats['acceptance_rate']:.0%} of "
                      f"{stats['draft_tokens']} drafted tokens accepted")
        # Interrupted, the files stay as they are, uncommitted: "(nothing to commit)" read as
        # if the model had written nothing.
        commit = result.commit or ("(not committed: interrupted)"
                                   if result.loop.reason == "interrupted" and result.files
                                   else "(nothing to commit)")
        out.print(f"Commit: {commit}; session log: {result.log}")
        left = summary["server"]
        if left is not None:
            # The managed server outlives the command (the next one reuses it, loaded and
            # warm): holding the model's memory unannounced is what a user would not expect.
            out.print(f"Server: llama-server pid {left['pid']} is still running at "
                      f"{left['url']} (the next command reuses it); stop it with "
                      "`agent backend down`", markup=False)
    if result.loop.reason == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
    ok = result.loop.reason == "done" and result.tests.status == "passed"
    raise typer.Exit(EXIT_OK if ok else EXIT_TASK_FAILED)


def _left_running(state: ServerState | None) -> dict[str, object] | None:
    """The summary's ``server``: pid and URL of the managed server a session used, when it is
    still running after the session (None with ``--base-url`` or once it has exited)."""
    if state is None or not is_ours(state):
        return None
    return {"pid": state.pid, "url": state.base_url, "stop": "agent backend down"}


Repo = Annotated[Path, typer.Option("--repo", metavar="DIR", help="Repository to work in "
                                      "(default: the current directory).")]
Approval = Annotated[str | None, typer.Option(help="ask, auto-edit (default) or full-auto.")]
BaseUrl = Annotated[str | None, typer.Option(help="Use this OpenAI-compatible server instead of "
                                             "the managed one.")]
ToolProtocol = Annotated[str | None, typer.Option(
    help="auto (see agent/protocols/choice.py), text, native, json or whole (files "
    "written whole in fences, commands in bash blocks).")]
NoGit = Annotated[bool, typer.Option("--no-git", help="Work outside git: no checkpoints, "
                                     "no undo.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print events as JSON lines.")]


def _repo_dir(repo: Path) -> Path:
    """``--repo`` as an absolute path; raises :class:`UsageError` when it is not an existing
    directory (before anything looks for a git repository there)."""
    path = repo.expanduser()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise UsageError(f"--repo {repo}: {what}; give the folder of an existing project")
    return path.resolve()


def typed(text: str) -> str:
    """Text the user typed (a task, a description, a chat line). Bytes the locale could not
    decode arrive as surrogate escapes (a Latin-1 terminal under a UTF-8 locale: "ol\\xe1"),
    which no session log or request can hold (an internal error, exit 4): such text is read
    as cp1252, the usual one-byte terminal encoding ("olá")."""
    if not any("\udc80" <= c <= "\udcff" for c in text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("cp1252", "replace")


def _session_settings(repo: Path, **cli: object):
    return load_settings(project=repo.expanduser().resolve(), cli=cli)


def _exit_for(reason: str) -> int:
    return {"done": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(reason, EXIT_TASK_FAILED)


@app.command("run", epilog=EXIT_CODES_HELP)
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
            skill: Annotated[list[str] | None, typer.Option(
                "--skill", metavar="NAME", help="Activate this skill (see `agent skills "
                "list`) before the model starts; repeatable.")] = None) -> None:
    """Run one task in a repository, checkpointed (undo with `agent undo`), then exit."""
    task = typed(task)
    if not task.strip():
        raise UsageError("the task is empty; say what to do")
    repo = _repo_dir(repo)
    settings = _session_settings(repo, approval=approval, preset=preset, profile=profile,
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
            committed = _commit_line(*session.commit_last(include_user_changes),
                                     how="--include-user-changes commits them too")
    finally:
        session.close()
        reporter.close()
    if not json_out:
        for line in _session_footer(session, committed):
            err.print(line, markup=False)
    raise typer.Exit(_exit_for(result.reason))


def _commit_line(sha: str | None, left_out: list[str], nested: list[str], how: str) -> str:
    """What a commit of the task's files did: its sha or that there was nothing to commit,
    the files left out because the user had changed them before the task (``how`` says how
    to include them), and the nested repositories holding the task's changes, which a commit
    here leaves uncommitted (it said "nothing to commit" of a task that changed only a
    submodule's files)."""
    said = f"committed {sha[:10]}" if sha else "nothing to commit"
    if left_out:
        said += (f" (left out, changed by you before the task: "
                 f"{', '.join(map(display_name, left_out))}; "
                 f"{how})")
    if nested:
        said += (f"; not committed: the task's changes inside the nested repositories "
                 f"{', '.join(map(display_name, nested))} (commit them there with git)")
    return said


def _session_footer(session: RepoSession, committed: str = "") -> list[str]:
    """What `run` and `chat` print last: the session with its undo command (none without
    git: there are no checkpoints, nor after a chat that ran no task), what ``committed``
    says, and the managed server when it is left running (new-project says the same: a
    server holding the model's memory unannounced is what a user would not expect)."""
    if not session.tasks:  # its id is the only way to it: `agent sessions` leaves it out
        undo = "no task ran: nothing to undo, and `agent sessions` does not list it"
    elif session.repo is not None:
        undo = f"undo: agent undo {session.id}"
    else:
        undo = "no git: no undo"
    lines = [f"session {session.id} ({undo})" + (f"; {committed}" if committed else "")]
    left = _left_running(session.backend.state)
    if left is not None:
        lines.append(f"Server: llama-server pid {left['pid']} is still running at "
                     f"{left['url']} (the next command reuses it); stop it with "
                     "`agent backend down`")
    return lines


def _undo_summary(plan: RestorePlan) -> str:
    """``/undo``'s line: the files written back, then those deleted (the task created them)."""
    restored = [p for p in plan.changed if p not in plan.removed]
    parts = [f"{verb}: {', '.join(map(display_name, paths))}" for verb, paths in
             (("restored", restored), ("removed", plan.removed)) if paths]
    return "; ".join(parts + plan.git_lines()) or _nothing_undone(plan)


def _nothing_undone(plan: RestorePlan) -> str:
    """What an undo that put nothing back says: that the task changed no file, unless the
    notes name files it changed and the undo had to leave (a large file, another session's)."""
    if plan.not_restored:
        return "nothing was put back: the files below are left as they are"
    return "nothing to undo: the task changed no files"


CHAT_COMMANDS = {
    "/undo": ("/undo [--force]", "put back the files the last task changed (--force: over "
              "your edits since; again: undo the undo)"),
    "/diff": ("/diff", "what the session changed: the files now against its first checkpoint"),
    "/commit": ("/commit", "commit the last task's files (not the ones you had changed)"),
    "/compact": ("/compact", "summarise the conversation so far, to free the context"),
    "/status": ("/status", "the session's id, tasks, context size and model"),
    "/help": ("/help", "these commands, one line each"),
    "/exit": ("/exit, /quit", "leave the chat (Ctrl-D too); the session stays resumable"),
}
"""``agent chat``'s slash commands: name → (how it is typed, what it does), as /help lists
them; ``/quit`` is ``/exit``."""
_COMMAND_ARGS = {"/undo": ("--force",)}
"""The arguments a command takes (one at most); the others take none."""


def chat_command(line: str) -> tuple[str, str] | None:
    """``line`` as a slash command: (name, its argument or ""), or None when it is a task.

    A first word with a second ``/`` is a path ("/etc/hosts: what is in it?"): a task, not a
    command nobody knows. Raises :class:`UserError` for an unknown command or an argument the
    command does not take, so it is never sent to the model."""
    word, *rest = line.split(maxsplit=1)  # a tab after the command too
    if not word.startswith("/") or "/" in word[1:]:
        return None
    name = "/exit" if word == "/quit" else word
    arg = rest[0].strip() if rest else ""
    if name not in CHAT_COMMANDS:
        raise UserError(f"unknown command {word}; /help lists the commands")
    takes = _COMMAND_ARGS.get(name, ())
    if arg and arg not in takes:
        said = f"takes only {' or '.join(takes)}" if takes else "takes no arguments"
        raise UserError(f"{word} {said}; /help lists the commands")
    return name, arg


def _chat_loop(session: RepoSession, reporter: Reporter) -> None:
    out = SafeConsole(highlight=False, soft_wrap=True)
    out.print("Type a task, or a command (/help lists them; /exit leaves).")
    while True:
        try:
            line = typed(input("> ")).strip()
        except EOFError:
            out.print()  # Ctrl-D left the cursor after the prompt
            return
        if not line:
            continue
        try:
            command = chat_command(line)
        except UserError as exc:
            out.print(f"error: {exc}", markup=False)
            continue
        name, arg = command or ("", "")
        if name == "/exit":
            return
        try:
            if name == "/help":
                for usage, what in CHAT_COMMANDS.values():
                    out.print(f"  {usage:<16} {what}", markup=False)
            elif name == "/undo":
                try:
                    plan = undo_task(session.id, log=session.log, force=arg == "--force")
                except RestoreConflict as exc:  # "rerun with --force" named no way in here
                    out.print(f"error: {exc.worded('type /undo --force to overwrite them')}; "
                              "the session goes on", markup=False)
                    continue
                out.print(_undo_summary(plan), markup=False)
                for note in _undo_notes(plan):
                    out.print(note, markup=False)
            elif name == "/diff":
                notes: list[str] = []
                out.print(diff_session(session.id, notes=notes) or "(no changes)",
                          markup=False)
                for note in notes:
                    out.print(note, markup=False)
            elif name == "/commit":
                out.print(_commit_line(*session.commit_last(),
                                       how="commit them yourself with git"), markup=False)
            elif name == "/compact" and all(m.get("role") == "system"
                                            for m in session.agent.messages):
                # Nothing to summarise; compacting anyway logged a compaction that made an
                # empty chat one `agent sessions` lists.
                out.print("nothing to compact yet: no task has run", markup=False)
            elif name == "/compact":
                before = len(session.agent.messages)
                done = session.agent.compact()
                out.print(f"compacted {before} messages into {len(session.agent.messages)}" if done
                          else "the server's context size is unknown: nothing to compact against",
                          markup=False)
            elif name == "/status":
                client = session.backend.client
                model = client.props().get("model_path") or client.model_id()
                # The context the session works with: the server's, else --ctx-size's (it
                # printed the server's alone, "None" where --ctx-size gave it).
                context = session.agent.context
                n_ctx = client.n_ctx()
                if n_ctx is None and context is not None and context.budget is not None:
                    n_ctx = f"{context.budget.n_ctx} (ctx_size: the server does not say)"
                out.print(f"session {session.id}, tasks {session.tasks}, n_ctx "
                          f"{n_ctx or 'unknown'}, model {model}", markup=False)
            else:
                session.run_task(line)
        except CHAT_RECOVERABLE as exc:
            # One failed command or task must not end the session (its history and cache stay).
            out.print(f"error: {exc}; the session goes on (/exit to leave)", markup=False)


@app.command("chat", epilog=CHAT_EXIT_CODES_HELP)
def chat_cmd(repo: Repo = Path("."), approval: Approval = None, preset: Preset = None,
             profile: Profile = None, base_url: BaseUrl = None, ctx_size: CtxSize = None,
             tool_protocol: ToolProtocol = None, max_steps: MaxSteps = None,
             max_time: MaxTime = None, no_git: NoGit = False) -> None:
    """Interactive session: a prompt between tasks, one session, checkpoints per task."""
    repo = _repo_dir(repo)
    settings = _session_settings(repo, approval=approval, preset=preset, profile=profile,
                                 base_url=base_url, ctx_size=ctx_size,
                                 tool_protocol=tool_protocol, max_steps=max_steps,
                                 max_time=max_time)
    reporter = Reporter()
    session = RepoSession(settings, repo, reporter, no_git=no_git)
    try:
        _chat_loop(session, reporter)
    finally:
        session.close()
        reporter.close()
    for line in _session_footer(session):
        err.print(line, markup=False)


def _pick_session(session_id: str | None, here_only: bool = True) -> str:
    """``session_id``, else :func:`_latest_session`'s. An id given empty is refused: `resume
    ""` (a variable that was not set) went on with the latest session, which may not be the
    one meant."""
    if session_id is not None and not session_id.strip():
        raise UsageError("the session id is empty; name one from `agent sessions`, or leave it "
                         "out for the latest")
    return session_id or _latest_session(here_only).id


def _latest_session(here_only: bool = True) -> SessionSummary:
    """The latest session that ran a task (the latest of all where none did) of the
    repository around the current directory (``here_only``: the innermost folder that has
    sessions, never past the innermost git repository holding it) or of any repository."""
    sessions = list_sessions()
    if here_only:
        cwd = Path.cwd().resolve()
        top = _repository_around(cwd)
        sessions = [s for s in sessions
                    if s.workspace and (cwd == Path(s.workspace)
                                        or Path(s.workspace) in cwd.parents)
                    # Not past the repository the directory is in: an outer repository's
                    # task is not this one's (undo from a nested repository with no session
                    # of its own reverted the outer repository's files).
                    and (top is None or top == Path(s.workspace)
                         or top in Path(s.workspace).parents)]
        # The innermost folder that has sessions: a --no-git session's folder inside the
        # repository before the repository's own sessions.
        innermost = max((len(Path(s.workspace).parts) for s in sessions), default=0)
        sessions = [s for s in sessions if len(Path(s.workspace).parts) == innermost]
    if not sessions:
        where = " for this directory" if here_only else ""
        raise UsageError(f"there is no saved session{where} (start one with `agent run` or "
                         "`agent chat`, or name a session id from `agent sessions`)")
    # A session that ran no task (a damaged log; a chat left at its first prompt is not
    # listed at all) must not hide the task before it from undo, diff and resume.
    ran = [s for s in sessions if s.tasks]
    return (ran or sessions)[0]


def _repository_around(folder: Path) -> Path | None:
    """The work tree of the innermost git repository holding ``folder`` (a ``.git`` folder,
    or the ``.git`` file of a submodule or linked worktree), or None outside any."""
    for candidate in (folder, *folder.parents):
        if os.path.exists(candidate / ".git"):  # never raises: a folder it may not read
            return candidate
    return None


@app.command("resume", epilog=CHAT_EXIT_CODES_HELP)
def resume_cmd(session_id: Annotated[str | None, typer.Argument(help="Session id (see "
                                                                "`agent sessions`).")] = None,
               last: Annotated[bool, typer.Option("--last", help="The most recent "
                                                  "session of this repository that ran a "
                                                  "task (the default).")] = False,
               approval: Approval = None, preset: Preset = None, profile: Profile = None,
               base_url: BaseUrl = None, ctx_size: CtxSize = None,
               tool_protocol: ToolProtocol = None, max_steps: MaxSteps = None,
               max_time: MaxTime = None) -> None:
    """Continue a saved session (the exact conversation) in chat mode. It keeps the session's
    tool-call protocol unless --tool-protocol says otherwise."""
    # Of this repository, as Claude Code's --continue and undo/diff here have it: the latest
    # of all resumed another repository's chat, its commands then running there.
    chosen = _pick_session(None if last else session_id)
    record = load_record(chosen)
    # A run killed with SIGKILL while its watchdog was gone too may have left commands running.
    stopped = reaper.stop_leftovers(chosen)
    if stopped:
        err.print(f"stopped {stopped} process{'es' if stopped != 1 else ''} left running by "
                  f"the previous run of session {chosen}", markup=False)
    check_resumable(record)
    repo = Path(record.start.repo or record.start.workspace)
    if not repo.is_dir():
        # _repo_dir's "does not exist" did not say whose folder it was.
        raise UserError(f"session {chosen} ran in {repo}, which is no longer a folder; it "
                        "cannot be resumed there")
    settings = _session_settings(repo, approval=approval, preset=preset, profile=profile,
                                 base_url=base_url, ctx_size=ctx_size, max_steps=max_steps,
                                 max_time=max_time)
    reporter = Reporter()
    session = RepoSession(settings, repo, reporter, no_git=record.start.repo is None,
                          resume=chosen, protocol=tool_protocol)
    try:
        _chat_loop(session, reporter)
    finally:
        session.close()
        reporter.close()
    for line in _session_footer(session):
        err.print(line, markup=False)


@app.command("sessions")
def sessions_cmd(json_out: JsonOut = False) -> None:
    """Saved sessions: id, first task, repository, age, tasks, steps and how the last task
    ended (done, stopped and why, interrupted, failed, no end recorded)."""
    found = list_sessions()
    if json_out:
        typer.echo(json.dumps([s.__dict__ for s in found], indent=2))
        return
    if not found:
        echo("no sessions yet")
    now = time.time()
    for s in found:
        age = _age(now - s.started)
        echo(f"{s.id}  {age:>6} ago  tasks {s.tasks}  steps {s.steps}  {s.end_detail}  "
                   f"{s.workspace}  {s.task[:60]!r}")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@app.command("undo", epilog=EXIT_CODES_HELP)
def undo_cmd(session_id: Annotated[str | None, typer.Argument(help="Session id (default: "
                                                              "the latest here that ran a "
                                                              "task).")] = None,
             task: Annotated[int | None, typer.Option(help="Task number (default: the "
                                                      "last).")] = None,
             force: Annotated[bool, typer.Option(help="Overwrite files you changed after "
                                                 "the agent.")] = False) -> None:
    """Put back the files a task changed (the current state is checkpointed first)."""
    latest = _latest_session() if session_id is None else None
    plan = undo_task(latest.id if latest else _pick_session(session_id), task, force)
    if latest is not None:  # say which session was picked: it may not be the one expected
        err.print(f"session {latest.id} ({latest.workspace})", markup=False)
    if not plan.did_something:
        echo(_nothing_undone(plan))
    for path in plan.changed:
        echo(f"{'removed' if path in plan.removed else 'restored'} {display_name(path)}")
    for line in plan.git_lines():
        echo(line)
    for line in _undo_notes(plan):
        err.print(line, markup=False)


def _undo_notes(plan: RestorePlan) -> list[str]:
    """The notes of an undo: commits that stay, and what it left for the user to put back
    (each with its git command)."""
    notes = [_commits_note(plan)] if plan.changed and plan.commits_since else []
    return notes + [f"note: not put back: {line}" for line in plan.not_restored]


def _commits_note(plan: RestorePlan) -> str:
    """What an undo says when HEAD moved since the task started (a field trial's undo after
    `run --commit` said only "removed test_mul.py", leaving git to show it deleted)."""
    return (f"note: the undo put files back only; the commits made since the task started "
            f"stay ({'; '.join(plan.commits_since)}), so git now shows the restored files "
            "as changes against them (`git revert` or `git reset` those commits to drop them)")


@app.command("diff")
def diff_cmd(session_id: Annotated[str | None, typer.Argument(help="Session id (default: the "
                                                              "latest here that ran a task)."
                                                              )] = None
             ) -> None:
    """The working tree against the session's first checkpoint, as a unified diff."""
    notes: list[str] = []  # on stderr: piped, the diff stays a patch `git apply` takes
    diff = diff_session(_pick_session(session_id), notes=notes) or "(no changes)"
    for note in notes:
        err.print(note, markup=False)
    # Piped (`agent diff | git apply`) the bytes stay exact (typer.echo would strip escape
    # sequences from them); on a terminal the model's escape sequences must not act.
    if sys.stdout.isatty():
        echo(diff)
    else:
        # git's own bytes (its output was read with surrogate escapes), whatever the locale's
        # encoding: under LC_ALL=C or a Latin-1 locale the text write raised or re-encoded.
        sys.stdout.flush()
        sys.stdout.buffer.write(diff.encode("utf-8", "surrogateescape") + b"\n")
        sys.stdout.buffer.flush()


@backend_app.command("download", epilog=EXIT_CODES_HELP)
def download_cmd(preset: Annotated[str | None, typer.Argument(help="Preset name.")] = None
                 ) -> None:
    """Fetch a preset's model (and draft) into the model cache, verified; a safetensors DFlash
    drafter (z-lab's) is converted to GGUF once, with the target's tokenizer files."""
    settings = load_settings()
    chosen = get_preset(preset or settings.preset)
    reporter = Reporter()
    model = requantized(resolve_model(chosen.model, reporter.note), chosen.requantize,
                        reporter.note)
    echo(f"{chosen.model} -> {model}")
    if chosen.draft:
        # A safetensors drafter is converted here, once (the converter's sdist: engine_sdist).
        draft = resolve_draft(chosen.draft, model, chosen.target_tokenizer, chosen.draft_type,
                              Path(settings.engine_sdist) if settings.engine_sdist else None,
                              reporter.note, window=chosen.draft_train_ctx)
        echo(f"{chosen.draft} -> {draft}")
        warning = swa_quant_warning(draft)
        if warning:
            reporter.note(warning)


def _engine(settings: Settings, reporter: Reporter, rpc: bool = False) -> Engine:
    """The installed engine (with ``rpc``: one with rpc-server), built first (progress on
    ``reporter``, closed after) when there is none."""
    try:
        return ensure_engine(Path(settings.engine_sdist) if settings.engine_sdist else None,
                             reporter.build_progress, reporter.note, rpc)
    finally:
        reporter.close()


@backend_app.command("up", epilog=EXIT_CODES_HELP)
def up_cmd(preset: Preset = None, profile: Profile = None, ctx_size: CtxSize = None,
           port: Annotated[int | None, typer.Option(help="Preferred port.")] = None,
           parallel: Annotated[int, typer.Option(min=1, max=256, help="Server slots (-np): "
                                                 "sessions run side by side, one slot each; "
                                                 "the context is shared between slots.")] = 1,
           idle_timeout: Annotated[int | None, typer.Option(min=1, help="Seconds idle before "
                                                            "the server sleeps and frees the "
                                                            "model's memory; the next request "
                                                            "wakes it.")] = None,
           print_cmd: Annotated[bool, typer.Option("--print-cmd", help="Print the exact "
                                                   "llama-server command and exit.")] = False,
           force: Annotated[bool, typer.Option("--force", help="Launch even when the fit "
                                               "check says the models and context do not fit "
                                               "this machine's free memory.")] = False,
           rpc: Annotated[str | None, typer.Option(
               "--rpc", metavar="HOST:PORT,...",
               help="Spread the model's layers over these RPC workers (each an `agent backend "
                    "worker`); overrides the preset's `rpc`.")] = None
           ) -> None:
    """Start the managed server (or reuse the running one with the same configuration)."""
    settings = load_settings(cli={"preset": preset, "profile": profile, "ctx_size": ctx_size,
                                  "port": port})
    chosen = get_preset(settings.preset)
    try:
        workers = parse_workers(rpc) if rpc is not None else preset_workers(chosen)
    except ValueError as exc:
        raise UsageError(f"--rpc: {exc}") from exc
    try:
        profile_for(chosen, settings.profile)
    except PresetError as exc:
        # Before the engine is built (minutes on a first run, then exit 3), and the same exit
        # as --print-cmd's (2): a field trial got both for one command line.
        raise UsageError(str(exc)) from exc
    request = LaunchRequest(
        chosen, profile=settings.profile, ctx_size=settings.ctx_size, parallel=parallel,
        idle_timeout=idle_timeout, rpc=workers, force=force, port=settings.port,
        timeout=settings.server_start_timeout,
        sdist=Path(settings.engine_sdist) if settings.engine_sdist else None)
    if print_cmd:
        try:
            preview = print_command(request)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        for line in preview.notes:
            err.print(f"note: {line}", markup=False)
        echo(shlex.join(preview.argv))
        return
    reporter = Reporter()
    try:
        state, reused = launch(request, progress=reporter.build_progress, note=reporter.note)
    finally:
        reporter.close()
    verb = "reusing" if reused else "started"
    over = f", over RPC workers {','.join(state.plan.rpc)}" if state.plan.rpc else ""
    echo(f"{verb} llama-server pid {state.pid} at {state.base_url} "
               f"(preset {chosen.name}, profile {state.plan.profile}{over})")
    if state.speculation:
        echo(f"speculation: {state.speculation}")


@backend_app.command("down", epilog=EXIT_CODES_HELP)
def down_cmd(all_servers: Annotated[bool, typer.Option("--all", help="Stop every server "
                                                       "dflash-agent started.")] = False
             ) -> None:
    """Stop the current managed server (the one most recently started or reused), or all."""
    stopped = server.down(all_servers)
    if not stopped:
        echo("no managed server is running")
    for state in stopped:
        echo(f"stopped llama-server pid {state.pid} ({state.base_url})")
    for state in server.unproven():
        echo(f"note: {server.unproven_line(state)}")


@backend_app.command("status", epilog=EXIT_CODES_HELP)
def status_cmd(json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False
               ) -> None:
    """Running managed servers: binary, flavour, model, profile, port, uptime, context
    size, and a line for a server whose RPC worker went away; a server whose process is gone
    is said in one line and its state file removed."""
    alive, gone = server.sweep(explain=True)
    for state, why in gone:
        # --json keeps stdout the list of running servers; the line goes to stderr there.
        line = (f"removed the stale state file of llama-server pid {state.pid} "
                f"({state.base_url}): {why}")
        if json_out:
            err.print(f"note: {line}", markup=False)
        else:
            echo(line)
    for state in server.unproven():
        err.print(f"note: {server.unproven_line(state)}", markup=False)
    infos = [server.describe(s) for s in alive]
    if json_out:
        typer.echo(json.dumps(infos, indent=2))
        return
    if not infos:
        echo("no managed server is running (start one with `agent backend up`)")
    for info in infos:
        echo(f"{info['url']}  pid {info['pid']}  preset {info['preset']}  profile "
                   f"{info['profile']}  n_ctx {info['n_ctx']}  up {info['uptime_s']} s\n"
                   f"  binary {info['binary']} ({info['flavour']})\n  model  {info['model']}"
                   f"\n  log    {info['log']}")
        if info.get("speculation"):
            echo(f"  speculation {info['speculation']}")
        if info["rpc"]:
            echo(f"  RPC workers {', '.join(info['rpc'])}")
        if info["problem"]:
            echo(f"  problem {info['problem']}")


@backend_app.command("bench", epilog=EXIT_CODES_HELP)
def bench_cmd(
    preset: Preset = None,
    profiles: Annotated[str | None, typer.Option(help="Comma-separated profiles to compare "
                                                 "(default: baseline and the preset's own).")]
    = None,
    prompts: Annotated[str, typer.Option(help="seed (the three coding prompts of the DFlash "
                                         "write-up), edit (return a file with one rename, "
                                         "three sizes) or a JSON/text prompts file.")]
    = "seed",
    max_tokens: Annotated[int, typer.Option(min=1, help="max_tokens per request.")] = 1200,
    temperatures: Annotated[str, typer.Option(help="Comma-separated temperatures; each "
                                              "prompt runs at each.")] = "0.7,0",
    repeats: Annotated[int, typer.Option(min=1, help="Times each request is sent to each "
                                         "profile.")] = 1,
    ctx_size: CtxSize = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results here "
                                                   "(default: <state>/bench/<date>.json).")]
    = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG bar chart here (needs the "
                                              "plot extra).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Launch even when the fit check "
                                        "says a server does not fit.")] = False,
    one_at_a_time: Annotated[bool, typer.Option("--one-at-a-time", help="One server at a "
                                                "time, rounds alternating the profile order "
                                                "(automatic when the servers do not fit side "
                                                "by side).")] = False,
    synth_accept: Annotated[float | None, typer.Option(
        "--synth-accept", min=0.0, max=1.0,
        help="Each drafted token accepted with probability P whatever the draft proposes "
             "(b11434's --spec-synth-rates): what a better draft would give on this machine. "
             "Output text is not valid; tuned profiles choose their length for P.")] = None,
) -> None:
    """Compare speculation profiles on one binary and model: one server per profile side by
    side, requests interleaved; per prompt and overall tokens, decode and prefill tok/s,
    draft acceptance and speedup vs baseline."""
    settings = load_settings(cli={"preset": preset, "ctx_size": ctx_size})
    chosen = get_preset(settings.preset)
    names = parse_profiles(profiles, chosen)
    temps = parse_temperatures(temperatures)
    prompt_set, prompt_list = load_prompts(prompts)
    _check_output(json_path, "--json")
    _check_output(plot, "--plot")
    if plot is not None:
        require_matplotlib()
    engine = _engine(settings, Reporter())
    result = run_bench(chosen, engine, names, prompt_list, prompt_set=prompt_set,
                       temperatures=temps, max_tokens=max_tokens, repeats=repeats,
                       ctx_size=settings.ctx_size, start_timeout=settings.server_start_timeout,
                       force=force,
                       note=lambda message: err.print(message, markup=False, style="dim"),
                       one_at_a_time=one_at_a_time, synth_accept=synth_accept)
    table_out = SafeConsole(highlight=False, soft_wrap=True)
    if not table_out.is_terminal:  # piped or logged: rich's 80 columns would cut the table
        table_out = SafeConsole(highlight=False, soft_wrap=True, width=160)
    table_out.print(result_table(result))
    for line in different_answers(result):
        echo(f"note: {line}")
    written = write_result(result, json_path or default_result_path(result))
    echo(f"results: {written}")
    if plot is not None:
        echo(f"chart: {plot_result(result, plot)}")


def _check_output(path: Path | None, flag: str) -> None:
    """Raise :class:`UsageError` when ``path`` (a results file a command writes after
    minutes of measuring) cannot be written: an existing folder, or a nearest existing parent
    that is a file or not writable. A field trial lost a whole bench this way."""
    if path is None:
        return
    target = path.expanduser().absolute()
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    parent = next(p for p in target.parents if p.exists())
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is a file, so it cannot be made")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: no permission to write in {parent}")


@backend_app.command("calibrate", epilog=EXIT_CODES_HELP)
def calibrate_cmd(
    preset: Preset = None,
    profile: Annotated[str, typer.Option(help="The speculative profile whose steps to "
                                         "measure (dflash, dflash-fixed, dflash+ngram).")]
    = "dflash",
    lengths: Annotated[str, typer.Option(help="Comma-separated draft lengths to measure "
                                         "(1..15).")] = "1,2,3,5,7,15",
    check_accept: Annotated[float, typer.Option(
        "--check-accept", min=0.0, max=1.0,
        help="Also measure each length at this synthetic per-token acceptance, to correct "
             "the model for partial acceptance (0: skip).")] = 0.75,
    tokens: Annotated[int | None, typer.Option(
        min=16, help="Tokens decoded per request (default: half a second of plain decoding, "
        "64 to 512).")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Timed requests per configuration "
                                         "(the median counts).")] = 3,
    ctx_size: CtxSize = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the run here "
                                                   "(default: <state>/calibrate/<date>.json)."
                                                   )] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of speed against acceptance "
                                              "length per draft length (plot extra).")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Launch even when the fit check "
                                        "says the servers do not fit.")] = False,
) -> None:
    """Measure what a speculative step costs on this engine, model, draft and device (plain
    decoding and each draft length, synthetic acceptance), store the cost model the tuned
    profiles launch with, and print speedup against acceptance with break-even marked."""
    settings = load_settings(cli={"preset": preset, "ctx_size": ctx_size})
    chosen = get_preset(settings.preset)
    wanted = parse_lengths(lengths)
    _check_output(json_path, "--json")
    _check_output(plot, "--plot")
    if plot is not None:
        require_matplotlib()  # before minutes of measuring, not after
    engine = _engine(settings, Reporter())
    with server.interrupt_on_termination():  # a killed run stops its servers too
        result = calibrate(chosen, engine, profile=profile, lengths=wanted,
                           check_p=check_accept or None, tokens=tokens, repeats=repeats,
                           ctx_size=settings.ctx_size or 4096,
                           start_timeout=settings.server_start_timeout, force=force,
                           note=lambda message: err.print(message, markup=False, style="dim"))
    for line in table_lines(result):
        echo(line)
    path = json_path or calibration_path(result)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json(indent=2), "utf-8")
    except OSError as exc:
        raise UserError(f"cannot write the results to {path}: {exc}") from exc
    echo(f"cost model: {result.stored}")
    echo(f"results: {path}")
    if plot is not None:
        echo(f"chart: {plot_calibration(result, plot)}")


backend_app.command("presets")(presets_cmd)
backend_app.command("doctor", epilog=EXIT_CODES_HELP)(doctor_cmd)


@cache_app.command("list")
def cache_list_cmd(json_out: JsonOut = False) -> None:
    """Cached engines and models with their size and when a server last used them."""
    entries = list_cache()
    if json_out:
        typer.echo(json.dumps([{**e.__dict__, "path": str(e.path)} for e in entries],
                              indent=2))
        return
    if not entries:
        echo("the cache is empty")
    now = time.time()
    for e in entries:
        used = f"used {_age(now - e.last_used)} ago" if e.last_used else "never used"
        echo(f"{e.kind:<6}  {e.size_bytes / 2**20:>9.1f} MiB  {used:<16}  {e.name}")


@cache_app.command("rm", epilog=EXIT_CODES_HELP)
def cache_rm_cmd(name: Annotated[str, typer.Argument(help="Engine key or model file name "
                                                     "(see `agent backend cache list`).")]
                 ) -> None:
    """Delete a cached engine or model (refused while a running server uses it)."""
    busy = {p.resolve() for s in server.running()
            for p in (s.plan.binary, s.plan.model, s.plan.draft) if p is not None}
    entry = remove(name, busy)
    echo(f"removed {entry.kind} {entry.name} ({entry.size_bytes / 2**20:.1f} MiB)")


def main() -> None:
    """Runs the app and turns failures into one-line errors. :mod:`agent.entry` is the entry
    point; starting here instead still re-execs without secrets first (a no-op once clean)."""
    secret_store.start()
    command = typer.main.get_command(app)
    debug = "--debug" in sys.argv[1:]
    try:
        # SIGTERM (`timeout`, systemd, a host stopping us) and SIGHUP (a closed terminal, a
        # dropped ssh) end a command the way Ctrl-C does: the pending tool call is answered,
        # the session log ends on the interruption, servers a command started for itself are
        # stopped. Python's default for them ends the process with none of that.
        with server.interrupt_on_termination():
            code = command.main(args=sys.argv[1:], prog_name="agent", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.TyperException as exc:  # typer's vendored click usage errors
        show = getattr(exc, "show", None)
        if show:
            show()
        else:
            err.print(f"error: {exc}", markup=False)
        code = EXIT_USAGE
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        code = EXIT_INTERRUPTED
    except StatedError as exc:
        err.print(f"error: {exc}", markup=False)
        tail = getattr(exc, "tail", "")
        if tail:
            err.print(tail, markup=False)
        if not exc.plain:
            crash = write_crash_log(exc)
            err.print(f"details: {crash}" + ("" if debug else " (run with --debug for the "
                                              "traceback)"), markup=False)
        if debug:
            err.print("".join(traceback.format_exception(exc)), markup=False)
        code = exc.exit_code
    except Exception as exc:
        crash = write_crash_log(exc)
        err.print(f"internal error: {type(exc).__name__}: {exc}", markup=False)
        err.print(f"crash log: {crash}; please report it", markup=False)
        if debug:
            err.print("".join(traceback.format_exception(exc)), markup=False)
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else EXIT_OK)
