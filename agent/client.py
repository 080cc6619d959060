"""The model client: streamed chat completions against an OpenAI-compatible llama-server.

Requests keep the prefix cache warm (``cache_prompt``, pinned ``id_slot``); responses are
assembled from the stream with llama-server's ``timings`` (BACKEND-FACTS.md). The HTTP read
timeout is an idle timeout (per chunk), and nothing is retried automatically: a retry would
re-prefill the whole prompt (FIELD-CASES.md class 10).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2

from agent.events import Timings

if TYPE_CHECKING:
    import openai

    from backend.serve.ngram_guard import NgramGuard
    from backend.serve.tuning import DraftCap


class ContextOverflow(RuntimeError):
    """The request does not fit the server's context (``exceed_context_size_error``)."""

    def __init__(self, n_prompt_tokens: int | None, n_ctx: int | None):
        self.n_prompt_tokens, self.n_ctx = n_prompt_tokens, n_ctx
        super().__init__(f"the conversation ({n_prompt_tokens} tokens) does not fit the "
                         f"server's context of {n_ctx} tokens")


class ServerUnavailable(RuntimeError):
    """The server could not be reached or answered with an error."""


class TimeLimitReached(RuntimeError):
    """The task's deadline passed while a reply streamed (or before its first byte): the
    stream was closed, so the server stops decoding. ``turn`` holds what had arrived."""

    def __init__(self, turn: Turn):
        self.turn = turn
        super().__init__(f"the time limit ran out after {len(turn.content)} characters of the "
                         "reply")


@dataclass
class Turn:
    """One assembled model response."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    """Each: ``{"id", "name", "arguments"}`` with arguments as the raw JSON text."""
    finish_reason: str | None = None
    timings: Timings | None = None
    usage: dict[str, Any] | None = None
    draft_n_max: int | None = None
    """The draft length the request carried (``speculative.n_max``, 0 = no draft), or None
    when it carried none (the server's own length)."""


_HTTP: httpx2.Client | None = None
_HTTP_LOCK = threading.Lock()


def _shared_http() -> httpx2.Client:
    """The process's kept-alive connection pool for the small calls (``/tokenize`` on every new
    message, ``/props``, ``/apply-template``): a new client per call cost ~70 ms each on a
    loaded 2-core machine, a whole decode step on a GPU. One per process, closed at exit, so no
    client left unclosed leaves sockets behind."""
    global _HTTP
    with _HTTP_LOCK:
        if _HTTP is None:
            _HTTP = httpx2.Client()
            atexit.register(_HTTP.close)
        return _HTTP


class ServerClient:
    """Talks to one server: chat completions (streamed), ``/props``, ``/apply-template``."""

    def __init__(self, base_url: str, idle_timeout: float = 600.0, id_slot: int | None = 0,
                 explain: Callable[[], str | None] | None = None,
                 request_extra: dict[str, Any] | None = None,
                 draft_cap: DraftCap | NgramGuard | None = None):
        """``explain``: called when a request fails; returns why the server is gone (the
        managed server's crash report: signal, fix, log lines) or None. ``request_extra``:
        fields every completion carries (the managed server's workaround for a known bug of
        its build, :mod:`backend.serve.quirks`). ``draft_cap``: for a server that takes its
        draft length per request, what chooses each completion's length (sent as
        ``speculative.n_max``) and learns from its timings."""
        self.explain = explain
        self.request_extra = dict(request_extra or {})
        self.draft_cap = draft_cap
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.id_slot = id_slot
        self.idle_timeout = idle_timeout
        import openai  # deferred: ~0.75 s, which commands that call no model should not pay

        self.openai = openai.OpenAI(
            base_url=self.base_url + "/v1", api_key="sk-no-key-required", max_retries=0,
            timeout=httpx2.Timeout(connect=10.0, read=idle_timeout, write=60.0, pool=10.0))
        self._props: dict[str, Any] | None = None
        self.http = _shared_http()

    def close(self) -> None:
        self.openai.close()

    def props(self) -> dict[str, Any]:
        """``GET /props`` (cached); an empty dict for servers without it (not llama.cpp)."""
        if self._props is None:
            try:
                resp = self.http.get(self.base_url + "/props", timeout=10.0)
                self._props = resp.json() if resp.status_code == 200 else {}
            except (httpx2.HTTPError, ValueError):
                self._props = {}
        return self._props

    def check_reachable(self) -> None:
        """Raise :class:`ServerUnavailable` with a next step when nothing answers."""
        try:
            self.http.get(self.base_url + "/v1/models", timeout=10.0)
        except httpx2.HTTPError as exc:
            raise ServerUnavailable(f"no server answers at {self.base_url} ({exc}); start it, "
                                    "or drop --base-url to use the managed server") from exc

    def n_ctx(self) -> int | None:
        """The server's per-slot context size in tokens, when it says."""
        return self.props().get("default_generation_settings", {}).get("n_ctx")

    def supports_tools(self) -> bool:
        """``/props.chat_template_caps.supports_tools``."""
        return bool(self.props().get("chat_template_caps", {}).get("supports_tools"))

    def apply_template(self, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text the server would build (``POST /apply-template``).

        Raises :class:`ServerUnavailable` when the server refuses the messages.
        """
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        try:
            resp = self.http.post(self.base_url + "/apply-template", json=body, timeout=30.0)
        except httpx2.HTTPError as exc:
            raise ServerUnavailable(f"cannot reach {self.base_url}: {exc}") from exc
        if resp.status_code != 200:
            raise ServerUnavailable(f"/apply-template answered {resp.status_code}: "
                                    f"{resp.text[:300]}")
        return str(resp.json().get("prompt", ""))

    def tokenize(self, text: str) -> list[int]:
        """The server's token ids for ``text`` (``POST /tokenize``, no special tokens added).

        Raises :class:`ServerUnavailable` when the server cannot be reached or refuses.
        """
        return [int(t) for t in self._tokens({"content": text}, 30.0)]

    def tokenize_pieces(self, text: str) -> list[dict[str, Any]]:
        """``/tokenize`` with pieces: ``[{"id": int, "piece": str | list[int]}]`` (a byte list
        where the piece is not valid UTF-8), no special tokens added and none parsed (a text
        holding ``<|im_end|>`` stays text). Raises :class:`ServerUnavailable`."""
        return list(self._tokens({"content": text, "with_pieces": True, "add_special": False,
                                  "parse_special": False}, 60.0))

    def _tokens(self, body: dict[str, Any], timeout: float) -> list[Any]:
        try:
            resp = self.http.post(self.base_url + "/tokenize", json=body, timeout=timeout)
        except httpx2.HTTPError as exc:
            raise ServerUnavailable(f"cannot reach {self.base_url}: {exc}") from exc
        if resp.status_code != 200:
            raise ServerUnavailable(f"/tokenize answered {resp.status_code}: {resp.text[:300]}")
        try:
            return list(resp.json()["tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ServerUnavailable(f"/tokenize answered without tokens: {resp.text[:300]}") \
                from exc

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict] | None = None,
                 response_format: dict | None = None, sampling: dict[str, Any] | None = None,
                 max_tokens: int = 2048,
                 on_text: Callable[[str], None] | None = None,
                 on_chunk: Callable[[int], None] | None = None,
                 deadline: float | None = None) -> Turn:
        """Stream one completion and assemble it. ``on_text`` gets each piece of reply text;
        ``on_chunk`` is called for every chunk (any sign of life) with the number of chunks so
        far that carried reply text, reasoning or tool-call arguments (one token each, about).

        ``deadline`` (``time.monotonic()`` seconds) is the task's time limit: a reply still
        streaming then is stopped (:class:`TimeLimitReached`), and a server silent past it
        (reading a long prompt) is given up as out of time rather than as dead.

        Raises :class:`ContextOverflow`, :class:`ServerUnavailable`,
        :class:`TimeLimitReached`; on ``KeyboardInterrupt`` the stream is closed first (so the
        server stops decoding) and the interrupt re-raised.
        """
        import openai  # deferred, as in __init__ (startup time)

        sampling = dict(sampling or {})
        extra: dict[str, Any] = {**self.request_extra, "cache_prompt": True}
        if self.id_slot is not None:
            extra["id_slot"] = self.id_slot
        n_max = self.draft_cap.next_n_max() if self.draft_cap is not None else None
        if n_max is not None:
            extra["speculative.n_max"] = n_max
        for key in ("top_k", "min_p"):
            if sampling.get(key) is not None:
                extra[key] = sampling[key]
        kwargs: dict[str, Any] = {"model": "local", "messages": messages, "stream": True,
                                  "stream_options": {"include_usage": True},
                                  "max_tokens": max_tokens, "extra_body": extra}
        if sampling.get("temperature") is not None:
            kwargs["temperature"] = sampling["temperature"]
        if sampling.get("top_p") is not None:
            kwargs["top_p"] = sampling["top_p"]
        if tools:
            kwargs["tools"] = tools
            kwargs["parallel_tool_calls"] = False
        if response_format:
            kwargs["response_format"] = response_format
        # The idle timeout shrinks to the time left, so a server that sends nothing (a prompt
        # still being read) cannot hold the task past its limit either: any read that times out
        # then ends past the deadline. A reply that streams is checked chunk by chunk below.
        left = None if deadline is None else max(deadline - time.monotonic(), 0.01)
        out_of_time = left is not None and left < self.idle_timeout
        if out_of_time:
            kwargs["timeout"] = httpx2.Timeout(connect=10.0, read=left, write=60.0, pool=10.0)
        turn = Turn()
        try:
            stream = self.openai.chat.completions.create(**kwargs)
        except openai.BadRequestError as exc:
            raise _bad_request(exc) from exc
        except openai.APITimeoutError as exc:
            if out_of_time:
                raise TimeLimitReached(turn) from exc
            raise self._unavailable(self._silent()) from exc
        except openai.APIError as exc:
            raise self._unavailable(f"model request to {self.base_url} failed: {exc}") from exc
        calls: dict[int, dict[str, str]] = {}

        def stopped() -> TimeLimitReached:
            turn.tool_calls = [calls[i] for i in sorted(calls)]
            return TimeLimitReached(turn)

        tokens = 0
        try:
            for chunk in stream:
                if on_chunk:
                    tokens += any(c.delta.content or c.delta.tool_calls
                                  or (c.delta.model_extra or {}).get("reasoning_content")
                                  for c in chunk.choices)
                    on_chunk(tokens)
                extra_fields = chunk.model_extra or {}
                if extra_fields.get("timings"):
                    turn.timings = Timings.model_validate(extra_fields["timings"])
                if chunk.usage is not None:
                    turn.usage = chunk.usage.model_dump(exclude_none=True)
                for choice in chunk.choices:
                    delta = choice.delta
                    if choice.finish_reason:
                        turn.finish_reason = choice.finish_reason
                    if delta.content:
                        turn.content += delta.content
                        if on_text:
                            on_text(delta.content)
                    reasoning = (delta.model_extra or {}).get("reasoning_content")
                    if reasoning:
                        turn.reasoning += reasoning
                    for tc in delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "",
                                                           "arguments": ""})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function and tc.function.name:
                            slot["name"] += tc.function.name
                        if tc.function and tc.function.arguments:
                            slot["arguments"] += tc.function.arguments
                if turn.finish_reason is None and _past(deadline):
                    stream.close()  # the server stops decoding when the connection closes
                    raise stopped()
        except KeyboardInterrupt:
            stream.close()
            raise
        except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
            stream.close()
            if out_of_time:
                raise stopped() from exc
            raise self._unavailable(self._silent()) from exc
        except (openai.APIError, httpx2.HTTPError) as exc:
            stream.close()
            raise self._unavailable(f"the stream from {self.base_url} broke: {exc}") from exc
        except ValueError as exc:  # a data: line that is not JSON (the SDK's json.loads)
            stream.close()
            raise ServerUnavailable(f"the server at {self.base_url} sent a malformed stream "
                                    f"line ({exc}); this is a server fault, not the model's: "
                                    "check the server's log") from exc
        if turn.finish_reason is None:
            # Without a finish reason the reply may be cut anywhere: giving it to the model as
            # its own answer would blame the model for the server's fault.
            raise self._unavailable(f"the stream from {self.base_url} ended without a finish "
                                    "reason (the server stopped mid-reply); check the "
                                    "server's log")
        turn.tool_calls = [calls[i] for i in sorted(calls)]
        turn.draft_n_max = n_max
        if self.draft_cap is not None and n_max is not None and turn.timings is not None:
            self.draft_cap.observe(n_max, turn.timings.model_dump())
        return turn

    def _silent(self) -> str:
        """Why a request was given up after :attr:`idle_timeout` seconds without a byte."""
        return (f"the server at {self.base_url} sent nothing for {self.idle_timeout:g} s "
                "(request_timeout): it may be stuck, or a very long prompt needs longer: raise "
                "request_timeout in config.toml (or DFLASH_AGENT_REQUEST_TIMEOUT)")

    def _unavailable(self, message: str) -> ServerUnavailable:
        """The error for a failed request, with the server's crash report when it died."""
        report = self.explain() if self.explain else None
        return ServerUnavailable(f"{message}\n{report}" if report else message)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _bad_request(exc: openai.BadRequestError) -> Exception:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    if isinstance(err, dict) and err.get("type") == "exceed_context_size_error":
        return ContextOverflow(err.get("n_prompt_tokens"), err.get("n_ctx"))
    return ServerUnavailable(f"the server rejected the request: {exc}")
