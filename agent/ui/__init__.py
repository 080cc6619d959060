"""What the user sees in the terminal, in rooms by job (each imports only those above it in
this list):

- ``console`` — terminal-safe output: :func:`printable`, :class:`SafeConsole`, :func:`echo`.
- ``watch`` — :class:`RequestWatch`: what to say while a model request runs.
- ``lines`` — the one-line texts of single events: stop lines, tool result lines, reply misses.
- ``reporter`` — :class:`Reporter`, the live reporter of a running task (events, requests,
  engine builds).
- ``summary`` — what a command prints when it ends: the new project's summary, a session's
  footer, a commit's and an undo's lines.

The rest of the product uses the names below as one face; ``summary`` is the command line's
alone and is imported from its room.
"""

from agent.ui.console import SafeConsole, echo, printable
from agent.ui.lines import TEMPLATE_SLACK, reply_misses, stop_line
from agent.ui.reporter import Reporter
from agent.ui.watch import TICK_S, RequestWatch

__all__ = ["TEMPLATE_SLACK", "TICK_S", "Reporter", "RequestWatch", "SafeConsole", "echo",
           "printable", "reply_misses", "stop_line"]
