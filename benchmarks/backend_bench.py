"""Prompt-lookup speculation on edit-heavy prompts, through the product's own benchmark.

Runs ``agent backend bench`` with the default preset (SmolLM2-135M), profiles baseline and
``ngram``, the built-in edit set ("give this file back with one rename", three sizes) at
temperatures 0.7 and 0, then prints the speedup per temperature and, as the last line, the
overall speedup (total tokens / total decode time of ngram over baseline, one run).

Usage: python benchmarks/backend_bench.py [--max-tokens 1200] [--temperatures 0.7,0]
       [--repeats 1] [--json OUT] [--plot PNG]   (from the repo root; DFLASH_AGENT_HOME is
       honoured, so a home that already holds the engine and model skips the build)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from backend.measure.results import BenchResult

PRESET = "smollm2-135m"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=1200)
    parser.add_argument("--temperatures", default="0.7,0")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.json or Path(tmp) / "bench.json"
        cmd = [sys.executable, "-m", "agent", "backend", "bench", "--preset", PRESET,
               "--profiles", "baseline,ngram", "--prompts", "edit",
               "--max-tokens", str(args.max_tokens), "--temperatures", args.temperatures,
               "--repeats", str(args.repeats), "--json", str(out)]
        if args.plot:
            cmd += ["--plot", str(args.plot)]
        code = subprocess.run(cmd).returncode
        if code != 0:
            sys.exit(code)
        result = BenchResult.model_validate_json(out.read_text("utf-8"))
    print(f"{result.machine.cpu} ({result.machine.cpu_threads} threads), "
          f"{result.build_info}, {result.date:%Y-%m-%d}")
    overall = {(s.profile, s.temperature): s for s in result.overall}
    for temp in [*result.temperatures, None]:
        base, ngram = overall[("baseline", temp)], overall[("ngram", temp)]
        label = "all temperatures" if temp is None else f"temperature {temp:g}"
        accept = "-" if ngram.acceptance is None else f"{ngram.acceptance:.0%}"
        print(f"{label}: baseline {base.decode_tok_s or 0:.1f} tok/s, ngram "
              f"{ngram.decode_tok_s or 0:.1f} tok/s, {ngram.draft_accepted}/{ngram.draft_n} "
              f"drafts accepted ({accept}), speedup {ngram.speedup or 0:.2f}x")
    print(f"speedup ngram vs baseline (edit set, {PRESET}): "
          f"{result.overall_speedup('ngram') or 0:.2f}x")


if __name__ == "__main__":
    main()
