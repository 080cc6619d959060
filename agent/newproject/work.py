"""The agent's work once the plan is accepted: the folder and its environment, the agent in
full-auto, the project's tests run by the product and sent back to the model while they fail
(the fix rounds), then the commit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from agent.config import Settings
from agent.context import DEFAULT_N_CTX, ContextKeeper
from agent.errors import interrupted_by
from agent.events import ErrorEvent, Event, FinalAnswer, ProjectChecked, Timings
from agent.loop import Agent, Limits, LoopResult
from agent.newproject.commit import (
    CommitFailed,
    commit_all,
    commit_message,
    git_reason,
    prepare_repo,
    present_files,
    staged_files,
)
from agent.newproject.environment import VENV, create_venv, find_python
from agent.newproject.plan import Plan
from agent.newproject.recipe import Recipe, full_task, simple_task
from agent.newproject.result import ProjectResult
from agent.newproject.runners import TIMEOUT_S, TestReport, run_project_tests
from agent.newproject.toolchains import ECOSYSTEMS
from agent.prompts import system_prompt
from agent.protocols.base import tools_with_final
from agent.protocols.choice import ProtocolDecision
from agent.runtime import Backend, record_speculation, renders_tool_role
from agent.sessions.log import SessionLog
from agent.sessions.slots import server_slot
from agent.ui import Reporter
from skills.activation import TOOL_NAME as SKILL_TOOL
from skills.loader import Discovery
from skills.session import attach_skills
from tools.base import ToolContext
from tools.registry import default_registry
from tools.workspace import Workspace

MAX_FIX_ROUNDS = 2
"""Times the product's own failing test run is sent back to a model that said it was done."""
MIN_TEST_RUN_S = 60.0
"""Seconds a test run gets even when the task's time is used up (see :func:`time_for_tests`)."""
FIX_TASK = """dflash-agent ran the project's tests itself with `{runner}`: {status}.

{detail}

Fix the code (the tests only when they are wrong), run the tests with bash, and finish with a \
short summary when they pass."""


NO_TESTS_TASK = """dflash-agent ran the project's tests itself with `{runner}`: {status}.

{detail}

Write the tests where that runner finds them (for pytest: files named tests/test_*.py that \
import the code, each test a function whose name starts with test_; pytest runs no bare \
assert at the top of a file), run them with bash, and finish with a short summary when they \
pass."""
"""The fix round's task when the runner found no test (the 1.5B wrote its tests inside its
module, where pytest does not look)."""


@dataclass
class Accepted:
    """A session whose plan was accepted, before anything is written: what :func:`build`
    needs."""

    description: str
    directory: Path
    settings: Settings
    reporter: Reporter
    backend: Backend
    log: SessionLog
    emit: Callable[[Event], None]
    recipe: Recipe
    plan: Plan
    plan_timings: list[Timings]
    env: dict[str, str | None]
    protocol: str
    auto_switch: ProtocolDecision
    found: Discovery
    skills: tuple[str, ...]
    module: str


def build(s: Accepted) -> ProjectResult:
    """Everything after the plan is accepted: directory, environment, the agent, tests,
    commit. Ctrl-C at any point leaves the files as they are, uncommitted, and ends the log
    (and the result) as interrupted."""
    progress = _Progress()
    try:
        return _make(s, progress)
    except KeyboardInterrupt as exc:
        # Outside the agent's own run (git init, the .venv, the commit): the agent's loop and
        # the product's test run handle their own interruption.
        s.backend.client.close()
        s.emit(FinalAnswer(session_id=s.log.id, text=interrupted_by(exc), reason="interrupted",
                           steps=progress.steps))
        return ProjectResult(s.directory, s.log.id, s.log.path,
                             LoopResult(interrupted_by(exc), "interrupted", progress.steps, []),
                             TestReport("not run", "interrupted"), recipe=s.recipe,
                             plan=s.plan, environment=progress.environment,
                             plan_timings=s.plan_timings)


@dataclass
class _Progress:
    """How far :func:`_make` got, for the result of an interrupted session."""

    steps: int = 0
    environment: str = ""


def _make(s: Accepted, progress: _Progress) -> ProjectResult:
    """:func:`build`'s work; ``progress`` is updated as it goes."""
    description, directory, settings, reporter = s.description, s.directory, s.settings, \
        s.reporter
    backend, log, emit, recipe, plan, env = s.backend, s.log, s.emit, s.recipe, s.plan, s.env
    protocol, auto_switch, found, skills = s.protocol, s.auto_switch, s.found, s.skills
    client = backend.client
    session_id = log.id
    repo = prepare_repo(directory, plan.toolchain)
    environment = ""
    if plan.toolchain == "python" and not (directory / VENV).exists():
        python = find_python(str(env["PATH"]))
        environment = create_venv(directory, python) if python else "no python3 for a .venv"
        progress.environment = environment
        reporter.note(environment)
    workspace = Workspace(directory)
    registry = default_registry(workspace, env)
    offered = attach_skills(registry, ToolContext(workspace), found,
                            client.n_ctx() or settings.ctx_size or DEFAULT_N_CTX,
                            lambda text: len(client.tokenize(text)), skills)
    tools = registry.openai_tools()
    listed = tools_with_final(tools) if protocol == "json" else tools
    system = system_prompt(protocol, listed)
    # Under whole a reply holds files and commands only: no skill could be called.
    if offered is not None and offered.catalog.text and protocol != "whole":
        system += "\n" + offered.catalog.text
    first = [*skills]
    eco_skill = ECOSYSTEMS[plan.toolchain].skill
    if recipe.name == "full" and offered is not None and eco_skill not in first \
            and eco_skill in offered.catalog.names:
        first.append(eco_skill)
    task = (simple_task(description, s.module, protocol)
            if recipe.name == "simple" else full_task(description, plan))
    agent = Agent(client, registry, session_id=session_id, protocol=protocol,
                  system=system, emit=emit,
                  sampling=backend.sampling, auto_switch=auto_switch,
                  tool_role=renders_tool_role(client),
                  limits=Limits(settings.max_steps, settings.max_time),
                  context=ContextKeeper(client, client.n_ctx() or settings.ctx_size,
                                        max_output=2048),
                  ui=reporter)
    try:
        with server_slot(client, reporter.note, session_id) as slot:
            client.id_slot = slot
            result, tests = _work(agent, task, first, s)
            progress.steps = result.steps
        record_speculation(s.backend, s.plan_timings + result.timings, reporter.note)
    except Exception as exc:
        emit(ErrorEvent(session_id=session_id, message=str(exc), kind=type(exc).__name__))
        raise
    finally:
        registry.close()
        client.close()
    project = ProjectResult(directory, session_id, log.path, result, tests,
                            recipe=recipe, plan=plan, environment=environment,
                            plan_timings=s.plan_timings)
    if result.reason == "interrupted":
        # The user asked to stop: the files stay as they are, uncommitted (and unstaged: the
        # summary lists them from git without adding them).
        project.files = present_files(repo)
        return project
    project.unwritten = [f for f in plan.files if not _exists(directory / f)]
    try:
        project.files = staged_files(repo)
        sha, files = commit_all(repo, commit_message(description, project))
    except (git.GitError, ValueError, OSError) as exc:
        # The model's bash can break the repository (rm -rf .git, a garbled HEAD): a stated
        # cause and the files as they are, not an internal error.
        text = (f"the project's git repository could not take the commit ({git_reason(exc)}); "
                f"the files stay in {directory} as they are, uncommitted (tests: "
                f"{tests.status})")
        emit(ErrorEvent(session_id=session_id, message=text, kind="CommitFailed"))
        raise CommitFailed(text) from exc
    project.commit, project.files = sha, files
    emit(ProjectChecked(session_id=session_id, tests=project.tests.status,
                        detail=project.tests.detail, commit=sha, files=files,
                        runner=project.tests.runner, recipe=recipe.name,
                        environment=environment))
    return project



def _work(agent: Agent, task: str, first: list[str], s: Accepted
          ) -> tuple[LoopResult, TestReport]:
    """Run the agent on ``task``, then the project's tests; while the model says it is done
    but tests fail (or time out, or the runner breaks), and steps and time are left, send it
    the product's own result (at most :data:`MAX_FIX_ROUNDS` times). Returns the whole run and
    the last verdict."""
    started = time.monotonic()
    result = agent.run(task, first_calls=[(SKILL_TOOL, {"name": n}) for n in first])
    steps = result.steps
    for round_ in range(MAX_FIX_ROUNDS + 1):
        if result.reason == "interrupted":
            return LoopResult(result.text, result.reason, steps, result.timings), \
                TestReport("not run", "interrupted")
        s.reporter.note("running the project's tests")
        try:
            tests = run_project_tests(s.directory, s.plan.toolchain, s.env,
                                      timeout=time_for_tests(s.settings.max_time, started),
                                      own_pytest=s.recipe.name == "simple")
        except KeyboardInterrupt as exc:
            # The agent's run ended (its answer is logged); the log must end on the
            # interruption, or `agent sessions` lists the session as done.
            s.emit(FinalAnswer(session_id=s.log.id, text=interrupted_by(exc),
                               reason="interrupted", steps=steps))
            return LoopResult(interrupted_by(exc), "interrupted", steps, result.timings), \
                TestReport("not run", "interrupted")
        steps_left = s.settings.max_steps - steps
        time_left = s.settings.max_time - (time.monotonic() - started)
        if not _fixable(tests) or result.reason not in FIXABLE_ENDS or round_ == MAX_FIX_ROUNDS \
                or steps_left < 1 or time_left <= 0:
            break
        s.reporter.note(f"tests {tests.status}: sending dflash-agent's own run back to the "
                        f"model ({steps_left} steps left)")
        agent.limits = Limits(steps_left, time_left)
        template = NO_TESTS_TASK if tests.status == "no tests" else FIX_TASK
        result = agent.run(agent.calls.own_words(template.format(
            runner=tests.runner or "(none)", status=tests.status, detail=tests.detail)))
        steps += result.steps
    # The agent's timings list grows over its runs: the last result holds them all.
    return LoopResult(result.text, result.reason, steps, result.timings), tests


FIXABLE_ENDS = frozenset({"done", "check_failed", "broken_files", "repeated_call"})
"""Loop ends after which failing project tests go back to the model: it finished, or it tried
to finish with its own check failing or a file unparseable (agent/finish.py), which the
product's test run then shows it in full; or it went round in circles (the 1.5B ran a test
file of bare asserts three times), which a new task with the product's verdict breaks."""


def time_for_tests(max_time: float, started: float) -> float:
    """Seconds the project's test run may take: what is left of the task's ``max_time``
    (``--max-time``, counted from ``started``, a :func:`time.monotonic` value), but at least
    :data:`MIN_TEST_RUN_S` (or all of ``max_time`` when that is shorter: the verdict is worth
    a little time past the budget, never another 10 minutes), at most the runner's own
    :data:`~agent.newproject.runners.TIMEOUT_S`."""
    left = max_time - (time.monotonic() - started)
    return min(TIMEOUT_S, max(left, min(MIN_TEST_RUN_S, max_time)))


def _exists(path: Path) -> bool:
    """Whether ``path`` exists, False for a name the file system refuses."""
    try:
        return path.exists()
    except (OSError, ValueError):  # a name the file system refuses was never written
        return False


def _fixable(tests: TestReport) -> bool:
    """Whether the model could act on this verdict: tests that do not pass, or none found."""
    return tests.status in ("failed", "timeout", "no tests") or tests.status.startswith("error")
