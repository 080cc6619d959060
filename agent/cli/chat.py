"""``agent chat``: tasks typed one after another into one session, with slash commands
between them (``/undo``, ``/diff``, ``/commit``, ``/compact``, ``/status``); the loop is
``agent resume``'s too."""

from __future__ import annotations

from pathlib import Path

from agent.cli.common import print_footer, repo_dir, session_settings, typed
from agent.cli.options import (
    Approval,
    BaseUrl,
    CtxSize,
    MaxSteps,
    MaxTime,
    NoGit,
    Preset,
    Profile,
    Repo,
    ToolProtocol,
)
from agent.client import ContextOverflow, ServerUnavailable
from agent.context import ContextTooSmall
from agent.errors import UserError
from agent.sessions.checkpoints.restores import RestoreConflict
from agent.sessions.repo import RepoSession
from agent.sessions.undo import diff_session, undo_task
from agent.ui import Reporter, SafeConsole
from agent.ui.summary import commit_line, undo_notes, undo_summary

CHAT_RECOVERABLE = (UserError, ContextOverflow, ContextTooSmall, ServerUnavailable)
"""Errors after which ``agent chat`` prompts again instead of exiting."""

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


def chat_loop(session: RepoSession) -> None:
    """Prompt for tasks and slash commands until /exit or Ctrl-D; a failed task or command
    (:data:`CHAT_RECOVERABLE`) is said in one line and the session goes on."""
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
                out.print(undo_summary(plan), markup=False)
                for note in undo_notes(plan):
                    out.print(note, markup=False)
            elif name == "/diff":
                notes: list[str] = []
                out.print(diff_session(session.id, notes=notes) or "(no changes)",
                          markup=False)
                for note in notes:
                    out.print(note, markup=False)
            elif name == "/commit":
                out.print(commit_line(*session.commit_last(),
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


def chat_cmd(repo: Repo = Path("."), approval: Approval = None, preset: Preset = None,
             profile: Profile = None, base_url: BaseUrl = None, ctx_size: CtxSize = None,
             tool_protocol: ToolProtocol = None, max_steps: MaxSteps = None,
             max_time: MaxTime = None, no_git: NoGit = False) -> None:
    """Interactive session: a prompt between tasks, one session, checkpoints per task."""
    repo = repo_dir(repo)
    settings = session_settings(repo, approval=approval, preset=preset, profile=profile,
                                base_url=base_url, ctx_size=ctx_size,
                                tool_protocol=tool_protocol, max_steps=max_steps,
                                max_time=max_time)
    reporter = Reporter()
    run_chat(RepoSession(settings, repo, reporter, no_git=no_git), reporter)


def run_chat(session: RepoSession, reporter: Reporter) -> None:
    """:func:`chat_loop` over ``session`` (``agent chat`` and ``agent resume``); the session
    and its ``reporter`` are closed whatever ends it, then the footer is printed."""
    try:
        chat_loop(session)
    finally:
        session.close()
        reporter.close()
    print_footer(session)
