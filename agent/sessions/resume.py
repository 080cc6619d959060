"""Resume: a session's history read back from its log, checked sendable, and every call of its
last reply answered once (its logged result, "interrupted", or "not run")."""

from __future__ import annotations

from typing import Any

from agent.errors import UserError
from agent.events import Compaction, Message, ModelTurn, ToolCall, ToolResult
from agent.loop import Agent
from agent.protocols.base import FINAL_ANSWER
from agent.protocols.calls import RESULT_PREFIX
from agent.sessions.record import SessionRecord
from skills.activation import TOOL_NAME as SKILL_TOOL

INTERRUPTED = "interrupted: the session ended before this call finished; check its effects"
NOT_RUN = "not run: the session ended before this call started"


def check_resumable(record: SessionRecord) -> None:
    """Raise :class:`UserError` when ``record``'s history cannot be sent again (see
    :func:`replay`): checked before a server is started or connected to."""
    replay(record)


def replay(record: SessionRecord) -> list[dict[str, Any]]:
    """The messages a resume sends again: the logged ones, from the last compaction's on.
    Raises :class:`UserError` when the first is not a system message or one is not what a
    chat server takes (an edited or damaged log)."""
    history: list[dict[str, Any]] = []
    for e in record.events:
        if isinstance(e, Message):
            history.append(e.message)
        elif isinstance(e, Compaction):
            history = list(e.messages)
    if not history or history[0].get("role") != "system":
        raise UserError(f"session '{record.session_id}' has no recorded system message; "
                        "it cannot be resumed")
    for n, message in enumerate(history, 1):
        problem = _unsendable(message)
        if problem:
            # A field trial: a message of role "alien" was resumed, and every turn after it
            # failed with the server's 400 (the session could never go on).
            raise UserError(f"session '{record.session_id}' cannot be resumed: message {n} of "
                            f"its history {problem} (the log was edited or damaged)")
    return history


_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _unsendable(message: object) -> str:
    """Why ``message`` (from a session log) is not one this product writes and a chat server
    takes, or ``""``: a role other than system/user/assistant/tool, or content that is neither
    text nor a list of text parts."""
    if not isinstance(message, dict):
        return "is not an object"
    if message.get("role") not in _ROLES:
        return f"has the role {str(message.get('role'))[:40]!r}"
    content = message.get("content")
    if content is None or isinstance(content, str):
        return ""
    if isinstance(content, list) and all(
            isinstance(part, dict) and part.get("type") == "text"
            and isinstance(part.get("text"), str) for part in content):
        return ""
    return "has content that is neither text nor text parts"


def activated_skills(record: SessionRecord) -> list[str]:
    """Skills a resumed session had activated (their content is in its history)."""
    ok = {e.call_id for e in record.events if isinstance(e, ToolResult) and not e.is_error}
    return [str(e.arguments.get("name")) for e in record.events
            if isinstance(e, ToolCall) and e.name == SKILL_TOOL and e.call_id in ok]


def unanswered(record: SessionRecord,
                agent: Agent) -> tuple[list[dict[str, Any]], list[ToolResult]]:
    """Result messages for the calls of the last reply that never got one (the process died
    mid-tool), and the ``tool_result`` events to log for those that never finished.

    The calls are those of the last assistant message (its wire ``tool_calls``, else its
    ``model_turn``; an injected call has only its ``tool_call`` event), up to a final answer:
    also a call that never started gets an answer ("not run"). What counts is what was sent:
    a result message in the log answers its call even when the process died before the
    ``tool_result`` event that follows it (answering it again would put two results for one
    call id into the next request). A call that finished but whose result was never sent
    (``text`` sends a reply's results together) gets its logged result. ``text`` results go
    back as one user message, as the loop sends them.
    """
    events = record.events
    last = max((i for i, e in enumerate(events) if isinstance(e, Message)
                and e.message.get("role") == "assistant"), default=None)
    if last is None:
        return [], []
    reply, tail = events[last].message, events[last + 1:]
    if any(isinstance(e, Compaction) for e in tail):
        return [], []  # compacted before the next request: every result was in
    turn = events[last - 1] if last else None
    step = turn.step if isinstance(turn, ModelTurn) else 0
    calls: list[tuple[str, str, int]] = []
    if reply.get("tool_calls"):
        calls = [(c["id"], c["function"]["name"], step) for c in reply["tool_calls"]]
    elif isinstance(turn, ModelTurn):
        calls = [(c.id, c.name, step) for c in turn.tool_calls]
    known = {c[0] for c in calls}
    calls += [(e.call_id, e.name, e.step) for e in tail
              if isinstance(e, ToolCall) and e.call_id not in known]
    names = [name for _, name, _ in calls]
    if FINAL_ANSWER in names:
        calls = calls[:names.index(FINAL_ANSWER)]  # the task ended; later calls never run
    pending = list(calls)
    for e in tail:
        if not isinstance(e, Message):
            continue
        message = e.message
        if message.get("role") == "tool":
            pending = [c for c in pending if c[0] != message.get("tool_call_id")]
        elif message.get("role") == "user":
            # Results sent as user messages (json without a tool role; text, where one
            # message holds every result of a reply) carry tool names, not call ids: each
            # "[result of tool X]" answers the oldest pending call of X.
            content = str(message.get("content") or "")
            for name in {c[1] for c in pending}:
                count = content.count(RESULT_PREFIX.format(name=name))
                hits = [c for c in pending if c[1] == name][:count]
                pending = [c for c in pending if c not in hits]
    started = {e.call_id for e in tail if isinstance(e, ToolCall)}
    finished = {e.call_id: e for e in tail if isinstance(e, ToolResult)}
    messages: list[dict[str, Any]] = []
    results: list[ToolResult] = []
    for call_id, name, call_step in pending:
        done = finished.get(call_id)
        if done is not None:
            text = ("ERROR: " if done.is_error else "") + done.text
        else:
            text = INTERRUPTED if call_id in started else NOT_RUN
            results.append(ToolResult(session_id=record.session_id, step=call_step,
                                      call_id=call_id, name=name, text=text, is_error=True,
                                      duration_s=0.0))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text}
                        if reply.get("tool_calls")
                        else agent.calls.result_message(call_id, name, text))
    if len(messages) > 1 and all(m["role"] == "user" for m in messages):
        messages = [{"role": "user", "content": "\n\n".join(m["content"] for m in messages)}]
    return messages, results
