"""The ``text`` tool-call protocol: calls written as tags, values as raw text.

Why: under ``json`` a file's content travels as a JSON string (every newline ``\\n``, every
quote ``\\"``), which neither an n-gram lookup (the file in the context is raw) nor a draft
model predicts, and the grammar splits words into non-canonical tokens, so the next request's
prefix diverges from the cached reply. Here a value is written exactly as it lands in the file,
no grammar and no ``tools`` field are sent, and the reply is stored verbatim.

The rules (the system prompt teaches 1-5; the others settle the edge cases):

1. **Calls.** ``<NAME>`` … ``</NAME>``, NAME a tool of the session or ``final_answer``. A reply
   may hold several calls; they run in order. Text outside calls (before, between, after) is
   kept in the history and otherwise ignored. A tool's opening tag anywhere outside a call
   starts a call, so prose must not write one. A tag of a name that is not a tool starts a call
   only at the start of a line and when a parameter tag or its own closing tag follows it (after
   whitespace): it then runs as a call of an unknown tool, and the registry's error lists the
   tools.
2. **Parameters.** Inside a call only ``<PARAM>value</PARAM>`` elements and whitespace, each
   parameter at most once, named like the properties of the tool's JSON schema
   (``Tool.parameters()``: the ``Args`` fields of core tools, the MCP or skill schema
   otherwise). Unknown and missing parameters are not format errors: the registry validates
   every call with the tool's own argument model, and the loop adds the call's text form to
   that error.
3. **String values** are the raw text between the tags, byte for byte (tabs, CRLF, trailing
   spaces, unicode), except one line break (``\\n`` or ``\\r\\n``) right after the opening
   tag. The value ends right before its closing tag, so the line break before a closing tag on
   its own line is the value's last line end: ``<file_text>\\nx = 1\\n</file_text>`` is
   ``"x = 1\\n"``. Content without a final newline closes the tag right after its last
   character (``x = 1</file_text>``). Short values are written inline: ``<path>a.py</path>``.
4. **Other values.** A parameter whose schema allows no string (integer, number, boolean,
   array, object, null) takes JSON, whitespace around it ignored: ``<view_range>[1, 40]
   </view_range>``, ``<background>true</background>``. A schema with no type information takes
   the raw string.
5. **final_answer** (``<text>…</text>``) ends the task; calls after it in the same reply do
   not run.
6. **Closing tags inside values** need no escape. A value ends at the first ``</PARAM>``
   followed (after whitespace) by another parameter's opening tag or the end of the call, and
   after which the rest of the call parses. A call ends at the first ``</NAME>`` that ends its
   line, at which its parameters parse, and after which the rest of the reply parses with no
   tool's or parameter's closing tag left outside a call; when no end does that (two calls on
   one line), at the first ``</NAME>`` at which its parameters and the rest parse. So a file
   may hold ``</file_text>``, even ``</file_text>`` and ``</create>`` on lines of their own
   (the sources of this module and of its tests round-trip). Content that is itself a complete
   run of calls is ambiguous, and content where ``</PARAM>`` is followed by ``<PARAM>`` may read as
   that parameter given twice.
7. **Format errors** (nothing in the reply runs; the message says what, on which line, and the
   correct form): a call that is never closed, a parameter that is never closed, text between
   parameters, a parameter given twice, a non-string value that is not JSON, a string value that
   is nothing but parameter tags (``<file_text><view_range>[1, 40]</view_range></file_text>``:
   a slip that would write that line over a file), no call at all.
8. **Cut off.** A reply that ended at max_tokens runs nothing; :func:`cut_detail` says which
   call was cut (the loop reports it and keeps a short marker instead of the reply).
9. **Repair.** A reply with no tag calls may still hold calls written the json way
   (:func:`agent.protocols.base.calls_in_text`); those run.
10. **A call left open.** A call with no closing tag anywhere ends where the next call opens
    at the start of a line, or at the end of the reply, when its parameters up to there parse
    (a parameter left open still does not: ``<file_text>`` cut short is no content).
11. **A bare value.** A call whose body holds no tag at all is the value of the tool's one
    required parameter, when it has exactly one and it takes a string, the value cut as in
    rule 3 (``<final_answer>\ndone\n</final_answer>``, ``<view>src/app.py</view>``).
12. **A wrapped call.** A call whose one parameter is named like another tool is that tool's
    call (``<view><create>…</create></view>``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.protocols.base import FINAL_ANSWER, FormatError, lenient_json
from tools.aliases import canonical_key

_TAG = re.compile(r"<([A-Za-z_][\w.\-]*)>")
_WS = " \t\r\n"
_LINE_END = re.compile(r"[ \t]*(?:\r?\n|$)")
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null", list: "array", dict: "object"}


@dataclass(frozen=True)
class TextCall:
    """One parsed call: the tool's name, its typed arguments, and the line its tag is on."""

    name: str
    arguments: dict[str, Any]
    line: int


def parse_text_calls(content: str, schemas: Mapping[str, dict[str, Any]]) -> list[TextCall]:
    """The calls in a ``text``-protocol reply, in order (rules in the module docstring).

    ``schemas`` maps each known tool name (``final_answer`` included) to its JSON schema. An
    empty list means the reply holds no tag call. Raises :class:`FormatError` with what is
    wrong, the line, and the call's correct form."""
    return _Parser(content, schemas).calls()


def string_typed(schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    """True when a property's value is written raw: its schema allows a string, or says no
    type at all. ``root`` is the tool's schema (for local ``$ref``)."""
    types = _types(schema, root, 0)
    return not types or "string" in types


def render_call(name: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> str:
    """``arguments`` written as a call that :func:`parse_text_calls` reads back unchanged:
    multi-line strings in block form, other strings inline, non-strings as JSON."""
    props = schema.get("properties", {})
    lines = [f"<{name}>"]
    for key, value in arguments.items():
        if isinstance(value, str) and string_typed(props.get(key, {}), schema):
            body = "\n" + value if "\n" in value else value
        else:
            body = json.dumps(value, ensure_ascii=False)
        lines.append(f"<{key}>{body}</{key}>")
    lines.append(f"</{name}>")
    return "\n".join(lines)


def usage(name: str, schema: Mapping[str, Any]) -> str:
    """The text form of a call of ``name`` with its required parameters (the shape a format
    error shows), e.g. ``<view>\\n<path>…</path>\\n</view>``."""
    required = schema.get("required", [])
    props = schema.get("properties", {})
    lines = [f"<{name}>"]
    for key in required:
        value = "…" if string_typed(props.get(key, {}), schema) else "JSON"
        lines.append(f"<{key}>{value}</{key}>")
    lines.append(f"</{name}>")
    return "\n".join(lines)


def mismatched(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
    """True when ``arguments`` name a parameter the schema lacks or leave out a required one
    (then the loop shows the call's text form next to the registry's error)."""
    props = schema.get("properties", {})
    unknown = bool(props) and any(key not in props for key in arguments)
    return unknown or any(key not in arguments for key in schema.get("required", []))


def cut_detail(content: str, names: set[str]) -> str:
    """Where a reply cut at max_tokens stopped (inside which call, or after its calls), for
    the report; ``names`` are the known tools. Tags inside a call's values are skipped."""
    pos, seen = 0, False
    for m in _TAG.finditer(content):
        if m.start() < pos or m.group(1) not in names:
            continue
        seen = True
        close = content.find(f"</{m.group(1)}>", m.end())
        if close == -1:
            return (f"inside the <{m.group(1)}> call opened on line {_line(content, m.start())};"
                    " nothing in the reply was run")
        pos = close
    return "after its last complete call; nothing in the reply was run" if seen \
        else "before it wrote a tool call"


def _types(schema: Any, root: Mapping[str, Any], depth: int) -> set[str]:
    if not isinstance(schema, Mapping) or depth > 16:
        return set()
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        return _types(target, root, depth + 1)
    kind = schema.get("type")
    out = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            out |= _types(sub, root, depth + 1)
    values = list(schema.get("enum") or []) + ([schema["const"]] if "const" in schema else [])
    out |= {_JSON_TYPES.get(type(v), "string") for v in values}
    return out


def _value_of(raw: str) -> str:
    """A raw value as rule 3 cuts it: one line break after the opening tag dropped."""
    return raw[2:] if raw.startswith("\r\n") else raw[1:] if raw.startswith("\n") else raw


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _skip_ws(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos] in _WS:
        pos += 1
    return pos


class _BodyError(Exception):
    """A call's body does not parse as parameters (the message says where)."""


@dataclass(frozen=True)
class _Raw:
    name: str
    params: list[tuple[str, str, int]]
    """(parameter, raw value, position of its tag)."""
    pos: int


class _Parser:
    """The backtracking reader behind :func:`parse_text_calls` (choices are where a value or
    a call ends; memoised, so realistic replies parse in one pass)."""

    def __init__(self, text: str, schemas: Mapping[str, dict[str, Any]]):
        self.text, self.schemas = text, schemas
        params = {p for s in schemas.values() for p in s.get("properties", {})}
        names = "|".join(re.escape(n) for n in sorted({*schemas, *params}, key=len,
                                                         reverse=True))
        self._stray = re.compile(f"</(?:{names})>") if names else None
        tools = "|".join(re.escape(n) for n in sorted(schemas, key=len, reverse=True))
        self._line_call = re.compile(f"^<(?:{tools})>", re.MULTILINE) if tools \
            else re.compile("(?!)")
        # Parameters only: a file whose content is a whole call round-trips (rule 6).
        only = "|".join(re.escape(n) for n in sorted(params, key=len, reverse=True))
        self._only_tags = re.compile(f"(?:[{_WS}]*<({only})>.*?</\\1>)+[{_WS}]*",
                                     re.DOTALL) if only else None
        self._memo: dict[tuple[int, bool], list[_Raw] | None] = {}
        self._errors: dict[int, str] = {}
        """Position of a call that cannot parse by itself → what is wrong with it."""

    def calls(self) -> list[TextCall]:
        try:
            raws = self._from(0, clean=True)
            if raws is None:
                raws = self._from(0, clean=False)
        except RecursionError as exc:  # one stack frame pair per call in the reply
            raise FormatError("too many calls in one reply; write at most 100") from exc
        if raws is None:
            pos = min(self._errors)
            raise FormatError(f"line {_line(self.text, pos)}: {self._errors[pos]}")
        return [call for raw in raws for call in self._unwrapped(raw)]

    def _unwrapped(self, raw: _Raw) -> list[TextCall]:
        """Rule 12: a call whose one parameter is named like another tool wraps that tool's
        call (``<view><create>…</create></view>``, as the 1.5B wrote it after a view): the
        inner calls run."""
        if len(raw.params) == 1 and raw.params[0][0] in self.schemas \
                and raw.params[0][0] != raw.name:
            key, value, _ = raw.params[0]
            try:
                inner = _Parser(f"<{key}>{value}</{key}>", self.schemas).calls()
            except FormatError:
                inner = []
            if inner:
                line = _line(self.text, raw.pos)
                return [TextCall(c.name, c.arguments, line) for c in inner]
        return [self._typed(raw)]

    def _from(self, pos: int, clean: bool) -> list[_Raw] | None:
        """The calls from ``pos`` to the end, or None; ``clean``: every call's closing tag
        ends its line, and no tool's or parameter's closing tag is left between calls."""
        key = (pos, clean)
        if key not in self._memo:
            self._memo[key] = self._parse_from(pos, clean)
        return self._memo[key]

    def _parse_from(self, pos: int, clean: bool) -> list[_Raw] | None:
        opened = self._next_call(pos)
        prose_end = len(self.text) if opened is None else opened.start()
        if clean and self._stray and self._stray.search(self.text, pos, prose_end):
            return None
        if opened is None:
            return []
        name = opened.group(1)
        close = f"</{name}>"
        body_start = opened.end()
        problem = f"the <{name}> call is never closed with {close}"
        parsed_any = False
        end = self.text.find(close, body_start)
        while end != -1:
            try:
                params = self._body(body_start, end, name)
            except _BodyError as exc:
                problem = str(exc)
            else:
                parsed_any = True
                after = end + len(close)
                rest = self._from(after, clean) if not clean or self._ends_line(after) \
                    else None
                if rest is not None:
                    return [_Raw(name, params, opened.start()), *rest]
            end = self.text.find(close, end + 1)
        if self.text.find(close, body_start) == -1:
            implicit = self._closed_by_next_call(name, body_start, clean)
            if implicit is not None:
                return [_Raw(name, implicit[0], opened.start()), *implicit[1]]
        if not parsed_any:
            self._errors.setdefault(opened.start(), self._with_form(name, problem))
        return None

    def _closed_by_next_call(self, name: str, body_start: int, clean: bool
                             ) -> tuple[list[tuple[str, str, int]], list[_Raw]] | None:
        """Rule 10: a call never closed ends where the next call opens at the start of a line,
        when its parameters up to there parse (a small model left out ``</create>`` before
        its ``<final_answer>``: Qwen2.5-Coder-1.5B, issue 49). The parameters and the calls
        from there, or None."""
        ends = [m.start() for m in self._line_call.finditer(self.text, body_start)]
        for end in [*ends, len(self.text)]:
            try:
                params = self._body(body_start, end, name)
            except _BodyError:
                continue
            rest = (self._from(end, clean) if end < len(self.text) else []) if params else None
            if rest is not None:
                return params, rest
        return None

    def _ends_line(self, pos: int) -> bool:
        return _LINE_END.match(self.text, pos) is not None

    def _next_call(self, pos: int) -> re.Match[str] | None:
        for m in _TAG.finditer(self.text, pos):
            name = m.group(1)
            if name in self.schemas:
                return m
            line_start = self.text.rfind("\n", 0, m.start()) + 1
            if self.text[line_start:m.start()].strip(_WS):
                continue
            after = _skip_ws(self.text, m.end(), len(self.text))
            closed = self.text.find(f"</{name}>", m.end()) != -1
            if closed and (self.text.startswith(f"</{name}>", after)
                           or _TAG.match(self.text, after)):
                return m
        return None

    def _body(self, pos: int, end: int, call: str) -> list[tuple[str, str, int]]:
        """The parameters of a call's body; rule 11: a body with no tag at all is the value
        of the tool's one required parameter, when it has one and it takes a string."""
        try:
            return self._params(pos, end, call)
        except _BodyError:
            schema = self.schemas.get(call) or {}
            required = schema.get("required") or []
            bare = self.text[pos:end]
            if len(required) != 1 or _TAG.search(bare) or not bare.strip(_WS) or \
                    not string_typed(schema.get("properties", {}).get(required[0], {}), schema):
                raise
            return [(required[0], _value_of(bare), pos)]

    def _params(self, pos: int, end: int, call: str) -> list[tuple[str, str, int]]:
        text = self.text
        pos = _skip_ws(text, pos, end)
        if pos == end:
            return []
        opened = _TAG.match(text, pos, end)
        if opened is None:
            snippet = text[pos:min(end, pos + 40)].split("\n")[0]
            raise _BodyError(f"inside <{call}>, text outside a parameter tag: {snippet!r} "
                             f"(line {_line(text, pos)}); a call holds only parameter tags")
        name = opened.group(1)
        start = opened.end()
        if text.startswith("\r\n", start):
            start += 2
        elif text.startswith("\n", start):
            start += 1
        close = f"</{name}>"
        failure: _BodyError | None = None
        at = text.find(close, start, end)
        while at != -1:
            after = _skip_ws(text, at + len(close), end)
            if after == end or _TAG.match(text, after, end):
                try:
                    rest = self._params(after, end, call)
                except _BodyError as exc:
                    failure = exc
                else:
                    return [(name, text[start:at], pos), *rest]
            at = text.find(close, at + 1, end)
        if failure is not None:
            raise failure
        raise _BodyError(f"<{name}> (line {_line(text, pos)}) is not closed with {close} "
                         f"before </{call}>")

    def _with_form(self, name: str, problem: str) -> str:
        schema = self.schemas.get(name)
        if schema is None:
            return problem
        return f"{problem}. The form is:\n{usage(name, schema)}"

    def _typed(self, raw: _Raw) -> TextCall:
        schema = self.schemas.get(raw.name, {})
        props = schema.get("properties", {})
        args: dict[str, Any] = {}
        given = {key for key, _, _ in raw.params}
        for key, value, pos in raw.params:
            if key in args:
                raise FormatError(f"line {_line(self.text, pos)}: <{key}> is given twice in "
                                  f"<{raw.name}>; give each parameter once. The form is:\n"
                                  + usage(raw.name, schema))
            # An alias (``range`` for ``view_range``) is typed as the parameter it stands
            # for; the call keeps the name written (the loop renames it and says so).
            typed_as = canonical_key(key, props, given)
            if not string_typed(props.get(typed_as, {}), schema):
                args[key] = self._json_value(raw.name, typed_as, value, pos, schema)
                continue
            only = self._only_tags.fullmatch(value) if self._only_tags else None
            if only is not None:
                # A stray <view_range>[1, 40]</view_range> where a create's file_text belonged
                # replaced two source files with that line (issue 49): a value that is nothing
                # but another parameter's or call's tag is a slip, not content.
                raise FormatError(
                    f"line {_line(self.text, pos)}: <{key}> of {raw.name} holds only a "
                    f"<{only.group(1)}> tag, which is a parameter, not a value; "
                    f"nothing in the reply was run. The form is:\n{usage(raw.name, schema)}")
            args[key] = value
        return TextCall(raw.name, args, _line(self.text, raw.pos))

    def _json_value(self, call: str, key: str, value: str, pos: int,
                    schema: Mapping[str, Any]) -> Any:
        stripped = value.strip(_WS)
        if stripped:
            try:
                return lenient_json(stripped)
            except ValueError:
                pass
        kinds = "/".join(sorted(_types(schema.get("properties", {}).get(key), schema, 0)))
        raise FormatError(
            f"line {_line(self.text, pos)}: <{key}> of {call} takes JSON ({kinds}), e.g. "
            "<view_range>[1, 40]</view_range> or <background>true</background>; got "
            f"{value[:60]!r}. Leave an optional parameter out instead of writing it empty")


def no_call_message(schemas: Mapping[str, dict[str, Any]]) -> str:
    """The format error for a reply without any call."""
    return ("the reply has no tool call. Call a tool by writing its tags, one tag per "
            "parameter, e.g.\n<view>\n<path>.</path>\n</view>\nand when the task is done:\n"
            + usage(FINAL_ANSWER, schemas.get(FINAL_ANSWER, {})))


class CallBlockEnd:
    """Where a ``text`` reply that is still streaming should end: right after its last
    complete call, once the model writes something after it that is not another tool's call.

    Why: a small model that has written its calls goes on to imagine their results and act on
    them (Qwen2.5-Coder-1.5B: 1,600+ tokens in one reply, cut at max_tokens inside a
    ``<create>`` so that nothing ran; issue 49). What follows the calls is never run anyway
    (rule 1), and a ``final_answer`` after calls must wait for their results, so the reply
    ends there and the calls run. ``schemas`` as for :func:`parse_text_calls`.

    Called with the whole reply so far after each streamed piece; returns the length to keep,
    or None to go on. Prose before the first call, and whitespace or another tool's opening tag
    (or a start of one) after a call, go on."""

    def __init__(self, schemas: Mapping[str, dict[str, Any]]):
        self.schemas = schemas
        tools = [n for n in schemas if n != FINAL_ANSWER]
        self._opens = [f"<{n}>" for n in tools]
        names = "|".join(re.escape(n) for n in sorted(schemas, key=len, reverse=True))
        self._close = re.compile(f"</(?:{names})>[ \\t]*(?=\\r?\\n|$)") if names else None
        self._decided = 0
        """Ends of calls up to here were followed by another call (or did not parse)."""

    def __call__(self, content: str) -> int | None:
        if self._close is None:
            return None
        for m in self._close.finditer(content, self._decided):
            end = m.end()
            rest = content[end:].lstrip(_WS)
            if not rest:
                return None  # undecided until something follows
            if any(o.startswith(rest[:len(o)]) for o in self._opens):
                if len(rest) < max(map(len, self._opens)) and \
                        not any(rest.startswith(o) for o in self._opens):
                    return None  # the start of a tag: wait for the rest of it
                self._decided = end
                continue
            try:
                complete = parse_text_calls(content[:end], self.schemas)
            except FormatError:
                complete = []
            if complete:
                return end
            self._decided = end
        return None
