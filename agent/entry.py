"""The ``agent`` console script and ``python -m agent``: secrets out first, then the CLI.

The re-exec of :func:`backend.secret_store.start` happens here, before :mod:`agent.cli.main` and its
dependencies are imported, so it costs one interpreter start, not a second import of
everything.

This module imports nothing of the product at its top: a Ctrl-C while the CLI's modules load
(~0.3 s) must end in ``interrupted`` and exit 130, as it does once the CLI runs, not in a
traceback.
"""

import sys

EXIT_INTERRUPTED = 130
""":data:`agent.errors.EXIT_INTERRUPTED`, not imported from there: that import can be the one
interrupted."""


def main() -> None:
    """Re-exec without secrets when the environment holds any, then run the CLI; a Ctrl-C
    before the CLI handles it exits 130 with one line."""
    for stream in (sys.stdout, sys.stderr):
        # A terminal that is not UTF-8 (LC_ALL=pt_BR.ISO-8859-1) cannot show every file name
        # or model reply: escape what it cannot show instead of an internal error (exit 4).
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        from backend import secret_store

        secret_store.start()
        from agent.cli.main import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        _interrupted()


def _interrupted() -> None:
    """Exit 130 with ``interrupted``, a second Ctrl-C ignored so it cannot print a traceback
    from the exit itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: the exit status still says it
    sys.exit(EXIT_INTERRUPTED)
