"""Chat requests to train on, before any token exists: coding prompts and the agent's own turns.

A :class:`ChatRequest` is what the product would send the server: OpenAI-format messages, the
``tools`` a ``native`` request carries (the chat template renders them) and the JSON schema a
``json``-protocol reply decodes under. :mod:`train.render` turns requests into token ids with
the server's own chat template.

Coding prompts come in the format of ``shared/dflash/train-prompts.jsonl``: one JSON object a
line, ``{"src": "...", "text": "..."}`` (``src`` optional). The bench's own prompts
(:mod:`backend.measure.prompts`) are held out of training: a prompt that repeats one of them, asks
for one of the seed's modules or copies a line of the edit set's file is dropped
(:func:`is_bench_prompt`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.measure.prompts import BUILT_IN
from train.errors import InputError


@dataclass(frozen=True)
class ChatRequest:
    """One request as the product sends it, and where it comes from."""

    messages: list[dict[str, Any]]
    source: str
    """``coding:<src>``, ``agent-<protocol>:<session>`` or, for a synthetic session,
    ``agent-synth-<protocol>:<session>``."""
    heldout: bool = False
    tools: list[dict[str, Any]] | None = None
    """``native`` requests: the tools the template renders into the prompt."""
    schema: str | None = None
    """``json`` requests: the JSON schema (text) the reply is decoded under."""


_SEED_MODULE = re.compile(r"Write a complete Python (.+? module)\.")
_MIN_SHARED_LINE = 40


def _bench_markers() -> tuple[set[str], set[str]]:
    """(phrases, long lines) that identify a bench prompt: the seed's module names, and the
    edit file's lines of at least 40 characters."""
    phrases, lines = set(), set()
    for prompts in BUILT_IN.values():
        for p in prompts:
            phrases.update(m.group(1) for m in _SEED_MODULE.finditer(p.text))
            phrases.add(p.text)
            if "```" in p.text:
                code = p.text.split("```python\n", 1)[-1].split("```", 1)[0]
                lines.update(s.strip() for s in code.splitlines()
                             if len(s.strip()) >= _MIN_SHARED_LINE)
    return phrases, lines


_PHRASES, _LINES = _bench_markers()


def is_bench_prompt(text: str) -> bool:
    """True for a prompt that is, or is built from, one of the bench's prompts."""
    if any(p in text for p in _PHRASES):
        return True
    return any(line.strip() in _LINES for line in text.splitlines())


def load_coding_prompts(path: Path, limit: int | None = None) -> tuple[list[ChatRequest], int]:
    """(requests, number dropped as bench prompts) from a prompts ``.jsonl`` file; each
    request is one user message, as the bench sends its prompts.

    Raises :class:`InputError` for a missing or unreadable file, a line that is not a JSON
    object with a non-empty string ``text``, or a file with no prompt.
    """
    path = Path(path)
    try:
        lines = path.read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the prompts file ({exc})") from exc
    requests, dropped = [], 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {number} is not JSON ({exc.msg})") from exc
        text = entry.get("text") if isinstance(entry, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise InputError(f'{path}: line {number} needs a non-empty string "text" '
                             '(format: {"src": "...", "text": "..."})')
        if is_bench_prompt(text):
            dropped += 1
            continue
        src = str(entry.get("src") or "prompt")
        requests.append(ChatRequest(messages=[{"role": "user", "content": text}],
                                    source=f"coding:{src}"))
        if limit is not None and len(requests) >= limit:
            break
    if not requests:
        raise InputError(f"{path}: holds no training prompt")
    return requests, dropped
