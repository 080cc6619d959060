"""Forced replies for the replay benchmark (issue 23): each assistant turn decodes the fixture's
own reply, written the way each protocol carries it, while speculation runs as it normally does.

SmolLM2-135M, the model this project can run, writes no runnable call, so replaying its own
replies measures speculation on runaway text. Here the engine is made to decode a *given* reply:
the request carries a llama-server ``grammar`` whose only sentence is the reply's canonical
tokenisation (``/tokenize``), one token element (``<[id]>``) per token. Sampling then picks the
forced token at every position, the target model still runs every step, and a draft (n-gram
lookup or a DFlash draft model) is accepted exactly when it guessed the reply's next tokens —
which for n-gram lookup depends only on the text and its context, not on the model.

Why token elements, and where they are not used: a character grammar forces the bytes but lets
the model pick any tokenisation (a zero-weight target picks the lowest token ids: one byte per
token), so the step count would not be the reply's. llama.cpp rejects a token element whose
piece ends inside a UTF-8 character (``llama_grammar_reject_candidates_for_stack``: a partial
sequence is refused at a token position; b11434 then fails the request with "Unexpected empty
grammar stack"), so a run of tokens that splits a character is written as that character's
string literal instead (its tokenisation may then differ; :class:`Check` counts the tokens).

What forcing costs (measured, ``benchmarks/RESULTS.md``): when the model's own choice is not the
forced token, llama.cpp re-samples with the grammar applied to the whole vocabulary, a fixed
cost per decoded token in every profile alike. It does not change which drafts are accepted but
it is not sped up by them, so forced speedups are lower bounds of the unforced ones (how much
lower depends on how many tokens are re-sampled, which the server does not report); the run
reports the cost beside them, and tokens per step and acceptance, which forcing does not
change.

Per protocol the reply is what the agent would have received (one call per fixture turn):
``text`` the call in the text protocol's tags (:func:`agent.protocols.text.render_call`);
``json`` the JSON object the json protocol's schema asks for; ``native`` the chat template's
own rendering of the call (``/apply-template``; a template that renders no call cannot be
forced, and says so); ``plain`` the same arguments as prose (values, code in fenced blocks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
from pydantic import BaseModel

from agent.client import ServerClient, ServerUnavailable, Turn
from agent.context import SUMMARY_SYSTEM
from agent.protocols.base import FINAL_ANSWER
from agent.protocols.text import render_call

HEADROOM = 8
"""Tokens allowed beyond the forced reply (its end-of-turn token, a re-tokenised character)."""


class Unforceable(ValueError):
    """This reply cannot be forced on this server (says why); the turn is reported, not sent."""


def reply_text(protocol: str, tool: str, arguments: Mapping[str, Any],
               schemas: Mapping[str, Mapping[str, Any]]) -> str:
    """The reply carrying one call ``tool(arguments)`` as the model writes it under
    ``protocol`` (``text``, ``json``, ``plain``; ``native`` needs the template:
    :func:`native_reply`). A ``final_answer`` call is its text as prose under ``plain``.

    Raises ``ValueError`` for an unknown protocol."""
    if protocol == "text":
        return render_call(tool, arguments, schemas.get(tool, {}))
    if protocol == "json":
        return json.dumps({"tool": tool, "arguments": dict(arguments)}, ensure_ascii=False)
    if protocol == "plain":
        if tool == FINAL_ANSWER and isinstance(arguments.get("text"), str):
            return arguments["text"]
        parts = []
        for key, value in arguments.items():
            if isinstance(value, str) and "\n" in value:
                parts.append(f"{key}:\n```\n{value.rstrip(chr(10))}\n```")
            else:
                parts.append(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")
        return "\n\n".join(parts)
    raise ValueError(f"no forced reply for protocol {protocol!r}")


def native_reply(client: ServerClient, tools: list[dict[str, Any]], tool: str,
                 arguments: Mapping[str, Any]) -> str:
    """The chat template's rendering of one assistant tool call (what a model that speaks the
    template's format writes before its end-of-turn token): the template applied to a short
    conversation with and without the call, the difference cut at the end-of-turn suffix the
    template puts after any assistant message.

    Raises :class:`Unforceable` when the template renders no call (SmolLM2's has no tool
    format) and :class:`agent.client.ServerUnavailable` when the server refuses."""
    if tool == FINAL_ANSWER and isinstance(arguments.get("text"), str):
        return arguments["text"]  # a native final answer is prose
    head = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_forced", "type": "function",
         "function": {"name": tool, "arguments": json.dumps(dict(arguments),
                                                            ensure_ascii=False)}}]}
    marker, end = "\u00a7REPLY\u00a7", "\u00a7END\u00a7"
    after = {"role": "user", "content": end}
    prompt = client.apply_template(head, tools)
    with_call = client.apply_template([*head, call, after], tools)
    with_text = client.apply_template([*head, {"role": "assistant", "content": marker}, after],
                                      tools)
    start = with_text.find(marker)
    if start < 0 or not with_text.startswith(prompt[:start]):
        raise Unforceable("the template does not render an assistant reply after the prompt")
    suffix = with_text[start + len(marker):with_text.index(end)]
    # The suffix holds the end-of-turn token and the next message's header; the call's
    # rendering ends where that suffix begins.
    stop = with_call.find(suffix, start)
    rendered = with_call[start:stop] if stop >= start else ""
    if not rendered.strip():
        raise Unforceable("the chat template renders no tool call (it has no tool-call format): "
                          "native replies cannot be forced on this model")
    return rendered


def _piece_bytes(piece: str | list[int]) -> bytes:
    # /tokenize with_pieces gives a string, or a byte list when the piece is not valid UTF-8.
    return bytes(piece) if isinstance(piece, list) else piece.encode("utf-8")


def token_grammar(pieces: Sequence[Mapping[str, Any]]) -> str:
    """A GBNF grammar whose only sentence is the token sequence ``pieces`` (``/tokenize``'s
    ``with_pieces`` items: ``{"id": int, "piece": str | list[int]}``): token elements, except
    runs of tokens that split a UTF-8 character, which become that text's string literal.

    Raises ``ValueError`` when the pieces end inside a character or are empty."""
    if not pieces:
        raise ValueError("an empty reply cannot be forced")
    items: list[str] = []
    pending = b""
    for item in pieces:
        piece = item["piece"]
        if pending or isinstance(piece, list):
            pending += _piece_bytes(piece)
            try:
                text = pending.decode("utf-8")
            except UnicodeDecodeError:
                continue
            items.append(json.dumps(text, ensure_ascii=False))
            pending = b""
        else:
            items.append(f"<[{int(item['id'])}]>")
    if pending:
        raise ValueError("the reply's tokens end inside a UTF-8 character")
    return "root ::= " + " ".join(items)


@dataclass
class Check:
    """How one forced request went: ``exact`` when the decoded text is the reply byte for
    byte; ``decoded`` the tokens the server decoded (``timings.predicted_n``, its end-of-turn
    token included) against ``canonical``, the reply's own tokenisation."""

    exact: bool
    canonical: int
    decoded: int
    note: str = ""


class ForcedClient(ServerClient):
    """A :class:`ServerClient` whose next request decodes a given reply (:meth:`force`).

    The request is the agent's own, with the forcing grammar added: the json protocol's
    ``response_format`` is dropped (llama-server takes one grammar), and under native the tools
    stay in the request, so the template renders them as before, with ``tool_choice: none``
    (llama-server refuses a grammar beside active tools); the decoded rendering is handed back
    as the tool call the server's parser would have made of it, so the history the agent keeps
    is the same. ``max_tokens`` becomes the reply's length plus :data:`HEADROOM`. A compaction's
    summary request (:data:`agent.context.SUMMARY_SYSTEM`) that comes first is sent as it is:
    the forcing waits for the turn's own request."""

    def __init__(self, base_url: str, **kwargs: Any):
        super().__init__(base_url, **kwargs)
        self._forced: tuple[str, list[dict[str, Any]], tuple[str, dict[str, Any]] | None] | None
        self._forced = None
        self.last: Check | None = None

    def force(self, text: str, call: tuple[str, dict[str, Any]] | None = None) -> None:
        """Make the next :meth:`complete` decode ``text``; ``call`` (name, arguments) when
        ``text`` is a native tool call's rendering. Raises :class:`Unforceable` when the text
        cannot be written as a grammar, :class:`ServerUnavailable` when ``/tokenize`` fails."""
        self.last = None
        pieces = self.tokenize_pieces(text)
        try:
            token_grammar(pieces)
        except ValueError as exc:
            raise Unforceable(str(exc)) from exc
        self._forced = (text, pieces, call)

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict] | None = None,
                 response_format: dict | None = None, sampling: dict[str, Any] | None = None,
                 max_tokens: int = 2048, on_text: Any = None, on_chunk: Any = None,
                 deadline: float | None = None, stop_at: Any = None) -> Turn:
        """As :meth:`ServerClient.complete`, forced when :meth:`force` was called since the
        last request (then :attr:`last` says how the forcing went; a forced reply is the
        recorded one whole, so ``stop_at`` applies only to a free one)."""
        summary = bool(messages) and messages[0].get("content") == SUMMARY_SYSTEM
        if self._forced is None or summary:
            return super().complete(messages, tools=tools, response_format=response_format,
                                    sampling=sampling, max_tokens=max_tokens, on_text=on_text,
                                    on_chunk=on_chunk, deadline=deadline, stop_at=stop_at)
        text, pieces, call = self._forced
        self._forced = None
        saved = self.request_extra
        self.request_extra = {**saved, "grammar": token_grammar(pieces)}
        if tools:
            self.request_extra["tool_choice"] = "none"
        try:
            turn = super().complete(messages, tools=tools, response_format=None,
                                    sampling=sampling, max_tokens=len(pieces) + HEADROOM,
                                    on_text=on_text, on_chunk=on_chunk, deadline=deadline)
        finally:
            self.request_extra = saved
        decoded = (turn.timings.predicted_n or 0) if turn.timings else 0
        exact = turn.content == text and turn.finish_reason == "stop" and \
            decoded <= len(pieces) + HEADROOM
        note = "" if exact else (f"decoded {len(turn.content)} characters, finish "
                                 f"{turn.finish_reason}, not the {len(text)}-character reply")
        self.last = Check(exact=exact, canonical=len(pieces), decoded=decoded, note=note)
        if exact and call is not None:
            turn.tool_calls = [{"id": "call_forced_" + format(len(messages), "x"),
                                "name": call[0],
                                "arguments": json.dumps(call[1], ensure_ascii=False)}]
            turn.content = ""
            turn.finish_reason = "tool_calls"
        return turn


COST_TEXT = (
    "def summarize(rows, key, *, limit=None):\n"
    "    \"\"\"Group rows by key and total their amounts, largest first.\"\"\"\n"
    "    totals = {}\n"
    "    for row in rows:\n"
    "        totals[row[key]] = totals.get(row[key], 0) + row['amount']\n"
    "    ordered = sorted(totals.items(), key=lambda item: item[1], reverse=True)\n"
    "    return ordered[:limit] if limit else ordered\n")
"""A reply the model would not write by itself: forcing it costs the re-sampling."""


class ForcingCost(BaseModel):
    """What forcing adds to a decoded token on one server: ``own_ms`` per token when the
    forced text is the model's own greedy reply (the grammar's one-token check passes),
    ``other_ms`` when it is not (every token re-sampled over the whole vocabulary); ``cost_ms``
    their difference, ``share`` that over ``own_ms`` (medians of ``repeats`` pairs)."""

    own_ms: float
    other_ms: float
    cost_ms: float
    share: float
    tokens: int
    repeats: int


def _timed(client: ServerClient, prompt: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = client.http.post(client.base_url + "/completion",
                                json={"prompt": prompt, "temperature": 0.0,
                                      "cache_prompt": False, **body}, timeout=600.0)
    except httpx2.HTTPError as exc:
        raise ServerUnavailable(f"cannot reach {client.base_url}: {exc}") from exc
    if resp.status_code != 200:
        raise ServerUnavailable(f"/completion answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()


def measure_cost(client: ServerClient, repeats: int = 3) -> ForcingCost:
    """Measure :class:`ForcingCost` on ``client``'s server (its slot's cache is replaced:
    call it before a conversation, not during one). Raises :class:`ServerUnavailable`."""
    other = client.tokenize_pieces(COST_TEXT)
    n = len(other)
    prompt = "Here is a small Python helper:\n\n"
    own_text = _timed(client, prompt, {"n_predict": n, "ignore_eos": True})["content"]
    own = client.tokenize_pieces(own_text)
    pairs = []
    for _ in range(repeats):
        rates = []
        for pieces in (own, other):
            out = _timed(client, prompt, {"n_predict": len(pieces) + HEADROOM,
                                          "grammar": token_grammar(pieces)})
            t = out.get("timings") or {}
            rates.append(float(t.get("predicted_ms", 0.0)) / max(int(t.get("predicted_n", 0)), 1))
        pairs.append(rates)
    own_ms = sorted(p[0] for p in pairs)[len(pairs) // 2]
    other_ms = sorted(p[1] for p in pairs)[len(pairs) // 2]
    cost = max(other_ms - own_ms, 0.0)
    return ForcingCost(own_ms=round(own_ms, 4), other_ms=round(other_ms, 4),
                       cost_ms=round(cost, 4), share=round(cost / own_ms, 4) if own_ms else 0.0,
                       tokens=n, repeats=repeats)
