"""The one-line texts of single events: why a task stopped, what a tool result shows, how
much of a reply the cache lost."""

from __future__ import annotations

_LARGER = "(--preset NAME; `agent backend presets` lists them)"

STOP_LINES = {
    "max_steps": "stopped: the step limit ({steps} model calls) ran out before the task was "
                 "done; raise --max-steps (or max_steps in config.toml)",
    "max_time": "stopped: the time limit ran out after {steps} model calls; raise --max-time "
                "(seconds, or max_time in config.toml)",
    "repeated_call": "{text}; the model is going round in circles: rephrase the task with a "
                     "concrete hint, or use a larger model {larger}",
    "format_errors": "{text}; the model cannot write valid tool calls: try --tool-protocol "
                     "json, or a larger model {larger}",
    "approval_needed": "stopped: {text}",
    "nothing_done": "stopped: {text}; rephrase the task with a concrete first step, or use a "
                    "larger model {larger}",
    "nothing_changed": "stopped: {text}",
    "broken_files": "stopped: {text}; the files stay as the task left them (`agent undo` "
                    "puts them back), or use a larger model {larger}",
    "check_failed": "stopped: {text}; the files stay as the task left them (`agent diff` "
                    "shows them, `agent undo` puts them back)",
    "length": "stopped: {text}; the model ran on without finishing: rephrase the task, or use "
              "a larger model {larger}",
    # "in step N", not "after N model calls": step N's call may be the one interrupted (a
    # field trial read "after 2 model calls" beside the session line's "1 model calls").
    "interrupted": "interrupted ({text}) in step {steps}: the task stopped; the files it "
                   "changed so far stay as they are",
}
"""What to print for each :class:`agent.events.FinalAnswer` ``reason`` other than done."""
TIME_LIMIT_IN_STEP = ("stopped: {text}; raise --max-time (seconds, or max_time in "
                      "config.toml)")
"""``max_time`` with the loop's report: the limit ran out inside a model step."""


def draft_length_text(n_max: int) -> str:
    """What a step line says of a request's draft length: ``draft length K`` or, for 0,
    ``drafting off``."""
    return f"draft length {n_max}" if n_max else "drafting off"


def stop_line(reason: str, text: str, steps: int) -> str:
    """One line saying why a task stopped and what to do about it; ``text`` is the loop's
    own report (whitespace collapsed, cut at 300 characters), ``steps`` the model calls made."""
    detail = " ".join(text.split())[:300]
    template = STOP_LINES.get(reason, "stopped ({reason}): {text}")
    if reason == "max_time" and detail:
        template = TIME_LIMIT_IN_STEP
    if reason == "interrupted":
        detail = detail or "Ctrl-C"  # a termination signal's name otherwise
    return template.format(reason=reason, text=detail or "no details", steps=steps,
                           larger=_LARGER)


TEMPLATE_SLACK = 3
"""Tokens at the seam of a reply that the chat template re-renders (end-of-turn markers)."""


def reply_misses(previous: tuple[int, int] | None, reused: int,
                 prefilled: int | None = None) -> int:
    """Tokens of the previous reply the next request had to prefill again: a cache miss the
    agent caused (its request did not continue the cached prompt + reply byte for byte).

    ``previous`` is (prompt tokens, decoded tokens) of the last request; ``reused`` is this
    request's ``cache_n``. A fully kept reply is reused with the prompt before it, so what is
    missing from prompt + reply, at most the reply itself, was thrown away (0 when unknown).
    ``prefilled`` is this request's ``prompt_n``, when known: a shorter history (compacted)
    reuses less without prefilling the reply again, and no more than was prefilled can have
    been prefilled again.
    """
    if previous is None:
        return 0
    prompt, decoded = previous
    missed = min(decoded, prompt + decoded - reused)
    if prefilled is not None:
        missed = min(missed, prefilled)
    # The end-of-turn tokens around a reply are rendered by the template, not decoded as they
    # were: a gap of a couple of tokens is the template, not a lost reply.
    return missed if missed > TEMPLATE_SLACK else 0


SUMMARY_LINES = 5
"""Lines of a tool result shown at most; a longer one shows its head, a count and its end."""
SUMMARY_WIDTH = 160
DIFF_EDITS = frozenset({"str_replace", "insert"})
"""Edits shown as a diff with their call; their result (a heading and the edited lines) is
then shown as its heading only."""
PREVIEW_LINES = 40
"""Lines of an edit's diff shown with the call (the rest is counted)."""


def result_summary(name: str, text: str, is_error: bool = False) -> list[str]:
    """The lines of a tool result worth showing in the terminal (at least one).

    Blank lines and an MCP result's ``[…]`` frame are left out. An edit's result is its
    heading only (``edited calc.py``): the call already showed the diff. Up to
    :data:`SUMMARY_LINES` lines are shown whole; a longer result shows its first lines, how many
    were left out and its last line, which is where commands put their verdict (``[exit code
    0]``, a test summary)."""
    lines = [line.rstrip().expandtabs(4) for line in text.strip().splitlines()
             if line.strip()]
    if len(lines) > 1 and lines[0].startswith("[") and "MCP tool" in lines[0]:
        lines = lines[1:-1] if lines[-1] == "[end of MCP output]" else lines[1:]
    if not lines:
        return ["(no output)"]
    if name in DIFF_EDITS and not is_error and lines[0].endswith(":"):
        lines = [lines[0][:-1]]
    if len(lines) > SUMMARY_LINES:
        head = SUMMARY_LINES - 2
        lines = [*lines[:head], f"… {len(lines) - head - 1} more lines", lines[-1]]
    cut = [line if len(line) <= SUMMARY_WIDTH else line[:SUMMARY_WIDTH - 1] + "…"
           for line in lines]
    # The first line follows the ✓/✗ mark; indentation relative to it is kept for the rest.
    return [cut[0].lstrip(), *cut[1:]]

