"""``ServerClient.props()`` and ``models()`` against a real local HTTP server: an answer is
cached, a failure to answer is not."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.client import ServerClient

PROPS = {"default_generation_settings": {"n_ctx": 4096},
         "chat_template_caps": {"supports_tools": True}}
MODEL = {"id": "served-model", "object": "model", "max_model_len": 8192}
MODELS = {"object": "list", "data": [MODEL]}


@pytest.fixture
def flaky_server() -> Iterator[tuple[str, list[str]]]:
    """A server whose first ``/props`` request is dropped without an answer (a network
    error for the client), then one that answers 503 (loading), then the props; any other
    path is dropped, then answered 503, then given the model list the same way, as vLLM
    does while it starts (no ``/props`` there: 404). Yields its URL and the paths requested."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.path)
            nth = seen.count(self.path)
            if nth == 1:
                self.close_connection = True  # no status line: the client sees an error
                return
            if nth == 2:
                body, status = b'{"error": "Loading model"}', 503
            else:
                answer = PROPS if self.path == "/props" else MODELS
                body, status = json.dumps(answer).encode(), 200
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_props_that_failed_to_load_are_asked_again_then_cached(
        flaky_server: tuple[str, list[str]]):
    url, seen = flaky_server
    client = ServerClient(url)
    try:
        assert client.props() == {}  # dropped connection
        assert client.props() == {}  # 503 while loading
        assert client.props() == PROPS
        assert client.is_llama_server() and client.n_ctx() == 4096
        assert seen == ["/props"] * 3  # the answer is cached: no fourth request
    finally:
        client.close()


def test_models_that_failed_to_load_are_asked_again_then_cached(
        flaky_server: tuple[str, list[str]]):
    url, seen = flaky_server
    client = ServerClient(url)
    try:
        assert client.models() == {}  # dropped connection
        assert client.models() == {}  # 503 while loading
        assert client.models() == MODEL
        assert client.models() == MODEL
        assert seen == ["/v1/models"] * 3  # the answer is cached: no fourth request
    finally:
        client.close()
