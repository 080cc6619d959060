"""What ``agent new-project`` made, and the totals over its model turns that the summary
shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.events import Timings
from agent.loop import LoopResult
from agent.newproject.plan import Plan
from agent.newproject.recipe import Recipe
from agent.newproject.runners import TestReport
from backend.serve.records import ServerState


@dataclass
class ProjectResult:
    """What ``new-project`` made: ``created`` is False when it stopped before writing
    anything (no usable plan)."""

    directory: Path
    session_id: str
    log: Path
    loop: LoopResult
    tests: TestReport
    files: list[str] = field(default_factory=list)
    commit: str | None = None
    recipe: Recipe | None = None
    plan: Plan | None = None
    created: bool = True
    environment: str = ""
    """How the isolated environment was made (empty when none was)."""
    unwritten: list[str] = field(default_factory=list)
    """Files of the plan that do not exist at the end."""
    plan_timings: list[Timings] = field(default_factory=list)
    server: ServerState | None = None
    """The managed server the session used (None with ``--base-url``): it is left running
    for the next command, and the summary says so."""

    def stats(self) -> dict[str, float | int | None]:
        """Totals over the session's turns (plan included): tokens, decode tok/s,
        acceptance rate."""
        return turn_stats(self.plan_timings + self.loop.timings)


def turn_stats(timings: list[Timings]) -> dict[str, float | int | None]:
    """Prompt tokens processed/cached, decoded tokens, decode tok/s, draft acceptance rate.
    ``cached_tokens`` is None when no turn reported its cache reuse (a server without
    llama-server's ``timings`` that does not report cached tokens either)."""
    prompt = sum(t.prompt_n or 0 for t in timings)
    reported = [t.cache_n for t in timings if t.cache_n is not None]
    cached = sum(reported) if reported or not timings else None
    decoded = sum(t.predicted_n or 0 for t in timings)
    ms = sum(t.predicted_ms or 0 for t in timings)
    drafts = sum(t.draft_n or 0 for t in timings)
    accepted = sum(t.draft_n_accepted or 0 for t in timings)
    return {"prompt_tokens": prompt, "cached_tokens": cached, "decoded_tokens": decoded,
            "decode_tok_s": round(decoded / ms * 1000, 1) if ms else None,
            "draft_tokens": drafts,
            "acceptance_rate": round(accepted / drafts, 3) if drafts else None}
