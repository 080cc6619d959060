"""Which llama-server flavour a binary is: BeeLlama ≤0.3 (``bee-old``), BeeLlama ≥0.4
(``bee-new``) or upstream llama.cpp.

Detected from ``llama-server --help`` (rules from docs/design/backend-facts.md, Flags:
``--spec-dflash-cross-ctx`` or ``turbo4`` → bee-old; ``kvarn`` or ``--spec-dm-controller`` →
bee-new; neither → upstream). ``--help`` still lists removed flags with a "has been removed" note:
those lines do not count. The help text is cached per binary content hash.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Literal

from backend.engine.helpfacts import HelpFacts, parse_help
from backend.home import home

Flavour = Literal["bee-old", "bee-new", "upstream"]


def flavour_from_help(text: str) -> Flavour:
    """Classify ``--help`` output."""
    live = "\n".join(line for line in text.splitlines() if "has been removed" not in line)
    if "--spec-dflash-cross-ctx" in live or "turbo4" in live:
        return "bee-old"
    if "kvarn" in live or "--spec-dm-controller" in live:
        return "bee-new"
    return "upstream"


def _digest(binary: Path) -> str:
    with binary.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def binary_help(binary: Path) -> str:
    """``binary --help`` output (stdout and stderr), cached by the binary's content hash.

    Raises ``OSError`` or ``subprocess.SubprocessError`` when the binary cannot run.
    """
    cache = home().ensure().cache / "flavours"
    cache.mkdir(parents=True, exist_ok=True)
    entry = cache / f"{_digest(binary)}.help"
    if entry.is_file():
        return entry.read_text("utf-8")
    proc = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    entry.write_text(text, "utf-8")
    return text


def binary_devices(binary: Path) -> list[str]:
    """The offload devices ``binary --list-devices`` names (``CUDA0: NVIDIA H200 …``), cached by
    the binary's content hash like its ``--help``; empty for a CPU-only build (upstream prints
    ``(none)``, BeeLlama v0.3.1 nothing).

    Raises ``OSError`` or ``subprocess.SubprocessError`` when the binary cannot run.
    """
    cache = home().ensure().cache / "flavours"
    cache.mkdir(parents=True, exist_ok=True)
    entry = cache / f"{_digest(binary)}.devices"
    if entry.is_file():
        text = entry.read_text("utf-8")
    else:
        proc = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        text = proc.stdout + proc.stderr
        entry.write_text(text, "utf-8")
    lines = text.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("Available devices")),
                 len(lines))
    return [line.strip() for line in lines[start:]
            if line.startswith(" ") and ":" in line and line.strip() != "(none)"]


def detect_flavour(binary: Path) -> Flavour:
    """The flavour of ``binary`` (from its cached ``--help``).

    Raises ``OSError`` or ``subprocess.SubprocessError`` when the binary cannot run.
    """
    return flavour_from_help(binary_help(binary))


def binary_facts(binary: Path) -> HelpFacts:
    """What ``binary`` accepts, parsed from its own ``--help``."""
    return parse_help(binary_help(binary), source=str(binary))
