"""Markdown tables from grid-<set>.json, sorted by tokens per target step (argv[3] = r1 | r2 |
large-r2: the whole set one-at-a-time, the whole set side by side with two repeats, or
rename-large alone side by side with two repeats)."""
import json
import sys

SET = sys.argv[1] if len(sys.argv) > 1 else "edit"
TOP = int(sys.argv[2]) if len(sys.argv) > 2 else 0
KEY = sys.argv[3] if len(sys.argv) > 3 else "r1"
A, B = 1.15, 0.18
with open(f"grid-{SET}.json") as f:
    g = json.load(f)


def large(rec, mode):
    p = rec[mode]["per_prompt"]["rename-large"]
    s = p["steps"]
    return p["tokens"] / s, p["drafted"], p["tokens"] / (A * s + B * p["drafted"])


def key(kv):
    rec = kv[1]
    if KEY == "r2":
        return -rec["side-by-side-r2"]["tokens_per_step"]
    if KEY == "large-r2":
        return -large(rec, "side-by-side-r2")[0]
    return -rec["one-at-a-time-r1"]["tokens_per_step"]


rows = sorted(g["configs"].items(), key=key)
if TOP:
    rows = rows[:TOP]
head = ("| config | tokens | steps | tok/step | drafted | accepted | drafted/step | "
        "drafted/drafting step | pool resets | est. H200 | r2: tok/step | r2: drafted | "
        "r2: est. H200 |")
cols = 12
if SET == "edit":
    head += " large r1: tok/step | large r2: tok/step | large r2: drafted | large r2: est. H200 |"
    cols += 4
print(head)
print("| --- |" + " ---: |" * cols)
for name, rec in rows:
    a, b = rec["one-at-a-time-r1"], rec["side-by-side-r2"]
    line = (f"| {name} | {a['tokens']} | {a['steps']} | {a['tokens_per_step']:.2f} | "
            f"{a['drafted']} | {a['accepted']} | {a['drafted_per_step']:.2f} | "
            f"{a['drafted_per_drafting_step']:.1f} | {a['resets']} | {a['h200_estimate']:.2f}x | "
            f"{b['tokens_per_step']:.2f} | {b['drafted']} | {b['h200_estimate']:.2f}x |")
    if SET == "edit":
        l1 = large(rec, "one-at-a-time-r1")
        l2 = large(rec, "side-by-side-r2")
        line += f" {l1[0]:.2f} | {l2[0]:.2f} | {l2[1]} | {l2[2]:.2f}x |"
    print(line)
