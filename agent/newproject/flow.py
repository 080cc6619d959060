"""``agent new-project`` end to end: the target folder checked, the recipe, the plan (the
simple recipe's own, or the model's, checked against the toolchains on PATH), then the
agent's work (:mod:`agent.newproject.work`). Nothing is written before the plan is accepted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from agent.config import Settings
from agent.errors import UsageError, UserError, interrupted_by
from agent.events import (
    ErrorEvent,
    Event,
    FinalAnswer,
    ProjectPlan,
    SessionStart,
    TaskStart,
    Timings,
)
from agent.loop import LoopResult
from agent.newproject.environment import project_env
from agent.newproject.names import module_name
from agent.newproject.plan import refusal, simple_plan
from agent.newproject.planner import MAX_PLAN_ATTEMPTS, get_plan
from agent.newproject.recipe import Recipe, choose_recipe
from agent.newproject.result import ProjectResult
from agent.newproject.runners import TestReport
from agent.newproject.target import check_target, enclosing_repo
from agent.newproject.work import Accepted, build
from agent.runtime import Backend, choose_protocol, connect
from agent.sessions.log import SessionLog, new_session_id
from agent.sessions.slots import server_slot
from agent.ui import Reporter
from skills.session import UnknownSkill, find_skills
from tools import reaper


class ToolchainMissing(UserError):
    """The plan needs a toolchain this machine lacks; nothing was written (exit 3)."""


def new_project(description: str, directory: Path, settings: Settings, reporter: Reporter,
                force: bool = False, session_id: str | None = None,
                skills: Sequence[str] = ()) -> ProjectResult:
    """Create the project in ``directory``.

    Raises :class:`UsageError` (bad directory, description or skill), :class:`ToolchainMissing`
    (the plan needs a toolchain that is not on PATH) or the backend's errors, each before
    anything is written. A model that writes no usable plan in :data:`MAX_PLAN_ATTEMPTS`
    tries ends the task with ``loop.reason == "plan_rejected"`` and ``created`` False.
    ``session_id`` names the session in advance (the MCP server hands it out before the
    backend is ready). The skill catalog (bundled and user skills) is offered to the model;
    ``skills`` are activated first, then the plan's ecosystem skill (full recipe)."""
    if not description.strip():
        raise UsageError("the project description is empty; say what to build")
    description = description.strip()
    directory = directory.expanduser().resolve()
    check_target(directory, force)
    outer = enclosing_repo(directory)
    if outer is not None:
        reporter.note(f"{directory} is inside the git repository at {outer}: "
                      "the project gets a repository of its own there")
    try:
        found = find_skills(directory, skills)
    except UnknownSkill as exc:
        raise UsageError(str(exc)) from exc
    backend = connect(settings, reporter)
    client = backend.client
    session_id = session_id or new_session_id()
    reaper.set_session(session_id)
    recipe = choose_recipe(settings.new_project_recipe, client.base_url)
    # `agent sessions` lists the user's words, not the prompt built around them.
    log = SessionLog(session_id, description, directory)

    def emit(event: Event) -> None:
        log.append(event)
        reporter.event(event)

    env = project_env(directory)
    path = str(env["PATH"])
    protocol, auto_switch = choose_protocol(settings.tool_protocol, client)
    module = module_name(description)
    try:
        emit(SessionStart(session_id=session_id, task=description, workspace=str(directory),
                          base_url=client.base_url, protocol=protocol, preset=backend.preset,
                          profile=backend.profile, model=client.props().get("model_path"),
                          n_ctx=client.n_ctx(), speculation=backend.speculation))
        emit(TaskStart(session_id=session_id, task=1, text=description))
        plan_timings: list[Timings] = []
        if recipe.name == "simple":
            plan = simple_plan(module)
            emit(ProjectPlan(session_id=session_id, recipe=recipe.name,
                             recipe_reason=recipe.reason, attempt=0, status="accepted",
                             plan=plan.model_dump()))
        else:
            with server_slot(client, reporter.note, session_id) as slot:
                client.id_slot = slot
                got, plan_timings, why = get_plan(client, description, recipe,
                                                  backend.sampling, emit, reporter,
                                                  session_id, path)
            if got is None:
                text = (f"no usable plan after {MAX_PLAN_ATTEMPTS} attempts ({why}); nothing "
                        "was written: try again, or use --recipe simple or a bigger model")
                client.close()
                return _served(_unmade(directory, log, emit, recipe, "plan_rejected", text,
                                       plan_timings), backend)
            plan = got
        for line in plan.shown():
            reporter.note(f"plan: {line}")
        refused = refusal(plan, path) if recipe.name == "full" else None
        if refused is not None:
            emit(ProjectPlan(session_id=session_id, recipe=recipe.name,
                             recipe_reason=recipe.reason, attempt=0, status="refused",
                             plan=plan.model_dump(), problems=[refused]))
            raise ToolchainMissing(refused)
    except KeyboardInterrupt as exc:
        # Ctrl-C while planning: nothing was written; the log says how the session ended.
        client.close()
        return _served(_unmade(directory, log, emit, recipe, "interrupted", interrupted_by(exc),
                               []), backend)
    except Exception as exc:
        emit(ErrorEvent(session_id=session_id, message=str(exc), kind=type(exc).__name__))
        client.close()
        raise
    reporter.note(f"recipe: {recipe.name} ({recipe.reason})")
    env = project_env(directory, python=plan.toolchain == "python")
    return _served(build(Accepted(description, directory, settings, reporter, backend, log,
                                    emit, recipe, plan, plan_timings, env, protocol,
                                    auto_switch, found, tuple(skills), module)), backend)


def _served(result: ProjectResult, backend: Backend) -> ProjectResult:
    """``result`` naming the managed server the session used (``backend.state``)."""
    result.server = backend.state
    return result


def _unmade(directory: Path, log: SessionLog, emit: Callable[[Event], None], recipe: Recipe,
            reason: str, text: str, timings: list[Timings]) -> ProjectResult:
    """The result of a session that ended before writing anything (``reason``: the
    :class:`FinalAnswer` reason)."""
    steps = MAX_PLAN_ATTEMPTS if reason == "plan_rejected" else 0
    emit(FinalAnswer(session_id=log.id, text=text, reason=reason, steps=steps))
    return ProjectResult(directory, log.id, log.path, LoopResult(text, reason, steps, timings),
                         TestReport("not run", reason if reason == "interrupted" else
                                    text or reason), recipe=recipe, created=False)
