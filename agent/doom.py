"""Doom-loop detection (docs/design/field-cases.md, class 6): the same call again and again, two
calls alternating (A-B-A-B), or a run of 3 to 6 calls repeated whole (A-B-C-D-A-B-C-D). The model is
warned first, then the task stops with a report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["ok", "warn", "stop"]
SAME_WARN, SAME_STOP = 2, 3
CYCLE_WARN, CYCLE_STOP = 4, 6
ROUNDS_WARN, ROUNDS_STOP = 2, 3
"""Whole repeats of a run of 3 to MAX_PERIOD calls."""
MAX_PERIOD = 6


@dataclass
class LoopDetector:
    """Feed every tool call to :meth:`observe`; ``report`` explains the last warn or stop."""

    history: list[str] = field(default_factory=list)
    report: str = ""

    def observe(self, name: str, arguments: Any) -> Verdict:
        self.history.append(name + json.dumps(arguments, sort_keys=True))
        same = 1
        while same < len(self.history) and self.history[-1 - same] == self.history[-1]:
            same += 1
        if same >= SAME_WARN:
            self.report = f"{name} was called {same} times in a row with the same arguments"
            return "stop" if same >= SAME_STOP else "warn"
        cycle = self._alternating()
        if cycle >= CYCLE_WARN:
            self.report = (f"the last {cycle} calls alternate between the same two calls "
                           "without progress")
            return "stop" if cycle >= CYCLE_STOP else "warn"
        period, rounds = self._repeating()
        if rounds >= ROUNDS_WARN:
            self.report = (f"the last {period * rounds} calls repeat the same {period} calls "
                           f"{rounds} times without progress")
            return "stop" if rounds >= ROUNDS_STOP else "warn"
        return "ok"

    def _repeating(self) -> tuple[int, int]:
        """The longest run of whole repeats of the last ``period`` calls (3 to
        :data:`MAX_PERIOD`; 1 and 2 are the checks above): ``(period, rounds)``, the most
        rounds first. Qwen2.5-Coder-1.5B wrote the same four files over and over, each
        unchanged, until the step limit."""
        h, best = self.history, (0, 0)
        for period in range(3, MAX_PERIOD + 1):
            rounds = 1
            while len(h) >= period * (rounds + 1) and \
                    h[-period * (rounds + 1):-period * rounds] == h[-period:]:
                rounds += 1
            if rounds > 1 and len(set(h[-period:])) == period and rounds > best[1]:
                best = (period, rounds)
        return best

    def _alternating(self) -> int:
        h = self.history
        if len(h) < 2 or h[-1] == h[-2]:
            return 0
        n = 2
        while n < len(h) and h[-1 - n] == h[-1 - (n % 2)]:
            n += 1
        return n
