"""The ``whole`` protocol: whole files in fences, commands in ``bash`` fences, prose to finish.

Aider's "whole" edit format, made a tool-call protocol. A small coder model that kept writing
a file it had been shown back unchanged through the ``create`` tool (Qwen2.5-Coder-1.5B: no
repository task of eleven solved under ``text``, ``json`` or ``native``, issue 49) solved two
with aider's format on the same server: a reply that is the changed file, as the model has
seen code written in every README and chat answer. So under ``whole`` a reply is read as:

- a **file listing**: the file's path on a line of its own (``calc.py``, ``**calc.py**``,
  ``File: `calc.py```: the decorations models add are read past), then a fence holding the
  entire new content — a ``create`` call. A path in the fence's info string
  (```` ```python:calc.py ````, ```` ```python title="calc.py" ````) counts too;
- a **command**: a ``bash``/``sh``/``shell``/``console`` fence with no path before it — a
  ``bash`` call per fence (``$`` prompts dropped);
- **no listing and no command**: the final answer, the reply its summary.

A code fence with no path is an example, not an edit: it is skipped when the reply holds a
listing or a command, and a reply holding only such fences gets a format error that says
where the path goes (overwriting a file with a usage snippet would lose it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agent.protocols.base import FormatError

SHELL_LANGS = frozenset({"bash", "sh", "shell", "console", "terminal", "zsh", "shell-session"})
MAX_COMMAND_LINES = 20
"""Lines a command block holds at most; a longer one after a file listing is made-up output."""
OUTPUT_LANGS = frozenset({"", "text", "txt", "output", "plaintext", "log"})
"""Fences that show output or prose, never an edit (with no path before them)."""
_OPEN = re.compile(r"^(?P<ticks>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_PATH = re.compile(r"^(?:\./)?(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+$")
"""A relative file path with an extension (``calc.py``, ``src/app.py``, ``.github/x.yml``)."""
_DECOR = re.compile(r"^(?:#+|[-*>]+|\d+\.)?\s*(?:(?:new |updated |the )?(?:file(?:name)?|path)"
                    r"\s*:?\s*)?", re.IGNORECASE)
_QUOTED = re.compile(r"[`*\"']([^`*\"'\s]+)[`*\"']")
_INFO_PATH = re.compile(r"(?:^|[\s:])(?:(?:title|path|file(?:name)?)=)?[\"']?"
                        r"((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+)[\"']?$")
_PROMPT = re.compile(r"^\s*\$ ")

PATH_BEFORE_FENCE = (
    "a code block without its file's path: to change a file, write its path on a line of its "
    "own right before the ``` fence (for example calc.py), then the file's entire new content "
    "in the fence. To run a command, use a ```bash fence. When the task is done, reply with a "
    "short summary and no code block.")


@dataclass(frozen=True)
class Block:
    """One fence of a reply: its language, the path written for it (None: none) and body."""

    lang: str
    path: str | None
    body: str
    closed: bool


def blocks(content: str) -> list[Block]:
    """The fences of ``content`` in order, each with the path written on the nearest non-blank
    line before it or in its info string. A fence left open runs to the end of the reply."""
    lines = content.splitlines()
    found: list[Block] = []
    before: str | None = None
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            if lines[i].strip():
                before = lines[i]
            i += 1
            continue
        ticks, info = opening.group("ticks"), opening.group("info").strip()
        end = i + 1
        while end < len(lines) and not _closes(lines[end], ticks):
            end += 1
        body = lines[i + 1:end]
        lang = info.split()[0].split(":")[0].lower() if info else ""
        path = _info_path(info) or (_line_path(before) if before is not None else None)
        found.append(Block(lang, path, "\n".join(body) + ("\n" if body else ""),
                           closed=end < len(lines)))
        before = None
        i = end + 1
    return found


def _closes(line: str, ticks: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(ticks[0] * len(ticks)) and set(stripped) == {ticks[0]}


def _info_path(info: str) -> str | None:
    if not info:
        return None
    match = _INFO_PATH.search(info)
    if match is None:
        return None
    # "```python" alone is a language; "```calc.py" or "```python:calc.py" a path.
    return match.group(1) if "." in match.group(1) else None


def _line_path(line: str) -> str | None:
    """The path a line before a fence names: the whole line once decorations are read past,
    or its one quoted or bold path (``Here is `calc.py`:``)."""
    text = _DECOR.sub("", line.strip(), count=1).strip().strip("*`\"'").rstrip(":").strip()
    text = text.strip("*`\"'")
    if _PATH.match(text):
        return text.removeprefix("./")
    quoted = [q for q in _QUOTED.findall(line) if _PATH.match(q)]
    return quoted[-1].removeprefix("./") if len(set(quoted)) == 1 else None


def parse_whole_calls(content: str) -> list[tuple[str, dict[str, Any]]]:
    """``(tool, arguments)`` calls in a ``whole`` reply, in order: ``create`` for each file
    listing, ``bash`` for each command fence; ``[]`` when it holds neither (the final answer).
    Raises :class:`FormatError` when its only fences are code without a path."""
    calls: list[tuple[str, dict[str, Any]]] = []
    pathless_code = False
    for block in blocks(content):
        if block.path is not None:
            calls.append(("create", {"path": block.path, "file_text": block.body}))
        elif block.lang in SHELL_LANGS:
            command = "\n".join(_PROMPT.sub("", line) for line in block.body.splitlines()
                                if line.strip() and not line.lstrip().startswith("#"))
            if command.strip():
                calls.append(("bash", {"command": command}))
        elif block.lang not in OUTPUT_LANGS:
            pathless_code = True
    if not calls and pathless_code:
        raise FormatError(PATH_BEFORE_FENCE)
    return calls


class CommandBlockEnd:
    """Where a ``whole`` reply that is still streaming should end: right after its first
    complete command block. What a small model writes after its command is the output it
    imagines (Qwen2.5-Coder-1.5B wrote its files, a ``pytest`` run with made-up failures and a
    fix for them, 8,000 characters cut at max_tokens, so nothing ran); the command's real
    output comes back instead. For the same reason the reply ends before an output block (a
    fence with no path and no language, or ``text``/``output``) that follows a complete file
    listing: the 1.5B wrote ``python -m pytest -q`` on a line, then 240,000 characters of
    made-up output. And a command block after a listing that runs past
    :data:`MAX_COMMAND_LINES` is output too (the 1.5B opened a ``bash`` fence after its files
    and wrote test results into it until the token limit): the reply ends before it. Called
    with the whole reply so far after each streamed piece; returns the length to keep, or None
    to go on."""

    def __call__(self, content: str) -> int | None:
        fence: str | None = None
        shell = done = False
        before: str | None = None
        pos = start = body = 0
        for line in content.splitlines(keepends=True):
            end = pos + len(line)
            complete = line.endswith("\n")
            if fence is None:
                opening = _OPEN.match(line.rstrip("\r\n")) if complete else None
                if opening is not None:
                    info = opening.group("info").strip()
                    lang = info.split()[0].split(":")[0].lower() if info else ""
                    has_path = _info_path(info) or (before is not None and _line_path(before))
                    if done and lang in OUTPUT_LANGS and not has_path:
                        return pos
                    fence, shell = opening.group("ticks"), lang in SHELL_LANGS and not has_path
                    start, body = pos, 0
                elif line.strip():
                    before = line
            elif complete and _closes(line, fence):
                if shell:
                    return end
                fence, before, done = None, None, True
            elif shell and done and (body := body + 1) > MAX_COMMAND_LINES:
                return start
            pos = end
        return None


def render_whole_call(name: str, arguments: dict[str, Any]) -> str | None:
    """A call as a ``whole`` reply would write it (for calls the product makes as if the
    model had); None for a tool the protocol has no form for."""
    if name == "create":
        text = str(arguments.get("file_text", ""))
        fence = "````" if "```" in text else "```"
        body = text if text.endswith("\n") or not text else text + "\n"
        return f"{arguments.get('path')}\n{fence}\n{body}{fence}"
    if name == "bash":
        return f"```bash\n{arguments.get('command')}\n```"
    return None


def cut_detail(content: str) -> str:
    """Where a ``whole`` reply cut by max_tokens stopped."""
    open_blocks = [b for b in blocks(content) if not b.closed]
    if open_blocks and open_blocks[-1].path:
        return f"inside the listing of {open_blocks[-1].path} (nothing of it was written)"
    return "before it finished a listing or command"



_OWN_WORDS = (("final_answer not taken: ", "Not finished: "),
              ("call final_answer again", "reply with your summary again"),
              ("call final_answer", "reply with a short summary"),
              (" with bash", " in a ```bash block"),
              ("Do the task with the tools first.", "Do the task first: write the files it "
               "changes, whole."),
              ("make it with the tools", "write the changed files whole"))


def in_own_words(text: str) -> str:
    """A message of the loop's (:mod:`agent.finish`'s refusals) in this protocol's terms: a
    model told to "call final_answer" under ``whole`` wrote that it would (the 1.5B)."""
    for theirs, ours in _OWN_WORDS:
        text = text.replace(theirs, ours)
    return text
