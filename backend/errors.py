"""The root of every error with a stated cause: the message says what happened and what to do,
and the error carries the exit code it ends a command with and whether its one line says it
all. The command line (``agent.cli.main``) and the MCP task worker catch this class alone; any
other exception is an internal error (exit 4, with a crash log).

It sits in ``backend``'s base, beside ``home.py``, because ``backend`` and ``tools`` raise such
errors too and may not import ``agent``.
"""

from __future__ import annotations

EXIT_USAGE = 2
"""Bad usage: flags, an empty task or description, an unknown preset on the command line."""
EXIT_ERROR = 3
"""An error with a stated cause: build, model, server, config."""


class StatedError(Exception):
    """A failure the user can act on, said in one line (``error: <message>``).

    ``exit_code``: what the command exits with (:data:`EXIT_ERROR`; usage errors
    :data:`EXIT_USAGE`). ``plain``: the line says it all, so no crash log is written (the
    user's own mistake or choice); otherwise (a build, a server, a model file) the crash log
    keeps the traceback. A subclass sets either as a class attribute, or an instance as its
    own attribute."""

    exit_code: int = EXIT_ERROR
    plain: bool = False
