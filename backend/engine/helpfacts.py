"""What a ``llama-server`` build accepts: its flags, removed flags and value lists.

Parsed from the binary's own ``--help`` (upstream, or any build we can run), or read from the
stored facts in ``backend/engine/facts/`` (BeeLlama's ``common/arg.cpp`` at a v0.3 and a v0.4
tag; see that folder's README for the sources). The argv translation in
:mod:`backend.serve.profiles` is checked against these facts before a server is launched.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from pydantic import BaseModel, Field

REMOVED = "has been removed"
_VALUES = re.compile(r"allowed values:\s*(.+)")


class HelpFacts(BaseModel):
    """The command-line surface of one ``llama-server`` build."""

    flags: frozenset[str] = Field(description="Every live option name, short and long forms.")
    removed: dict[str, str] = Field(default_factory=dict,
                                    description="Option → note, for options kept only to say "
                                    "they were removed (they error out when used).")
    spec_types: frozenset[str] = Field(frozenset(), description="Values of --spec-type.")
    cache_types: frozenset[str] = Field(frozenset(), description="Values of -ctk/-ctv.")
    source: str = Field("", description="Where the facts come from (binary, or repo@commit).")

    def has(self, flag: str) -> bool:
        """Whether ``flag`` is a live option (listed and not removed)."""
        return flag in self.flags and flag not in self.removed


def _names(head: str) -> list[str]:
    """Option names at the start of a help line: ``-ngl,  --gpu-layers, --n-gpu-layers N``."""
    names = []
    for token in head.replace(",", " ").split():
        if not token.startswith("-") or token == "-":
            break
        names.append(token)
    return names


def parse_help(text: str, source: str = "") -> HelpFacts:
    """Facts from ``llama-server --help`` output (llama.cpp's two-column layout).

    A "has been removed" note on an option's line, or on the continuation line right after it,
    marks that option as removed. The ``-ctk`` "allowed values:" list may wrap onto the next
    lines (BeeLlama v0.3.1 lists its TurboQuant types on the second line).
    """
    flags: set[str] = set()
    removed: dict[str, str] = {}
    spec_types: set[str] = set()
    cache_types: set[str] = set()
    current: list[str] = []
    collecting = False  # inside -ctk's "allowed values:" list, which may wrap onto more lines
    for line in text.splitlines():
        if line.startswith("-"):
            current = _names(line)
            flags.update(current)
            collecting = False
            if "--spec-type" in current:
                after = line.split("--spec-type", 1)[1].split()
                if after and "," in after[0]:
                    spec_types.update(after[0].split(","))
        elif not line.startswith(" "):
            current, collecting = [], False
        if REMOVED in line and current:
            for name in current:
                removed[name] = line.strip()
        values = _VALUES.search(line)
        if values and current and {"-ctk", "--cache-type-k"} & set(current):
            cache_types.update(v.strip() for v in values.group(1).split(","))
            collecting = values.group(1).rstrip().endswith(",")
        elif collecting:
            part = line.strip()
            if not part or part.startswith("("):
                collecting = False
            else:
                cache_types.update(v.strip() for v in part.split(","))
                collecting = part.endswith(",")
    cache_types.discard("")
    return HelpFacts(flags=frozenset(flags), removed=removed, spec_types=frozenset(spec_types),
                     cache_types=frozenset(cache_types), source=source)


def stored_facts(name: str) -> HelpFacts:
    """Stored facts ``backend/engine/facts/<name>.json`` (e.g. ``beellama-v0.3.2``).

    Raises ``FileNotFoundError`` for an unknown name.
    """
    text = resources.files("backend.engine").joinpath("facts", f"{name}.json").read_text("utf-8")
    data = json.loads(text)
    return HelpFacts(flags=frozenset(data["flags"]), removed=data.get("removed_flags", {}),
                     spec_types=frozenset(data.get("spec_types", [])),
                     cache_types=frozenset(data.get("cache_types", [])),
                     source=f"{data['repo']}@{data['tag']} ({data['commit']})")


def check_argv(argv: list[str], facts: HelpFacts) -> list[str]:
    """Problems with ``argv`` (binary first) against ``facts``: unknown or removed options and
    values outside the build's --spec-type / cache-type lists. Empty when all is accepted."""
    problems = []
    for i, arg in enumerate(argv[1:], start=1):
        if not arg.startswith("-") or re.fullmatch(r"-\d+", arg):
            continue
        if arg in facts.removed:
            problems.append(f"{arg}: {facts.removed[arg]}")
        elif arg not in facts.flags:
            problems.append(f"{arg}: not an option of this build")
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--spec-type" and facts.spec_types:
            bad = [v for v in value.split(",") if v not in facts.spec_types]
            if bad:
                problems.append(f"--spec-type {','.join(bad)}: this build accepts "
                                + ", ".join(sorted(facts.spec_types)))
        cache_flags = ("-ctk", "-ctv", "--cache-type-k", "--cache-type-v",
                       "--spec-draft-type-k", "--spec-draft-type-v")
        if arg in cache_flags and facts.cache_types and value not in facts.cache_types:
            problems.append(f"{arg} {value}: this build accepts "
                            + ", ".join(sorted(facts.cache_types)))
    return problems
