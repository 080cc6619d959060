"""The agent loop: one step = one model call + the tool calls it asked for.

Stops on a final answer, a step or time limit (also inside a model step: the stream is closed
when the time runs out), repeated calls, too many malformed replies, a reply cut by max_tokens,
or Ctrl-C. Each tool call gets one result, on error or interrupt too (docs/design/field-cases.md).

Requests are append-only: replies are stored verbatim (a cut reply as a short marker), and a
protocol fallback appends a note while the request keeps the shape it had (the ``tools`` field
of a session that started ``native`` stays), so the prompt the server renders keeps its prefix.
User and assistant turns alternate, as strict chat templates (Mistral, Gemma 2) demand: a user
message that would follow another gets a short assistant line first (:meth:`Agent._add`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.approvals import ApprovalUnavailable, Approver, CallRefused
from agent.client import ContextOverflow, ServerClient, TimeLimitReached, Turn
from agent.context import PROTECTED, ContextKeeper
from agent.doom import LoopDetector
from agent.errors import interrupted_by
from agent.events import (
    Compaction,
    Event,
    FinalAnswer,
    Message,
    ModelTurn,
    ProtocolChoice,
    Timings,
    ToolCall,
    ToolCallInfo,
    ToolResult,
)
from agent.finish import AFTER_CALLS, STOPPED_BEFORE_REPLY, STOPS, Ledger
from agent.prompts import JSON_SWITCH, switch_note
from agent.protocols.base import FINAL_ANSWER, FormatError, tools_with_final
from agent.protocols.calls import JOINED, Call, CallProtocol, Protocol, last_speaker
from agent.protocols.choice import ProtocolDecision
from agent.repeats import REPEATED, RepeatGuard
from tools.aliases import renamed_note
from tools.registry import Registry

MAX_FORMAT_ERRORS = 3
FALLBACK_AFTER = 2
"""Malformed replies in a row after which a session with a fallback protocol takes it."""
KEEP_CUT_CHARS = 200
"""Characters of a reply cut by max_tokens kept in the history (the rest is a runaway)."""
NOTE = ("\n[note: {report}; once more stops the task. Do the next step, or call "
        "final_answer if the task is done.]")
TASK_AGAIN = "The task: {task}"
"""Ends the results of the calls the product makes before the model's first step."""
BRIDGE = "[no reply: {why}]"
"""An assistant message put between two user messages (see :meth:`Agent._add`)."""
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

    ``protocol`` is ``text``, ``json`` or ``native``. ``auto_switch`` is the session's
    :class:`ProtocolDecision` (``runtime.choose_protocol``): logged before the first request,
    it names the fallback protocol (``json``) taken after repeated format errors, or when a
    ``native`` model answers in prose or writes calls as text; ``True`` means fallback ``json``
    without a logged decision. ``tool_role`` says whether the chat template renders ``tool``
    messages (else json-protocol results go back as ``user`` messages; text-protocol results
    always do, one message per reply). ``history`` resumes a session: the exact messages sent
    before (system message first); a json fallback in it is kept.
    """

    def __init__(self, client: ServerClient, registry: Registry, *, session_id: str,
                 protocol: Protocol, system: str, emit: Callable[[Event], None],
                 sampling: dict[str, Any] | None = None, limits: Limits | None = None,
                 auto_switch: bool | ProtocolDecision = False, tool_role: bool = True,
                 max_tokens: int = 2048,
                 approve: Approver | None = None,
                 history: list[dict[str, Any]] | None = None,
                 context: ContextKeeper | None = None, ui: Any = None):
        self.client, self.registry, self.session_id = client, registry, session_id
        self.emit, self.sampling = emit, sampling or {}
        self.limits, self.max_tokens = limits or Limits(), max_tokens
        self.approve, self.context = approve, context
        # Optional live display: request_started(protocol, idle_timeout), stream(text),
        # received(tokens), request_done() and told_model(text) (agent.ui.Reporter).
        self.ui = ui
        if context is not None and context.budget is not None:
            self.max_tokens = min(max_tokens, context.budget.max_output)
        self.messages: list[dict[str, Any]] = list(history or [])
        self.calls = CallProtocol(protocol, registry, tool_role=tool_role)
        self.fallback = self._take(auto_switch)
        if not self.messages:
            self._add({"role": "system", "content": system})
        self.steps = 0
        self.timings: list[Timings] = []
        self._loops = LoopDetector()
        self.repeats = RepeatGuard()
        self._format_errors = 0
        self._pending: list[tuple[str, str]] = []
        self._results: list[tuple[str, bool]] = []
        """Text-protocol results of the current reply: (content, protected), sent as one."""
        self._deadline: float | None = None
        """``time.monotonic()`` at which the running task's ``max_time`` runs out."""
        self.ledger = Ledger(registry)
        """What the running task's calls did: whether a final answer stands."""
        self._stopped = "the task stopped before a reply"
        """Why the last task ended, for a bridge before the next task's message (the default
        covers a resumed history, whose filler results end it)."""

    @property
    def protocol(self) -> Protocol:
        """The tool-call protocol the next request uses."""
        return self.calls.name

    def _take(self, decision: bool | ProtocolDecision) -> str | None:
        """The fallback protocol allowed; logs a new session's decision, and continues a
        resumed history that already fell back in json."""
        if any(m.get("role") == "user" and JSON_SWITCH in str(m.get("content"))
               for m in self.messages):
            self.calls.switch("json")
            return None
        if not isinstance(decision, ProtocolDecision):
            return "json" if decision and self.protocol != "json" else None
        if not self.messages:
            self.emit(ProtocolChoice(session_id=self.session_id, protocol=self.protocol,
                                     reason=decision.reason, setting=decision.setting,
                                     fallback=decision.fallback, facts=dict(decision.facts)))
        return decision.fallback

    def run(self, task: str,
            first_calls: list[tuple[str, dict[str, Any]]] | None = None) -> LoopResult:
        """Run ``task`` to a final answer or a stop; never raises on Ctrl-C.

        ``first_calls`` (tool name, arguments) run right after the task message as if the model
        had made them (``agent run --skill``), so the history reads like one it wrote."""
        self.steps, self._loops, self._format_errors = 0, LoopDetector(), 0
        self.ledger.reset()
        self.repeats.reset()
        self._add({"role": "user", "content": task}, why=self._stopped)
        started = time.monotonic()
        self._deadline = started + self.limits.max_time
        try:
            for n, (name, arguments) in enumerate(first_calls or [], 1):
                self._inject(name, arguments)
                if n == len(first_calls or []) and self._results:
                    # The task again after what the product read for the model: a small model
                    # that saw a file last echoed it back unchanged (issue 49); aider, too,
                    # puts the files first and the request last.
                    self._results.append((TASK_AGAIN.format(task=task), False))
                self._flush_results()
            self.ledger.reset()  # the product's calls, not the model's work
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
        except KeyboardInterrupt as exc:
            cause = interrupted_by(exc)
            self._deny_pending(f"interrupted by {cause} before this call finished" if cause
                               else "interrupted by the user before this call finished")
            return self._finish(cause, "interrupted")

    def _add(self, message: dict[str, Any], why: str = "the results above came first") -> None:
        """Append ``message`` to the history and log it.

        A user message that would follow another (a task that ended on a tool result, a
        switch note after results) gets an assistant message saying ``why`` first: chat
        templates that insist on alternating roles (Mistral, Gemma 2) refuse two user messages
        in a row, Mistral's also across tool results and tool-calling assistant messages. A
        message of its own rather than a merge keeps the history append-only (the prompt
        cache, and a resume replays the log)."""
        if message.get("role") == "user" and last_speaker(self.messages) == "user":
            bridge = {"role": "assistant", "content": BRIDGE.format(why=why)}
            self.messages.append(bridge)
            self.emit(Message(session_id=self.session_id, message=bridge))
        self.messages.append(message)
        self.emit(Message(session_id=self.session_id, message=message))

    def _tell(self, content: str, why: str = "the results above came first") -> None:
        """Send ``content`` as a user message the agent writes on its own (a format error's
        feedback, a protocol switch) and show it: the model reads it as the user's words, so
        the user sees it too. ``why`` as for :meth:`_add`."""
        self._add({"role": "user", "content": content}, why=why)
        if self.ui is not None:
            self.ui.told_model(content)

    def _deny_pending(self, reason: str) -> None:
        for call_id, name in list(self._pending):
            self._answer(call_id, name, reason, True, 0.0)
        self._pending.clear()
        self._flush_results()

    def _finish(self, text: str, reason: str) -> LoopResult:
        self._stopped = STOPPED_BEFORE_REPLY.get(reason, f"the task stopped ({reason})")
        self.emit(FinalAnswer(session_id=self.session_id, text=text, reason=reason,
                              steps=self.steps))
        return LoopResult(text=text, reason=reason, steps=self.steps, timings=self.timings)

    def _request(self) -> Turn:
        tools = self.calls.offered
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
        self._replace_history(self.context.compact_now(self.messages, self.calls.offered))
        return True

    def _replace_history(self, messages: list[dict[str, Any]]) -> None:
        self.messages[:] = messages
        self.emit(Compaction(session_id=self.session_id, messages=messages))

    def _send(self) -> Turn:
        on_text = on_chunk = None
        if self.ui is not None:
            self.ui.request_started(self.protocol, self.client.idle_timeout)
            on_text, on_chunk = self.ui.stream, self.ui.received
        try:
            return self.client.complete(self.messages, **self.calls.request_fields(),
                                        sampling=self.repeats.sampling(self.sampling,
                                                                        self.steps),
                                        max_tokens=self.max_tokens,
                                        on_text=on_text, on_chunk=on_chunk,
                                        deadline=self._deadline,
                                        stop_at=self.calls.stop_at())
        finally:
            if self.ui is not None:
                self.ui.request_done()

    def _step(self) -> tuple[str, str] | None:
        protocol = self.protocol
        try:
            turn = self._request()
        except TimeLimitReached as exc:
            return self._out_of_time(exc.turn, protocol)
        if turn.timings:
            self.timings.append(turn.timings)
        if protocol in JOINED and turn.finish_reason == "length":
            # Whatever parsed before the cut is part of a runaway: nothing of it runs.
            self._log_turn(turn, protocol, [])
            return self._cut(turn, self.calls.cut_detail(turn))
        try:
            calls = self.calls.parse(turn)
        except FormatError as exc:
            self._log_turn(turn, protocol, [])
            if turn.finish_reason == "length":
                return self._cut_or_switch(turn)
            return self._format_error(turn, str(exc))
        if self.repeats.is_repeat(turn.content, turn.tool_calls, self.sampling, calls):
            self._log_turn(turn, protocol, [], repeated=True)
            self._add(self.calls.assistant_message(turn, []))
            # Held back, yet called: three in a row still stop the task, as before.
            if "stop" in [self._loops.observe(c["name"], c["arguments"]) for c in calls]:
                return f"stopped: {self._loops.report}", "repeated_call"
            self._tell(self.calls.own_words(REPEATED))
            return None
        self._log_turn(turn, protocol, calls)
        if not calls and turn.finish_reason == "length":
            return self._cut_or_switch(turn)
        self._add(self.calls.assistant_message(turn, calls))
        if not calls:
            if self._never_called_natively():
                # A model that answers in prose before ever calling a tool natively does not
                # speak the template's tool format.
                self._switch("the model answered in prose before any native tool call")
                return None
            return self._final(turn.content.strip(), tell=True)
        self._format_errors = 0
        self._pending = [(c["id"], c["name"]) for c in calls]
        outcome = self._run(calls)
        self._flush_results()
        if outcome is None and protocol == "native" and self.fallback and not turn.tool_calls:
            self._switch("the model wrote its tool call as text instead of a native call")
        return outcome

    def _run(self, calls: list[Call]) -> tuple[str, str] | None:
        """Run ``calls`` in order; the task's outcome when one ends it."""
        ran = failed = 0
        for call in calls:
            if call["name"] == FINAL_ANSWER:
                self.ledger.reply_ended(ran, failed)
                text = call["arguments"].get("text")
                text = text if isinstance(text, str) else json.dumps(call["arguments"])
                if not ran:
                    return self._final(text, call=call)
                self._show(call)
                self._answer(call["id"], call["name"], AFTER_CALLS, True, 0.0, counted=False)
                self._deny_pending("not executed: it came after final_answer")
                return None
            ran += 1
            verdict = self._loops.observe(call["name"], call["arguments"])
            if verdict == "stop":
                # shown like the calls it repeats, so the lines on screen add up to the stop's
                # "called N times"
                self._show(call)
                self._deny_pending(f"not executed: {self._loops.report}")
                return f"stopped: {self._loops.report}", "repeated_call"
            try:
                denial = self.approve(call) if self.approve else None
            except CallRefused as exc:
                self._show(call)  # the user sees what was refused, as for a repeated call
                failed += self._answer(call["id"], call["name"], str(exc), True, 0.0)
                continue
            if denial is not None:
                failed += self._answer(call["id"], call["name"], f"denied by the user: {denial}",
                                       True, 0.0)
                continue
            failed += self._execute(call, self.calls.own_words(NOTE.format(
                report=self._loops.report)) if verdict == "warn" else "")
        self.ledger.reply_ended(ran, failed)
        return None

    def _final(self, text: str, call: Call | None = None, tell: bool = False
               ) -> tuple[str, str] | None:
        """The task's outcome for a final answer, or None when it is refused
        (:class:`agent.finish.Ledger`): the refusal answers ``call``, or is told as a message
        (``tell``: a final answer in prose has no call to answer). A refusal that would only
        repeat itself stops the task instead."""
        refusal, stop = self.ledger.refusal()
        if not refusal:
            self._pending.clear()
            return text, "done"
        if stop is not None and refusal in self.ledger.refused:
            self._deny_pending("not executed: the task stopped")
            return f"the model ended the task, but {STOPS[stop]}", stop
        self.ledger.refused.add(refusal + self.ledger.key)
        if call is not None:
            self._show(call)
            self._answer(call["id"], call["name"], refusal, True, 0.0, counted=False)
            self._deny_pending("not executed: it came after final_answer")
        elif tell:
            self._tell(self.calls.own_words(refusal))
        return None

    def _inject(self, name: str, arguments: dict[str, Any]) -> None:
        call, message = self.calls.injected(name, arguments)
        self._add(message)
        self._execute(call)

    def _never_called_natively(self) -> bool:
        """A native session that may still fall back and has had no native call yet."""
        return bool(self.fallback) and self.protocol == "native" \
            and not self.calls.native_calls_seen

    def _cut(self, turn: Turn, where: str = "before it called a tool or finished"
             ) -> tuple[str, str]:
        """Stop on a reply cut by max_tokens (unfinished, often a runaway: no answer, no format
        error to retry); the history keeps its start and a marker, not the runaway."""
        n = self._keep_cut(turn)
        return f"the model's reply was cut at the token limit ({n} characters) {where}", \
            "length"

    def _keep_cut(self, turn: Turn) -> int:
        """Add a cut reply to the history as its start and a marker; its length."""
        n = len(turn.content)
        self._add({"role": "assistant", "content": turn.content[:KEEP_CUT_CHARS]
                   + f" [... reply cut at the token limit after {n} characters; not run]"})
        return n

    def _cut_or_switch(self, turn: Turn) -> tuple[str, str] | None:
        """A reply cut by max_tokens without a call: :meth:`_cut`, except in a native session
        whose model never made a native call: it wrote what the template's parser did not take
        (SmolLM2, some CPUs), so the session falls back (once) instead of stopping."""
        if not self._never_called_natively():
            return self._cut(turn)
        n = self._keep_cut(turn)
        self._switch(f"the model ran to the token limit ({n} characters) before any native "
                     "tool call")
        return None

    def _out_of_time(self, turn: Turn, protocol: str) -> tuple[str, str]:
        """Stop on ``max_time`` reached inside a model step (the client closed the stream).
        The partial reply is logged, not kept in the history: like a reply cut by Ctrl-C, it
        is unfinished, and the next task's message is bridged (:meth:`_add`)."""
        turn.finish_reason = "max_time"
        self._log_turn(turn, protocol, [])
        n = len(turn.content)
        got = f"after {n} characters" if n else "before its first token (the server was " \
            "still reading the prompt)"
        return (f"the time limit ran out during model call {self.steps}; its reply was "
                f"stopped {got}"), "max_time"

    def _switch(self, reason: str, before: str = "") -> None:
        """Take the fallback protocol: one user message (``before`` + how to call tools now);
        the system prompt and earlier messages stay as they were sent."""
        previous = self.protocol
        self.calls.switch(self.fallback or "json")
        self.fallback = None
        self.emit(ProtocolChoice(session_id=self.session_id, protocol=self.protocol,
                                 reason=reason, previous=previous, step=self.steps))
        note = switch_note(tools_with_final(self.calls.tools))
        self._tell(before + note, why="the tool-call format changes before the next step")

    def _format_error(self, turn: Turn, message: str) -> tuple[str, str] | None:
        self._format_errors += 1
        self._add({"role": "assistant", "content": turn.content})
        feedback = f"Format error: {message}"
        if self.fallback and self._format_errors >= FALLBACK_AFTER:
            self._switch(f"{self._format_errors} malformed replies in a row under "
                         f"{self.protocol}", before=feedback + "\n\n")
            self._format_errors = 0
            return None
        self._tell(feedback)
        if self._format_errors >= MAX_FORMAT_ERRORS:
            return f"stopped after {MAX_FORMAT_ERRORS} malformed replies: {message}", \
                "format_errors"
        return None

    def _show(self, call: Call) -> None:
        """The :class:`ToolCall` event of ``call``: the UI's line for it, the log's record."""
        self.emit(ToolCall(session_id=self.session_id, step=self.steps, call_id=call["id"],
                           name=call["name"], arguments=call["arguments"],
                           preview=self.registry.preview(call["name"], call["arguments"])))

    def _execute(self, call: Call, note: str = "") -> int:
        """Run ``call`` and answer it; 1 when it failed, else 0."""
        self._show(call)
        started = time.monotonic()
        obs = self.registry.call(call["name"], call["arguments"])
        text = obs.text + (self.calls.error_hint(call) if obs.is_error else "") \
            + renamed_note(call.get("aliased", []))
        return self._answer(call["id"], call["name"], text + note, obs.is_error,
                            time.monotonic() - started, obs.protected,
                            arguments=call["arguments"])

    def _answer(self, call_id: str, name: str, text: str, is_error: bool,
                duration: float, protected: bool = False, counted: bool = True,
                arguments: Any = None) -> int:
        """Send the result of a call; 1 when it failed, else 0. ``counted``: a tool call of
        the model's, which the ledger records (a refused final answer is not)."""
        self._pending = [p for p in self._pending if p[0] != call_id]
        if counted:
            self.ledger.record(name, arguments, is_error, text)
        message = self.calls.result_message(call_id, name, ("ERROR: " if is_error else "") + text)
        if self.protocol in JOINED:
            self._results.append((message["content"], protected))  # sent as one: _flush_results
        else:
            # Compaction keeps flagged messages verbatim (agent.context.PROTECTED).
            self._add({**message, PROTECTED: True} if protected else message)
        self.emit(ToolResult(session_id=self.session_id, step=self.steps, call_id=call_id,
                             name=name, text=text, is_error=is_error,
                             duration_s=round(duration, 3)))
        return int(is_error)

    def _flush_results(self) -> None:
        """Send the buffered text-protocol results as one user message."""
        if not self._results:
            return
        message = {"role": "user", "content": "\n\n".join(c for c, _ in self._results)}
        protected = any(p for _, p in self._results)
        self._results.clear()
        self._add({**message, PROTECTED: True} if protected else message)

    def _log_turn(self, turn: Turn, protocol: str, calls: list[Call],
                  repeated: bool = False) -> None:
        self.emit(ModelTurn(session_id=self.session_id, step=self.steps, protocol=protocol,
                            repeated=repeated,
                            content=turn.content, reasoning=turn.reasoning,
                            finish_reason=turn.finish_reason,
                            usage=turn.usage, timings=turn.timings,
                            draft_n_max=turn.draft_n_max, ended_early=turn.ended_early,
                            tool_calls=[ToolCallInfo(id=c["id"], name=c["name"],
                                                     arguments=c["arguments"]) for c in calls]))

