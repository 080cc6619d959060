"""The grid: every configuration simulated over tokens.json (see simulate.py) in two request
orders: the brief's CPU command (--repeats 1 --one-at-a-time: a fresh server, warm-up then the
three prompts) and the H200 command's (--repeats 2, servers side by side: each prompt twice in a
row on one server, so the second copy finds the first in ngram-mod's pool). Writes grid.json."""
import json
import sys

from simulate import make_drafter, simulate

SET = sys.argv[1] if len(sys.argv) > 1 else "edit"
NAMES = {"edit": ["rename-small", "rename-medium", "rename-large"],
         "seed": ["task-store", "kv-report", "linked-list"]}[SET]
ONLY = sys.argv[2].split(",") if len(sys.argv) > 2 else None

configs = {"ng-24-48-64": dict(type="ngram-mod", n_match=24, n_min=48, n_max=64),
           "ng-12-8-32": dict(type="ngram-mod", n_match=12, n_min=8, n_max=32)}
for m in (3, 4, 5, 6, 8):
    for lo in (1, 2, 4):
        for hi in (16, 32, 64):
            configs[f"ng-{m}-{lo}-{hi}"] = dict(type="ngram-mod", n_match=m, n_min=lo, n_max=hi)
for m in (8, 12, 16):
    for lo in (8, 16):
        configs[f"ng-{m}-{lo}-64"] = dict(type="ngram-mod", n_match=m, n_min=lo, n_max=64)
# ngram-simple in front of the profile's ngram-mod (extra_flags; --spec-type appends)
for sn, sm in ((4, 16), (4, 32), (6, 32), (6, 64), (8, 64), (12, 48)):
    for mod in ((24, 48, 64), (6, 2, 64)):
        configs[f"simple-{sn}-{sm}+ng-{'-'.join(map(str, mod))}"] = dict(
            type="ngram-simple+ngram-mod", size_n=sn, size_m=sm, n_match=mod[0], n_min=mod[1],
            n_max=mod[2])
if ONLY:
    configs = {k: v for k, v in configs.items() if k in ONLY}

with open("tokens.json") as f:
    data = json.load(f)
missing = [n for n in NAMES if n not in data["prompts"]]
if missing:  # the capture had not finished them: the set without them, said in the output
    print(f"tokens.json lacks {missing}: simulated without them", flush=True)
    NAMES = [n for n in NAMES if n not in missing]
H200 = (1.15, 0.18)  # see README.md: plain-step cost of a step and of each drafted token
out = {"set": SET, "prompts": NAMES, "missing": missing,
       "baseline_tokens": {n: len(data["prompts"][n]["tokens"]) for n in NAMES}, "configs": {}}
for name, cfg in configs.items():
    rec = {"config": cfg}
    for mode, reps in (("one-at-a-time-r1", 1), ("side-by-side-r2", 2)):
        tot, per = simulate(lambda cfg=cfg: make_drafter(cfg), data, NAMES,
                            mode="side-by-side" if reps == 2 else "one-at-a-time",
                            repeats=reps)
        s = tot["steps"]
        tot["tokens_per_step"] = tot["tokens"] / s
        tot["drafted_per_step"] = tot["drafted"] / s
        tot["drafted_per_drafting_step"] = (tot["drafted"] / tot["drafting_steps"]
                                            if tot["drafting_steps"] else 0.0)
        tot["acceptance"] = tot["accepted"] / tot["drafted"] if tot["drafted"] else None
        tot["h200_estimate"] = tot["tokens"] / (H200[0] * s + H200[1] * tot["drafted"])
        tot["per_prompt"] = per
        rec[mode] = tot
    out["configs"][name] = rec
    r1, r2 = rec["one-at-a-time-r1"], rec["side-by-side-r2"]
    print(f"{name:28s} r1 {r1['tokens_per_step']:.2f} t/step dr {r1['drafted']:5d} acc "
          f"{r1['accepted']:5d} d/step {r1['drafted_per_step']:.2f} est {r1['h200_estimate']:.2f}"
          f" | r2 {r2['tokens_per_step']:.2f} dr {r2['drafted']:5d} est {r2['h200_estimate']:.2f}",
          flush=True)
with open(f"grid-{SET}.json", "w") as f:
    json.dump(out, f, indent=1)
