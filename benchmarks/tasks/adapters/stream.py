"""Reading dflash-agent's ``agent run --json`` event stream (agent/events.py) into the
record's fields: model turns with llama-server's timings, tool calls by name, malformed replies,
refused arguments, protocol fallbacks and the stop reason."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

INVALID_ARGS = ("invalid arguments for ", "unknown tool ")
"""How a tool result that refused a call's arguments (or its tool name) starts."""
FORMAT_ERROR = "Format error:"
"""How the loop's feedback on a malformed reply starts (agent/loop.py)."""


@dataclass
class Stream:
    """Totals of one ``agent run --json`` event stream."""

    steps: int = 0
    turns: int = 0
    tool_calls: Counter = field(default_factory=Counter)
    format_errors: int = 0
    invalid_arguments: int = 0
    tool_errors: int = 0
    fallbacks: int = 0
    protocol: str | None = None
    model: str | None = None
    prefilled: int = 0
    cached: int = 0
    decoded: int = 0
    decode_ms: float = 0.0
    drafted: int | None = None
    accepted: int = 0
    turns_without_timings: int = 0
    stop_reason: str | None = None
    final_text: str = ""
    error: str | None = None
    unreadable_lines: int = 0
    call_ids: set[str] = field(default_factory=set)
    final_calls: list[str] = field(default_factory=list)


def read_stream(lines: Iterable[str]) -> Stream:
    """Add up an ``agent run --json`` stream (agent/events.py): model turns (llama-server's
    ``timings``: ``prompt_n`` prefilled, ``cache_n`` cached, ``predicted_n`` decoded in
    ``predicted_ms``, ``draft_n``/``draft_n_accepted``), tool calls by name, malformed replies
    (the loop's "Format error:" feedback), calls refused for their arguments, other failed
    calls, protocol fallbacks and the final event's stop reason."""
    s = Stream()
    for line in lines:
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            s.unreadable_lines += 1
            continue
        if not isinstance(ev, dict):
            s.unreadable_lines += 1
            continue
        kind = ev.get("type")
        if kind == "session_start":
            s.model = ev.get("model")
        elif kind == "protocol":
            s.protocol = ev.get("protocol")
            s.fallbacks += bool(ev.get("previous"))
        elif kind == "model_turn":
            _add_turn(s, ev)
        elif kind == "tool_call":
            s.tool_calls[str(ev.get("name"))] += 1
            s.call_ids.add(str(ev.get("call_id")))
        elif kind == "tool_result" and ev.get("is_error"):
            if str(ev.get("text", "")).startswith(INVALID_ARGS):
                s.invalid_arguments += 1
            else:
                s.tool_errors += 1
        elif kind == "message":
            message = ev.get("message") or {}
            if message.get("role") == "user" and \
                    str(message.get("content", "")).startswith(FORMAT_ERROR):
                s.format_errors += 1
        elif kind == "final_answer":
            s.stop_reason = ev.get("reason")
            s.steps = int(ev.get("steps") or s.steps)
            s.final_text = str(ev.get("text", ""))[:300]
        elif kind == "error":
            s.error = f"{ev.get('kind')}: {ev.get('message')}"[:300]
    # a final_answer the loop refused (nothing done yet) has its tool_call event already
    s.tool_calls["final_answer"] += sum(i not in s.call_ids for i in s.final_calls)
    if not s.tool_calls["final_answer"]:
        del s.tool_calls["final_answer"]
    return s


def _add_turn(s: Stream, ev: dict[str, Any]) -> None:
    s.turns += 1
    s.steps = max(s.steps, int(ev.get("step") or 0))
    for call in ev.get("tool_calls") or []:
        if call.get("name") == "final_answer":  # taken, it ends the loop with no tool_call
            s.final_calls.append(str(call.get("id")))
    t = ev.get("timings")
    if not t:
        s.turns_without_timings += 1
        usage = ev.get("usage") or {}
        s.prefilled += int(usage.get("prompt_tokens") or 0)
        s.decoded += int(usage.get("completion_tokens") or 0)
        return
    s.prefilled += int(t.get("prompt_n") or 0)
    s.cached += int(t.get("cache_n") or 0)
    s.decoded += int(t.get("predicted_n") or 0)
    s.decode_ms += float(t.get("predicted_ms") or 0.0)
    if t.get("draft_n") is not None:
        s.drafted = (s.drafted or 0) + int(t["draft_n"])
        s.accepted += int(t.get("draft_n_accepted") or 0)


def stream_fields(s: Stream) -> dict[str, Any]:
    """The record's fields from a stream's totals."""
    draft = None
    if s.drafted is not None:
        draft = {"drafted": s.drafted, "accepted": s.accepted,
                 "acceptance": round(s.accepted / s.drafted, 4) if s.drafted else None}
    return {"steps": s.steps, "tool_calls": dict(sorted(s.tool_calls.items())),
            "tool_calls_total": sum(s.tool_calls.values()),
            "malformed": {"format_errors": s.format_errors,
                          "invalid_arguments": s.invalid_arguments,
                          "total": s.format_errors + s.invalid_arguments},
            "tool_errors": s.tool_errors, "protocol": s.protocol,
            "protocol_fallbacks": s.fallbacks, "model": s.model,
            "prompt_tokens": {"prefilled": s.prefilled, "cached": s.cached},
            "decode_tokens": s.decoded,
            "decode_tok_s": round(s.decoded / (s.decode_ms / 1000), 2) if s.decode_ms else None,
            "draft": draft, "turns_without_timings": s.turns_without_timings,
            "final_text": s.final_text}
