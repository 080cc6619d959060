"""The tuned draft length replayed on recorded H200 data (benchmarks/RESULTS.md, 2026-12-04):
what ``backend.serve.speculation.costs.choose`` picks from the launch probe of
``h200-first-2026-12-04`` under three calibrations of the same server, and how it re-chooses
over the edit set's requests drafted at a fixed 3 (``pmin-edit-k3-p0.json``); then, for each
first launch at temperature 0 of ``h200-first-layers-2026-12-04`` (its own calibration), the
length chosen after each request the bench recorded. Those requests ran at the lengths the
tuning code of that run chose (``git show c71e673:backend/serve/tuning.py``): from the first
request at a length another choice would not have made, the later records are what that
length drafted, not what the replayed choice would have.

    python benchmarks/replay_choice.py

Reads only the JSON under benchmarks/; prints one line per choice. Run it with the tuning code
of a given commit to see what that code would have chosen."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from backend.serve.speculation.costs import CostModel, Observation, choose, estimate_p

HERE = Path(__file__).resolve().parent / "runs"
FIRST = HERE / "h200-first-2026-12-04"
CALIBRATIONS = (FIRST, FIRST / "second", HERE / "h200-q8-2026-12-03")
LAYERS = HERE / "h200-first-layers-2026-12-04"


def _json(path: Path) -> dict:
    return json.loads(path.read_text("utf-8"))


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="replay_choice.py", description=__doc__.split("\n\n")[0]
                            ).parse_args(argv)
    record = _json(FIRST / "acceptance-first-edit-t0-run1.json")["observations"]
    probe = [Observation(**o) for o in record if o["source"] == "probe"]
    print(f"launch probe: {estimate_p(probe):.3f} a token at 15")
    for folder in CALIBRATIONS:
        costs = CostModel(**_json(folder / "calibrate-smol-v3.json")["costs"])
        choice = choose(costs, estimate_p(probe), probe)
        print(f"{folder.relative_to(HERE)}: length {choice.n_max} "
              f"({choice.predicted:.2f}x predicted)")
    costs = CostModel(**_json(FIRST / "calibrate-smol-v3.json")["costs"])
    seen = list(probe)
    for s in _json(FIRST / "pmin-edit-k3-p0.json")["samples"]:
        if s["profile"] == "baseline":
            continue
        seen.append(Observation(source="bench", n_max=3, draft_n=s["draft_n"],
                                accepted=s["draft_accepted"], tokens=s["completion_tokens"],
                                decode_ms=s["decode_ms"], at=datetime.now(UTC),
                                temperature=0.0))
        choice = choose(costs, estimate_p(seen), seen)
        print(f"after {s['prompt']} ({s['completion_tokens']} tokens at 3): "
              f"length {choice.n_max} ({choice.predicted:.2f}x)")
    costs = CostModel(**_json(LAYERS / "calibrate-smol-v3.json")["costs"])
    for path in sorted(LAYERS.glob("acceptance-first-*-t0-run*.json")):
        seen = [Observation(**o) for o in _json(path)["observations"]]
        probes = sum(o.source == "probe" for o in seen)
        ran = " ".join(str(o.n_max) for o in seen[probes:])
        chosen = " ".join(str(choose(costs, estimate_p(seen[:i]), seen[:i]).n_max)
                          for i in range(probes, len(seen)))
        print(f"{LAYERS.name}/{path.stem[len('acceptance-'):]}: ran at {ran}; "
              f"chosen before each: {chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
