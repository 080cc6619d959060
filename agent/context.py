"""Context budget: keep every request inside the server's window, compact history before overflow.

Sizes are measured with the server's own tokenizer (``POST /tokenize``), never guessed from a
model-name table (docs/design/field-cases.md, class 1). Compaction triggers with headroom for the
summary call itself, falls back to dropping old tool outputs when the summary fails, keeps
instructions and skill bodies (messages flagged ``"_protected": True``) verbatim, and never loops
(class 9).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agent.client import ServerClient
from agent.protocols.calls import RESULT_PREFIX
from backend.errors import StatedError

Message = dict[str, Any]

PROTECTED = "_protected"
SUMMARY_HEADER = "[summary of earlier work]\n"
DROPPED = "[output dropped to save context]"
# Large tool-call arguments (a whole file for `create`) are replaced by valid JSON: the server
# parses arguments before rendering the template.
DROPPED_ARGS = json.dumps({"dropped": "[arguments dropped to save context]"})
KEEP_ARGS_CHARS = 200
CUT_REPLY = " [... rest of this reply dropped to save context]"
# Results sent as user messages (text; json without a tool role) start with this.
RESULT_HEAD = RESULT_PREFIX.split("{", 1)[0]
SAFETY_MARGIN = 0.05

DEFAULT_N_CTX = 4096
"""Context assumed for the skill catalog's share when neither the server nor settings say."""


class ContextTooSmall(StatedError, RuntimeError):
    """Even the smallest request compaction can build does not fit the server's context."""

    plain = True

    def __init__(self, n_ctx: int, smallest: int, budget: Budget):
        self.n_ctx, self.smallest = n_ctx, smallest
        # The context at which `smallest` would sit exactly at the compaction threshold.
        needed = math.ceil((smallest + budget.max_output + budget.summary_reserve)
                           / (1 - SAFETY_MARGIN))
        super().__init__(
            f"the server's context of {n_ctx} tokens is too small: the smallest possible request "
            f"(system prompt, task, protected messages, the last messages and the tool list, "
            f"with old tool outputs dropped) is {smallest} tokens, but only "
            f"{budget.compact_at()} are available after reserving {budget.max_output} for the "
            f"reply, {budget.summary_reserve} for a summary and a 5% margin; restart the server "
            f"with a bigger --ctx-size (at least {needed})")


class TokenCounter:
    """Counts tokens with the server's ``/tokenize``, cached per message.

    The cache key is ``json.dumps(message, sort_keys=True)``, so an unchanged message is sent to
    the server once per session. Raises :class:`agent.client.ServerUnavailable` when
    ``/tokenize`` fails.
    """

    def __init__(self, client: ServerClient, per_message_overhead: int = 8):
        self.client = client
        self.per_message_overhead = per_message_overhead
        """Tokens added per message for the template's role markers and separators."""
        self._messages: dict[str, int] = {}
        self._tools: dict[str, int] = {}

    def _tokens(self, text: str) -> int:
        return len(self.client.tokenize(text)) if text else 0

    def count_message(self, message: Message) -> int:
        """Tokens of the content, reasoning and tool call names/arguments, plus the overhead."""
        key = json.dumps(message, sort_keys=True, default=str)
        if key not in self._messages:
            # One /tokenize request per message: all its text parts joined.
            self._messages[key] = self._tokens(message_text(message)) + self.per_message_overhead
        return self._messages[key]

    def count(self, messages: list[Message]) -> int:
        """Tokens of all ``messages`` (sum of :meth:`count_message`)."""
        return sum(self.count_message(m) for m in messages)

    def count_tools(self, tools: list[dict[str, Any]] | None) -> int:
        """Tokens of the tool list's JSON (0 for none), cached by that JSON."""
        if not tools:
            return 0
        key = json.dumps(tools, sort_keys=True, default=str)
        if key not in self._tools:
            self._tools[key] = self._tokens(key)
        return self._tools[key]


def message_text(message: Message) -> str:
    """The text of a message that reaches the prompt: content, reasoning, tool calls."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):  # content parts: only the text ones
        parts += [p["text"] for p in content if isinstance(p, dict)
                  and isinstance(p.get("text"), str)]
    if isinstance(message.get("reasoning_content"), str):
        parts.append(message["reasoning_content"])
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(p for p in parts if p)


@dataclass
class Budget:
    """How the server's context is shared out; all fields in tokens."""

    n_ctx: int
    """The server's per-slot context size."""
    max_output: int
    """Reserved for the model's reply (the request's ``max_tokens``)."""
    summary_reserve: int
    """Reserved so the summary call made by compaction still fits."""

    def limit(self) -> int:
        """The most tokens a request may hold: ``n_ctx - max_output`` less a 5% margin."""
        return self.n_ctx - self.max_output - math.ceil(self.n_ctx * SAFETY_MARGIN)

    def compact_at(self) -> int:
        """Compaction triggers above this many request tokens: ``limit() - summary_reserve``."""
        return self.limit() - self.summary_reserve


def needs_compaction(counter: TokenCounter, budget: Budget, messages: list[Message],
                     tools: list[dict[str, Any]] | None) -> bool:
    """True when ``messages`` plus ``tools`` exceed ``budget.compact_at()`` tokens."""
    return counter.count(messages) + counter.count_tools(tools) > budget.compact_at()


@dataclass
class _Entry:
    message: Message
    part: str  # "head", "middle", "summary" or "recent"
    protected: bool
    unit: int  # messages of one assistant tool-call turn and its results share a unit


def compact(messages: list[Message], counter: TokenCounter, budget: Budget,
            tools: list[dict[str, Any]] | None, summarise: Callable[[list[Message]], str],
            keep_recent: int = 4) -> list[Message]:
    """A new message list of at most ``budget.compact_at()`` tokens (with ``tools``).

    Kept verbatim: ``messages[0]`` up to the first user message (the task), messages flagged
    ``"_protected": True`` (with the tool-call turn they belong to), and the last
    ``keep_recent`` messages, extended back so an assistant message with ``tool_calls`` is never
    split from its tool results. The rest becomes one user message ``[summary of earlier
    work]\\n…`` written by ``summarise`` (called at most once). When ``summarise`` raises or the
    result is still too big: old tool outputs (and large tool-call arguments) are replaced by
    ``[output dropped to save context]`` oldest first, then the summary is dropped, then the
    latest tool outputs are dropped too. ``messages`` is not modified.

    Raises :class:`ContextTooSmall` when even that does not fit.
    """
    head_end = _head_end(messages)
    start = _recent_start(messages, head_end, keep_recent)
    units = _units(messages, head_end, start)
    entries_head = [_Entry(m, "head", bool(m.get(PROTECTED)), -1) for m in messages[:head_end]]
    entries_recent = [_Entry(m, "recent", any(x.get(PROTECTED) for x in messages[a:b]),
                             len(units) + u)
                      for u, (a, b) in enumerate(_units(messages, start, len(messages)))
                      for m in messages[a:b]]
    middle = [_Entry(m, "middle", any(x.get(PROTECTED) for x in messages[a:b]), u)
              for u, (a, b) in enumerate(units) for m in messages[a:b]]

    summary: Message | None = None
    to_summarise = [e.message for e in middle if not e.protected]
    if to_summarise:
        try:
            summary = {"role": "user",
                       "content": SUMMARY_HEADER + summarise(to_summarise).strip()}
        except Exception:
            # A failed summary must not stop the task: dropping old outputs needs no model.
            summary = None
    if summary is not None:
        kept = [e for e in middle if e.protected]
        entries = entries_head + kept + [_Entry(summary, "summary", False, -2)] + entries_recent
    else:
        entries = entries_head + middle + entries_recent

    sizes = [counter.count_message(e.message) for e in entries]
    tools_size = counter.count_tools(tools)
    target = budget.compact_at()

    def fits() -> bool:
        return sum(sizes) + tools_size <= target

    def elide(which: list[int]) -> bool:
        for i in which:
            smaller = _elided(entries[i].message)
            if smaller is not None:
                entries[i].message = smaller
                sizes[i] = counter.count_message(smaller)
                if fits():
                    return True
        return False

    if fits():
        return [e.message for e in entries]
    last_unit = entries[-1].unit if entries and entries[-1].part == "recent" else None
    elidable = [i for i, e in enumerate(entries) if e.part != "head" and not e.protected]
    if elide([i for i in elidable if entries[i].unit != last_unit]):
        return [e.message for e in entries]
    # Drop the summary, or (when there is none) the unprotected middle it would have replaced.
    dropped = {i for i, e in enumerate(entries)
               if e.part == "summary" or (e.part == "middle" and not e.protected)}
    for i in dropped:
        sizes[i] = 0
    if fits() or elide([i for i in elidable if entries[i].unit == last_unit]):
        return [e.message for i, e in enumerate(entries) if i not in dropped]
    raise ContextTooSmall(budget.n_ctx, sum(sizes) + tools_size, budget)


def _head_end(messages: list[Message]) -> int:
    """Index after the first user message (the task), or after ``messages[0]`` if none."""
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            return i + 1
    return min(1, len(messages))


def _recent_start(messages: list[Message], head_end: int, keep_recent: int) -> int:
    start = max(head_end, len(messages) - keep_recent)
    # A tool message must follow its assistant tool_calls message, or the request is invalid.
    while head_end < start < len(messages) and messages[start].get("role") == "tool":
        start -= 1
    return start


def _units(messages: list[Message], start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` split into (from, to) ranges: a tool-call turn with its results, or one
    message."""
    units, i = [], start
    while i < end:
        j = i + 1
        if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
            while j < end and messages[j].get("role") == "tool":
                j += 1
        units.append((i, j))
        i = j
    return units


def _elided(message: Message) -> Message | None:
    """A copy with the tool output (or large tool-call arguments) dropped; None if no gain."""
    role, content = message.get("role"), message.get("content")
    if role == "tool" and isinstance(content, str) and len(content) > len(DROPPED):
        return {**message, "content": DROPPED}
    if role == "user" and isinstance(content, str) and content.startswith(RESULT_HEAD):
        # One message may carry several results (the text protocol sends a reply's results
        # together): keep every header, so the model still sees each call it made.
        heads = [line for line in content.split("\n") if line.startswith(RESULT_HEAD)]
        smaller = "\n\n".join(f"{head}\n{DROPPED}" for head in heads)
        if len(smaller) < len(content):
            return {**message, "content": smaller}
    if role == "assistant" and message.get("tool_calls"):
        calls, changed = [], False
        for call in message["tool_calls"]:
            fn = call.get("function", {})
            args = fn.get("arguments")
            if isinstance(args, str) and len(args) > KEEP_ARGS_CHARS:
                call = {**call, "function": {**fn, "arguments": DROPPED_ARGS}}
                changed = True
            calls.append(call)
        if changed:
            return {**message, "tool_calls": calls}
    if role == "assistant" and isinstance(content, str) and len(content) > 2 * KEEP_ARGS_CHARS:
        # A runaway reply (e.g. a json-protocol call that repeated itself up to max_tokens):
        # keep its start so the model still sees what it tried.
        return {**message, "content": content[:KEEP_ARGS_CHARS] + CUT_REPLY}
    return None


SUMMARY_SYSTEM = "You summarise the work log of a coding agent so that it can continue its task."
SUMMARY_PROMPT = (
    "Summarise the work log below for the agent that wrote it. List: the files it created, read "
    "or changed; the decisions it made and why; errors it hit; what remains to be done. Be "
    "brief and concrete; write only the summary.\n\nWork log:\n")
SUMMARY_CAPS = (2000, 1000, 500, 250, 120, 60)
"""Characters kept per message, tried in turn until the summary request fits."""
SUMMARY_SLACK = 64
"""Tokens allowed for the system message and the template's markers in the summary request."""


def render_transcript(messages: list[Message], cap: int) -> str:
    """``role: text`` lines, each message's text cut to ``cap`` characters."""
    lines = []
    for m in messages:
        text = message_text(m)
        if len(text) > cap:
            text = text[:cap] + f" [... {len(text) - cap} more characters]"
        lines.append(f"{m.get('role', '?')}: {text}")
    return "\n".join(lines)


def summarise_with_model(client: ServerClient, messages: list[Message],
                         max_tokens: int = 512) -> str:
    """The model's summary of ``messages``: files touched, decisions, what remains.

    One plain completion (temperature 0, no tools, at most ``max_tokens`` tokens). The
    messages are rendered as text, each cut short enough for the request to fit ``n_ctx``
    (checked with ``/tokenize`` when the server states ``n_ctx``). Raises ``ValueError`` when
    even the shortest rendering does not fit or the reply is empty, and whatever
    :meth:`ServerClient.complete` raises.
    """
    n_ctx = client.n_ctx()
    room = None if n_ctx is None else n_ctx - max_tokens - SUMMARY_SLACK \
        - math.ceil(n_ctx * SAFETY_MARGIN)
    prompt = ""
    for cap in SUMMARY_CAPS:
        prompt = SUMMARY_PROMPT + render_transcript(messages, cap)
        if room is None:
            break
        size = len(client.tokenize(prompt))
        if size <= room:
            break
    else:
        # Still too long at the smallest cap: keep the latest lines, cut by the measured ratio.
        log = prompt[len(SUMMARY_PROMPT):]
        keep = int(room * len(prompt) / size * 0.9) - len(SUMMARY_PROMPT)
        if keep <= 0:
            raise ValueError(f"no room to summarise in a context of {n_ctx} tokens")
        prompt = SUMMARY_PROMPT + log[-keep:]
        if len(client.tokenize(prompt)) > room:
            raise ValueError(f"the messages to summarise do not fit a context of {n_ctx} tokens")
    turn = client.complete([{"role": "system", "content": SUMMARY_SYSTEM},
                            {"role": "user", "content": prompt}],
                           sampling={"temperature": 0.0}, max_tokens=max_tokens)
    text = turn.content.strip()
    if not text:
        raise ValueError("the model returned an empty summary")
    return text


class ContextKeeper:
    """What the loop calls around each request: compact before an overflow, and once more
    (smaller) if the server still reports ``exceed_context_size_error``.

    ``n_ctx`` comes from ``/props`` (or ``--ctx-size`` for servers that do not say); None turns
    compaction off. Raises :class:`ContextTooSmall` when nothing fits.
    """

    def __init__(self, client: ServerClient, n_ctx: int | None, max_output: int,
                 summary_tokens: int = 512):
        self.client = client
        self.counter = TokenCounter(client)
        # Small contexts cannot spare 512 tokens for a summary.
        self.summary_tokens = min(summary_tokens, (n_ctx or 0) // 8) or summary_tokens
        self.budget = None if not n_ctx else Budget(
            n_ctx=n_ctx, max_output=min(max_output, n_ctx // 4),
            summary_reserve=self.summary_tokens + 64)

    def _summarise(self, messages: list[Message]) -> str:
        return summarise_with_model(self.client, messages, max_tokens=self.summary_tokens)

    def before_request(self, messages: list[Message],
                       tools: list[dict[str, Any]] | None) -> list[Message] | None:
        """A compacted history when ``messages`` would not fit, else None."""
        if self.budget is None or not needs_compaction(self.counter, self.budget, messages,
                                                       tools):
            return None
        return compact(messages, self.counter, self.budget, tools, self._summarise)

    def compact_now(self, messages: list[Message],
                    tools: list[dict[str, Any]] | None) -> list[Message]:
        """Compact on request (``/compact``), whatever the size (only with a known ``n_ctx``)."""
        assert self.budget is not None
        return compact(messages, self.counter, self.budget, tools, self._summarise)

    def after_overflow(self, messages: list[Message], tools: list[dict[str, Any]] | None,
                       n_prompt_tokens: int | None) -> list[Message]:
        """A history shrunk by how far our estimate was below the server's count (only with a
        known ``n_ctx``)."""
        assert self.budget is not None
        estimate = self.counter.count(messages) + self.counter.count_tools(tools)
        short = max((n_prompt_tokens or 0) - estimate, 0) + 64
        tighter = replace(self.budget, n_ctx=max(self.budget.n_ctx - short, 1))
        try:
            return compact(messages, self.counter, tighter, tools, self._summarise)
        except ContextTooSmall as exc:
            # Said in the server's numbers: its context, and the smallest request as it would
            # count it (the tightened budget is our bookkeeping, e.g. "a context of 1 token").
            raise ContextTooSmall(self.budget.n_ctx, exc.smallest + short - 64,
                                  self.budget) from exc
