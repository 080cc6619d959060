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
from pathlib import Path

import httpx2

from backend.engine.build import default_engine
from backend.measure.bench import machine_info, sample_from_response
from backend.measure.prompts import load_prompts
from backend.serve import worker
from backend.serve.profiles import LaunchPlan
from backend.serve.server import ServerState, interrupt_on_termination, pick_port, stop, up


def _post(client: httpx2.Client, state: ServerState, body: dict) -> dict:
    resp = client.post(state.base_url + "/v1/chat/completions", json=body)
    resp.raise_for_status()
    return resp.json()


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
            _post(client, states[name], {"messages": [{"role": "user", "content": "Hi"}],
                                         "max_tokens": 4, "temperature": 0.0})
        order = list(plans)
        samples: dict[str, list] = {name: [] for name in order}
        texts: dict[str, list[str]] = {name: [] for name in order}
        turn = 0
        for repeat in range(args.repeats):
            for prompt in prompts:
                shift = turn % len(order)
                turn += 1
                for name in order[shift:] + order[:shift]:
                    data = _post(client, states[name], {
                        "messages": [{"role": "user", "content": prompt.text}],
                        "max_tokens": args.max_tokens, "temperature": 0.0,
                        "cache_prompt": False})
                    texts[name].append(f"{repeat}/{prompt.name}: "
                                       f"{data['choices'][0]['message']['content']}")
                    samples[name].append(sample_from_response(
                        data, index=len(samples[name]), profile=name, prompt=prompt.name,
                        temperature=0.0, repeat=repeat))
        argvs = {name: states[name].argv for name in order}
    rows = []
    for name in order:
        tokens = sum(s.completion_tokens for s in samples[name])
        ms = sum(s.decode_ms for s in samples[name])
        p_tokens = sum(s.prompt_tokens for s in samples[name])
        p_ms = sum(s.prompt_ms for s in samples[name])
        rows.append({"name": name, "argv": argvs[name], "requests": len(samples[name]),
                     "completion_tokens": tokens, "decode_tok_s": tokens / ms * 1000,
                     "prefill_tok_s": p_tokens / p_ms * 1000 if p_ms else None,
                     "same_text_as_local": sorted(texts[name]) == sorted(texts["local"])})
    for row in rows:
        row["decode_ratio"] = row["decode_tok_s"] / rows[0]["decode_tok_s"]
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
