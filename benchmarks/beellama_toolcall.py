"""Does BeeLlama v0.3.1 (bee-old) keep drafting with DFlash inside a grammar-constrained tool
call, and how much of the draft is accepted there, against the same request without a grammar?

One real bee-old server (built through the product: ``agent backend build --engine beellama
--source beellama.cpp-v0.3.1.tar.gz``) runs SmolLM2-135M with the trained DFlash draft from
shared/dflash, converted to BeeLlama's ``dflash-draft`` format by the product; a baseline server
on the same binary gives the speed reference. Requests go through the agent's own client (so the
bee-old crash workaround of backend.serve.quirks is applied as in a session). Modes, same prompt:

- ``plain``: the ask as text, no grammar;
- ``json``: the agent's json tool protocol (``response_format`` json_schema over every tool:
  a grammar active from the first token);
- ``native``: ``tools`` with a chat template that has a tool-call format (Hermes 2 Pro, passed by
  ``--chat-template-file``), so BeeLlama's *lazy* tool-call grammar starts at ``<tool_call>``;
- with ``--more-native`` also ``native-shot`` (the same after one earlier exchange in which the
  assistant called the tool) and ``required`` (``tool_choice: required``): SmolLM2 asked
  plainly never opens ``<tool_call>``; these try to make it (on a 2-core CPU, 2026-12-03,
  neither did: both engines log ``Chat format: peg-native`` for that template and did not
  enforce ``required``).

Usage (repo root): python benchmarks/beellama_toolcall.py --home DIR [--repeats 2] [--json OUT]
[--model GGUF] [--draft GGUF] [--ngl all] [--more-native] where DIR is a dflash-agent home
holding the bee-old engine (tests use ``~/.cache/dflash-agent-tests-beellama``); ``--ngl all``
on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agent.client import ServerClient, ServerUnavailable
from agent.protocols.base import json_response_format
from backend.engine.registry import Engine, list_engines
from backend.models.drafts import DraftError, draft_for
from backend.models.presets import PresetError, ServerOptions, get_preset
from backend.models.sources import ModelError, resolve_model
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerError
from backend.serve.server import interrupt_on_termination, up
from tools.registry import default_registry
from tools.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "shared" / "dflash" / "smollm2-135m-dflash-v1.gguf"
SOURCE = "\n".join(
    [f"def compute_{i}(values):\n    total = 0\n    for v in values:\n        total += v * {i}\n"
     f"    return total\n" for i in range(6)])
ASKS = {
    "edit": ("Repeat this file exactly, but rename `total` to `acc`:\n```python\n" + SOURCE
             + "\n```"),
    "fresh": ("Write a Python function `is_prime(n)` that returns True when n is a prime number, "
              "and three tests for it."),
}
TOOL_HINT = " Write it with the create tool to utils.py."
# One earlier exchange in which the assistant called the tool (the ``native-shot`` mode).
SHOT = [
    {"role": "user", "content": "Write `def add(a, b): return a + b` to add.py with the create "
                                "tool."},
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_0", "type": "function", "function": {
            "name": "create",
            "arguments": json.dumps({"path": "add.py",
                                     "file_text": "def add(a, b):\n    return a + b\n"})}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "created add.py (2 lines)"},
]


def _timings(turn: Any) -> dict[str, float]:
    t = turn.timings
    return {"tokens": t.predicted_n or 0, "tok_s": t.predicted_per_second or 0.0,
            "draft": t.draft_n or 0, "accepted": t.draft_n_accepted or 0}


def measure(client: ServerClient, mode: str, ask: str, max_tokens: int) -> dict[str, Any]:
    """One request in ``mode`` at temperature 0; its timings and the first words of the reply."""
    tools = default_registry(Workspace(Path("."))).openai_tools()
    text = ask + (TOOL_HINT if mode != "plain" else "")
    messages = [{"role": "system", "content": "You are a coding agent."},
                *(SHOT if mode == "native-shot" else []),
                {"role": "user", "content": text}]
    kwargs: dict[str, Any] = {}
    if mode == "json":
        kwargs["response_format"] = json_response_format(tools)
    elif mode in ("native", "native-shot", "required"):
        kwargs["tools"] = [t for t in tools if t["function"]["name"] == "create"]
    extra = client.request_extra
    if mode == "required":
        client.request_extra = {**extra, "tool_choice": "required"}
    try:
        turn = client.complete(messages, max_tokens=max_tokens, sampling={"temperature": 0.0},
                               **kwargs)
    finally:
        client.request_extra = extra
    out = _timings(turn)
    out["reply"] = (turn.content or json.dumps(turn.tool_calls))[:120]
    out["tool_calls"] = len(turn.tool_calls)
    return out


def bee_old_engine() -> Engine:
    """The bee-old engine built in the current home; raises :class:`LookupError` saying what
    to build when there is none."""
    found = next((e for e in list_engines() if e.engine == "beellama" and e.flavour == "bee-old"),
                 None)
    if found is None:
        raise LookupError("no BeeLlama v0.3.1 (bee-old) engine in this home: build one "
                         "with `DFLASH_AGENT_HOME=DIR agent backend build --engine beellama "
                         "--source beellama.cpp-v0.3.1.tar.gz` and pass --home DIR")
    return found


def main() -> int:
    """Parse the arguments, run :func:`run`; exit 2 on a missing engine, 1 on a failure of the
    model, draft or servers (with its message)."""
    try:
        run()
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (DraftError, ModelError, PresetError, ServerError, ServerUnavailable, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def run() -> None:
    """Measure every server and mode (see the module docstring) and print/write the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--model", type=Path, help="Target GGUF (default: the smollm2-135m "
                        "preset's, fetched into the home)")
    parser.add_argument("--draft", type=Path, default=TRAINED,
                        help="DFlash draft (either format; converted for bee-old)")
    parser.add_argument("--ngl", default=None, help="gpu_layers for target and draft (a GPU)")
    parser.add_argument("--more-native", action="store_true",
                        help="also the native-shot and required modes (module docstring)")
    args = parser.parse_args()
    os.environ["DFLASH_AGENT_HOME"] = str(args.home)
    engine = bee_old_engine()
    model = args.model or resolve_model(get_preset("smollm2-135m").model)
    draft = draft_for(args.draft, "bee-old", print)
    options = ServerOptions(gpu_layers=args.ngl, draft_gpu_layers=args.ngl,
                            flash_attn="on" if args.ngl else None)
    template = engine.templates / "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"
    plans = {
        "baseline": LaunchPlan(binary=engine.binary, model=model, profile="baseline",
                               ctx_size=4096, options=options),
        "dflash": LaunchPlan(binary=engine.binary, model=model, profile="dflash", ctx_size=4096,
                             draft=draft, options=options),
        "baseline-hermes": LaunchPlan(binary=engine.binary, model=model, profile="baseline",
                                      ctx_size=4096, options=options,
                                      extra_flags=("--chat-template-file", str(template))),
        "dflash-hermes": LaunchPlan(binary=engine.binary, model=model, profile="dflash",
                                    ctx_size=4096, draft=draft, options=options,
                                    extra_flags=("--chat-template-file", str(template))),
    }
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(interrupt_on_termination())
        for server, plan in plans.items():
            state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
            stack.callback(stop, state)
            client = ServerClient(state.base_url, 600, request_extra=state.request_extra)
            modes = ((("native", "native-shot", "required") if args.more_native
                      else ("native",)) if server.endswith("hermes") else ("plain", "json"))
            for ask_name, ask in ASKS.items():
                for mode in modes:
                    runs = [measure(client, mode, ask, args.max_tokens)
                            for _ in range(args.repeats)]
                    row = {"server": server, "ask": ask_name, "mode": mode,
                           "tokens": runs[-1]["tokens"], "tool_calls": runs[-1]["tool_calls"],
                           "tok_s": statistics.median(r["tok_s"] for r in runs),
                           "draft": runs[-1]["draft"], "accepted": runs[-1]["accepted"],
                           "reply": runs[-1]["reply"]}
                    row["acceptance"] = row["accepted"] / row["draft"] if row["draft"] else None
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            stop(state)
    result = {"engine": engine.key, "model": str(model), "draft": str(draft),
              "when": time.strftime("%Y-%m-%d %H:%M:%S"), "repeats": args.repeats,
              "max_tokens": args.max_tokens, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), "utf-8")
    print(f"{'server':<16} {'ask':<6} {'mode':<7} {'tokens':>6} {'tok/s':>7} {'drafted':>8} "
          f"{'accepted':>8} {'accept%':>7}")
    for r in rows:
        acc = f"{100 * r['acceptance']:.1f}" if r["acceptance"] is not None else "-"
        print(f"{r['server']:<16} {r['ask']:<6} {r['mode']:<7} {r['tokens']:>6} "
              f"{r['tok_s']:>7.1f} {r['draft']:>8} {r['accepted']:>8} {acc:>7}")


if __name__ == "__main__":
    sys.exit(main())
