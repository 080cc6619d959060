"""User-facing failures: one line with cause and next step; a crash log where a traceback
helps (internal errors, build and server failures). Every failure with a stated cause derives
from :class:`backend.errors.StatedError`, which carries its exit code and whether its line says
it all."""

from __future__ import annotations

import secrets
import time
import traceback

# The two codes an error carries are defined with its root; the CLI takes them from here, with
# the others.
from backend.errors import EXIT_ERROR as EXIT_ERROR
from backend.errors import EXIT_USAGE as EXIT_USAGE
from backend.errors import StatedError
from backend.home import home, private_open

EXIT_OK = 0
EXIT_TASK_FAILED = 1
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = ("Exit codes: 0 success; 1 the task did not finish (new-project: or the "
                   "project's tests failed); 2 bad usage (flags, an empty task or description, "
                   "an unknown preset on the command line); 3 an error with a stated cause "
                   "(build, model, server, config); 4 internal error (see the crash log); 130 "
                   "interrupted (Ctrl-C, SIGTERM, SIGHUP).")

CHAT_EXIT_CODES_HELP = ("Exit codes: 0 you left the chat (/exit, Ctrl-D), whatever its tasks did "
                        "(a task that did not finish says so and the prompt comes back); 2 bad "
                        "usage (flags, an unknown preset on the command line); 3 an error with a "
                        "stated cause before the first prompt (model, server, config, session "
                        "log); 4 internal error (see the crash log); 130 interrupted (Ctrl-C, "
                        "SIGTERM, SIGHUP).")
"""`agent chat` and `agent resume`: a session the user leaves is a success (as an interactive
session of Codex CLI or Claude Code), so 1 never comes from them."""


def interrupted_by(exc: KeyboardInterrupt) -> str:
    """What interrupted the command: ``""`` for Ctrl-C, or the name of the termination signal
    (``SIGTERM``, ``SIGHUP``) that :func:`backend.serve.server.interrupt_on_termination` turned
    into the same ``KeyboardInterrupt`` (its only argument)."""
    cause = exc.args[0] if len(exc.args) == 1 else None
    return cause if isinstance(cause, str) and cause.startswith("SIG") else ""


class UserError(StatedError, RuntimeError):
    """A failure the user can act on; the message says what happened and what to do (no crash
    log: the line says it all).

    ``cli_hint`` is advice naming command-line flags (``--no-git``, ``--force``), appended to
    the message; an MCP host, whose tools have no such flags, is told ``mcp_hint`` in its place
    (:func:`host_text`)."""

    plain = True

    def __init__(self, *args: object, cli_hint: str = "", mcp_hint: str = ""):
        self.mcp_text = f"{args[0]}{mcp_hint}" if args and cli_hint else None
        super().__init__(*((f"{args[0]}{cli_hint}", *args[1:]) if args and cli_hint else args))


def host_text(exc: Exception) -> str:
    """What an MCP host is told of ``exc``: its message, with advice for MCP tools where the
    command line's would name flags the tools lack."""
    return getattr(exc, "mcp_text", None) or str(exc)


class UsageError(UserError):
    """The command line asks for something impossible (exit code 2)."""

    exit_code = EXIT_USAGE


def write_crash_log(exc: BaseException) -> str:
    """Write the traceback to ``<state>/crashes/<time>.log``; returns the path."""
    folder = home().ensure().crashes
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{stamp}-{secrets.token_hex(3)}-{type(exc).__name__}.log"
    with private_open(path, "w", encoding="utf-8") as out:
        out.write("".join(traceback.format_exception(exc)))
    return str(path)
