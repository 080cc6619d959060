"""The ``agent`` console script and ``python -m agent``: secrets out first, then the CLI.

The re-exec of :func:`backend.secret_store.start` happens here, before :mod:`agent.cli.main` and its
dependencies are imported, so it costs one interpreter start, not a second import of
everything.
"""

from backend import secret_store


def main() -> None:
    """Re-exec without secrets when the environment holds any, then run the CLI."""
    secret_store.start()
    from agent.cli.main import main as cli_main

    cli_main()
