"""A stand-in for a vLLM OpenAI-compatible server, as its own process (starlette + uvicorn).

It answers what vLLM answers and nothing of llama-server's: ``/v1/models`` with
``max_model_len``, ``/health`` 200 with an empty body, vLLM's ``/tokenize`` (``prompt``,
optional), streamed chat completions without ``timings`` (a ``usage`` chunk at the end when
``stream_options.include_usage``), 404 for ``/props``, ``/slots``, ``/apply-template`` and a
model name it does not serve. Replies come from a JSON script; every completion body is
appended to a JSONL log, so a test can check what the agent sent.

Run: ``python -m tests.vllm_standin SCRIPT LOG PORT_FILE [--mode MODE]``; the bound port is
written to PORT_FILE once the server listens. Modes break one thing: ``garbage-models``
(``/v1/models`` is not JSON), ``no-max-len`` (its entry lacks ``max_model_len``),
``models-500`` (``/v1/models`` answers 500), ``no-tokenize`` (no ``/tokenize``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

SERVED = "Qwen/Qwen3-8B"
MAX_MODEL_LEN = 32768


def _tokens(text: str) -> int:
    """The stand-in tokenizer's count: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)


def _chunk(delta: dict[str, Any] | None, finish: str | None = None,
           usage: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                            "created": 0, "model": SERVED,
                            "choices": [] if delta is None else
                            [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


def build_app(script: list[dict[str, Any]], log: Path, mode: str) -> Starlette:
    """The ASGI app: ``script`` is consumed one reply per completion; ``log`` gets each
    completion's request body as one JSON line."""
    replies = list(script)

    async def models(_: Request) -> Response:
        if mode == "garbage-models":
            return PlainTextResponse("<html>proxy says hello</html>")
        if mode == "models-500":
            return JSONResponse({"error": {"message": "engine dead", "code": 500}},
                                status_code=500)
        entry: dict[str, Any] = {"id": SERVED, "object": "model", "created": 0,
                                 "owned_by": "vllm", "root": SERVED, "parent": None}
        if mode != "no-max-len":
            entry["max_model_len"] = MAX_MODEL_LEN
        return JSONResponse({"object": "list", "data": [entry]})

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def not_found(_: Request) -> Response:
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        if mode == "no-tokenize":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        if not isinstance(body.get("prompt"), str):
            return JSONResponse({"error": {"message": "Field required: prompt",
                                           "type": "BadRequestError", "code": 400}},
                                status_code=400)
        n = _tokens(body["prompt"])
        return JSONResponse({"count": n, "max_model_len": MAX_MODEL_LEN,
                             "tokens": list(range(n))})

    async def completions(request: Request) -> Response:
        body = await request.json()
        with log.open("a") as out:
            out.write(json.dumps(body) + "\n")
        if body.get("model") != SERVED:
            return JSONResponse({"error": {"message": f"The model `{body.get('model')}` does "
                                           "not exist.", "type": "NotFoundError",
                                           "code": 404}}, status_code=404)
        if not replies:
            return JSONResponse({"error": {"message": "script exhausted", "code": 500}},
                                status_code=500)
        reply = replies.pop(0)
        if "status" in reply:
            return JSONResponse(reply["body"], status_code=reply["status"])
        prompt = _tokens(json.dumps(body["messages"]))
        completion = _tokens(reply["content"])
        cached = reply.get("cached")
        include_usage = (body.get("stream_options") or {}).get("include_usage")

        async def stream() -> AsyncIterator[str]:
            yield _chunk({"role": "assistant", "content": ""})
            for start in range(0, len(reply["content"]), 16):
                yield _chunk({"content": reply["content"][start:start + 16]})
                await asyncio.sleep(0)
            yield _chunk({}, "stop")
            if include_usage:
                usage: dict[str, Any] = {"prompt_tokens": prompt,
                                         "completion_tokens": completion,
                                         "total_tokens": prompt + completion}
                if cached is not None:
                    usage["prompt_tokens_details"] = {"cached_tokens": cached}
                yield _chunk(None, usage=usage)
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[
        Route("/v1/models", models), Route("/health", health),
        Route("/props", not_found), Route("/slots", not_found),
        Route("/apply-template", not_found, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/v1/chat/completions", completions, methods=["POST"])])


def main() -> None:
    """Serve until killed; the bound port goes to PORT_FILE."""
    parser = argparse.ArgumentParser()
    parser.add_argument("script", type=Path)
    parser.add_argument("log", type=Path)
    parser.add_argument("port_file", type=Path)
    parser.add_argument("--mode", default="ok")
    args = parser.parse_args()
    app = build_app(json.loads(args.script.read_text()), args.log, args.mode)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # before the port is published: early connections queue until serving
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    tmp.rename(args.port_file)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
