"""Per-request draft cap against a restart, side by side: is ``speculative.n_max`` 0 a true
"off", and does ``speculative.n_max`` K cost what a launch with ``--spec-draft-n-max`` K costs?

Needs an engine built with ``backend/engine/patches/b11434-per-request-draft-cap.patch``.
Three servers of one binary, target and draft, all up at once:

- ``baseline``: no draft model;
- ``capped``: the draft at launch length ``--launch-k`` (15), measured twice per round: each
  request with ``speculative.n_max`` 0 (variant ``cap0``) and with ``speculative.n_max`` K
  (variant ``capK``);
- ``launchK``: the draft launched with ``--spec-draft-n-max`` K, requests without the field.

Every prompt goes to every variant in a rotating order, ``--repeats`` rounds, so load drift
(the 2-core VM is shared) hits all alike; temperature 0, ``cache_prompt`` false (every request
prefills its whole prompt, so prefill is compared too). Ratios are of sums over the run (tokens /
time) against ``baseline``; the spread of the per-round ratios is reported as the noise.
``--synth-accept P`` makes every drafting server accept each drafted token with probability P
(``--spec-synth-rates`` p, p², …: the first K of the launch-15 server's rates are the K server's
rates, so ``capK`` and ``launchK`` see the same acceptance).

Usage (from the repo root):
  python benchmarks/draft_cap.py --binary <home>/cache/engines/<key>/bin/llama-server \\
      --model SmolLM2-135M-Instruct.Q4_1.gguf --draft smollm2-135m-dflash-v1.gguf \\
      --k 3 --prompts edit --repeats 5 --max-tokens 256 --json draft-cap.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
from pathlib import Path

import httpx2

from backend.measure.prompts import load_prompts
from backend.measure.results import Sample, machine_info, sample_from_response
from backend.models.presets import ServerOptions
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerState
from backend.serve.server import interrupt_on_termination, up
from backend.serve.speculation.costs import synth_rates


def _post(client: httpx2.Client, state: ServerState, body: dict) -> dict:
    resp = client.post(state.base_url + "/v1/chat/completions",
                       json={**state.request_extra, **body})
    if resp.status_code != 200:
        raise SystemExit(f"{state.base_url} answered HTTP {resp.status_code}: {resp.text[:300]}")
    return resp.json()


def _rate(tokens: int, ms: float) -> float | None:
    return tokens / ms * 1000 if ms > 0 else None


def summarize(samples: dict[str, list], names: list[str]) -> list[dict]:
    """Per variant: totals over the run (ratio of sums against ``baseline``) and the ratios of
    the variant's decode rate to ``baseline``'s within each group (one prompt in one round,
    requests sent back to back), whose median is what to read when the machine is shared:
    a stall of other jobs hits one group, and the median leaves it out."""
    def rate(group: list) -> float | None:
        return _rate(sum(s.completion_tokens for s in group), sum(s.decode_ms for s in group))

    def pick(name: str, key: tuple | None = None) -> list:
        return [s for s in samples[name] if key is None or (s.repeat, s.prompt) == key]

    groups = sorted({(s.repeat, s.prompt) for s in samples["baseline"]})
    rows = []
    for name in names:
        group = pick(name)
        ratios = [rate(pick(name, k)) / rate(pick("baseline", k)) for k in groups]
        prefill = _rate(sum(s.prompt_tokens for s in group), sum(s.prompt_ms for s in group))
        base_prefill = _rate(sum(s.prompt_tokens for s in pick("baseline")),
                             sum(s.prompt_ms for s in pick("baseline")))
        rows.append({"variant": name, "requests": len(group),
                     "completion_tokens": sum(s.completion_tokens for s in group),
                     "decode_tok_s": rate(group), "prefill_tok_s": prefill,
                     "draft_n": sum(s.draft_n for s in group),
                     "draft_accepted": sum(s.draft_accepted for s in group),
                     "decode_ratio_of_sums": rate(group) / rate(pick("baseline")),
                     "prefill_ratio_of_sums": prefill / base_prefill,
                     "group_ratios": ratios, "group_ratio_median": statistics.median(ratios),
                     "group_ratio_quartiles": statistics.quantiles(ratios, n=4)
                     if len(ratios) > 1 else ratios * 3})
    return rows


def report(result: dict) -> None:
    """The table of a result (JSON as :func:`main` writes it)."""
    print(f"{'variant':<9} {'tokens':>6} {'dec tok/s':>9} {'drafts':>7} {'acc':>5} "
          f"{'sum x':>6} {'median x':>8} {'quartiles':>11} {'pre x':>6}")
    for r in result["variants"]:
        q = r["group_ratio_quartiles"]
        print(f"{r['variant']:<9} {r['completion_tokens']:>6} {r['decode_tok_s']:>9.1f} "
              f"{r['draft_n']:>7} {r['draft_accepted']:>5} {r['decode_ratio_of_sums']:>6.2f} "
              f"{r['group_ratio_median']:>8.2f} {q[0]:>5.2f}-{q[2]:<5.2f} "
              f"{r['prefill_ratio_of_sums']:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--launch-k", type=int, default=15)
    parser.add_argument("--prompts", default="edit")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--synth-accept", type=float, default=None)
    parser.add_argument("--gpu", action="store_true", help="both models on the GPU, flash "
                        "attention on (the H200 presets' server options)")
    parser.add_argument("--json", type=Path, default=Path("draft-cap.json"))
    parser.add_argument("--report", type=Path, help="print the table of a saved result "
                        "again (its samples summarized anew) and exit")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text("utf-8"))
        samples = {n: [Sample.model_validate(s) for s in v] for n, v in saved["samples"].items()}
        saved["variants"] = summarize(samples, list(samples))
        report(saved)
        return
    if not (args.binary and args.model and args.draft):
        raise SystemExit("give --binary, --model and --draft (or --report JSON)")
    if not 1 <= args.k <= args.launch_k <= 15:
        raise SystemExit("need 1 <= --k <= --launch-k <= 15")
    _, prompts = load_prompts(args.prompts)
    options = ServerOptions(gpu_layers="all", draft_gpu_layers="all", flash_attn="on") \
        if args.gpu else ServerOptions()

    def plan(name: str, profile: str, n_max: int | None) -> LaunchPlan:
        flags: tuple[str, ...] = ("--alias", f"draft-cap-{name}")
        if args.synth_accept is not None and n_max:
            flags += ("--spec-synth-rates", synth_rates(args.synth_accept, n_max))
        return LaunchPlan(binary=args.binary, model=args.model, profile=profile,
                          ctx_size=4096, draft=args.draft if n_max else None,
                          draft_n_max=n_max, extra_flags=flags, options=options)

    plans = {"baseline": plan("baseline", "baseline", None),
             "capped": plan("capped", "dflash-fixed", args.launch_k),
             "launchK": plan("launchK", "dflash-fixed", args.k)}
    variants = [("baseline", "baseline", {}), ("cap0", "capped", {"speculative.n_max": 0}),
                ("capK", "capped", {"speculative.n_max": args.k}), ("launchK", "launchK", {})]
    samples: dict[str, list] = {name: [] for name, _, _ in variants}
    states: dict[str, ServerState] = {}
    with interrupt_on_termination(), contextlib.ExitStack() as cleanup, \
            httpx2.Client(timeout=httpx2.Timeout(900.0)) as client:
        cleanup.callback(lambda: [stop(s) for s in states.values()])
        for name, p in plans.items():
            states[name], _ = up(p, port=pick_port("127.0.0.1", 0), timeout=300)
            _post(client, states[name], {"messages": [{"role": "user", "content": "Hi"}],
                                         "max_tokens": 4, "temperature": 0.0})
        argvs = {name: states[name].argv for name in plans}

        def save(rounds: int) -> dict:
            """The result so far (every finished round), written at once: a run on a shared
            machine may have to be stopped, and its finished rounds still count."""
            result = {"machine": machine_info().model_dump(), "binary": str(args.binary),
                      "model": str(args.model), "draft": str(args.draft), "k": args.k,
                      "launch_k": args.launch_k, "synth_accept": args.synth_accept,
                      "prompts": [p.name for p in prompts], "max_tokens": args.max_tokens,
                      "repeats": args.repeats, "rounds_done": rounds, "argv": argvs,
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                      "variants": summarize(samples, [v for v, _, _ in variants]),
                      "samples": {n: [s.model_dump() for s in v] for n, v in samples.items()}}
            args.json.write_text(json.dumps(result, indent=2, default=str), "utf-8")
            return result

        turn = 0
        for repeat in range(args.repeats):
            for prompt in prompts:
                shift = turn % len(variants)
                turn += 1
                for name, server, extra in variants[shift:] + variants[:shift]:
                    body = {"messages": [{"role": "user", "content": prompt.text}],
                            "max_tokens": args.max_tokens, "temperature": 0.0,
                            "cache_prompt": False, **extra}
                    sample = sample_from_response(
                        _post(client, states[server], body), index=len(samples[name]),
                        profile=name, prompt=prompt.name, temperature=0.0, repeat=repeat)
                    samples[name].append(sample)
                    print(f"r{repeat} {prompt.name:<14} {name:<8} {sample.completion_tokens:>4} "
                          f"tok {_rate(sample.completion_tokens, sample.decode_ms) or 0:6.1f} "
                          f"tok/s draft {sample.draft_accepted}/{sample.draft_n}", flush=True)
            result = save(repeat + 1)
    report(result)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
