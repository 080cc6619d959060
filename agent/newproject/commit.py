"""The new project's repository: ``git init`` with its excludes before the model writes, the
files it holds, and the final commit whose message says what exists and how the tests went."""

from __future__ import annotations

from pathlib import Path

import git

from agent.errors import UserError
from agent.newproject.environment import VENV
from agent.newproject.result import ProjectResult
from agent.newproject.toolchains import ECOSYSTEMS
from tools.workspace import SCRATCH_NAME, hide_from_git

PRODUCT_EXCLUDES = (f"/{SCRATCH_NAME}/", f"/{VENV}/", "node_modules/")
"""What :func:`prepare_repo` keeps out of the project's commits (``.git/info/exclude``)."""


class CommitFailed(UserError):
    """The project's repository could not take the final commit; the files stay (exit 3)."""


def git_reason(exc: BaseException) -> str:
    """The last line git wrote to stderr for ``exc``, else the exception's first line."""
    stderr = str(getattr(exc, "stderr", "") or "").strip().strip("'").strip()
    lines = (stderr or str(exc)).splitlines()
    return lines[-1].strip() if lines else type(exc).__name__


def prepare_repo(directory: Path, toolchain: str = "python") -> git.Repo:
    """``git init`` and a ``.gitignore`` for the toolchain; the isolated environment and the
    tools' scratch folder are also excluded through ``.git/info/exclude``, so a ``.gitignore``
    the model rewrites cannot put ``.venv`` or ``node_modules`` into the commit. Files already
    in a folder without commits are committed first, as they were."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what the target's checks cannot foresee (/proc, a race)
        raise UserError(f"{directory} cannot be made: {exc.strerror or exc}; choose another "
                        "--dir") from exc
    repo = git.Repo.init(directory)
    for pattern in PRODUCT_EXCLUDES:
        hide_from_git(directory, pattern)
    if not repo.head.is_valid() and staged_files(repo):
        # A folder that had files but no git (--force): they are committed first, as they
        # were, so whatever the model overwrites or deletes can be had back.
        commit_all(repo, f"Files in {directory.name} before new-project\n\nCommitted by "
                "dflash-agent before the model wrote anything, so none of them is lost.")
    eco = ECOSYSTEMS[toolchain]
    gitignore = directory / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("".join(f"{line}\n" for line in (*eco.ignore, f"{SCRATCH_NAME}/")),
                             "utf-8")
    return repo


def commit_message(description: str, result: ProjectResult) -> str:
    """The new project's commit message: what exists, the recipe, the product's own test
    verdict (with its last lines when they did not pass) and how the agent's run ended."""
    verdict = result.tests.status
    # One line of printable text: a description with newlines would split the subject, and
    # escape sequences would reach every terminal that shows the log.
    words = "".join(c if c.isprintable() else " " for c in description).split()
    subject = f"New project: {' '.join(words)[:60]}"
    if verdict != "passed":
        subject += f" (tests: {verdict})"
    lines = [subject, ""]
    if result.plan is not None:
        lines.append(f"{result.plan.language} ({result.plan.toolchain}): "
                     f"{result.plan.summary}")
    lines.append(f"Files: {len(result.files)} ({', '.join(result.files[:12])}"
                 f"{', ...' if len(result.files) > 12 else ''})")
    if result.recipe is not None:
        lines.append(f"Recipe: {result.recipe.name} ({result.recipe.reason})")
    if result.unwritten:
        lines.append(f"Planned but not written: {', '.join(result.unwritten)}")
    runner = f" with `{result.tests.runner}`" if result.tests.runner else ""
    totals = f" ({result.tests.counts})" if result.tests.counts else ""
    lines.append(f"Tests, run by dflash-agent{runner}: {verdict}{totals}")
    if verdict != "passed" and result.tests.detail:
        lines += ["", *("    " + line for line in result.tests.detail.splitlines())]
    if result.loop.reason != "done":
        lines += ["", f"The agent stopped before finishing ({result.loop.reason}, "
                  f"{result.loop.steps} steps)."]
    lines += ["", "Created by dflash-agent."]
    return "\n".join(lines)


def commit_all(repo: git.Repo, message: str) -> tuple[str | None, list[str]]:
    """Stage every change in ``repo`` and commit it with ``message`` (as dflash-agent when git
    has no user identity, so a machine without one still gets its commit). Returns the new
    sha and the files the commit holds, sorted; (None, []) when there is nothing to commit."""
    repo.git.add(A=True)
    if not repo.index.entries:
        return None, []
    reader = repo.config_reader()
    has_identity = reader.has_option("user", "name") and reader.has_option("user", "email")
    actor = None if has_identity else git.Actor("dflash-agent", "dflash-agent@localhost")
    commit = repo.index.commit(message, author=actor, committer=actor)
    return commit.hexsha, sorted(str(k[0]) for k in repo.index.entries)


def present_files(repo: git.Repo) -> list[str]:
    """The files of the work tree git would take (tracked or not ignored), without touching
    the index."""
    try:
        listed = repo.git.ls_files("--cached", "--others", "--exclude-standard")
    except git.GitError:
        return []
    return sorted(set(listed.splitlines()))


def staged_files(repo: git.Repo) -> list[str]:
    """Stage every change in ``repo`` and return the index's files, sorted (what the next
    commit will hold)."""
    repo.git.add(A=True)
    return sorted(str(k[0]) for k in repo.index.entries)
