"""The llama-server calls the trainer makes, and starting one through the product's backend.

- :func:`apply_template` — ``POST /apply-template``: the prompt text the server's own chat
  template builds for a request (what the product's requests become);
- :func:`tokenize` — ``POST /tokenize`` with special tokens parsed and added as a completion
  would (``add_special``), so the ids are the ones the server decodes from;
- :func:`complete_ids` — ``POST /completion`` from token ids, greedy (temperature 0), with
  ``return_tokens``: the generated ids exactly as sampled, not re-tokenised text;
- :func:`serve` — a managed ``llama-server`` (``backend.serve.server.up``) with ``parallel`` slots
  (``-np``, continuous batching), stopped on exit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from backend.models.presets import ServerOptions
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerError
from backend.serve.server import up
from train.errors import TrainError
from train.requests import ChatRequest

TIMEOUT = httpx2.Timeout(connect=10.0, read=900.0, write=60.0, pool=None)
_CLIENT: httpx2.Client | None = None


def _client() -> httpx2.Client:
    """One client for every call (thread-safe, connections kept): a new connection per call
    cost ~0.4 s here, 40 times the call itself."""
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = httpx2.Client(timeout=TIMEOUT, limits=httpx2.Limits(
            max_connections=512, max_keepalive_connections=512))
    return _CLIENT


class TooLong(TrainError):
    """The server's slot context cannot hold the prompt plus the continuation."""


def _post(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = _client().post(base_url.rstrip("/") + path, json=body)
    except httpx2.HTTPError as exc:
        raise TrainError(f"cannot reach the server at {base_url}: {exc}") from exc
    if resp.status_code != 200:
        kind = TooLong if "exceed_context_size_error" in resp.text else TrainError
        raise kind(f"{path} answered {resp.status_code}: {resp.text[:300]}")
    try:
        return resp.json()
    except ValueError as exc:
        raise TrainError(f"{path} answered with no JSON: {resp.text[:300]}") from exc


def apply_template(base_url: str, request: ChatRequest) -> str:
    """The prompt text for ``request`` (its messages, and its tools for ``native``)."""
    body: dict[str, Any] = {"messages": request.messages}
    if request.tools:
        body["tools"] = request.tools
    return str(_post(base_url, "/apply-template", body).get("prompt", ""))


def tokenize(base_url: str, text: str) -> list[int]:
    """The ids the server decodes ``text`` into as a prompt (special tokens parsed, BOS added
    when the vocabulary asks for one)."""
    found = _post(base_url, "/tokenize", {"content": text, "add_special": True,
                                          "parse_special": True})
    return [int(t) for t in found.get("tokens", [])]


def complete_ids(base_url: str, prompt: list[int], max_new: int,
                 schema: str | None = None) -> list[int]:
    """The server's greedy continuation of ``prompt`` (ids), at most ``max_new`` tokens, the
    end-of-generation token included when it came; decoded under ``schema`` (JSON schema
    text) when given, as a ``json``-protocol reply is. Raises :class:`TooLong` when the slot's
    context cannot hold the prompt."""
    body: dict[str, Any] = {"prompt": prompt, "n_predict": max_new, "temperature": 0.0,
                            "cache_prompt": True, "return_tokens": True, "stream": False}
    if schema is not None:
        body["json_schema"] = json.loads(schema)
    return [int(t) for t in _post(base_url, "/completion", body).get("tokens", [])]


def slots(base_url: str) -> int:
    """How many slots the server runs (``/props.total_slots``)."""
    try:
        resp = _client().get(base_url.rstrip("/") + "/props", timeout=10.0)
        return int(resp.json().get("total_slots", 1))
    except (httpx2.HTTPError, ValueError, TypeError) as exc:
        raise TrainError(f"cannot read /props from {base_url}: {exc}") from exc


@contextmanager
def serve(binary: Path, model: Path, *, parallel: int = 1, ctx_per_slot: int = 4096,
          gpu_layers: str | None = None, timeout: float = 600.0) -> Iterator[str]:
    """A baseline ``llama-server`` for ``model`` with ``parallel`` slots of ``ctx_per_slot``
    tokens each, started through the product's backend; yields its base URL and stops it.

    Raises :class:`TrainError` (exit 3) with the backend's diagnosis when it does not start.
    """
    if not Path(binary).is_file():
        raise TrainError(f"{binary}: no llama-server binary there (build one with "
                         "agent backend build, or pass --server-url)")
    plan = LaunchPlan(binary=Path(binary), model=Path(model), profile="baseline",
                      ctx_size=max(256, parallel * ctx_per_slot), parallel=parallel,
                      options=ServerOptions(gpu_layers=gpu_layers))
    try:
        state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=timeout)
    except (ServerError, ValueError) as exc:
        raise TrainError(f"llama-server did not start: {exc}") from exc
    try:
        yield state.base_url
    finally:
        stop(state)
