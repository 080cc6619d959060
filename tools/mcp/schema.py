"""Make MCP tool input schemas safe for llama.cpp's JSON-schema-to-grammar compiler.

Servers write schemas for validators, not for grammars. llama-server refuses a whole request
when one tool's schema does not compile (400 "JSON schema error" or "failed to parse grammar"),
so one hostile tool would break every turn. Facts from llama.cpp ``common/json-schema.cpp`` and
``json-schema-to-grammar.cpp`` (build b11434), confirmed against the real server by
``tests/test_mcp_client_schema.py``:

- ``$ref`` resolves against the document root, but tool schemas are embedded in a larger
  response format, and ``#``/cyclic references fail: every reference is inlined here, and a
  reference met again on its own path becomes ``{}`` (any value);
- keywords with ``null`` or wrongly typed values (``pattern: null``, ``format: null``,
  ``minItems: 1.5``), boolean sub-schemas, and empty ``enum``/``anyOf`` fail;
- large repetition bounds expand into huge grammars (``minItems: 10000`` fails);
- ``anyOf`` next to ``properties`` ignores the properties; ``not``, ``if``, lookaround
  patterns and unknown formats are ignored or accepted loosely.

The sanitised schema is only what the grammar forces; arguments are still validated against the
server's original schema before a call (:mod:`tools.mcp.tool`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_BOUND = 64
"""Largest repetition bound (items, length) kept; larger ones are dropped."""
MAX_NUMBER = 1e15
"""Largest magnitude of minimum/maximum kept."""
MAX_DEPTH = 24
MAX_SCHEMA_CHARS = 16_000
"""A sanitised schema larger than this (JSON text) is refused: it would dominate the prompt."""
MAX_DESCRIPTION = 300
MAX_NODES = 4000
"""Sub-schemas visited at most (inlining references can multiply them)."""
FORMATS = frozenset({"date", "time", "date-time", "uuid"})
"""Formats llama.cpp turns into grammar rules; others are dropped (they only loosen it)."""
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_BOUND_KEYS = ("minItems", "maxItems", "minLength", "maxLength")
_SAFE_PATTERN = re.compile(r"^\^[\w\[\]\-. +*?|(){},:@/\\$]*\$$")


class UnsafeSchema(ValueError):
    """The schema cannot be made safe (the tool is left out); the message says why."""


_NULL_ALLOWED = frozenset({"const", "default", "examples", "enum"})
"""Keywords whose value may be JSON null; any other keyword set to null means "not set"."""


def drop_null_keywords(schema: Any) -> Any:
    """A copy of ``schema`` without keywords whose value is null (``"pattern": null``, as a
    server dumping a model without ``exclude_none`` writes them), at every depth; property
    *names* and null ``const``/``default`` values are kept."""
    if isinstance(schema, list):
        return [drop_null_keywords(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if value is None and key not in _NULL_ALLOWED:
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and \
                isinstance(value, dict):
            out[key] = {name: drop_null_keywords(sub) for name, sub in value.items()}
        elif key in _NULL_ALLOWED:
            out[key] = value
        else:
            out[key] = drop_null_keywords(value)
    return out


def sanitize(schema: Any) -> dict[str, Any]:
    """A grammar-safe copy of a tool's input schema (an object schema).

    Raises :class:`UnsafeSchema` when the root is not an object schema, a reference cannot be
    resolved, a required property admits no value, or the result is too large."""
    if not isinstance(schema, dict):
        raise UnsafeSchema("the input schema is not a JSON object")
    if schema.get("type", "object") != "object":
        raise UnsafeSchema(f"the input schema's type is {schema.get('type')!r}, not 'object'")
    out = _Sanitizer(schema).visit(schema, (), 0)
    if out is None:
        raise UnsafeSchema("the input schema admits no value")
    out["type"] = "object"
    size = len(json.dumps(out))
    if size > MAX_SCHEMA_CHARS:
        raise UnsafeSchema(f"the sanitised schema is {size} characters (limit "
                           f"{MAX_SCHEMA_CHARS})")
    return out


def _resolve(root: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        raise UnsafeSchema(f"$ref '{ref}' points outside the schema")
    node: Any = root
    for part in [p for p in ref[1:].split("/") if p]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise UnsafeSchema(f"$ref '{ref}' cannot be resolved")
    return node


def _is_never(schema: Any) -> bool:
    return schema is False or (isinstance(schema, dict) and schema.get("not") == {})


def _is_null(schema: Any) -> bool:
    return isinstance(schema, dict) and (schema.get("type") == "null" or schema.get("const", 0)
                                         is None and "const" in schema)


def _safe_pattern(pattern: str) -> bool:
    """Anchored, no groups beginning ``(?`` (lookaround, named groups), small repeats."""
    if "(?" in pattern or not _SAFE_PATTERN.match(pattern):
        return False
    if any(int(n) > MAX_BOUND for n in re.findall(r"\{(\d+)", pattern)):
        return False
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


class _Sanitizer:
    def __init__(self, root: dict[str, Any]):
        self.root = root
        self.nodes = 0

    def visit(self, schema: Any, refs: tuple[str, ...], depth: int) -> dict[str, Any] | None:
        """The safe form of ``schema``, or None when it admits no value."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise UnsafeSchema(f"the schema expands to more than {MAX_NODES} sub-schemas")
        if schema is True or schema == {}:
            return {}
        if _is_never(schema):
            return None
        if not isinstance(schema, dict) or depth > MAX_DEPTH:
            return {}
        if isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            if ref in refs:
                return {}
            target = _resolve(self.root, ref)
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            merged = {**target, **siblings} if isinstance(target, dict) else target
            return self.visit(merged, (*refs, ref), depth + 1)
        out: dict[str, Any] = {}
        self._scalars(schema, out)
        self._type(schema, out)
        is_object = any(k in schema for k in ("properties", "required", "additionalProperties"))
        if is_object and not self._object(schema, out, refs, depth):
            return None
        if "items" in schema or "prefixItems" in schema:
            self._array(schema, out, refs, depth)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return self._any_of(schema, key, out, refs, depth)
        if isinstance(schema.get("allOf"), list):
            parts = [self.visit(s, refs, depth + 1) for s in schema["allOf"]]
            if any(p is None for p in parts):
                return None
            kept = [p for p in parts if p]
            if kept:
                out["allOf"] = kept
        return out

    def _scalars(self, schema: dict[str, Any], out: dict[str, Any]) -> None:
        description = schema.get("description")
        if isinstance(description, str) and description.strip():
            out["description"] = description[:MAX_DESCRIPTION]
        if "const" in schema:
            out["const"] = schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            out["enum"] = enum
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in FORMATS:
            out["format"] = fmt
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and _safe_pattern(pattern):
            out["pattern"] = pattern
        for key in _BOUND_KEYS:
            value = schema.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_BOUND:
                out[key] = value
        for key in _NUMBER_KEYS:
            value = schema.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) \
                    and math.isfinite(value) and abs(value) <= MAX_NUMBER:
                out[key] = value

    def _type(self, schema: dict[str, Any], out: dict[str, Any]) -> None:
        kind = schema.get("type")
        if isinstance(kind, list):
            names = [t for t in kind if isinstance(t, str)]
            kept = [t for t in names if t != "null"] or names
            if len(kept) == 1:
                out["type"] = kept[0]
            elif kept:
                out["type"] = kept
        elif isinstance(kind, str):
            out["type"] = kind

    def _object(self, schema: dict[str, Any], out: dict[str, Any], refs: tuple[str, ...],
                depth: int) -> bool:
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        props: dict[str, Any] = {}
        raw = schema.get("properties")
        for name, sub in (raw.items() if isinstance(raw, dict) else []):
            safe = self.visit(sub, refs, depth + 1)
            if safe is None:
                if name in required:
                    return False
                continue
            props[str(name)] = safe
        out["properties"] = props
        if required:
            out["required"] = required
        extra = schema.get("additionalProperties")
        if extra is False or _is_never(extra):
            out["additionalProperties"] = False
        elif isinstance(extra, dict) and extra:
            safe = self.visit(extra, refs, depth + 1)
            out["additionalProperties"] = safe if safe is not None else False
        out.setdefault("type", "object")
        return True

    def _array(self, schema: dict[str, Any], out: dict[str, Any], refs: tuple[str, ...],
               depth: int) -> None:
        items = schema.get("items")
        if isinstance(items, list):
            tuple_items = [self.visit(s, refs, depth + 1) or {} for s in items]
            out["prefixItems"] = tuple_items
        elif items is not None:
            safe = self.visit(items, refs, depth + 1)
            if safe is None:
                out["maxItems"] = 0
                out.pop("minItems", None)
            else:
                out["items"] = safe
        if isinstance(schema.get("prefixItems"), list):
            out["prefixItems"] = [self.visit(s, refs, depth + 1) or {}
                                  for s in schema["prefixItems"]]
        out.setdefault("type", "array")

    def _any_of(self, schema: dict[str, Any], key: str, out: dict[str, Any],
                refs: tuple[str, ...], depth: int) -> dict[str, Any] | None:
        """llama.cpp reads only the alternatives when ``anyOf`` is present, so keywords next
        to it are folded into each alternative; ``[X, null]`` collapses to X."""
        siblings = {k: v for k, v in schema.items() if k not in (key, "description")}
        options = []
        for option in schema[key]:
            if _is_null(option) and len(schema[key]) > 1:
                continue
            if isinstance(option, dict) and siblings:
                merged = {**siblings, **option}
                if isinstance(siblings.get("properties"), dict) \
                        and isinstance(option.get("properties"), dict):
                    merged["properties"] = {**siblings["properties"], **option["properties"]}
                if isinstance(siblings.get("required"), list) \
                        and isinstance(option.get("required"), list):
                    merged["required"] = sorted({*siblings["required"], *option["required"]})
                option = merged
            safe = self.visit(option, refs, depth + 1)
            if safe is not None:
                options.append(safe)
        if not options:
            return None
        description = out.get("description")
        if len(options) == 1:
            single = options[0]
            if description and "description" not in single:
                single["description"] = description
            return single
        return {"anyOf": options, **({"description": description} if description else {})}
