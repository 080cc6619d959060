"""How the loop asks for a call's approval: the approver's contract and its two refusals.

:mod:`agent.sessions.approval` builds approvers for the approval modes; the loop
(:mod:`agent.loop`) calls one before each tool call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ApprovalUnavailable(Exception):
    """A call needs the user's approval and nobody can be asked (stdin is not a terminal)."""


class CallRefused(Exception):
    """A call needs an approval nobody can give here, and only that call is refused: the
    message is its result for the model and the task goes on. For a read the task can do
    without (a file that may hold secrets), where stopping the whole task, as
    :class:`ApprovalUnavailable` does, would cost the user the rest of the work."""


Approver = Callable[[dict[str, Any]], str | None]
"""Called before each tool call: None approves; a string denies, with the user's reason.
May raise :class:`ApprovalUnavailable` (the task stops) or :class:`CallRefused` (the call
is answered with the message, the task goes on)."""
