"""The model client: streamed chat completions against an OpenAI-compatible server.

Against llama-server (it answers ``/props``) requests keep the prefix cache warm
(``cache_prompt``, pinned ``id_slot``) and responses carry its ``timings``
(docs/design/backend-facts.md). Another engine (vLLM, SGLang) gets plain OpenAI requests with the
model id it lists in ``/v1/models``; its context size comes from there (``max_model_len``), its
prefix caching is its own (automatic, reused because requests are append-only), and a turn's token
counts come from the stream's ``usage``. The HTTP read timeout is an idle timeout (per chunk),
and nothing is retried automatically: a retry would re-prefill the whole prompt
(docs/design/field-cases.md, class 10).
"""

from __future__ import annotations

import atexit
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2

from agent.events import Timings
from agent.usage import usage_timings
from backend.errors import StatedError

if TYPE_CHECKING:
    import openai

    from backend.serve.speculation.control import RequestControl


class ContextOverflow(StatedError, RuntimeError):
    """The request does not fit the server's context (``exceed_context_size_error``)."""

    def __init__(self, n_prompt_tokens: int | None, n_ctx: int | None):
        self.n_prompt_tokens, self.n_ctx = n_prompt_tokens, n_ctx
        super().__init__(f"the conversation ({n_prompt_tokens} tokens) does not fit the "
                         f"server's context of {n_ctx} tokens")


class ServerUnavailable(StatedError, RuntimeError):
    """The server could not be reached or answered with an error."""


class _Refused(ServerUnavailable):
    """The server answered, but not with what was asked (an error status, a body without
    tokens): unlike a server that cannot be reached, a reason to estimate instead."""


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
    ended_early: bool = False
    """The client ended the reply (``stop_at``), not the server."""


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
                 draft_cap: RequestControl | None = None):
        """``explain``: called when a request fails; returns why the server is gone (the
        managed server's crash report: signal, fix, log lines) or None. ``request_extra``:
        fields every completion carries (the managed server's workaround for a known bug of
        its build, :mod:`backend.serve.quirks`). ``draft_cap``: for a server that takes its
        draft length per request, what chooses each completion's length (sent as
        ``speculative.n_max``) and learns from its timings."""
        self.id_slot = id_slot
        self.idle_timeout = idle_timeout
        self.before_request: Callable[[], None] | None = None
        """Called before each completion: the session's chance to replace the server
        (:func:`agent.runtime.connect` relaunches one whose loaded draft costs, then
        :meth:`rebind`)."""
        self.estimated_tokens = False
        """True once a token count was estimated (the server has no ``/tokenize`` that
        answered): sizes are then ~1 token per 3 characters, on the safe side for code."""
        self.http = _shared_http()
        self._open(base_url, explain, request_extra, draft_cap)

    def _open(self, base_url: str, explain: Callable[[], str | None] | None,
              request_extra: dict[str, Any] | None,
              draft_cap: RequestControl | None) -> None:
        import openai  # deferred: ~0.75 s, which commands that call no model should not pay

        self.explain = explain
        self.request_extra = dict(request_extra or {})
        self.draft_cap = draft_cap
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.openai = openai.OpenAI(
            base_url=self.base_url + "/v1", api_key="sk-no-key-required", max_retries=0,
            timeout=httpx2.Timeout(connect=10.0, read=self.idle_timeout, write=60.0,
                                   pool=10.0))
        self._props: dict[str, Any] | None = None
        self._models: dict[str, Any] | None = None

    def rebind(self, base_url: str, explain: Callable[[], str | None] | None = None,
               request_extra: dict[str, Any] | None = None,
               draft_cap: RequestControl | None = None) -> None:
        """Talk to the server at ``base_url`` from now on, with these ``explain``,
        ``request_extra`` and ``draft_cap`` (as in the constructor): a server started in
        place of this one for the same session. What was read of the old one is forgotten."""
        self.close()
        self._open(base_url, explain, request_extra, draft_cap)

    def close(self) -> None:
        self.openai.close()

    def props(self) -> dict[str, Any]:
        """``GET /props`` (cached once the server answered); an empty dict for servers without
        it (not llama.cpp), and, not cached, while the server cannot answer (a network error,
        a 5xx while it is still loading)."""
        if self._props is None:
            try:
                resp = self.http.get(self.base_url + "/props", timeout=10.0)
            except httpx2.HTTPError:
                return {}  # not the server's answer: a later call asks again
            if resp.status_code >= 500:
                return {}
            try:
                data = resp.json() if resp.status_code == 200 else {}
            except ValueError:
                data = {}
            self._props = data if isinstance(data, dict) else {}
        return self._props

    def is_llama_server(self) -> bool:
        """True when the server answers llama.cpp's ``/props`` (llama-server, BeeLlama): only
        then are its own request fields (``cache_prompt``, ``id_slot``) sent."""
        return bool(self.props())

    def models(self) -> dict[str, Any]:
        """The first entry of ``GET /v1/models`` (cached once the server answered); an empty
        dict when the server has none, answers an error or something that is not an OpenAI
        model list, and, not cached, while the server cannot answer (a network error, a 5xx
        while it is still loading)."""
        if self._models is None:
            try:
                resp = self.http.get(self.base_url + "/v1/models", timeout=10.0)
            except httpx2.HTTPError:
                return {}  # not the server's answer: a later call asks again
            if resp.status_code >= 500:
                return {}
            try:
                data = resp.json().get("data") if resp.status_code == 200 else None
            except (ValueError, AttributeError):
                data = None
            ok = isinstance(data, list) and data and isinstance(data[0], dict)
            self._models = data[0] if ok else {}
        return self._models

    def model_id(self) -> str:
        """The ``model`` a completion names: the id ``/v1/models`` lists on an engine that
        checks it (vLLM answers 404 for a name it does not serve); ``local`` for llama-server,
        which ignores it."""
        if self.is_llama_server():
            return "local"
        model_id = self.models().get("id")
        return model_id if isinstance(model_id, str) and model_id else "local"

    def check_reachable(self) -> None:
        """Raise :class:`ServerUnavailable` with a next step when nothing answers, or when
        ``/v1/models`` answers a server error (5xx)."""
        try:
            resp = self.http.get(self.base_url + "/v1/models", timeout=10.0)
        except httpx2.HTTPError as exc:
            raise ServerUnavailable(f"no server answers at {self.base_url} ({exc}); start it, "
                                    "or drop --base-url to use the managed server") from exc
        if resp.status_code >= 500:
            raise ServerUnavailable(f"the server at {self.base_url} answered "
                                    f"{resp.status_code} on /v1/models "
                                    f"({' '.join(resp.text.split())[:200]}); check its log")

    def n_ctx(self) -> int | None:
        """The server's per-slot context size in tokens, when it says: llama-server's
        ``/props`` ``n_ctx``, else ``max_model_len`` of ``/v1/models`` (vLLM, SGLang)."""
        n_ctx = self.props().get("default_generation_settings", {}).get("n_ctx")
        if n_ctx is None and not self.is_llama_server():
            n_ctx = self.models().get("max_model_len")
        return n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 \
            else None

    def context_source(self) -> str:
        """Where :meth:`n_ctx` came from, for a note: ``/props`` or ``/v1/models``."""
        return "/props" if self.is_llama_server() else "/v1/models max_model_len"

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

        On a server that is not llama-server, vLLM's and SGLang's ``/tokenize`` form is
        tried (``prompt``); where that is refused or missing, the count is estimated at one
        token per 3 characters (the ids are then placeholders) and :attr:`estimated_tokens`
        is set. Raises :class:`ServerUnavailable` when llama-server cannot be reached or
        refuses.
        """
        if self.is_llama_server():
            return [int(t) for t in self._tokens({"content": text}, 30.0)]
        if not self.estimated_tokens:
            try:
                return [int(t) for t in self._tokens(
                    {"model": self.model_id(), "prompt": text, "add_special_tokens": False},
                    30.0)]
            except (_Refused, ValueError, TypeError):
                self.estimated_tokens = True
        return [0] * math.ceil(len(text) / 3)

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
            raise _Refused(f"/tokenize answered {resp.status_code}: {resp.text[:300]}")
        try:
            return list(resp.json()["tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            raise _Refused(f"/tokenize answered without tokens: {resp.text[:300]}") from exc

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict] | None = None,
                 response_format: dict | None = None, sampling: dict[str, Any] | None = None,
                 max_tokens: int = 2048,
                 on_text: Callable[[str], None] | None = None,
                 on_chunk: Callable[[int], None] | None = None,
                 deadline: float | None = None,
                 stop_at: Callable[[str], int | None] | None = None) -> Turn:
        """Stream one completion and assemble it. ``on_text`` gets each piece of reply text;
        ``on_chunk`` is called for every chunk (any sign of life) with the number of chunks so
        far that carried reply text, reasoning or tool-call arguments (one token each, about).

        ``deadline`` (``time.monotonic()`` seconds) is the task's time limit: a reply still
        streaming then is stopped (:class:`TimeLimitReached`), and a server silent past it
        (reading a long prompt) is given up as out of time rather than as dead.

        ``stop_at`` is called with the reply text so far after each piece; when it returns a
        length, the reply is kept to that many characters, the stream is closed (the server
        stops decoding) and the turn ends with finish reason ``stop`` and ``ended_early`` set.
        llama-server is then asked for timings in every chunk, so the turn keeps them.

        Raises :class:`ContextOverflow`, :class:`ServerUnavailable`,
        :class:`TimeLimitReached`; on ``KeyboardInterrupt`` the stream is closed first (so the
        server stops decoding) and the interrupt re-raised.
        """
        import openai  # deferred, as in __init__ (startup time)

        if self.before_request is not None:
            self.before_request()
        sampling = dict(sampling or {})
        extra: dict[str, Any] = dict(self.request_extra)
        llama = self.is_llama_server()
        if llama:  # other engines cache prefixes on their own and may refuse unknown fields
            extra["cache_prompt"] = True
            if self.id_slot is not None:
                extra["id_slot"] = self.id_slot
            if stop_at is not None:  # a stream closed early gets no final timings chunk
                extra["timings_per_token"] = True
        n_max = self.draft_cap.next_n_max() if self.draft_cap is not None else None
        if n_max is not None:
            extra["speculative.n_max"] = n_max
        for key in ("top_k", "min_p"):
            if sampling.get(key) is not None:
                extra[key] = sampling[key]
        kwargs: dict[str, Any] = {"model": self.model_id(), "messages": messages,
                                  "stream": True,
                                  "stream_options": {"include_usage": True},
                                  "max_tokens": max_tokens, "extra_body": extra}
        if sampling.get("temperature") is not None:
            kwargs["temperature"] = sampling["temperature"]
        for key in ("top_p", "seed"):
            if sampling.get(key) is not None:
                kwargs[key] = sampling[key]
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
        except openai.NotFoundError as exc:
            if llama:
                raise self._unavailable(f"model request to {self.base_url} failed: {exc}") \
                    from exc
            raise ServerUnavailable(f"the server at {self.base_url} does not serve model "
                                    f"{kwargs['model']!r} (404; the model id is read from "
                                    "its /v1/models, which gave "
                                    f"{'none' if kwargs['model'] == 'local' else 'that one'}"
                                    "): check the server's /v1/models") from exc
        except openai.APIError as exc:
            raise self._unavailable(f"model request to {self.base_url} failed: {exc}") from exc
        calls: dict[int, dict[str, str]] = {}

        def stopped() -> TimeLimitReached:
            turn.tool_calls = [calls[i] for i in sorted(calls)]
            return TimeLimitReached(turn)

        tokens = 0
        first_token: float | None = None
        try:
            for chunk in stream:
                if first_token is None and any(c.delta.content or c.delta.tool_calls
                                               for c in chunk.choices):
                    first_token = time.monotonic()
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
                        keep = stop_at(turn.content) if stop_at is not None else None
                        if keep is not None:
                            turn.content, turn.ended_early = turn.content[:keep], True
                            turn.finish_reason = "stop"
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
                if turn.ended_early:
                    stream.close()  # the server stops decoding when the connection closes
                    break
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
        if turn.timings is None and turn.usage is not None and not llama:
            turn.timings = usage_timings(turn.usage, first_token)
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


_CONTEXT_WORDS = re.compile(r"maximum context length (?:is|of) (\d+) tokens")
_REQUESTED_WORDS = re.compile(r"requested (?:a total of )?(\d+) tokens")


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _bad_request(exc: openai.BadRequestError) -> Exception:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    if isinstance(err, dict) and err.get("type") == "exceed_context_size_error":
        return ContextOverflow(err.get("n_prompt_tokens"), err.get("n_ctx"))
    # Other engines say it in words (vLLM: "This model's maximum context length is N
    # tokens. However, you requested M tokens ..."): the same overflow, so compaction runs.
    message = str(err.get("message", "")) if isinstance(err, dict) else ""
    found = _CONTEXT_WORDS.search(message)
    if found:
        asked = _REQUESTED_WORDS.search(message)
        return ContextOverflow(int(asked.group(1)) if asked else None, int(found.group(1)))
    return ServerUnavailable(f"the server rejected the request: {exc}")
