"""One llama-server alone vs the same model spread over RPC workers on this machine: decode and
prefill tok/s, and whether the greedy text is the same.

The workers are real ``rpc-server`` processes started the way ``agent backend worker`` starts
them (:mod:`backend.serve.worker`) on 127.0.0.1, so what is measured is ggml-rpc's own cost (a
round trip per graph, the activations between workers) with no network in the way: the floor of
what RPC costs, not what a LAN adds. Both servers are up at once and each prompt goes to each in
a rotating order (the product's bench rules: temperature 0, ``cache_prompt`` off, one warm-up
request each).

Usage (from the repo root, with an engine built with RPC: ``agent backend build``):
  python benchmarks/rpc_loopback.py --model SmolLM2-135M-Instruct.Q4_1.gguf --workers 2 \\
      --worker-threads 2 --repeats 2 --json rpc_loopback.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import httpx2

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.engine.build import default_engine  # noqa: E402
from backend.measure.prompts import load_prompts  # noqa: E402
from backend.measure.results import machine_info  # noqa: E402
from backend.serve import worker  # noqa: E402
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan  # noqa: E402
from backend.serve.records import ServerState
from backend.serve.server import interrupt_on_termination, up
from benchmarks.side_by_side import interleaved, summary_rows, warm_up  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--json", type=Path, default=Path("rpc_loopback.json"))
    args = parser.parse_args()
    engine = default_engine(rpc=True)
    if engine is None:
        raise SystemExit("no engine with rpc-server here: run `agent backend build` first")
    _, prompts = load_prompts("seed")
    states: dict[str, ServerState] = {}
    procs: list[subprocess.Popen] = []
    with interrupt_on_termination(), contextlib.ExitStack() as cleanup, \
            httpx2.Client(timeout=httpx2.Timeout(600.0)) as client:
        cleanup.callback(lambda: [worker.stop(p) for p in procs])
        cleanup.callback(lambda: [stop(s) for s in states.values()])
        addresses = []
        for _ in range(args.workers):
            port = worker.resolve_port("127.0.0.1", 0)
            argv = worker.worker_argv(engine, "127.0.0.1", port, threads=args.worker_threads)
            proc, _, info = worker.start(argv, "127.0.0.1", port)
            procs.append(proc)
            addresses.append(info.address)
        base = LaunchPlan(binary=engine.binary, model=args.model, profile="baseline",
                          ctx_size=4096)
        plans = {"local": base, f"rpc-{args.workers}": base.model_copy(
            update={"rpc": tuple(addresses)})}
        for name, plan in plans.items():
            states[name], _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
            warm_up(client, states[name])
        samples, texts = interleaved(client, states, prompts, args.repeats, args.max_tokens)
    rows = summary_rows(samples, states)
    for row in rows:
        row["same_text_as_local"] = sorted(texts[row["name"]]) == sorted(texts["local"])
    result = {"machine": machine_info().model_dump(), "engine": engine.key,
              "model": str(args.model), "max_tokens": args.max_tokens,
              "repeats": args.repeats, "workers": addresses,
              "worker_threads": args.worker_threads, "prompts": [p.name for p in prompts],
              "servers": rows,
              "samples": {n: [s.model_dump() for s in v] for n, v in samples.items()}}
    args.json.write_text(json.dumps(result, indent=2, default=str), "utf-8")
    print(f"{'server':<8} {'tokens':>7} {'decode tok/s':>13} {'prefill tok/s':>14} "
          f"{'x local':>8} same text")
    for row in rows:
        print(f"{row['name']:<8} {row['completion_tokens']:>7} {row['decode_tok_s']:>13.1f} "
              f"{row['prefill_tok_s'] or 0:>14.1f} {row['decode_ratio']:>8.2f} "
              f"{row['same_text_as_local']}")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
