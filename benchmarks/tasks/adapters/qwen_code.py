"""Qwen Code (``@qwen-code/qwen-code``, command ``qwen``): its headless mode (the prompt as the
positional argument, one shot) in yolo approval mode, with OpenAI-compatible authentication
pointed at the server (``--auth-type openai --openai-base-url``, and the documented
``OPENAI_BASE_URL``/``OPENAI_API_KEY``/``OPENAI_MODEL``), its turns capped, its events as
``stream-json``; its home (settings, sessions) is the scratch folder."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import AgentRun, Limits, json_lines
from benchmarks.tasks.adapters.peer import Peer
from benchmarks.tasks.tasks import Task

API_ERROR = "[API Error"
"""How Qwen Code's result text starts when the model request failed."""


class QwenCode(Peer):
    """``qwen TASK --yolo --auth-type openai --openai-base-url <url>/v1 --openai-api-key x
    -m <model> --output-format stream-json --max-session-turns N``. Its edits are its own
    tools (``edit``, ``write_file``) through native tool calls: the only format it has."""

    name = "qwen-code"
    FORMATS = ("native",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._scratch: Path | None = None

    def flags(self) -> list[str]:
        return ["--yolo", "--auth-type", "openai", "--output-format", "stream-json"]

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        api, model, binary = self.endpoint()
        (scratch / "home").mkdir(parents=True, exist_ok=True)
        self._scratch = scratch
        return [str(binary), task.instruction, *self.flags(), "--openai-base-url", api,
                "--openai-api-key", "x", "-m", model,
                "--max-session-turns", str(limits.max_steps)]

    def env(self) -> dict[str, str]:
        env = {**super().env()}
        if self.base_url and self.model:
            env.update(OPENAI_BASE_URL=f"{self.base_url.rstrip('/')}/v1", OPENAI_API_KEY="x",
                       OPENAI_MODEL=self.model)
        if self._scratch is not None:  # its ~/.qwen: settings and sessions
            env["HOME"] = str(self._scratch / "home")
        return env

    def parse(self, run: AgentRun) -> dict[str, Any]:
        return self.fields(run, **read_stream_json(run.stdout))


def read_stream_json(stdout: str) -> dict[str, Any]:
    """Counts of Qwen Code's ``stream-json`` messages: an ``assistant`` message per model
    reply (its ``tool_use`` blocks by name, its ``usage``: ``input_tokens``,
    ``output_tokens``, ``cache_read_input_tokens``), ``tool_result`` blocks with
    ``is_error``, and the ``result`` message (its ``num_turns`` and ``usage`` win when
    present; an error result's text, or a result that starts ``[API Error``, is the
    error)."""
    steps = failed = 0
    calls: Counter = Counter()
    usage_sum: Counter = Counter()
    result: dict[str, Any] | None = None
    for ev in json_lines(stdout):
        message = ev.get("message") if isinstance(ev.get("message"), dict) else {}
        content = message.get("content") if isinstance(message.get("content"), list) else []
        if ev.get("type") == "assistant":
            steps += 1
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls[str(block.get("name"))] += 1
            for key, value in (message.get("usage") or {}).items():
                if isinstance(value, int):
                    usage_sum[key] += value
        elif ev.get("type") == "user":
            failed += sum(isinstance(b, dict) and b.get("type") == "tool_result"
                          and bool(b.get("is_error")) for b in content)
        elif ev.get("type") == "result":
            result = ev
    usage: dict[str, Any] = dict(usage_sum)
    error = None
    if result is not None:
        usage = result.get("usage") or usage
        steps = int(result.get("num_turns") or steps)
        text = str(result.get("result") or "")
        # 0.15.10 reports a failed request (the server's 400, say) as a successful result
        # whose text is the error
        if result.get("is_error") or text.startswith(API_ERROR):
            error = str(result.get("error") or text or result.get("subtype"))[:300]
    cached = int(usage.get("cache_read_input_tokens") or 0)
    out: dict[str, Any] = {"steps": steps, "tool_calls": dict(calls), "tool_errors": failed,
                           "prefilled": max(0, int(usage.get("input_tokens") or 0) - cached),
                           "cached": cached, "decoded": int(usage.get("output_tokens") or 0)}
    if error:
        out["error"] = error
    return out
