"""Timings for a server that sends no llama-server ``timings`` (vLLM, SGLang): from the stream's
OpenAI ``usage`` block."""

from __future__ import annotations

import time
from typing import Any

from agent.events import Timings


def usage_timings(usage: dict[str, Any], first_token: float | None) -> Timings | None:
    """Timings for a server without llama-server's ``timings`` (vLLM, SGLang), from the
    stream's ``usage``: ``prompt_n`` is the prompt tokens not served from cache, ``cache_n``
    the cached ones when the server reports them (``prompt_tokens_details.cached_tokens``;
    None when it does not say), ``predicted_per_second`` measured here from the first token
    to the end of the stream. ``source`` is ``usage``. None when ``usage`` holds no counts."""
    prompt, decoded = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(decoded, int):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = cached if isinstance(cached, int) and 0 <= cached <= prompt else None
    elapsed = time.monotonic() - first_token if first_token is not None else 0.0
    timed = elapsed > 0 and decoded > 0
    return Timings(prompt_n=prompt - (cached or 0), cache_n=cached, predicted_n=decoded,
                   predicted_ms=elapsed * 1000 if timed else None,
                   predicted_per_second=decoded / elapsed if timed else None,
                   source="usage")
