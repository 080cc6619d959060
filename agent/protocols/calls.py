"""What differs per tool-call protocol (``text``, ``json``, ``native``, ``whole``): the
request's protocol fields, turning a reply into calls, and the messages that record a call and
its result.

:class:`agent.loop.Agent` owns the step loop and asks a :class:`CallProtocol` for everything that
depends on the protocol, so the loop reads the same for all three.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal

from agent.client import Turn
from agent.protocols.base import (
    FormatError,
    calls_in_text,
    json_response_format,
    lenient_json,
    parse_json_call,
    tools_with_final,
)
from agent.protocols.text import (
    CallBlockEnd,
    cut_detail,
    mismatched,
    no_call_message,
    parse_text_calls,
    render_call,
    usage,
)
from agent.protocols.whole import (
    CommandBlockEnd,
    in_own_words,
    parse_whole_calls,
    render_whole_call,
)
from agent.protocols.whole import cut_detail as whole_cut_detail
from tools.aliases import canonical_arguments
from tools.registry import Registry

Protocol = Literal["native", "json", "text", "whole"]
RESULT_PREFIX = "[result of tool {name}]\n"
"""First line of a result sent as a user message (``text``; ``json`` without a tool role)."""
JOINED = ("text", "whole")
"""Protocols whose results of one reply go back as one user message."""

Call = dict[str, Any]
"""``{"id": str, "name": str, "arguments": dict}``."""


class CallProtocol:
    """How tool calls travel under protocol ``name`` for the tools of ``registry``.

    ``tool_role`` says whether the chat template renders ``tool`` messages (else json-protocol
    results go back as ``user`` messages). ``name`` changes on a fallback (:meth:`switch`); the
    ``tools`` a session that started ``native`` offered keep being sent, because the template
    renders them into the prompt and dropping them would change its prefix.
    """

    def __init__(self, name: Protocol, registry: Registry, *, tool_role: bool = True):
        self.name, self.registry, self.tool_role = name, registry, tool_role
        self.tools = registry.openai_tools()
        self.offered = self.tools if name == "native" else None
        self.schemas: dict[str, dict[str, Any]] = {
            t["function"]["name"]: t["function"]["parameters"]
            for t in tools_with_final(self.tools)}
        self.native_calls_seen = False
        """A native call arrived this session (a model that never made one may not speak the
        template's tool format)."""

    def switch(self, name: Protocol) -> None:
        self.name = name

    def request_fields(self) -> dict[str, Any]:
        """``tools`` and ``response_format`` for the next request (None: not sent)."""
        grammar = json_response_format(self.tools) if self.name == "json" else None
        return {"tools": self.offered, "response_format": grammar}

    def stop_at(self) -> CallBlockEnd | None:
        """For the next request: where a streaming reply ends (``text``: after its last call,
        :class:`agent.protocols.text.CallBlockEnd`; ``whole``: after its first command,
        :class:`agent.protocols.whole.CommandBlockEnd`), or None (the server ends it)."""
        if self.name == "whole":
            return CommandBlockEnd()
        return CallBlockEnd(self.schemas) if self.name == "text" else None

    def parse(self, turn: Turn) -> list[Call]:
        """The calls in ``turn``, in order, their aliased argument names read as the tool's
        (:mod:`tools.aliases`; a call's ``aliased`` lists the renames); raises
        :class:`FormatError` with feedback for the model when it holds none in this protocol's
        form (prose under ``native`` and ``whole`` is an answer: ``[]``)."""
        return [self._canonical(call) for call in self._parse(turn)]

    def _canonical(self, call: Call) -> Call:
        schema = self.schemas.get(call["name"])
        if schema is None or not isinstance(call["arguments"], dict):
            return call
        arguments, renamed = canonical_arguments(call["arguments"], schema)
        return {**call, "arguments": arguments, "aliased": renamed} if renamed else call

    def _parse(self, turn: Turn) -> list[Call]:
        if self.name == "json":
            name, args = parse_json_call(turn.content)
            return [_call(name, args)]
        if self.name == "whole":
            return [_call(n, a) for n, a in parse_whole_calls(turn.content)]
        if self.name == "text":
            found = [(c.name, c.arguments) for c in parse_text_calls(turn.content, self.schemas)]
            # A model that writes calls the json way anyway: repaired, not refused.
            found = found or calls_in_text(turn.content, set(self.schemas))
            if not found:
                raise FormatError(no_call_message(self.schemas))
            return [_call(n, a) for n, a in found]
        calls = []
        for raw in turn.tool_calls:
            try:
                args = lenient_json(raw["arguments"]) if raw["arguments"].strip() else {}
            except ValueError as exc:
                raise FormatError(f"arguments of {raw['name']} are not valid JSON: {exc}") from exc
            calls.append(_call(raw["name"], args, raw["id"]))
        if calls:
            self.native_calls_seen = True
            return calls
        written = calls_in_text(turn.content, set(self.registry.tools))
        # A call written as text to a tool that does not exist is a call gone wrong, not a
        # final answer (the 1.5B's "test_before_done" ended a task with exit 0).
        written = written or calls_in_text(turn.content, set(), unknown_too=True)
        if not written and turn.finish_reason == "tool_calls":
            raise FormatError("finish_reason was tool_calls but no call arrived; call a tool "
                              "with valid arguments")
        if not written and not turn.content.strip():
            # Reasoning that ran out of tokens, or nothing at all: never a silent stop.
            raise FormatError("the reply had no answer and no tool call; call a tool, or reply "
                              "with a short summary when the task is done")
        return [_call(n, a) for n, a in written]

    def cut_detail(self, turn: Turn) -> str:
        """Where a ``text`` or ``whole`` reply cut by max_tokens stopped (which call or file
        listing was left open)."""
        if self.name == "whole":
            return whole_cut_detail(turn.content)
        return cut_detail(turn.content, set(self.schemas))

    def assistant_message(self, turn: Turn, calls: list[Call]) -> dict[str, Any]:
        """The reply as the history keeps it: verbatim, plus wire ``tool_calls`` under
        ``native``."""
        if calls and self.name == "native":
            return {"role": "assistant", "content": turn.content or None,
                    "tool_calls": [_wire(c) for c in calls]}
        return {"role": "assistant", "content": turn.content}

    def injected(self, name: str, arguments: dict[str, Any]) -> tuple[Call, dict[str, Any]]:
        """A call the product makes as if the model had (``agent run --skill``), and the
        assistant message that reads as the model writing it."""
        call = _call(name, arguments)
        if self.name == "json":
            return call, {"role": "assistant",
                          "content": json.dumps({"tool": name, "arguments": arguments})}
        written = render_whole_call(name, arguments) if self.name == "whole" else None
        if written is not None:
            return call, {"role": "assistant", "content": written}
        if self.name in JOINED:
            return call, {"role": "assistant",
                          "content": render_call(name, arguments, self.schemas.get(name, {}))}
        return call, {"role": "assistant", "content": None, "tool_calls": [_wire(call)]}

    def own_words(self, text: str) -> str:
        """A loop message (a refused final answer) in this protocol's terms."""
        return in_own_words(text) if self.name == "whole" else text

    def error_hint(self, call: Call) -> str:
        """Appended to a failed ``text`` call whose arguments do not fit its tool: the form."""
        schema = self.schemas.get(call["name"])
        if self.name == "text" and schema is not None and mismatched(call["arguments"], schema):
            return f"\nThe form of {call['name']} is:\n{usage(call['name'], schema)}"
        return ""

    def result_message(self, call_id: str, name: str, content: str) -> dict[str, Any]:
        """The message that answers a call. Under ``text`` the loop joins a reply's results
        into one user message: templates that insist on alternating roles (Mistral, Gemma 2)
        refuse several user messages in a row."""
        if self.name in JOINED or (self.name == "json" and not self.tool_role):
            return {"role": "user", "content": RESULT_PREFIX.format(name=name) + content}
        return {"role": "tool", "tool_call_id": call_id, "content": content}


def _call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> Call:
    # Unique across tasks and resumes: resume matches results to calls by id.
    return {"id": call_id or f"call_{secrets.token_hex(6)}", "name": name, "arguments": arguments}


def _wire(call: Call) -> dict[str, Any]:
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"],
                         "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}


def last_speaker(messages: list[dict[str, Any]]) -> str | None:
    """The role of the last message that counts in a strict template's alternation check:
    tool results and assistant messages carrying tool calls are left out (Mistral's rule)."""
    for message in reversed(messages):
        role = message.get("role")
        if role != "tool" and not (role == "assistant" and message.get("tool_calls")):
            return str(role)
    return None
