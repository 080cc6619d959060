"""A reply that repeats an earlier one of the task word for word, under greedy decoding.

At temperature 0 the same history gives the same reply, and a small model shown a failed test
answers with the reply it wrote before, character for character (Qwen2.5-Coder-1.5B under the
``whole`` protocol wrote the same wrong ``pagination.py`` and the same ``pytest`` three times,
and the task stopped on repeated calls, issue 49). Running the repeat again cannot help and
keeping it in the history teaches the model to repeat. So the repeat is logged, neither run
nor kept, and the step is asked again with sampling (:data:`RESAMPLE`, a seed per step so
that a run repeats on the same machine); the request after it decodes greedily again.
"""

from __future__ import annotations

import json
from typing import Any

RESAMPLE = {"temperature": 1.0, "top_p": 0.95}
"""Sampling wider than the presets' own (Qwen's 0.7 with top_p 0.8 gave the 1.5B's repeat
back word for word: its top token held more than 0.8 of the mass at every step)."""
MAX_RESAMPLES = 3
"""Repeats in a row after which the reply is taken as it is (the loop's repeat detector then
stops the task)."""


class RepeatGuard:
    """The replies of the running task (reset per task) and whether the next request samples."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._in_a_row = 0
        self.resample = False
        """The next request samples with :data:`RESAMPLE`."""

    def reset(self) -> None:
        self._seen.clear()
        self._in_a_row, self.resample = 0, False

    def is_repeat(self, content: str, tool_calls: list[dict[str, Any]],
                  sampling: dict[str, Any]) -> bool:
        """Whether a reply (its text and native ``tool_calls``) repeats an earlier one of the
        task under greedy decoding (``sampling``'s temperature 0), and is to be asked again;
        records it otherwise."""
        key = json.dumps([content.strip(), tool_calls], sort_keys=True, default=str)
        greedy = sampling.get("temperature") == 0
        if greedy and key in self._seen and self._in_a_row < MAX_RESAMPLES \
                and (content.strip() or tool_calls):
            self._in_a_row += 1
            self.resample = True
            return True
        self._seen.add(key)
        self._in_a_row, self.resample = 0, False
        return False

    def sampling(self, base: dict[str, Any], step: int) -> dict[str, Any]:
        """The sampling of the next request: ``base``, or sampled with a seed after a repeat."""
        if not self.resample:
            return base
        return {**base, **RESAMPLE, "seed": step}
