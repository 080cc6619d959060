"""Why a draft's acceptance collapsed on a turn, said once per session next to the step line.

Field reports (issue 24) name the two causes an agent meets: **thinking on** (Qwen3.6's template
turns it on by default and acceptance collapses; a drafter trained on non-thinking output cannot
predict the reasoning) and **the chat template** (a Qwen3.5-27B drafter accepted 69 % of code on
raw prompts and 37 % once the template was applied: it was trained on raw continuations). The
reply tells which is likely: reasoning in it (the ``reasoning_content`` the server streamed
apart, which is where llama-server puts a thinking model's reasoning under ``--jinja``; a
``<think>`` block in the content; or reasoning tokens counted in ``usage``) points at thinking;
otherwise the template is the suspect.
"""

from __future__ import annotations

from typing import Any

MIN_DRAFTED = 32
"""Fewer drafted tokens than this say nothing about a collapse."""
COLLAPSED = 0.10
"""Acceptance (accepted / drafted) below this on a turn is a collapse."""


def _reasoned(content: str, usage: dict[str, Any] | None, reasoning: str = "") -> bool:
    """Whether the reply carried reasoning: separate reasoning text, a think block, or
    reasoning tokens in ``usage``."""
    if reasoning.strip() or "<think>" in content or "</think>" in content:
        return True
    details = (usage if isinstance(usage, dict) else {}).get("completion_tokens_details") or {}
    return bool(isinstance(details, dict) and details.get("reasoning_tokens"))


def collapse_note(draft_n: int | None, accepted: int | None, content: str,
                  usage: dict[str, Any] | None = None, reasoning: str = "") -> str | None:
    """One line naming the likely cause when a turn drafted at least :data:`MIN_DRAFTED` tokens
    and accepted under :data:`COLLAPSED` of them; None otherwise. ``reasoning``: the reply's
    ``reasoning_content``, streamed apart from ``content``."""
    if not draft_n or draft_n < MIN_DRAFTED or (accepted or 0) / draft_n >= COLLAPSED:
        return None
    rate = f"draft acceptance collapsed ({accepted or 0}/{draft_n} drafted tokens accepted)"
    if _reasoned(content, usage, reasoning):
        return (f"{rate}: the model is thinking, and drafters trained without thinking cannot "
                "predict it; set `reasoning = \"off\"` in the preset's [NAME.server] table "
                "(the template's enable_thinking=false)")
    return (f"{rate}: likely the chat template (drafters trained on raw continuations accept "
            "far less under it: 69 % raw vs 37 % templated in field reports); a drafter trained "
            "with this model's template, or the n-gram profile, may do better")
