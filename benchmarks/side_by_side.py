"""Servers up at once, each prompt sent to each in a rotating order: the measuring loop of the
scripts that compare whole servers rather than profiles (``engine_ab.py``: builds;
``rpc_loopback.py``: a local server against the same model over RPC workers). The product's
bench rules: temperature 0, ``cache_prompt`` off, one warm-up request per server.
"""

from __future__ import annotations

import httpx2

from backend.measure.prompts import BenchPrompt
from backend.measure.results import Sample, sample_from_response
from backend.serve.records import ServerState


def post_chat(client: httpx2.Client, state: ServerState, body: dict) -> dict:
    """One chat completion; raises ``httpx2.HTTPStatusError`` on an error status."""
    resp = client.post(state.base_url + "/v1/chat/completions", json=body)
    resp.raise_for_status()
    return resp.json()


def warm_up(client: httpx2.Client, state: ServerState) -> None:
    """A 4-token request: weights paged in and buffers allocated before anything is timed."""
    post_chat(client, state, {"messages": [{"role": "user", "content": "Hi"}],
                              "max_tokens": 4, "temperature": 0.0})


def interleaved(client: httpx2.Client, states: dict[str, ServerState],
                prompts: list[BenchPrompt], repeats: int, max_tokens: int
                ) -> tuple[dict[str, list[Sample]], dict[str, list[str]]]:
    """Each prompt ``repeats`` times to every server in ``states`` (in its order, rotated one
    place per prompt so no server always goes first); (samples, texts) per server name, the
    texts as ``repeat/prompt: reply``."""
    order = list(states)
    samples: dict[str, list[Sample]] = {name: [] for name in order}
    texts: dict[str, list[str]] = {name: [] for name in order}
    turn = 0
    for repeat in range(repeats):
        for prompt in prompts:
            shift = turn % len(order)
            turn += 1
            for name in order[shift:] + order[:shift]:
                data = post_chat(client, states[name], {
                    "messages": [{"role": "user", "content": prompt.text}],
                    "max_tokens": max_tokens, "temperature": 0.0, "cache_prompt": False})
                texts[name].append(f"{repeat}/{prompt.name}: "
                                   f"{data['choices'][0]['message']['content']}")
                samples[name].append(sample_from_response(
                    data, index=len(samples[name]), profile=name, prompt=prompt.name,
                    temperature=0.0, repeat=repeat))
    return samples, texts


def summary_rows(samples: dict[str, list[Sample]],
                 states: dict[str, ServerState]) -> list[dict]:
    """Per server (in ``samples``' order): argv, requests, completion tokens, decode and prefill
    tok/s, and ``decode_ratio`` against the first server."""
    rows = []
    for name, taken in samples.items():
        tokens = sum(s.completion_tokens for s in taken)
        ms = sum(s.decode_ms for s in taken)
        p_tokens = sum(s.prompt_tokens for s in taken)
        p_ms = sum(s.prompt_ms for s in taken)
        rows.append({"name": name, "argv": states[name].argv, "requests": len(taken),
                     "completion_tokens": tokens, "decode_tok_s": tokens / ms * 1000,
                     "prefill_tok_s": p_tokens / p_ms * 1000 if p_ms else None})
    for row in rows:
        row["decode_ratio"] = row["decode_tok_s"] / rows[0]["decode_tok_s"]
    return rows
