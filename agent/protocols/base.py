"""Tool-call protocols and the repair of tool calls written as text.

``json`` protocol wire contract: the assistant content is exactly one JSON object
``{"tool": NAME, "arguments": {...}}``, forced by a ``response_format`` json_schema that
llama-server compiles into a grammar; ``final_answer`` (``{"text": ...}``) ends the task. The
content is stored verbatim in history. The ``text`` protocol (tags, raw-text values, no
grammar) is in :mod:`agent.protocols.text`.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

FINAL_ANSWER = "final_answer"
FINAL_ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "What was done, for the user."}},
    "required": ["text"],
}
FINAL_ANSWER_DESCRIPTION = "Finish the task and report what was done."


class FormatError(ValueError):
    """The model's output is not a usable tool call; the message tells it what to fix."""


def json_response_format(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """``response_format`` forcing one call of any tool in ``tools`` (OpenAI tool dicts) or
    ``final_answer``."""
    options = []
    for spec in [*tools, _final_tool()]:
        fn = spec["function"]
        options.append({"type": "object",
                        "properties": {"tool": {"const": fn["name"]},
                                       "arguments": fn["parameters"]},
                        "required": ["tool", "arguments"],
                        "additionalProperties": False})
    return {"type": "json_schema",
            "json_schema": {"name": "tool_call", "strict": True, "schema": {"anyOf": options}}}


def _final_tool() -> dict[str, Any]:
    return {"type": "function", "function": {"name": FINAL_ANSWER,
                                             "description": FINAL_ANSWER_DESCRIPTION,
                                             "parameters": FINAL_ANSWER_SCHEMA}}


def tools_with_final(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The registry's tools plus ``final_answer`` (for prompts that list them)."""
    return [*tools, _final_tool()]


def lenient_json(text: str) -> Any:
    """Parse JSON the way small models write it: raw newlines in strings, trailing commas,
    Python literals with single quotes. Raises ``ValueError`` when nothing parses."""
    try:
        return json.loads(text, strict=False)
    except ValueError:
        pass
    cleaned = re.sub(r",\s*([}\]])", r"\1", text)
    try:
        return json.loads(cleaned, strict=False)
    except ValueError:
        pass
    try:
        return ast.literal_eval(cleaned)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc


def parse_json_call(content: str) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) from a ``json``-protocol reply; raises :class:`FormatError`."""
    text = content.strip()
    if not text:
        raise FormatError('empty reply; answer with one JSON object {"tool": ..., '
                          '"arguments": {...}}')
    try:
        data = lenient_json(text)
    except ValueError as exc:
        raise FormatError(f"the reply is not valid JSON ({exc}); answer with exactly one "
                          'object {"tool": NAME, "arguments": {...}}') from exc
    return _name_and_args(data)


def _name_and_args(data: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(data, dict):
        raise FormatError('the reply must be a JSON object {"tool": NAME, "arguments": {...}}')
    name = data.get("tool", data.get("name"))
    if isinstance(data.get("function"), dict):
        name = data["function"].get("name", name)
        data = data["function"]
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = lenient_json(args) if args.strip() else {}
        except ValueError as exc:
            raise FormatError(f"arguments of {name} are not valid JSON: {exc}") from exc
    if not isinstance(name, str) or not name:
        raise FormatError('the object has no "tool" name')
    if not isinstance(args, dict):
        raise FormatError(f'"arguments" of {name} must be an object')
    return name, args


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json|tool_call)?\s*(\{.*?\})\s*```", re.DOTALL)
_XML_FN = re.compile(r"<function=([\w.\-]+)>(.*?)</function>", re.DOTALL)
_XML_PARAM = re.compile(r"<parameter=([\w.\-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


def calls_in_text(content: str, known: set[str], unknown_too: bool = False
                  ) -> list[tuple[str, dict[str, Any]]]:
    """Tool calls a model wrote as text instead of structured calls (docs/design/field-cases.md,
    class 3): ``<tool_call>{…}</tool_call>``, fenced JSON, XML ``<function=…>`` tags, or a bare JSON
    object. Only calls naming a tool in ``known`` count, or (``unknown_too``) any name. Raises
    :class:`FormatError` when the text clearly tries a call to a known tool but cannot be
    parsed."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, body in _XML_FN.findall(content):
        args = {k: v for k, v in _XML_PARAM.findall(body)}
        found.append((name, args))
    candidates = _TAGGED.findall(content) or _FENCED.findall(content)
    stripped = content.strip()
    if not candidates and not found and stripped.startswith("{") and stripped.endswith("}"):
        candidates = [stripped]
    for raw in candidates:
        try:
            found.append(_name_and_args(lenient_json(raw)))
        except (ValueError, FormatError) as exc:
            if any(f'"{k}"' in raw or f"'{k}'" in raw for k in known):
                raise FormatError(f"your tool call could not be parsed: {exc}") from exc
    return [(n, a) for n, a in found if unknown_too or n in known]
