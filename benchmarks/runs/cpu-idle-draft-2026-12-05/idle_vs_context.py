"""The loaded draft with drafting off (every request at ``speculative.n_max`` 0) against plain
decoding, at calibrate's request shape (a short prompt, no prompt cache) and at a session's (a
1,348-token prompt, cached, asked three times): does the idle draft's cost grow with context?

Run from the checkout's root with the venv: ``.venv/bin/python
benchmarks/cpu-idle-draft-2026-12-05/idle_vs_context.py``. Output: ``output.txt``. ``IDLE_PRESET``
names another preset with a draft (``train/h200.sh first`` runs it on a GPU with ``smol-v3``)."""

import os
import statistics
from pathlib import Path

import httpx2

from backend.models.presets import get_preset
from backend.serve.launch import ensure_engine, plan_for
from backend.serve.process import DEFAULT_HOST, pick_port, stop
from backend.serve.server import up

preset = get_preset(os.environ.get("IDLE_PRESET", "smollm2-135m-dflash"))
spec = plan_for(preset, ensure_engine(), "dflash-fixed", 4096, None)
loaded = spec.model_copy(update={"draft_n_max": 15})
plain = spec.model_copy(update={"profile": "baseline", "draft": None})
code = Path("agent/loop.py").read_text("utf-8")[:5000]
LONG = (f"Here is a file:\n```python\n{code}\n```\nRename every variable named `result` to "
        "`outcome` and show the whole file.")
SHORT = "Write a Python function that reverses a linked list, with a docstring."


def request(client: httpx2.Client, state, prompt: str, n: int, cache: bool,
            extra: dict) -> tuple[float, int]:
    """(decode tokens/s, prompt tokens evaluated) of one request."""
    body = {**state.request_extra, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": n, "temperature": 0.0, "cache_prompt": cache, "ignore_eos": True,
            **extra}
    t = client.post(state.base_url + "/v1/chat/completions", json=body).json()["timings"]
    return t["predicted_n"] / t["predicted_ms"] * 1000, t["prompt_n"]


rates: dict[str, dict[str, list[float]]] = {}
for rnd in range(2):
    for name, plan, extra in (("plain", plain, {}),
                              ("loaded-off", loaded, {"speculative.n_max": 0})):
        state, _ = up(plan, port=pick_port(DEFAULT_HOST, 0), preset=preset.name, timeout=300)
        try:
            with httpx2.Client(timeout=600) as client:
                request(client, state, SHORT, 8, False, extra)
                short = [request(client, state, SHORT, 200, False, extra)[0] for _ in range(3)]
                long = [request(client, state, LONG, 200, True, extra) for _ in range(3)]
        finally:
            stop(state)
        got = rates.setdefault(name, {"short": [], "long": []})
        got["short"] += short
        got["long"] += [rate for rate, _ in long]
        print(rnd, name, "short", [round(x) for x in short], "long",
              [(round(rate), n) for rate, n in long], flush=True)
for name, got in rates.items():
    print(name, {k: round(statistics.median(v), 1) for k, v in got.items()})
for shape in ("short", "long"):
    print("ratio", shape, statistics.median(rates["loaded-off"][shape])
          / statistics.median(rates["plain"][shape]))
