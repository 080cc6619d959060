"""The plan attempts of the full recipe: the model asked for a plan, each broken one sent back
with its problems."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.client import ServerClient
from agent.events import Event, ModelTurn, ProjectPlan, Timings
from agent.newproject.plan import Plan, parse_plan
from agent.newproject.recipe import PLAN_FORMAT, PLANNER_SYSTEM, Recipe, plan_request
from agent.newproject.toolchains import available
from agent.ui import Reporter

MAX_PLAN_ATTEMPTS = 3
"""Plans the model may write before the task stops (each rejected one is sent back with its
problems)."""
PLAN_MAX_TOKENS = 1024


def get_plan(client: ServerClient, description: str, recipe: Recipe, sampling: dict[str, Any],
             emit: Callable[[Event], None], reporter: Reporter, session_id: str,
             path: str) -> tuple[Plan | None, list[Timings], str]:
    """Ask the model for a plan, sending each broken one back with its problems, at most
    :data:`MAX_PLAN_ATTEMPTS` times. Returns (plan or None, the turns' timings, the last
    problems as one line). Each attempt is logged as a :class:`ProjectPlan` event.
    ``path``: the PATH the project's commands will see (the toolchains offered)."""
    messages = [{"role": "system", "content": PLANNER_SYSTEM},
                {"role": "user", "content": plan_request(description, available(path))}]
    timings: list[Timings] = []
    problems: list[str] = []
    reporter.note(f"planning the project (recipe: full, {recipe.reason})")
    for attempt in range(1, MAX_PLAN_ATTEMPTS + 1):
        reporter.request_started("json", client.idle_timeout)
        try:
            turn = client.complete(messages, response_format=PLAN_FORMAT, sampling=sampling,
                                   max_tokens=PLAN_MAX_TOKENS, on_chunk=reporter.received)
        finally:
            reporter.request_done()
        if turn.timings:
            timings.append(turn.timings)
        emit(ModelTurn(session_id=session_id, step=0, protocol="plan", content=turn.content,
                       finish_reason=turn.finish_reason, usage=turn.usage,
                       timings=turn.timings))
        plan, problems = parse_plan(turn.content)
        if turn.finish_reason == "length" and plan is None:
            problems = [f"the plan was cut at {PLAN_MAX_TOKENS} tokens: write a shorter one "
                        "(fewer files, no file contents)"]
        emit(ProjectPlan(session_id=session_id, recipe=recipe.name,
                         recipe_reason=recipe.reason, attempt=attempt,
                         status="accepted" if plan else "rejected",
                         plan=plan.model_dump() if plan else None, problems=problems,
                         reply=turn.content[:4000]))
        if plan is not None:
            return plan, timings, ""
        reporter.note(f"plan {attempt} rejected: {'; '.join(problems)}")
        messages += [{"role": "assistant", "content": turn.content},
                     {"role": "user", "content": "The plan cannot be used:\n"
                      + "\n".join(f"- {p}" for p in problems)
                      + "\nWrite the whole plan again as one JSON object."}]
    return None, timings, "; ".join(problems)
