"""Where the ``torch`` generator's time goes, batch by batch: prefill and decode seconds of the
batches ``python -m train generate --engine torch`` runs (numbered in its order, as its
progress lines count them), under each decode attention of ``train.fast_decode.ATTENTION``
side by side, whether both give the same tokens, and the kernels of a few eager decode steps.

    python benchmarks/gen_profile.py --target SmolLM2-135M-Instruct.Q4_1.gguf \\
        --prompts train/data/prompts-v4.npz --batches 5,10,13 --steps 64 --json gen-profile.json

Why: on one H200 (train/README.md, 2026-12-04) the batches holding the long agent prompts
made 2-4 k response tokens/s where the coding batches made 37-44 k: 36-38 s a batch, where
reading their KV cache 512 times should take about 4. Needs the trainer's extra (torch,
transformers)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gen_profile.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, required=True, help="target GGUF")
    ap.add_argument("--prompts", type=Path, default=Path("train/data/prompts-v4.npz"))
    ap.add_argument("--batches", default="5,10,13",
                    help="batch numbers (1-based) in the generator's order, comma-separated")
    ap.add_argument("--steps", type=int, default=64, help="decode steps timed a batch")
    ap.add_argument("--batch", type=int, default=1024, help="as generate's --batch")
    ap.add_argument("--batch-tokens", type=int, default=1_500_000,
                    help="as generate's --batch-tokens")
    ap.add_argument("--max-new", type=int, default=512, help="as generate's --max-new")
    ap.add_argument("--rows", type=int, default=0,
                    help="keep only the first N rows of each batch (0: all; a CPU check)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kernels", type=int, default=8,
                    help="eager decode steps profiled on the last batch (0: none)")
    ap.add_argument("--json", type=Path, help="write the results here")
    a = ap.parse_args(argv)
    try:
        a.batches = [int(x) for x in a.batches.split(",")]
    except ValueError:
        ap.error(f"--batches: comma-separated numbers, not {a.batches!r}")
    if a.steps < 1 or min(a.batches) < 1:
        ap.error("--steps and --batches count from 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    try:
        import torch

        from train.errors import TrainError
        from train.fast_decode import ATTENTION, Decoder
        from train.hf_gen import generation_batches
        from train.seqs import load
        from train.target import load_target
    except ImportError as exc:
        print(f"gen_profile.py needs the trainer's extra (pip install -e '.[train]'): {exc}",
              file=sys.stderr)
        return 2
    try:
        prompts = load(a.prompts)
        order, _ = generation_batches(prompts, batch=a.batch, batch_tokens=a.batch_tokens,
                                      max_new=a.max_new)
        if max(a.batches) > len(order):
            raise TrainError(f"--batches: these prompts make {len(order)} batches")
        target = load_target(a.target, a.device)
    except TrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    decoders = {name: Decoder(target.model, attention=name) for name in ATTENTION}
    results = []
    for number in a.batches:
        sel = order[number - 1][: a.rows or None]
        rows = [prompts.prompt(i) for i in sel]
        tokens = {}
        for name, decoder in decoders.items():
            # no end-of-generation id: every batch runs the same number of steps
            tokens[name] = decoder.greedy(rows, a.steps + 1, ())
            t = decoder.timing
            results.append({"batch": number, "rows": len(sel),
                            "width": max(len(r) for r in rows), "attention": name,
                            "prefill_s": round(t.prefill_s, 4), "decode_s": round(t.decode_s, 4),
                            "steps": t.steps,
                            "decode_ms_a_step": round(1000 * t.decode_s / t.steps, 3),
                            "graph": decoder.graph_error})
            print(json.dumps(results[-1]), flush=True)
            if a.device == "cuda":
                torch.cuda.empty_cache()
        same = sum(x == y for x, y in zip(*tokens.values(), strict=True))
        print(f"batch {number}: {same} of {len(sel)} rows the same tokens under "
              f"{' and '.join(tokens)}", flush=True)
        for r in results[-len(decoders):]:
            r["rows_same"] = same
    kernels = ""
    if a.kernels:
        decoder = Decoder(target.model, graphs=False)
        sel = order[a.batches[-1] - 1][: a.rows or None]
        activities = [torch.profiler.ProfilerActivity.CPU]
        if a.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        started = time.monotonic()
        with torch.profiler.profile(activities=activities) as prof:
            decoder.greedy([prompts.prompt(i) for i in sel], a.kernels + 1, ())
        key = "self_device_time_total" if a.device == "cuda" else "self_cpu_time_total"
        kernels = prof.key_averages().table(sort_by=key, row_limit=20)
        print(f"batch {a.batches[-1]}, eager (bmm), {a.kernels} steps in "
              f"{time.monotonic() - started:.1f} s with the profiler:\n{kernels}")
    if a.json:
        a.json.write_text(json.dumps({"target": str(a.target), "prompts": str(a.prompts),
                                      "device": a.device, "results": results,
                                      "kernels": kernels}, indent=1) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
