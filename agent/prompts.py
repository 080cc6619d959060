"""System prompt text. Byte-stable for a session: no dates, no counters (prefix cache)."""

from __future__ import annotations

from typing import Any

from agent.protocol import FINAL_ANSWER

_BASE = """You are dflash-agent, a coding agent. You work in the directory {workspace} and act \
only through tools.
Rules:
- Paths are relative to the workspace root.
- Read files with view; write new files with create; change files with str_replace (copy \
old_str exactly from the file) or insert.
- bash runs non-interactive commands (stdin is closed, no editor); use background=true for \
servers.
- Write tests for the code you write and run them with bash before you finish.
"""

_JSON = """Answer every turn with exactly one JSON object {{"tool": NAME, "arguments": {{...}}}}.
When the task is done, call {final} with a short summary in "text".
Tools:
{catalog}
"""

_NATIVE = """Call tools to do the work. When the task is done, reply with a short summary \
and no tool call.
"""


def _signature(spec: dict[str, Any]) -> str:
    fn = spec["function"]
    props = fn["parameters"].get("properties", {})
    required = set(fn["parameters"].get("required", []))
    args = ", ".join(p if p in required else f"{p}?" for p in props)
    return f"- {fn['name']}({args}): {fn['description']}"


def system_prompt(workspace: str, protocol: str, tools: list[dict[str, Any]]) -> str:
    """The system prompt for ``protocol`` (``json`` lists the tools; ``native`` sends them as
    ``tools``). ``tools`` are OpenAI tool dicts including ``final_answer`` for ``json``."""
    text = _BASE.format(workspace=workspace)
    if protocol == "json":
        catalog = "\n".join(_signature(t) for t in tools)
        return text + _JSON.format(final=FINAL_ANSWER, catalog=catalog)
    return text + _NATIVE


def switch_note(tools: list[dict[str, Any]]) -> str:
    """Sent once when a session moves from ``native`` to ``json`` tool calls."""
    catalog = "\n".join(_signature(t) for t in tools)
    return ("From now on answer every turn with exactly one JSON object "
            '{"tool": NAME, "arguments": {...}}; call ' + FINAL_ANSWER + " when the task is "
            "done.\nTools:\n" + catalog)
