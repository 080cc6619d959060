"""What the commands share besides their options: the error console, reading what the user
typed, a session's settings and footer, the installed engine, and ages as words."""

from __future__ import annotations

from pathlib import Path

from agent.config import Settings, load_settings
from agent.errors import UsageError
from agent.sessions.repo import RepoSession
from agent.ui import Reporter, SafeConsole
from agent.ui.summary import session_footer
from backend.engine.registry import Engine
from backend.serve.launch import ensure_engine

err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
"""stderr, for notes and errors: stdout stays a command's result (a diff, JSON)."""


def typed(text: str) -> str:
    """Text the user typed (a task, a description, a chat line). Bytes the locale could not
    decode arrive as surrogate escapes (a Latin-1 terminal under a UTF-8 locale: "ol\\xe1"),
    which no session log or request can hold (an internal error, exit 4): such text is read
    as cp1252, the usual one-byte terminal encoding ("olá")."""
    if not any("\udc80" <= c <= "\udcff" for c in text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("cp1252", "replace")


def repo_dir(repo: Path) -> Path:
    """``--repo`` as an absolute path; raises :class:`UsageError` when it is not an existing
    directory (before anything looks for a git repository there)."""
    path = repo.expanduser()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise UsageError(f"--repo {repo}: {what}; give the folder of an existing project")
    return path.resolve()


def session_settings(repo: Path, **cli: object) -> Settings:
    """The settings of a session in ``repo``: its project's config.toml under the command
    line's options (``cli``; None: not given)."""
    return load_settings(project=repo.expanduser().resolve(), cli=cli)


def print_footer(session: RepoSession, committed: str = "") -> None:
    """Print the session's footer (:func:`agent.ui.summary.session_footer`) on stderr."""
    for line in session_footer(session.id, session.tasks, session.repo is not None,
                               session.backend.state, committed):
        err.print(line, markup=False)


def installed_engine(settings: Settings, reporter: Reporter, rpc: bool = False) -> Engine:
    """The installed engine (with ``rpc``: one with rpc-server), built first (progress on
    ``reporter``, closed after) when there is none."""
    try:
        return ensure_engine(Path(settings.engine_sdist) if settings.engine_sdist else None,
                             reporter.build_progress, reporter.note, rpc)
    finally:
        reporter.close()


def age(seconds: float) -> str:
    """``seconds`` as a short age: ``3d``, ``5h``, ``12m`` or ``40s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"
