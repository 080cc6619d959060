"""Finding ``old_str`` in a file: exact, then progressively more tolerant, unique matches only.

Stages, in order (docs/design/field-cases.md, class 5):
1. exact substring;
2. whole lines equal after stripping trailing whitespace;
3. whole lines equal after stripping indentation (the replacement is re-indented);
4. whole lines equal after normalising Unicode punctuation (smart quotes, dashes, NBSP, …).
A stage that finds several matches stops the cascade: applying one would be a guess.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

_PUNCT = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u2009": " ", "\u200b": "",
    "\u2026": "...",
})


def normalise_punctuation(text: str) -> str:
    """ASCII stand-ins for typographic quotes, dashes, spaces and the ellipsis."""
    return text.translate(_PUNCT)


@dataclass
class Match:
    """A unique match: the new full text and the 1-based line span replaced."""

    stage: str
    text: str
    first_line: int
    last_line: int


@dataclass
class Ambiguous:
    """Several candidate matches at ``lines`` (1-based first lines)."""

    stage: str
    lines: list[int]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _exact(text: str, old: str, new: str) -> Match | Ambiguous | None:
    starts, at = [], text.find(old)
    while at != -1:
        starts.append(at)
        at = text.find(old, at + 1)
    if not starts:
        return None
    if len(starts) > 1:
        return Ambiguous("exact", [_line_of(text, s) for s in starts])
    s = starts[0]
    first = _line_of(text, s)
    replaced = text[:s] + new + text[s + len(old):]
    return Match("exact", replaced, first, first + new.count("\n"))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _unit(indents: list[str]) -> str:
    """The indentation step among ``indents``: the shortest non-empty difference between a
    deeper indent and a shallower one it starts with; else the shallowest non-empty one."""
    ordered = sorted({i for i in indents if i}, key=len)
    steps = [deep[len(flat):] for n, deep in enumerate(ordered) for flat in ["", *ordered[:n]]
             if deep.startswith(flat) and deep != flat]
    return min(steps, key=len) if steps else ""


def _reindent(new_lines: list[str], old_lines: list[str], file_lines: list[str]) -> list[str]:
    """``new_lines`` written with ``old_lines``' indentation, in the file's indentation.

    Every matched pair of lines maps an old indent to the file's; a new line whose indent was
    not among them keeps its nesting: the deepest mapped indent it starts with, plus the rest
    counted in the old step (4 spaces, say) and written in the file's step (a tab, say).
    """
    pairs = {_indent(o): _indent(f) for o, f in zip(old_lines, file_lines, strict=True)
             if o.strip()}
    old_unit, file_unit = _unit(list(pairs)), _unit(list(pairs.values()))
    if not file_unit and any("\t" in f for f in pairs.values()):
        file_unit = "\t"
    if not old_unit:
        old_unit = "\t" if any("\t" in o for o in pairs) else "    "
    file_unit = file_unit or old_unit
    out = []
    for line in new_lines:
        if not line.strip():
            out.append(line)
            continue
        ind = _indent(line)
        if ind in pairs:
            out.append(pairs[ind] + line[len(ind):])
            continue
        base = max((o for o in pairs if ind.startswith(o)), key=len, default="")
        rest = ind[len(base):]
        levels, extra = divmod(len(rest), len(old_unit))
        mapped = (file_unit * levels + rest[len(rest) - extra:]
                  if rest == old_unit * levels + rest[len(rest) - extra:] else rest)
        out.append(pairs.get(base, base) + mapped + line[len(ind):])
    return out


def _by_lines(text: str, old: str, new: str, stage: str,
              key: Callable[[str], str], reindent: bool) -> Match | Ambiguous | None:
    lines = text.split("\n")
    old_lines = old.strip("\n").split("\n")
    want = [key(x) for x in old_lines]
    if not any(w.strip() for w in want):
        return None
    keyed = [key(x) for x in lines]
    n = len(want)
    hits = [i for i in range(len(lines) - n + 1) if keyed[i:i + n] == want]
    if not hits:
        return None
    if len(hits) > 1:
        return Ambiguous(stage, [h + 1 for h in hits])
    i = hits[0]
    new_lines = new.strip("\n").split("\n") if new.strip("\n") else []
    if reindent and new_lines:
        new_lines = _reindent(new_lines, old_lines, lines[i:i + n])
    out = lines[:i] + new_lines + lines[i + n:]
    return Match(stage, "\n".join(out), i + 1, i + max(len(new_lines), 1))


STAGES: list[tuple[str, Callable[[str], str], bool]] = [
    ("trailing-whitespace", str.rstrip, False),
    ("indentation", str.strip, True),
    ("unicode-punctuation", lambda s: normalise_punctuation(s).strip(), True),
]


def find_and_replace(text: str, old: str, new: str) -> Match | Ambiguous | None:
    """Apply the cascade; a :class:`Match`, an :class:`Ambiguous` result, or None."""
    result = _exact(text, old, new)
    if result is not None:
        return result
    for stage, key, reindent in STAGES:
        result = _by_lines(text, old, new, stage, key, reindent)
        if result is not None:
            return result
    return None


def closest_region(text: str, old: str) -> tuple[int, int, float]:
    """The 1-based line span of ``text`` most similar to ``old`` and the similarity (0–1)."""
    lines = text.split("\n")
    n = max(1, len(old.strip("\n").split("\n")))
    best = (1, min(n, len(lines)), 0.0)
    target = old.strip("\n")
    for i in range(max(1, len(lines) - n + 1)):
        window = "\n".join(lines[i:i + n])
        ratio = difflib.SequenceMatcher(None, window, target, autojunk=False).ratio()
        if ratio > best[2]:
            best = (i + 1, min(i + n, len(lines)), ratio)
    return best
