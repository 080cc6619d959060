"""Prefix-cache reuse of a 10-turn session against the real server, side by side with the same
session whose system prompt carries a per-turn timestamp (what several other agents do).

Usage: python benchmarks/prefix_cache.py [--base-url URL] [--turns 10] [--json OUT]
Without --base-url it starts (or reuses) the managed server for the smollm2-135m preset.
The last line printed is the overall reuse ratio of the stable session.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agent.client import ServerClient
from agent.prompts import system_prompt
from backend.models.presets import get_preset
from backend.serve.pipeline import LaunchRequest, launch
from tools.registry import default_registry
from tools.workspace import Workspace

FILE = "\n".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(12))


def run_session(client: ServerClient, turns: int, clock: bool) -> list[dict[str, int]]:
    """One scripted session; returns per-turn ``prompt_n`` (prefilled) and ``cache_n``."""
    tools = default_registry(Workspace(Path("."))).openai_tools()
    base = system_prompt("json", tools)
    history: list[dict] = []
    rows = []
    for turn in range(1, turns + 1):
        system = base + (f"\nCurrent time: {time.strftime('%Y-%m-%d %H:%M:%S')} (turn {turn})"
                         if clock else "")
        history.append({"role": "user", "content": f"Turn {turn}: here is utils.py again, "
                        f"say which function multiplies by {turn}.\n{FILE}"})
        reply = client.complete([{"role": "system", "content": system}, *history],
                                sampling={"temperature": 0.0}, max_tokens=16)
        history.append({"role": "assistant", "content": reply.content})
        t = reply.timings
        rows.append({"turn": turn, "prefilled": t.prompt_n or 0 if t else 0,
                     "reused": t.cache_n or 0 if t else 0})
    return rows


def ratio(rows: list[dict[str, int]]) -> float:
    reused = sum(r["reused"] for r in rows)
    total = reused + sum(r["prefilled"] for r in rows)
    return reused / total if total else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("prefix_cache.json"))
    args = parser.parse_args()
    if args.base_url is None:
        state, _ = launch(LaunchRequest(get_preset("smollm2-135m"), profile="baseline",
                                        ctx_size=16384, session=True))
        args.base_url = state.base_url
    client = ServerClient(args.base_url)
    stable = run_session(client, args.turns, clock=False)
    clocked = run_session(client, args.turns, clock=True)
    print(f"{'turn':>4} {'stable: prefilled':>18} {'reused':>7} | "
          f"{'timestamped: prefilled':>23} {'reused':>7}")
    for a, b in zip(stable, clocked, strict=True):
        print(f"{a['turn']:>4} {a['prefilled']:>18} {a['reused']:>7} | "
              f"{b['prefilled']:>23} {b['reused']:>7}")
    result = {"turns": args.turns, "stable": stable, "timestamped": clocked,
              "stable_reuse_ratio": round(ratio(stable), 4),
              "timestamped_reuse_ratio": round(ratio(clocked), 4),
              "stable_prefilled": sum(r["prefilled"] for r in stable),
              "timestamped_prefilled": sum(r["prefilled"] for r in clocked)}
    args.json.write_text(json.dumps(result, indent=2))
    print(f"prefilled tokens: stable {result['stable_prefilled']}, timestamped "
          f"{result['timestamped_prefilled']} "
          f"({result['timestamped_prefilled'] / max(result['stable_prefilled'], 1):.1f}x)")
    print(f"timestamped reuse ratio: {result['timestamped_reuse_ratio']:.3f}")
    print(f"overall reuse ratio: {result['stable_reuse_ratio']:.3f}")


if __name__ == "__main__":
    main()
