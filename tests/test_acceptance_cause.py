"""A collapsed draft acceptance names its likely cause once per session (issue 24: thinking
on, or the chat template), on the terminal next to the step line."""

from __future__ import annotations

import io

from rich.console import Console

from agent.acceptance import collapse_note
from agent.events import ModelTurn, Timings
from agent.ui import Reporter


def test_a_collapse_with_reasoning_in_the_reply_names_thinking():
    line = collapse_note(160, 3, "<think>let me see</think>ok")
    assert line and "3/160" in line and "thinking" in line and 'reasoning = "off"' in line
    usage = {"completion_tokens_details": {"reasoning_tokens": 90}}
    assert "thinking" in (collapse_note(100, 0, "ok", usage) or "")


def test_a_collapse_without_reasoning_names_the_template():
    line = collapse_note(64, 2, "def f(): pass")
    assert line and "chat template" in line and "69 % raw vs 37 %" in line


def test_healthy_or_too_small_samples_say_nothing():
    assert collapse_note(160, 80, "<think>x</think>") is None  # 50 %: no collapse
    assert collapse_note(16, 0, "x") is None  # too few drafted tokens to tell
    assert collapse_note(None, None, "x") is None and collapse_note(0, 0, "x") is None


def _turn(step: int, drafted: int, accepted: int, content: str = "x") -> ModelTurn:
    return ModelTurn(session_id="s", step=step, protocol="text", content=content,
                     timings=Timings(prompt_n=10, cache_n=0, predicted_n=50,
                                     predicted_per_second=20.0, draft_n=drafted,
                                     draft_n_accepted=accepted))


def test_the_terminal_says_the_cause_once_per_session():
    out = io.StringIO()
    reporter = Reporter()
    reporter.console = Console(file=out, force_terminal=False, width=300, soft_wrap=True)
    reporter.event(_turn(1, 160, 90))
    assert "collapsed" not in out.getvalue()
    reporter.event(_turn(2, 160, 1, "<think>hmm</think>"))
    reporter.event(_turn(3, 160, 0, "<think>hmm</think>"))
    notes = [x for x in out.getvalue().splitlines() if x.startswith("note: draft acceptance")]
    assert len(notes) == 1 and "1/160" in notes[0] and "thinking" in notes[0]


def test_n_gram_lookup_alone_gets_no_draft_model_cause():
    # A fresh first command (profile ngram) read "a drafter trained with this model's
    # template, or the n-gram profile, may do better" under the n-gram profile itself.
    out = io.StringIO()
    reporter = Reporter()
    reporter.console = Console(file=out, force_terminal=False, width=300, soft_wrap=True)
    reporter.draft_model = False
    reporter.event(_turn(1, 64, 4))
    assert "collapsed" not in out.getvalue() and "accepted 4 of 64 drafted tokens" in out.getvalue()
