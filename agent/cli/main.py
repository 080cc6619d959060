"""The ``agent`` command line's entry: runs the app (:mod:`agent.cli.app`) and turns every
failure into one line and an exit code."""

from __future__ import annotations

import sys
import traceback

import typer

from agent.cli.app import app
from agent.cli.common import err
from agent.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, write_crash_log
from backend import secret_store
from backend.errors import StatedError
from backend.serve import server


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
