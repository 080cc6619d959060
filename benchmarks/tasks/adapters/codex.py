"""Codex (``@openai/codex``): ``codex exec --json`` (its documented non-interactive mode, one
JSON event a line) with the server as a custom model provider (``model_providers.<id>`` with
``base_url``). Codex 0.171 speaks only OpenAI's Responses API to a provider (``wire_api =
"chat"`` is refused: "no longer supported"), so the server must serve ``/v1/responses``, as
llama-server does. ``CODEX_HOME`` is the scratch folder: no user config, no login."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import AgentRun, Limits, json_lines
from benchmarks.tasks.adapters.peer import Peer
from benchmarks.tasks.tasks import Task

PROVIDER = "llama"
"""The provider id given to the server."""
TOOL_ITEMS = {"command_execution": "shell", "file_change": "apply_patch",
              "mcp_tool_call": "mcp", "web_search": "web_search"}
"""Codex's item types that are tool calls, by the tool's name in the record."""


class Codex(Peer):
    """``codex exec --json --skip-git-repo-check --ephemeral --sandbox workspace-write -c
    approval_policy="never" -c model_provider="llama" -c model_providers.llama.{name,base_url,
    wire_api="responses"} -m <model> -C <repo> TASK``. Its edits are ``apply_patch`` and
    shell commands through native tool calls: the only format it has. It has no step
    limit; the wall-clock limit stops it."""

    name = "codex"
    FORMATS = ("native",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._scratch: Path | None = None

    def flags(self) -> list[str]:
        return ["exec", "--json", "--skip-git-repo-check", "--ephemeral", "--color", "never",
                "--sandbox", "workspace-write", "-c", 'approval_policy="never"',
                "-c", f'model_provider="{PROVIDER}"',
                "-c", f'model_providers.{PROVIDER}.name="llama-server"',
                "-c", f'model_providers.{PROVIDER}.wire_api="responses"']

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        api, model, binary = self.endpoint()
        (scratch / "codex-home").mkdir(parents=True, exist_ok=True)
        self._scratch = scratch
        return [str(binary), *self.flags(),
                "-c", f'model_providers.{PROVIDER}.base_url="{api}"',
                "-m", model, "-C", str(repo), task.instruction]

    def env(self) -> dict[str, str]:
        env = {**super().env()}
        if self._scratch is not None:
            env["CODEX_HOME"] = str(self._scratch / "codex-home")
        return env

    def timeout(self, limits: Limits) -> float:
        return limits.timeout_s  # codex has no time limit of its own

    def parse(self, run: AgentRun) -> dict[str, Any]:
        return self.fields(run, **read_jsonl(run.stdout))


def read_jsonl(stdout: str) -> dict[str, Any]:
    """Counts of ``codex exec --json``'s events: tool calls by item type (``item.completed``:
    command_execution, file_change, ...; a non-zero ``exit_code`` or ``status`` failed is a
    failed call), model replies (those items plus agent messages: Codex does not report its
    model calls), tokens from each ``turn.completed``'s ``usage`` (``input_tokens``,
    ``cached_input_tokens``, ``output_tokens``), and a ``turn.failed`` or ``error`` event's
    message."""
    replies = failed = prefilled = cached = decoded = 0
    calls: Counter = Counter()
    error = None
    for ev in json_lines(stdout):
        kind = ev.get("type")
        item = ev.get("item") if isinstance(ev.get("item"), dict) else {}
        if kind == "item.completed":
            item_type = str(item.get("type"))
            if item_type in TOOL_ITEMS:
                calls[TOOL_ITEMS[item_type]] += 1
                replies += 1
                failed += item.get("status") == "failed" or \
                    item.get("exit_code") not in (None, 0)
            elif item_type == "agent_message":
                replies += 1
        elif kind == "turn.completed":
            usage = ev.get("usage") or {}
            cached_now = int(usage.get("cached_input_tokens") or 0)
            cached += cached_now
            prefilled += max(0, int(usage.get("input_tokens") or 0) - cached_now)
            decoded += int(usage.get("output_tokens") or 0)
        elif kind in ("turn.failed", "error"):
            detail = ev.get("error") if kind == "turn.failed" else ev
            message = detail.get("message") if isinstance(detail, dict) else detail
            error = str(message)[:300]
    out: dict[str, Any] = {"steps": replies, "tool_calls": dict(calls), "tool_errors": failed,
                           "prefilled": prefilled, "cached": cached, "decoded": decoded}
    if error:
        out["error"] = error
    return out
