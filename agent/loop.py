"""The agent loop: one step = one model call + the tool calls it asked for.

Stops on a final answer, a step or time limit, repeated identical calls, too many malformed
replies, or Ctrl-C. Every tool call id gets exactly one tool message, also on error or
interrupt (FIELD-CASES.md class 11).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.client import ContextOverflow, ServerClient, Turn
from agent.context import PROTECTED, ContextKeeper
from agent.doom import LoopDetector
from agent.events import (
    Compaction,
    Event,
    FinalAnswer,
    Message,
    ModelTurn,
    Timings,
    ToolCall,
    ToolCallInfo,
    ToolResult,
)
from agent.prompts import switch_note
from agent.protocol import (
    FINAL_ANSWER,
    FormatError,
    calls_in_text,
    json_response_format,
    lenient_json,
    parse_json_call,
    tools_with_final,
)
from tools.registry import Registry

Protocol = Literal["native", "json"]
MAX_FORMAT_ERRORS = 3
RESULT_PREFIX = "[result of tool {name}]\n"
NOTE = ("\n[note: {report}; once more stops the task. Do the next step, or call "
        "final_answer if the task is done.]")


class ApprovalUnavailable(Exception):
    """A call needs the user's approval and nobody can be asked (stdin is not a terminal)."""


Approver = Callable[[dict[str, Any]], str | None]
"""Called before each tool call: None approves; a string denies, with the user's reason.
May raise :class:`ApprovalUnavailable`."""


@dataclass
class Limits:
    max_steps: int = 30
    max_time: float = 1800.0
    """Seconds."""


@dataclass
class LoopResult:
    text: str
    reason: str
    steps: int
    timings: list[Timings] = field(default_factory=list)


class Agent:
    """Runs tasks against ``client`` with the tools of ``registry``.

    ``protocol`` is ``native`` or ``json``; ``auto_switch`` moves a native session to ``json``
    once the model writes tool calls as text. ``tool_role`` says whether the chat template
    renders ``tool`` messages (else json-protocol results go back as ``user`` messages).
    ``history`` resumes a session: the exact messages sent before (system message first).
    """

    def __init__(self, client: ServerClient, registry: Registry, *, session_id: str,
                 protocol: Protocol, system: str, emit: Callable[[Event], None],
                 sampling: dict[str, Any] | None = None, limits: Limits | None = None,
                 auto_switch: bool = False, tool_role: bool = True, max_tokens: int = 2048,
                 approve: Approver | None = None,
                 history: list[dict[str, Any]] | None = None,
                 context: ContextKeeper | None = None, ui: Any = None):
        self.client, self.registry, self.session_id = client, registry, session_id
        self.protocol, self.auto_switch, self.tool_role = protocol, auto_switch, tool_role
        self.emit, self.sampling = emit, sampling or {}
        self.limits, self.max_tokens = limits or Limits(), max_tokens
        self.approve, self.context = approve, context
        # Optional live display: request_started(protocol) and stream(text) (agent.ui.Reporter).
        self.ui = ui
        if context is not None and context.budget is not None:
            self.max_tokens = min(max_tokens, context.budget.max_output)
        self.messages: list[dict[str, Any]] = list(history or [])
        if not self.messages:
            self._add({"role": "system", "content": system})
        self.tools = registry.openai_tools()
        self.steps = 0
        self.timings: list[Timings] = []
        self._loops = LoopDetector()
        self._format_errors = 0
        self._pending: list[tuple[str, str]] = []
        self._native_calls_seen = False

    def run(self, task: str,
            first_calls: list[tuple[str, dict[str, Any]]] | None = None) -> LoopResult:
        """Run ``task`` to a final answer or a stop; never raises on Ctrl-C.

        ``first_calls`` (tool name, arguments) run right after the task message as if the model
        had made them (``agent run --skill``), so the history reads like one it wrote."""
        self.steps, self._loops, self._format_errors = 0, LoopDetector(), 0
        self._add({"role": "user", "content": task})
        started = time.monotonic()
        try:
            for name, arguments in first_calls or []:
                self._inject(name, arguments)
            while True:
                if self.steps >= self.limits.max_steps:
                    return self._finish("", "max_steps")
                if time.monotonic() - started > self.limits.max_time:
                    return self._finish("", "max_time")
                self.steps += 1
                try:
                    outcome = self._step()
                except ApprovalUnavailable as exc:
                    self._deny_pending(str(exc))
                    return self._finish(str(exc), "approval_needed")
                if outcome is not None:
                    return self._finish(*outcome)
        except KeyboardInterrupt:
            self._deny_pending("interrupted by the user before this call finished")
            return self._finish("", "interrupted")

    def _add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.emit(Message(session_id=self.session_id, message=message))

    def _deny_pending(self, reason: str) -> None:
        for call_id, name in list(self._pending):
            self._answer(call_id, name, reason, True, 0.0)
        self._pending.clear()

    def _finish(self, text: str, reason: str) -> LoopResult:
        self.emit(FinalAnswer(session_id=self.session_id, text=text, reason=reason,
                              steps=self.steps))
        return LoopResult(text=text, reason=reason, steps=self.steps, timings=self.timings)

    def _request(self) -> Turn:
        tools = None if self.protocol == "json" else self.tools
        if self.context is not None:
            compacted = self.context.before_request(self.messages, tools)
            if compacted is not None:
                self._replace_history(compacted)
        try:
            return self._send()
        except ContextOverflow as exc:
            if self.context is None or self.context.budget is None:
                raise
            # Our estimate was low: compact once more, tighter, and retry once.
            self._replace_history(self.context.after_overflow(self.messages, tools,
                                                              exc.n_prompt_tokens))
            return self._send()

    def compact(self) -> bool:
        """Compact the history now (``/compact``); False when the context size is unknown."""
        if self.context is None or self.context.budget is None:
            return False
        tools = None if self.protocol == "json" else self.tools
        self._replace_history(self.context.compact_now(self.messages, tools))
        return True

    def _replace_history(self, messages: list[dict[str, Any]]) -> None:
        self.messages[:] = messages
        self.emit(Compaction(session_id=self.session_id, messages=messages))

    def _send(self) -> Turn:
        on_text = None
        if self.ui is not None:
            self.ui.request_started(self.protocol)
            on_text = self.ui.stream
        try:
            if self.protocol == "json":
                return self.client.complete(self.messages, sampling=self.sampling,
                                            response_format=json_response_format(self.tools),
                                            max_tokens=self.max_tokens, on_text=on_text)
            return self.client.complete(self.messages, tools=self.tools, sampling=self.sampling,
                                        max_tokens=self.max_tokens, on_text=on_text)
        finally:
            if self.ui is not None:
                self.ui.request_done()

    def _step(self) -> tuple[str, str] | None:
        protocol = self.protocol
        turn = self._request()
        if turn.timings:
            self.timings.append(turn.timings)
        try:
            calls = self._calls(turn)
        except FormatError as exc:
            self._log_turn(turn, protocol, [])
            if turn.finish_reason == "length":
                return self._cut(turn)
            return self._format_error(turn, str(exc))
        self._log_turn(turn, protocol, calls)
        if not calls and turn.finish_reason == "length":
            return self._cut(turn)
        if not calls:
            self._add({"role": "assistant", "content": turn.content})
            if self.auto_switch and self.protocol == "native" and not self._native_calls_seen:
                # A model that answers in prose before ever calling a tool natively does not
                # speak the template's tool format: continue under the json grammar.
                self._switch_to_json()
                return None
            return turn.content.strip(), "done"
        self._format_errors = 0
        if protocol == "json":
            self._add({"role": "assistant", "content": turn.content})
        else:
            self._add({"role": "assistant", "content": turn.content or None,
                       "tool_calls": [_wire(c) for c in calls]})
        self._pending = [(c["id"], c["name"]) for c in calls]
        for call in calls:
            if call["name"] == FINAL_ANSWER:
                text = call["arguments"].get("text")
                self._pending.clear()
                return (text if isinstance(text, str) else json.dumps(call["arguments"])), "done"
            verdict = self._loops.observe(call["name"], call["arguments"])
            if verdict == "stop":
                self._deny_pending(f"not executed: {self._loops.report}")
                return f"stopped: {self._loops.report}", "repeated_call"
            denial = self.approve(call) if self.approve else None
            if denial is not None:
                self._answer(call["id"], call["name"], f"denied by the user: {denial}", True, 0.0)
                continue
            self._execute(call, NOTE.format(report=self._loops.report) if verdict == "warn"
                          else "")
        return None

    def _inject(self, name: str, arguments: dict[str, Any]) -> None:
        call = {"id": _new_id(), "name": name, "arguments": arguments}
        if self.protocol == "json":
            self._add({"role": "assistant",
                       "content": json.dumps({"tool": name, "arguments": arguments})})
        else:
            self._add({"role": "assistant", "content": None, "tool_calls": [_wire(call)]})
        self._execute(call)

    def _calls(self, turn: Turn) -> list[dict[str, Any]]:
        if self.protocol == "json":
            name, args = parse_json_call(turn.content)
            return [{"id": _new_id(), "name": name, "arguments": args}]
        calls = []
        for raw in turn.tool_calls:
            try:
                args = lenient_json(raw["arguments"]) if raw["arguments"].strip() else {}
            except ValueError as exc:
                raise FormatError(f"arguments of {raw['name']} are not valid JSON: {exc}") from exc
            calls.append({"id": raw["id"] or _new_id(), "name": raw["name"],
                          "arguments": args})
        if calls:
            self._native_calls_seen = True
            return calls
        written = calls_in_text(turn.content, set(self.registry.tools))
        if written and self.auto_switch:
            self._switch_to_json(note=False)
        if not written and turn.finish_reason == "tool_calls":
            raise FormatError("finish_reason was tool_calls but no call arrived; call a tool "
                              "with valid arguments")
        if not written and not turn.content.strip():
            # Reasoning that ran out of tokens, or nothing at all: never a silent stop.
            raise FormatError("the reply had no answer and no tool call; call a tool, or reply "
                              "with a short summary when the task is done")
        return [{"id": _new_id(), "name": n, "arguments": a} for n, a in written]

    def _cut(self, turn: Turn) -> tuple[str, str]:
        """Stop on a reply cut by max_tokens: unfinished (often a runaway repetition), so
        neither an answer nor a format error to retry at the same limit."""
        self._add({"role": "assistant", "content": turn.content})
        return (f"the model's reply was cut at the token limit ({len(turn.content)} "
                "characters) before it called a tool or finished"), "length"

    def _switch_to_json(self, note: bool = True) -> None:
        self.protocol = "json"
        self.auto_switch = False
        if note:
            self._add({"role": "user", "content": switch_note(tools_with_final(self.tools))})

    def _format_error(self, turn: Turn, message: str) -> tuple[str, str] | None:
        self._format_errors += 1
        self._add({"role": "assistant", "content": turn.content})
        self._add({"role": "user", "content": f"Format error: {message}"})
        if self._format_errors >= MAX_FORMAT_ERRORS:
            return f"stopped after {MAX_FORMAT_ERRORS} malformed replies: {message}", \
                "format_errors"
        return None

    def _execute(self, call: dict[str, Any], note: str = "") -> None:
        self.emit(ToolCall(session_id=self.session_id, step=self.steps, call_id=call["id"],
                           name=call["name"], arguments=call["arguments"]))
        started = time.monotonic()
        obs = self.registry.call(call["name"], call["arguments"])
        self._answer(call["id"], call["name"], obs.text + note, obs.is_error,
                     time.monotonic() - started, obs.protected)

    def _answer(self, call_id: str, name: str, text: str, is_error: bool,
                duration: float, protected: bool = False) -> None:
        self._pending = [p for p in self._pending if p[0] != call_id]
        content = ("ERROR: " if is_error else "") + text
        if self.protocol == "json" and not self.tool_role:
            message = {"role": "user", "content": RESULT_PREFIX.format(name=name) + content}
        else:
            message = {"role": "tool", "tool_call_id": call_id, "content": content}
        # Compaction keeps flagged messages verbatim (agent.context.PROTECTED).
        self._add({**message, PROTECTED: True} if protected else message)
        self.emit(ToolResult(session_id=self.session_id, step=self.steps, call_id=call_id,
                             name=name, text=text, is_error=is_error,
                             duration_s=round(duration, 3)))

    def _log_turn(self, turn: Turn, protocol: str, calls: list[dict[str, Any]]) -> None:
        self.emit(ModelTurn(session_id=self.session_id, step=self.steps, protocol=protocol,
                            content=turn.content, finish_reason=turn.finish_reason,
                            usage=turn.usage, timings=turn.timings,
                            tool_calls=[ToolCallInfo(id=c["id"], name=c["name"],
                                                     arguments=c["arguments"]) for c in calls]))


def _new_id() -> str:
    # Unique across tasks and resumes: resume matches results to calls by id.
    return f"call_{secrets.token_hex(6)}"


def _wire(call: dict[str, Any]) -> dict[str, Any]:
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"],
                         "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}
