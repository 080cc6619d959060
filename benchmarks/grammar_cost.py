"""What the ``json`` protocol's grammar costs a decoded token, side by side on one server.

The embedded default (SmolLM2-135M) runs the agent's ``json`` protocol from its first turn
(``agent.protocols.choice.AUTO_RULES``): every request carries a ``json_schema``
``response_format`` over all the tools, which llama-server compiles into a grammar. This sends
the agent's own first request of a task (its json system prompt and a task) to one server,
alternating with and without that ``response_format`` (``--repeats`` each, after one warm-up
of each), and reports decode tokens/s and ms a token per side, and their ratio.

Run from the checkout's root with the venv (``DFLASH_AGENT_HOME`` honoured)::

    python benchmarks/grammar_cost.py --profiles baseline,ngram --json grammar-cost.json

A side is the same messages, so the prompt is cached after the warm-up; what differs is only
the grammar, and with it the reply (prose without it, one JSON call with it): the rates compare
decoding, not the same text.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2

from agent.prompts import system_prompt
from agent.protocols.base import json_response_format, tools_with_final
from backend.models.presets import get_preset
from backend.serve import pipeline
from backend.serve.pipeline import LaunchRequest
from backend.serve.process import DEFAULT_HOST, pick_port, stop
from tools.registry import default_registry
from tools.workspace import Workspace

TASK = ("Create a small Python package `inventory` with a function that reads a CSV of items "
        "(name, quantity, price) and returns the total stock value, and tests for it.")


def _request(client: httpx2.Client, base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(base_url + "/v1/chat/completions", json=body).json()
    t = reply["timings"]
    return {"tokens": t["predicted_n"], "decode_ms": t["predicted_ms"],
            "tok_s": t["predicted_n"] / t["predicted_ms"] * 1000,
            "draft_n": t.get("draft_n", 0), "draft_accepted": t.get("draft_n_accepted", 0),
            "text": reply["choices"][0]["message"].get("content") or ""}


def measure(preset_name: str, profile: str, max_tokens: int, repeats: int,
            workspace: Path) -> dict[str, Any]:
    """One server of ``preset_name`` under ``profile``; both sides' requests and medians."""
    preset = get_preset(preset_name)
    tools = default_registry(Workspace(workspace)).openai_tools()
    messages = [{"role": "system",
                 "content": system_prompt("json", tools_with_final(tools))},
                {"role": "user", "content": TASK}]
    grammar = json_response_format(tools)
    request = LaunchRequest(preset, profile=profile)
    plan = pipeline.resolve(request).plan
    state, _ = pipeline.start(plan, replace(request, port=pick_port(DEFAULT_HOST, 0)))
    sides: dict[str, list[dict[str, Any]]] = {"free": [], "json-grammar": []}
    try:
        with httpx2.Client(timeout=900) as client:
            for rnd in range(repeats + 1):
                for side, extra in (("free", {}), ("json-grammar", {"response_format": grammar})):
                    body = {**state.request_extra, "messages": messages,
                            "max_tokens": max_tokens, "temperature": 0.0, **extra}
                    got = _request(client, state.base_url, body)
                    if rnd:  # round 0 warms the prompt cache and the grammar's first parse
                        sides[side].append(got)
                    print(f"{profile} {side} round {rnd}: {got['tokens']} tok "
                          f"{got['tok_s']:.1f} tok/s", flush=True)
    finally:
        stop(state)
    medians = {side: statistics.median(r["tok_s"] for r in rows) for side, rows in sides.items()}
    return {"preset": preset_name, "profile": profile, "requests": sides,
            "median_tok_s": medians,
            "grammar_ratio": medians["json-grammar"] / medians["free"],
            "ms_per_token": {side: 1000 / v for side, v in medians.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--profiles", default="baseline,ngram")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workspace", type=Path, default=Path.cwd())
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = [measure(args.preset, p, args.max_tokens, args.repeats, args.workspace.resolve())
            for p in args.profiles.split(",")]
    for run in runs:
        m = run["median_tok_s"]
        print(f"{run['profile']}: free {m['free']:.1f} tok/s, json grammar "
              f"{m['json-grammar']:.1f} tok/s: x{run['grammar_ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({
            "schema_version": 1, "date": datetime.now(UTC).isoformat(),
            "machine": {"platform": platform.platform(), "processor": platform.processor()},
            "max_tokens": args.max_tokens, "repeats": args.repeats, "task": TASK,
            "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
