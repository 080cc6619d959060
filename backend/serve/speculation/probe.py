"""The acceptance probe: a few short requests to a server of the draft's own, run at a launch
when nothing recent is known about the draft."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx2

from backend.serve.process import DEFAULT_HOST, pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import keep_current_marker
from backend.serve.server import up
from backend.serve.speculation.costs import Observation
from backend.serve.speculation.store import TuningError

REPROBE_AFTER = timedelta(hours=24)
"""While drafting is off, a launch probes the draft again once the last probe is this old."""

PROBE_TOKENS = 160
"""Tokens decoded per probe request: past an answer's opening line into its code, which is what a
coding agent decodes most; a few seconds on a CPU. A probe of 48 tokens read acceptance well under
what the requests it then served accepted (docs/performance.md, "What the tuning's thresholds rest
on")."""

PROBE_PROMPTS = (
    # An edit (text the answer repeats) and new code (text it does not): the two kinds of turn
    # a coding agent decodes most.
    "Rename the function `total` to `sum_prices` in this code and show the whole file:\n\n"
    "def total(items):\n    result = 0\n    for item in items:\n        result += item.price\n"
    "    return result\n\n\nprint(total([]))\n",
    "Write a Python function `parse_csv(text)` that parses CSV text into a list of dicts, "
    "handling quoted fields.",
)


def probe_due(observations: list[Observation], now: datetime | None = None) -> bool:
    """True when nothing was observed yet, or the newest observation is older than
    :data:`REPROBE_AFTER` (drafting off produces none, so this is how it comes back)."""
    if not observations:
        return True
    newest = max(o.at for o in observations)
    return (now or datetime.now(UTC)) - newest > REPROBE_AFTER


def probe(plan: LaunchPlan, n_max: int, timeout: float = 600.0,
          note: Callable[[str], None] | None = None,
          temperature: float = 0.0) -> list[Observation]:
    """Measure the draft's acceptance on :data:`PROBE_PROMPTS` at length ``n_max``.

    Starts a server of ``plan`` drafting ``n_max`` tokens (an alias of its own, so never the
    user's server nor a concurrent probe's), sends each prompt once (at ``temperature``,
    :data:`PROBE_TOKENS` tokens), stops it; the ``current`` server marker is left as it was.
    Returns one observation per prompt. Raises :class:`TuningError` when a request fails,
    ``ServerError`` when the server does not start.
    """
    probing = plan.model_copy(update={"draft_n_max": n_max, "extra_flags": (
        *plan.extra_flags, "--alias", f"dflash-agent-probe-{os.getpid()}")})
    out = []
    with keep_current_marker():
        state, _ = up(probing, port=pick_port(DEFAULT_HOST, 0), timeout=timeout,
                      progress=note)
        try:
            with httpx2.Client(timeout=timeout) as client:
                for text in PROBE_PROMPTS:
                    body = {**state.request_extra,
                            "messages": [{"role": "user", "content": text}],
                            "max_tokens": PROBE_TOKENS, "temperature": temperature,
                            "cache_prompt": False}
                    try:
                        resp = client.post(state.base_url + "/v1/chat/completions", json=body)
                        t = resp.json().get("timings")
                    except (httpx2.HTTPError, ValueError, AttributeError) as exc:
                        raise TuningError(f"a probe request failed: {exc} "
                                          f"(log: {state.log})") from exc
                    if resp.status_code != 200 or not isinstance(t, dict):
                        raise TuningError(f"a probe request got HTTP {resp.status_code} "
                                          f"without timings (log: {state.log})")
                    try:
                        out.append(Observation(
                            source="probe", n_max=n_max, draft_n=int(t.get("draft_n") or 0),
                            accepted=int(t.get("draft_n_accepted") or 0),
                            tokens=int(t.get("predicted_n") or 0),
                            decode_ms=float(t.get("predicted_ms") or 0.0),
                            at=datetime.now(UTC), temperature=temperature))
                    except (TypeError, ValueError) as exc:
                        raise TuningError(f"a probe request got malformed timings: "
                                          f"{exc}") from exc
        finally:
            stop(state)
    return out
