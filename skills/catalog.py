"""Tier 1 of progressive disclosure: the skill catalog in the system prompt.

The catalog lists name, description and location of each skill, sorted by name, and is built
once per session (the system prompt stays byte-stable for the prefix cache). It must fit a
token budget: descriptions are shortened first, then skills are left out (they stay usable with
``agent run --skill``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skills.loader import Skill

CATALOG_SHARE = 0.05
"""Share of the server's context the catalog may take."""
STEPS: tuple[tuple[int | None, bool], ...] = (
    (None, True), (240, True), (120, True), (None, False), (240, False), (120, False),
    (60, False), (0, False))
"""(description length, with location) tried in turn: descriptions are shortened first, then
locations dropped (activation reports the folder anyway), then descriptions shortened further
(None: in full; 0: left out)."""
HEADER = ("Skills: instructions for particular tasks. When the task matches a skill's "
          "description, call activate_skill with its name first and follow what it returns.\n")


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per 4 characters, rounded up."""
    return -(-len(text) // 4)


@dataclass
class Catalog:
    """The rendered catalog and the skills it names (the ones the model may activate)."""

    text: str
    names: list[str]
    left_out: int = 0


def shorten(text: str, limit: int | None) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, marked with ``…``."""
    if limit is None or len(text) <= limit:
        return text
    if limit <= 1:
        return ""
    cut = text[:limit - 1].rsplit(" ", 1)[0] if " " in text[:limit - 1] else text[:limit - 1]
    return cut.rstrip(" ,;:.") + "…"


def _render(skills: Sequence[Skill], limit: int | None, left_out: int,
            location: bool = False) -> str:
    lines = [HEADER]
    for skill in skills:
        line = f"- {skill.name}"
        description = shorten(skill.description, limit)
        if description:
            line += f": {description}"
        lines.append(f"{line} ({skill.file})\n" if location else line + "\n")
    if left_out:
        lines.append(f"({left_out} more skills are installed but not listed here.)\n")
    return "".join(lines)


def build_catalog(skills: Sequence[Skill], max_tokens: int,
                  count: Callable[[str], int] = estimate_tokens) -> Catalog:
    """The catalog of ``skills`` (given in the order to list them) within ``max_tokens``
    as measured by ``count`` (the server's tokenizer, or :func:`estimate_tokens`).

    Descriptions are shortened step by step for all skills at once (locations are dropped
    after the second step); when even names alone do not fit, skills are left out from the
    end. An empty catalog (``text == ""``) when no skill
    fits or there are none."""
    if not skills:
        return Catalog("", [])
    for limit, location in STEPS:
        text = _render(skills, limit, 0, location)
        if count(text) <= max_tokens:
            return Catalog(text, [s.name for s in skills])
    # The most skills (names only) that fit: binary search, each probe one count() call.
    lo, hi = 0, len(skills) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(_render(skills[:mid], 0, len(skills) - mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return Catalog("", [], len(skills))
    kept = skills[:lo]
    return Catalog(_render(kept, 0, len(skills) - lo), [s.name for s in kept], len(skills) - lo)
