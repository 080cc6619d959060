"""aider (``aider-chat``): its documented one-shot scripting mode, ``--message TASK`` with the
starting files named, every confirmation answered yes, no commits, no network extras."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import AgentRun, Limits
from benchmarks.tasks.adapters.peer import Peer
from benchmarks.tasks.tasks import Task

TOKENS = re.compile(r"Tokens: ([\d.]+k?) sent(?:, ([\d.]+k?) cache write)?"
                    r"(?:, ([\d.]+k?) cache hit)?, ([\d.]+k?) received")
"""aider's report after each exchange (rounded to 0.1k above a thousand)."""


def _count(text: str | None) -> int:
    if not text:
        return 0
    return round(float(text[:-1]) * 1000) if text.endswith("k") else int(float(text))


class Aider(Peer):
    """aider's one-shot scripting mode with the whole-file edit format (a small model's best:
    no search/replace blocks to get exactly right). Installed in its own venv outside the
    repository (``install-peer aider``: ``peers_dir()``), never the product's."""

    name = "aider"
    FORMATS = ("whole",)
    ANY_FORMAT = True  # aider's own --edit-format list grows; it refuses what it lacks
    FLAGS = ["--yes-always", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore",
             "--no-check-update", "--no-show-release-notes", "--no-analytics",
             "--no-show-model-warnings", "--no-pretty", "--no-fancy-input",
             "--no-suggest-shell-commands", "--no-detect-urls", "--no-auto-lint",
             "--no-restore-chat-history"]
    """The documented options of a non-interactive run (``aider --help``)."""

    def flags(self) -> list[str]:
        return ["--edit-format", self.edit_format, *self.FLAGS]

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        api, model, binary = self.endpoint()
        scratch.mkdir(parents=True, exist_ok=True)
        return [str(binary), "--model", f"openai/{model}", "--openai-api-base", api,
                "--openai-api-key", "x", *self.flags(), "--timeout", f"{limits.timeout_s:g}",
                "--chat-history-file", str(scratch / "aider.chat.history.md"),
                "--input-history-file", str(scratch / "aider.input.history"),
                "--message", task.instruction, *task.files()]

    def timeout(self, limits: Limits) -> float:
        return limits.timeout_s  # aider has no time limit of its own

    def parse(self, run: AgentRun) -> dict[str, Any]:
        sent = received = cached = 0
        exchanges = 0
        for m in TOKENS.finditer(run.stdout):
            exchanges += 1
            sent += _count(m.group(1))
            cached += _count(m.group(3))
            received += _count(m.group(4))
        edits = len(re.findall(r"^Applied edit to ", run.stdout, re.M))
        # aider's own words for a reply it could not apply (coders/base_coder.py)
        nonconforming = (run.stdout + run.stderr).count("did not conform to the edit format")
        return self.fields(run, steps=exchanges, tool_calls={"edit": edits},
                           format_errors=nonconforming, prefilled=sent, cached=cached,
                           decoded=received, approximate=True)
