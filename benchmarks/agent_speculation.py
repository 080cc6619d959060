"""Does speculation still pay inside the agent's own edit turns?

In one run, against two real servers on the same binary and model (baseline and the ``ngram``
profile), the same edit — "give the whole file back with one rename" — is decoded as the
agent's json-protocol tool call (grammar-forced ``{"tool": "create", ...}``) and as plain text,
at temperature 0 and 0.7. Reports decode tok/s, draft acceptance and the speedup over baseline.

The DFlash path is measured the same way on the test fixture (a tiny random llama target and
a random upstream-format ``dflash`` draft, tests/dflash_fixture.py): random weights accept
~nothing, so those rows show the draft path's overhead, not a speedup a real draft would give.

Usage: python benchmarks/agent_speculation.py [--repeats 2] [--json OUT]  (from the repo root)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

from agent.client import ServerClient
from agent.protocols.base import json_response_format
from backend.engine.build import default_engine
from backend.models.presets import get_preset
from backend.models.sources import resolve_model
from backend.serve.launch import ensure_engine
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.server import interrupt_on_termination, up
from tools.registry import default_registry
from tools.workspace import Workspace

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.dflash_fixture import write_tiny_dflash_draft, write_tiny_target  # noqa: E402

SOURCE = "\n".join(
    [f"def compute_{i}(values):\n    total = 0\n    for v in values:\n        total += v * {i}\n"
     f"    return total\n" for i in range(8)])
ASK = ("Repeat this file exactly, but rename `total` to `acc`:\n```python\n" + SOURCE
       + "\n```")


def measure(client: ServerClient, mode: str, temperature: float) -> dict[str, float]:
    tools = default_registry(Workspace(Path("."))).openai_tools()
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": ASK + ("\nWrite it with the create tool to "
                                                   "utils.py." if mode == "tool call" else "")}]
    fmt = json_response_format(tools) if mode == "tool call" else None
    turn = client.complete(messages, response_format=fmt, max_tokens=700,
                           sampling={"temperature": temperature})
    t = turn.timings
    assert t is not None
    return {"tok_s": t.predicted_per_second or 0.0, "tokens": t.predicted_n or 0,
            "draft": t.draft_n or 0, "accepted": t.draft_n_accepted or 0}


def _compare(clients: dict[str, ServerClient], spec: str, repeats: int,
             label: str) -> list[dict]:
    rows = []
    for mode in ("tool call", "plain text"):
        for temperature in (0.0, 0.7):
            runs: dict[str, list[dict[str, float]]] = {p: [] for p in clients}
            for _ in range(repeats):  # interleaved, so drift hits both alike
                for profile, client in clients.items():
                    runs[profile].append(measure(client, mode, temperature))
            base = statistics.median(r["tok_s"] for r in runs["baseline"])
            fast = statistics.median(r["tok_s"] for r in runs[spec])
            draft = sum(r["draft"] for r in runs[spec])
            accepted = sum(r["accepted"] for r in runs[spec])
            rows.append({"model": label, "profile": spec, "mode": mode,
                         "temperature": temperature, "baseline_tok_s": round(base, 1),
                         "spec_tok_s": round(fast, 1),
                         "speedup": round(fast / base, 2) if base else None,
                         "drafted": draft,
                         "acceptance": round(accepted / draft, 3) if draft else None,
                         "tokens": statistics.median(r["tokens"] for r in runs[spec])})
    return rows


def _serve(plans: dict[str, LaunchPlan], servers: dict) -> dict[str, ServerClient]:
    clients = {}
    for name, plan in plans.items():
        servers[name], _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
        clients[name] = ServerClient(servers[name].base_url)
    return clients


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path("agent_speculation.json"))
    args = parser.parse_args()
    engine = default_engine() or ensure_engine()
    model = resolve_model(get_preset("smollm2-135m").model)
    rows: list[dict] = []
    servers: dict = {}
    with interrupt_on_termination(), contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: [stop(state) for state in servers.values()])
        clients = _serve({p: LaunchPlan(binary=engine.binary, model=model, profile=p,
                                        ctx_size=4096) for p in ("baseline", "ngram")}, servers)
        rows += _compare(clients, "ngram", args.repeats, "SmolLM2-135M")
        for state in servers.values():
            stop(state)
        servers.clear()
        with tempfile.TemporaryDirectory() as tmp:
            target = write_tiny_target(Path(tmp) / "target.gguf", model)
            draft = write_tiny_dflash_draft(Path(tmp) / "draft.gguf", target)
            clients = _serve({
                "baseline": LaunchPlan(binary=engine.binary, model=target, profile="baseline",
                                       ctx_size=4096),
                "dflash": LaunchPlan(binary=engine.binary, model=target, profile="dflash",
                                     draft=draft, ctx_size=4096)}, servers)
            rows += _compare(clients, "dflash", args.repeats, "random fixture")
    print(f"{'model':<15} {'profile':<7} {'mode':<11} {'temp':>4} {'baseline tok/s':>15} "
          f"{'spec tok/s':>11} {'speedup':>8} {'drafted':>8} {'acceptance':>11}")
    for r in rows:
        print(f"{r['model']:<15} {r['profile']:<7} {r['mode']:<11} {r['temperature']:>4} "
              f"{r['baseline_tok_s']:>15} {r['spec_tok_s']:>11} {r['speedup']!s:>8} "
              f"{r['drafted']:>8} {r['acceptance']!s:>11}")
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
