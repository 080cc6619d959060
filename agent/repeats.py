"""A reply that repeats the one before it word for word, under greedy decoding.

At temperature 0 the same history gives the same reply, and a small model shown a failed test
answers with the reply it wrote before, character for character (Qwen2.5-Coder-1.5B under the
``whole`` protocol wrote the same wrong ``pagination.py`` and the same ``pytest`` three times,
and the task stopped on repeated calls, issue 49). Running the repeat again cannot help. So the
repeat is not run: it stays in the history (append-only) with a note saying so
(:data:`REPEATED`), and the next request samples (:data:`RESAMPLE`, a seed per step so that a
run repeats on the same machine); the request after it decodes greedily again. Sampling alone
was not enough: a reply that copies one already in the history comes back the same even at
temperature 1.0, which also made the 1.5B ramble to the token limit.
"""

from __future__ import annotations

import json
from typing import Any

from agent.protocols.base import FINAL_ANSWER

RESAMPLE = {"temperature": 0.7, "top_p": 0.95}
"""Qwen's temperature for its Coder instruct models with a wider nucleus than its 0.8 (at 0.8
the 1.5B's top token held the mass at every step and the repeat came back)."""
MAX_RESAMPLES = 3
"""Repeats in a row after which the reply is run as it is (the loop's repeat detector then
stops the task)."""
REPEATED = ("[Your reply repeats your previous reply word for word, so it was not run: the "
            "same calls give the same results. Do something different. If a "
            "check failed, change the code it checks; if the project has no tests, write a "
            "test file for your change and run it; if the task is done, call final_answer.]")


class RepeatGuard:
    """The replies of the running task (reset per task) and whether the next request samples."""

    def __init__(self) -> None:
        self._last: str | None = None
        """The task's last reply with calls (its key)."""
        self._in_a_row = 0
        self.resample = False
        """The next request samples with :data:`RESAMPLE`."""
        self.enabled = True
        """False: every reply is run (a replay of recorded turns, which repeat on purpose)."""

    def reset(self) -> None:
        self._last, self._in_a_row, self.resample = None, 0, False

    def is_repeat(self, content: str, tool_calls: list[dict[str, Any]],
                  sampling: dict[str, Any], calls: list[dict[str, Any]]) -> bool:
        """Whether a reply (its text and native ``tool_calls``, parsed into ``calls``) repeats
        the task's previous reply under greedy decoding (``sampling``'s temperature 0) and is
        not to be run; records it otherwise. Only the reply right before counts: the same
        ``pytest`` after an edit is a new check, and the same call after other calls can be
        meant (the loop's repeat detector judges those). A final answer is never held back:
        whether it stands is the ledger's to say (agent/finish.py)."""
        key = json.dumps([content.strip(), tool_calls], sort_keys=True, default=str)
        greedy = self.enabled and sampling.get("temperature") == 0
        working = bool(calls) and all(c["name"] != FINAL_ANSWER for c in calls)
        if not working:
            return False
        if greedy and key == self._last and self._in_a_row < MAX_RESAMPLES:
            self._in_a_row += 1
            self.resample = True
            return True
        self._last, self._in_a_row, self.resample = key, 0, False
        return False

    def sampling(self, base: dict[str, Any], step: int) -> dict[str, Any]:
        """The sampling of the next request: ``base``, or sampled with a seed after a repeat."""
        if not self.resample:
            return base
        return {**base, **RESAMPLE, "seed": step}
