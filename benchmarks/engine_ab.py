"""Two or more llama-server builds side by side on one model, in one run: decode tok/s.

Made for the AMX fix: the old ``-march=native`` build crashes on an AMX Xeon unless it runs with
``--no-repack``, so "before" is that build with ``--no-repack`` and "after" is the CPU-keyed build
with weight repacking on (and, for scale, the new build with ``--no-repack`` too). Every server
is up at once and each prompt goes to each of them in a rotating order (the product's bench
rules: temperature 0, ``cache_prompt`` off, one warm-up request each).

Usage (from the repo root):
  python benchmarks/engine_ab.py --server before=/old/llama-server:--no-repack \\
      --server after=/new/llama-server --server after-nr=/new/llama-server:--no-repack \\
      --model SmolLM2-135M-Instruct.Q4_1.gguf --repeats 3 --json engine_ab.json
Each ``--server`` is ``NAME=BINARY[:FLAG,FLAG...]``; the first is the reference for ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import httpx2

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.measure.prompts import load_prompts  # noqa: E402
from backend.measure.results import machine_info  # noqa: E402
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan  # noqa: E402
from backend.serve.records import ServerState
from backend.serve.server import interrupt_on_termination, up
from benchmarks.side_by_side import interleaved, summary_rows, warm_up  # noqa: E402


def _parse_server(spec: str) -> tuple[str, Path, tuple[str, ...]]:
    name, _, rest = spec.partition("=")
    binary, _, flags = rest.partition(":")
    if not name or not binary:
        raise SystemExit(f"--server {spec!r}: expected NAME=BINARY[:FLAG,FLAG...]")
    return name, Path(binary), tuple(f for f in flags.split(",") if f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", action="append", required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--json", type=Path, default=Path("engine_ab.json"))
    args = parser.parse_args()
    servers = [_parse_server(s) for s in args.server]
    _, prompts = load_prompts("seed")
    states: dict[str, ServerState] = {}
    with interrupt_on_termination(), contextlib.ExitStack() as cleanup, \
            httpx2.Client(timeout=httpx2.Timeout(600.0)) as client:
        cleanup.callback(lambda: [stop(s) for s in states.values()])
        for name, binary, flags in servers:
            plan = LaunchPlan(binary=binary, model=args.model, profile="baseline",
                              ctx_size=4096, extra_flags=flags)
            states[name], _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
            warm_up(client, states[name])
        samples, _ = interleaved(client, states, prompts, args.repeats, args.max_tokens)
    rows = summary_rows(samples, states)
    order = list(states)
    result = {"machine": machine_info().model_dump(), "model": str(args.model),
              "max_tokens": args.max_tokens, "repeats": args.repeats,
              "prompts": [p.name for p in prompts], "servers": rows,
              "samples": {n: [s.model_dump() for s in v] for n, v in samples.items()}}
    args.json.write_text(json.dumps(result, indent=2, default=str), "utf-8")
    print(f"{'server':<10} {'tokens':>7} {'decode tok/s':>13} {'prefill tok/s':>14} "
          f"{'x ' + order[0]:>10}")
    for row in rows:
        print(f"{row['name']:<10} {row['completion_tokens']:>7} {row['decode_tok_s']:>13.1f} "
              f"{row['prefill_tok_s'] or 0:>14.1f} {row['decode_ratio']:>10.2f}")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
