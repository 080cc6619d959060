"""The simulator against the 2026-12-02 CPU bench (benchmarks/cpu-ngram-2026-12-02/
bench-cpu-ngram-edit.json: side by side, one repeat, ngram at 6/2/16 then, ngram-fixed at
llama.cpp's 24/48/64): per prompt drafted / accepted, measured vs simulated."""
import json

from simulate import make_drafter, simulate

with open("tokens.json") as f:
    data = json.load(f)
with open("../cpu-ngram-2026-12-02/bench-cpu-ngram-edit.json") as f:
    old = json.load(f)
names = ["rename-small", "rename-medium", "rename-large"]
rows = []
for prof, cfg in [("ngram", dict(type="ngram-mod", n_match=6, n_min=2, n_max=16)),
                  ("ngram-fixed", dict(type="ngram-mod", n_match=24, n_min=48, n_max=64))]:
    _, per = simulate(lambda cfg=cfg: make_drafter(cfg), data, names)
    for s in old["samples"]:
        if s["profile"] == prof:
            p = per[s["prompt"]]
            row = dict(profile=prof, prompt=s["prompt"],
                       measured=[s["completion_tokens"], s["draft_n"], s["draft_accepted"]],
                       simulated=[p["tokens"], p["drafted"], p["accepted"]])
            rows.append(row)
            print(row)
with open("validation.json", "w") as f:
    json.dump(rows, f, indent=1)
