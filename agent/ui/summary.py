"""What a command prints when it ends: the new project's summary, a session's footer (its undo
command, the server left running), what a commit of the task's files did, and what an undo put
back or left.

The core cannot import the layers above it (``agent/README.md``), so what a summary reads of a
project, a session or an undo is typed here as the small protocols below; the objects the
command line passes in (``agent.newproject.ProjectResult``,
``agent.sessions.checkpoints.RestorePlan``) have those attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from agent.ui.console import SafeConsole
from backend.serve.records import ServerState, is_ours
from tools.workspace import display_name


class _Recipe(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def reason(self) -> str: ...


class _Plan(Protocol):
    @property
    def toolchain(self) -> str: ...

    @property
    def language(self) -> str: ...


class _Tests(Protocol):
    @property
    def status(self) -> str: ...

    @property
    def detail(self) -> str: ...

    @property
    def runner(self) -> str: ...

    @property
    def counts(self) -> str: ...


class _Loop(Protocol):
    @property
    def reason(self) -> str: ...

    @property
    def steps(self) -> int: ...


class ProjectOutcome(Protocol):
    """What ``new-project`` made, as its summary reads it."""

    @property
    def directory(self) -> Path: ...

    @property
    def created(self) -> bool: ...

    @property
    def recipe(self) -> _Recipe | None: ...

    @property
    def plan(self) -> _Plan | None: ...

    @property
    def files(self) -> list[str]: ...

    @property
    def unwritten(self) -> list[str]: ...

    @property
    def tests(self) -> _Tests: ...

    @property
    def loop(self) -> _Loop: ...

    @property
    def commit(self) -> str | None: ...

    @property
    def log(self) -> Path: ...


class UndoOutcome(Protocol):
    """What an undo did, as its lines read it."""

    @property
    def changed(self) -> list[str]: ...

    @property
    def removed(self) -> list[str]: ...

    @property
    def commits_since(self) -> list[str]: ...

    @property
    def not_restored(self) -> list[str]: ...

    def git_lines(self) -> list[str]: ...


def left_running(state: ServerState | None) -> dict[str, object] | None:
    """The summary's ``server``: pid and URL of the managed server a session used, when it is
    still running after the session (None with ``--base-url`` or once it has exited)."""
    if state is None or not is_ours(state):
        return None
    return {"pid": state.pid, "url": state.base_url, "stop": "agent backend down"}


def print_project_summary(result: ProjectOutcome, stats: dict[str, float | int | None],
                          server: dict[str, object] | None) -> None:
    """Print ``new-project``'s summary on stdout: the folder, recipe, toolchain, files, the
    tests dflash-agent ran, steps and tokens (``stats``: ``ProjectResult.stats()``), the
    commit and the session log, and ``server`` (:func:`left_running`) when it still runs."""
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
    if server is not None:
        # The managed server outlives the command (the next one reuses it, loaded and
        # warm): holding the model's memory unannounced is what a user would not expect.
        out.print(_server_line(server), markup=False)


def _server_line(server: dict[str, object]) -> str:
    return (f"Server: llama-server pid {server['pid']} is still running at {server['url']} "
            "(the next command reuses it); stop it with `agent backend down`")


def commit_line(sha: str | None, left_out: list[str], nested: list[str], how: str) -> str:
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


def session_footer(session_id: str, tasks: int, git: bool, server: ServerState | None,
                   committed: str = "") -> list[str]:
    """What `run` and `chat` print last: the session with its undo command (none without
    ``git``: there are no checkpoints, nor after a chat that ran no task), what ``committed``
    says, and the managed ``server`` when it is left running (new-project says the same: a
    server holding the model's memory unannounced is what a user would not expect)."""
    if not tasks:  # its id is the only way to it: `agent sessions` leaves it out
        undo = "no task ran: nothing to undo, and `agent sessions` does not list it"
    elif git:
        undo = f"undo: agent undo {session_id}"
    else:
        undo = "no git: no undo"
    lines = [f"session {session_id} ({undo})" + (f"; {committed}" if committed else "")]
    left = left_running(server)
    if left is not None:
        lines.append(_server_line(left))
    return lines


def undo_summary(plan: UndoOutcome) -> str:
    """``/undo``'s line: the files written back, then those deleted (the task created them)."""
    restored = [p for p in plan.changed if p not in plan.removed]
    parts = [f"{verb}: {', '.join(map(display_name, paths))}" for verb, paths in
             (("restored", restored), ("removed", plan.removed)) if paths]
    return "; ".join(parts + plan.git_lines()) or nothing_undone(plan)


def nothing_undone(plan: UndoOutcome) -> str:
    """What an undo that put nothing back says: that the task changed no file, unless the
    notes name files it changed and the undo had to leave (a large file, another session's)."""
    if plan.not_restored:
        return "nothing was put back: the files below are left as they are"
    return "nothing to undo: the task changed no files"


def undo_notes(plan: UndoOutcome) -> list[str]:
    """The notes of an undo: commits that stay, and what it left for the user to put back
    (each with its git command)."""
    notes = [_commits_note(plan)] if plan.changed and plan.commits_since else []
    return notes + [f"note: not put back: {line}" for line in plan.not_restored]


def _commits_note(plan: UndoOutcome) -> str:
    """What an undo says when HEAD moved since the task started (a field trial's undo after
    `run --commit` said only "removed test_mul.py", leaving git to show it deleted)."""
    return (f"note: the undo put files back only; the commits made since the task started "
            f"stay ({'; '.join(plan.commits_since)}), so git now shows the restored files "
            "as changes against them (`git revert` or `git reset` those commits to drop them)")
