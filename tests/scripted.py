"""A scripted OpenAI-compatible model server on loopback, for testing the loop's logic.

It replays queued replies as llama-server-style SSE streams (with ``timings``) and records every
request body. ``openai`` 3.x talks through ``httpx2``, so a real socket is the honest seam.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def wait_for_session_log(home: Path, marker: str, what: str, timeout: float = 60.0) -> None:
    """Wait until a session log under the agent home ``home`` holds ``marker`` (a compact JSON
    fragment such as '"kind":"after"'); fails the test with ``what`` after ``timeout`` s."""
    sessions = home / "data" / "sessions"
    deadline = time.monotonic() + timeout
    while not any(marker in p.read_text("utf-8") for p in sessions.glob("2*.jsonl")):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def reply(content: str = "", tool_calls: list[tuple[str, Any]] | None = None,
          finish_reason: str | None = None, delay: float = 0.0,
          reasoning: str = "") -> dict[str, Any]:
    """One scripted model reply; tool call arguments may be a dict or raw JSON text;
    ``reasoning`` streams as ``reasoning_content`` first; ``delay`` (s) precedes any chunk."""
    return {"content": content, "tool_calls": tool_calls or [], "finish_reason": finish_reason,
            "delay": delay, "reasoning": reasoning}


def raw_reply(*lines: str) -> dict[str, Any]:
    """A scripted SSE stream sent verbatim: each of ``lines`` as one event line (e.g. a
    ``data: {not json`` line, or a stream that stops without a finish reason)."""
    return {"raw": list(lines)}


def runaway_reply(piece: str, count: int, every: float) -> dict[str, Any]:
    """A runaway decode: ``piece`` streamed ``count`` times, ``every`` seconds apart, then a
    ``length`` finish. A client that closes the stream before its end is counted in
    :attr:`ScriptedModel.cut_off`."""
    return {"runaway": (piece, count, every)}


def error_reply(status: int, error: dict[str, Any]) -> dict[str, Any]:
    """A scripted HTTP error answer, e.g. llama-server's ``exceed_context_size_error``."""
    return {"status": status, "error": error}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class ScriptedModel:
    """Serve ``replies`` in order; ``requests`` collects the parsed request bodies.

    ``POST /tokenize`` answers one token per 4 characters and does not consume a reply.
    """

    def __init__(self, replies: list[dict[str, Any]], supports_tools: bool = False,
                 n_ctx: int = 8192):
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.tokenize_requests: list[str] = []
        """Texts sent to ``/tokenize`` (kept apart from ``requests``, the completion bodies)."""
        self.props = {"default_generation_settings": {"n_ctx": n_ctx},
                      "chat_template_caps": {"supports_tools": supports_tools},
                      "model_path": "/scripted/model.gguf"}
        self.cut_off = 0
        """Streams the client closed before their end (a runaway it stopped)."""
        self.models: dict[str, Any] | None = None
        """The ``GET /v1/models`` answer when set (llama-server's has ``meta.n_params``)."""
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/props":
                    self._json(200, model.props)
                elif self.path == "/v1/models" and model.models is not None:
                    self._json(200, model.models)
                else:
                    self._json(200, {"status": "ok"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/apply-template":
                    text = "\n".join(f"<{m['role']}>{m.get('content')}"
                                     for m in body["messages"])
                    self._json(200, {"prompt": text})
                    return
                if self.path == "/tokenize":
                    if "content" not in body:  # llama-server's form only, as it answers
                        self._json(400, {"error": {"message": "\"content\" must be provided"}})
                        return
                    # Deterministic stand-in tokenizer: one token per 4 characters (rounded up).
                    model.tokenize_requests.append(body["content"])
                    self._json(200, {"tokens": list(range(-(-len(body["content"]) // 4)))})
                    return
                model.requests.append(body)
                if not model.replies:
                    self._json(500, {"error": {"message": "script exhausted"}})
                    return
                scripted = model.replies.pop(0)
                if "status" in scripted:
                    self._json(scripted["status"], {"error": scripted["error"]})
                elif "runaway" in scripted:
                    self._runaway(*scripted["runaway"])
                elif "raw" in scripted:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for line in scripted["raw"]:
                        self.wfile.write(f"{line}\n\n".encode())
                    self.wfile.flush()
                else:
                    self._stream(scripted)

            def _runaway(self, piece: str, count: int, every: float) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunks = [{"role": "assistant", "content": None}] + [{"content": piece}] * count
                try:
                    for delta in chunks:
                        self.wfile.write(f"data: {json.dumps(_chunk(delta))}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(every)
                    self.wfile.write(f"data: {json.dumps(_chunk({}, 'length'))}\n\n"
                                     "data: [DONE]\n\n".encode())
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    model.cut_off += 1

            def _stream(self, r: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                time.sleep(r["delay"])
                base = {"id": "x", "object": "chat.completion.chunk", "created": 0,
                        "model": "scripted"}

                def send(delta: dict[str, Any], finish: str | None = None,
                         **extra: Any) -> None:
                    chunk = {**base, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish}], **extra}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()

                send({"role": "assistant", "content": None})
                if r.get("reasoning"):
                    send({"reasoning_content": r["reasoning"]})
                if r["content"]:
                    send({"content": r["content"]})
                for i, (name, args) in enumerate(r["tool_calls"]):
                    raw = args if isinstance(args, str) else json.dumps(args)
                    send({"tool_calls": [{"index": i, "id": f"tc{i}", "type": "function",
                                          "function": {"name": name, "arguments": raw}}]})
                finish = r["finish_reason"] or ("tool_calls" if r["tool_calls"] else "stop")
                timings = {"cache_n": 0, "prompt_n": 10, "prompt_ms": 1.0,
                           "predicted_n": 5, "predicted_ms": 2.0, "predicted_per_second": 2500}
                send({}, finish, timings=timings)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
