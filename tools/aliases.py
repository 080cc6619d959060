"""Argument names models are trained on, read as the names our tools take.

Models write the parameter names of the agents they were trained with: Claude Code's
``file_path``/``old_string``/``new_string``/``content``, OpenHands' and SWE-agent's ``path`` +
``file_text``, aider-style ``filename``. Refusing them cost real tasks: with
Qwen2.5-Coder-1.5B, 4 of 8 small repository tasks wrote ``<file_path>`` for ``path``, were
refused, repeated the same call and stopped on ``repeated_call`` with the right code never
written (issue 49). So an alias is read as its parameter, and the call's result says so in one
line, which teaches the name for the next call.

Only a name the tool's schema lacks is read as an alias, and only for a parameter the call left
out: a tool (an MCP server's) that has a ``file_path`` of its own keeps it, and a call that
gives both ``path`` and ``file_path`` is still refused by the tool's validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ALIASES: dict[str, tuple[str, ...]] = {
    "file_path": ("path",), "filepath": ("path",), "file": ("path",), "filename": ("path",),
    "file_name": ("path",), "dir": ("path", "cwd"), "directory": ("path", "cwd"),
    "dir_path": ("path", "cwd"), "folder": ("path", "cwd"), "target_file": ("path",),
    "content": ("file_text", "text"), "contents": ("file_text", "text"),
    "file_content": ("file_text",), "file_contents": ("file_text",), "code": ("file_text", "text"),
    "text": ("file_text",), "new_text": ("new_str", "text"), "new_string": ("new_str",),
    "new_content": ("new_str",), "replacement": ("new_str",), "replace": ("new_str",),
    "new": ("new_str",), "old_string": ("old_str",), "old_text": ("old_str",),
    "old_content": ("old_str",), "search": ("old_str", "pattern"), "old": ("old_str",),
    "original": ("old_str",), "cmd": ("command",), "script": ("command",),
    "shell": ("command",), "workdir": ("cwd",), "working_dir": ("cwd",),
    "working_directory": ("cwd",), "range": ("view_range",), "line_range": ("view_range",),
    "lines": ("view_range",), "line": ("insert_line",), "line_number": ("insert_line",),
    "after_line": ("insert_line",), "lineno": ("insert_line",), "regex": ("pattern",),
    "query": ("pattern",), "case_insensitive": ("ignore_case",),
    "timeout_s": ("timeout",), "timeout_seconds": ("timeout",), "id": ("job_id",),
}
"""An alias → the parameters it may stand for, first match wins (``content`` is a create's
``file_text`` and an insert's ``text``)."""


def canonical_key(key: str, properties: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    """The parameter ``key`` stands for in a tool with these schema ``properties``: ``key``
    itself when the tool has it or it is no known alias; else the first parameter it may
    stand for that the tool has and the call (``given``, its argument names) left out."""
    if key in properties or key not in ALIASES:
        return key
    for target in ALIASES[key]:
        if target in properties and target not in given:
            return target
    return key


def canonical_arguments(arguments: Mapping[str, Any], schema: Mapping[str, Any]
                        ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``arguments`` with every alias renamed (:func:`canonical_key`), and the renames made as
    ``(alias, parameter)`` pairs in the order given. Values are kept as they are."""
    properties = schema.get("properties") or {}
    out: dict[str, Any] = {}
    renamed: list[tuple[str, str]] = []
    for key, value in arguments.items():
        target = canonical_key(key, properties, {**arguments, **out})
        if target != key:
            renamed.append((key, target))
        out[target] = value
    return out, renamed


def renamed_note(renamed: list[tuple[str, str]]) -> str:
    """The line a call's result carries when aliases were read (empty when none were)."""
    if not renamed:
        return ""
    pairs = ", ".join(f"{alias} as {target}" for alias, target in renamed)
    return f"\n[note: read {pairs}; the parameter names are the tool's: use them next time]"
