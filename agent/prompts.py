"""System prompt text. Byte-stable for a session: no dates, no counters (prefix cache)."""

from __future__ import annotations

from typing import Any

from agent.protocols.base import FINAL_ANSWER, tools_with_final
from agent.protocols.text import string_typed

_BASE = """You are dflash-agent, a coding agent. You work in a project folder and act only \
through tools.
Rules:
- Paths are relative to the project's root folder (. is the root itself); bash commands \
start in the root.
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

_TEXT = """Call a tool by writing its tag, with one tag per parameter:
<view>
<path>src/app.py</path>
</view>
Values are raw text, exactly as meant: no quotes, no escapes. A long value starts on the line \
after its opening tag and ends right before its closing tag:
<create>
<path>hello.py</path>
<file_text>
print("hello")
</file_text>
</create>
Parameters marked JSON take JSON: <view_range>[1, 40]</view_range>, <background>true</background>.
Several calls in one reply run in order; their results come back together.
When the task is done, call {final}:
<{final}>
<text>a short summary</text>
</{final}>
Tools (? marks an optional parameter):
{catalog}
"""

_WHOLE = """You are dflash-agent, a coding agent working in a project folder. Paths are relative \
to the project's root folder.
To change a file, or to make a new one, reply with its path on a line of its own and then \
its entire new content in a fenced block:

calc.py
```python
def add(a, b):
    return a + b
```

Always write the whole file: never leave parts out and never write "..." for code that \
stays the same.
To run a command (the tests, the program), write it in a bash block; its output comes back \
to you:

```bash
python -m pytest -q
```

Check your change by running the project's tests, or a short test you write, before you \
finish. When the task is done, reply with a short summary and no block.
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


def _text_signature(spec: dict[str, Any]) -> str:
    fn = spec["function"]
    schema = fn["parameters"]
    required = set(schema.get("required", []))
    args = []
    for name, prop in schema.get("properties", {}).items():
        mark = "" if name in required else "?"
        kind = "" if string_typed(prop, schema) else ": JSON"
        args.append(f"{name}{mark}{kind}")
    return f"- {fn['name']}({', '.join(args)}): {fn['description']}"


def system_prompt(protocol: str, tools: list[dict[str, Any]]) -> str:
    """The system prompt for ``protocol``: ``json`` and ``text`` list the tools (``text``
    adds ``final_answer`` itself when ``tools`` lacks it); ``native`` sends them as ``tools``;
    ``whole`` has no tools to list (:mod:`agent.protocols.whole`: file listings and bash
    blocks). ``tools`` are OpenAI tool dicts, including ``final_answer`` for ``json``."""
    if protocol == "whole":
        return _WHOLE
    # No absolute path: a small model copied it, cut short, and was refused as outside the
    # workspace (issue 49); relative paths are all the tools need.
    text = _BASE
    if protocol == "json":
        catalog = "\n".join(_signature(t) for t in tools)
        return text + _JSON.format(final=FINAL_ANSWER, catalog=catalog)
    if protocol == "text":
        plain = [t for t in tools if t["function"]["name"] != FINAL_ANSWER]
        catalog = "\n".join(_text_signature(t) for t in tools_with_final(plain))
        return text + _TEXT.format(final=FINAL_ANSWER, catalog=catalog)
    return text + _NATIVE


JSON_SWITCH = "From now on answer every turn with exactly one JSON object"
"""The first words of :func:`switch_note`: a resumed history holding them continues in json."""


def switch_note(tools: list[dict[str, Any]]) -> str:
    """Sent once when a session falls back to ``json`` tool calls (appended: the system
    prompt, which may describe another protocol, is never rewritten)."""
    catalog = "\n".join(_signature(t) for t in tools)
    return (JSON_SWITCH + ' {"tool": NAME, "arguments": {...}}; call ' + FINAL_ANSWER
            + " when the task is done.\nTools:\n" + catalog)
