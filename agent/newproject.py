"""``agent new-project``: a new directory, ``git init``, the agent in full-auto until the project
and its tests exist, the project's tests run by the product itself, and a commit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import git

from agent.config import Settings
from agent.context import DEFAULT_N_CTX, ContextKeeper
from agent.errors import UsageError
from agent.events import ErrorEvent, ProjectChecked, SessionStart, TaskStart, Timings
from agent.loop import Agent, Limits, LoopResult
from agent.prompts import system_prompt
from agent.protocol import tools_with_final
from agent.runtime import choose_protocol, connect, renders_tool_role
from agent.sessions.log import SessionLog, new_session_id
from agent.sessions.slots import hold_slot
from agent.ui import Reporter
from skills.activation import TOOL_NAME as SKILL_TOOL
from skills.session import UnknownSkill, attach_skills, find_skills
from tools import reaper
from tools.base import ToolContext
from tools.bash import tool_env
from tools.ignore import walk
from tools.registry import default_registry
from tools.workspace import SCRATCH_NAME, Workspace, hide_from_git

GITIGNORE = f"""__pycache__/
*.py[cod]
.pytest_cache/
.venv/
*.egg-info/
{SCRATCH_NAME}/
"""

TASK = """Create a new project in the current directory: {description}

Steps:
1. Use the create tool to write the source code in {module}.py.
2. Use the create tool to write pytest tests in tests/test_{module}.py.
3. Run the tests with bash: python -m pytest -q
4. Fix any failure, then finish with a short summary."""


def slugify(description: str, limit: int = 40) -> str:
    """A directory name from a description: lowercase words joined by hyphens."""
    words = re.findall(r"[a-z0-9]+", description.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or "new-project"


@dataclass
class TestReport:
    """What the product saw when it ran the project's tests."""

    status: str
    """passed, failed, no tests, not run (not a Python project) or timeout."""
    detail: str = ""


@dataclass
class ProjectResult:
    directory: Path
    session_id: str
    log: Path
    loop: LoopResult
    tests: TestReport
    files: list[str] = field(default_factory=list)
    commit: str | None = None

    def stats(self) -> dict[str, float | int | None]:
        """Totals over the session's turns: tokens, decode tok/s, acceptance rate."""
        return turn_stats(self.loop.timings)


def turn_stats(timings: list[Timings]) -> dict[str, float | int | None]:
    """Prompt tokens processed/cached, decoded tokens, decode tok/s, draft acceptance rate."""
    prompt = sum(t.prompt_n or 0 for t in timings)
    cached = sum(t.cache_n or 0 for t in timings)
    decoded = sum(t.predicted_n or 0 for t in timings)
    ms = sum(t.predicted_ms or 0 for t in timings)
    drafts = sum(t.draft_n or 0 for t in timings)
    accepted = sum(t.draft_n_accepted or 0 for t in timings)
    return {"prompt_tokens": prompt, "cached_tokens": cached, "decoded_tokens": decoded,
            "decode_tok_s": round(decoded / ms * 1000, 1) if ms else None,
            "draft_tokens": drafts,
            "acceptance_rate": round(accepted / drafts, 3) if drafts else None}


_PYTEST_STATUS = {0: "passed", 1: "failed", 5: "no tests"}
_PROJECT_INIS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def run_project_tests(directory: Path, timeout: float = 600.0) -> TestReport:
    """Run pytest in a Python project and report honestly; never raises.

    The run is confined to ``directory`` (its own config file or none), so a project created
    inside another project is not judged by the outer project's pytest settings.
    """
    if not any(p.suffix == ".py" for p in walk(directory, directory)):
        return TestReport("not run", "no Python files: no test runner detected")
    ini = next((directory / n for n in _PROJECT_INIS if (directory / n).is_file()), None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
           str(directory), "-c", str(ini) if ini else os.devnull]
    env = tool_env(kind="tests")
    try:
        proc = subprocess.run(cmd, cwd=directory, capture_output=True, text=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return TestReport("timeout", f"pytest did not finish within {timeout:.0f} s")
    finally:
        # What the project's tests left running (a server fixture without teardown) goes too.
        reaper.kill_tagged(env[reaper.OWNER_ENV])
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    status = _PYTEST_STATUS.get(proc.returncode, f"error (pytest exit {proc.returncode})")
    return TestReport(status, tail)


def _check_target(directory: Path, force: bool) -> None:
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory; choose another --dir")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        raise UsageError(f"{directory} is not empty; choose another --dir or pass --force")


def _prepare(directory: Path) -> git.Repo:
    directory.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(directory)
    gitignore = directory / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text(GITIGNORE, "utf-8")
    hide_from_git(directory, f"/{SCRATCH_NAME}/")
    return repo


def _commit(repo: git.Repo, description: str) -> tuple[str | None, list[str]]:
    repo.git.add(A=True)
    if not repo.index.entries:
        return None, []
    reader = repo.config_reader()
    has_identity = reader.has_option("user", "name") and reader.has_option("user", "email")
    actor = None if has_identity else git.Actor("dflash-agent", "dflash-agent@localhost")
    commit = repo.index.commit(f"New project: {description[:60]}\n\nCreated by dflash-agent.",
                               author=actor, committer=actor)
    files = sorted(str(k[0]) for k in repo.index.entries)
    return commit.hexsha, files


def new_project(description: str, directory: Path, settings: Settings, reporter: Reporter,
                force: bool = False, session_id: str | None = None,
                skills: Sequence[str] = ()) -> ProjectResult:
    """Create the project; raises :class:`UsageError` or the backend's errors before anything
    is written when the directory or the server is unusable. ``session_id`` names the session in
    advance (the MCP server hands it out before the backend is ready). The skill catalog
    (bundled and user skills) is offered to the model; ``skills`` are activated first."""
    if not description.strip():
        raise UsageError("the project description is empty; say what to build")
    directory = directory.expanduser().resolve()
    _check_target(directory, force)
    try:
        found = find_skills(directory, skills)
    except UnknownSkill as exc:
        raise UsageError(str(exc)) from exc
    backend = connect(settings, reporter)
    repo = _prepare(directory)
    client = backend.client
    protocol, auto_switch = choose_protocol(settings.tool_protocol, client)
    workspace = Workspace(directory)
    registry = default_registry(workspace)
    offered = attach_skills(registry, ToolContext(workspace), found,
                            client.n_ctx() or settings.ctx_size or DEFAULT_N_CTX,
                            lambda text: len(client.tokenize(text)), skills)
    tools = registry.openai_tools()
    listed = tools_with_final(tools) if protocol == "json" else tools
    session_id = session_id or new_session_id()
    reaper.set_session(session_id)
    task = TASK.format(description=description.strip(),
                       module=slugify(description, 24).replace("-", "_"))
    # `agent sessions` lists the user's words, not the prompt built around them.
    log = SessionLog(session_id, description.strip(), directory)

    def emit(event):
        log.append(event)
        reporter.event(event)

    emit(SessionStart(session_id=session_id, task=task, workspace=str(directory),
                      base_url=client.base_url, protocol=protocol, preset=backend.preset,
                      profile=backend.profile, model=client.props().get("model_path"),
                      n_ctx=client.n_ctx()))
    system = system_prompt(str(directory), protocol, listed)
    if offered is not None and offered.catalog.text:
        system += "\n" + offered.catalog.text
    agent = Agent(client, registry, session_id=session_id, protocol=protocol,
                  system=system, emit=emit,
                  sampling=backend.sampling, auto_switch=auto_switch,
                  tool_role=renders_tool_role(client),
                  limits=Limits(settings.max_steps, settings.max_time),
                  context=ContextKeeper(client, client.n_ctx() or settings.ctx_size,
                                        max_output=2048),
                  ui=reporter)
    emit(TaskStart(session_id=session_id, task=1, text=description.strip()))
    try:
        total = int(client.props().get("total_slots") or 1)
        with hold_slot(client.base_url, total, reporter.note, session_id) as slot:
            client.id_slot = slot
            result = agent.run(task, first_calls=[(SKILL_TOOL, {"name": n}) for n in skills])
    except Exception as exc:
        emit(ErrorEvent(session_id=session_id, message=str(exc), kind=type(exc).__name__))
        raise
    finally:
        registry.close()
        client.close()
    if result.reason == "interrupted":
        # The user asked to stop: the files stay as they are, uncommitted.
        return ProjectResult(directory, session_id, log.path, result,
                             TestReport("not run", "interrupted"))
    reporter.note("running the project's tests")
    tests = run_project_tests(directory)
    sha, files = _commit(repo, description.strip())
    emit(ProjectChecked(session_id=session_id, tests=tests.status, detail=tests.detail,
                        commit=sha, files=files))
    return ProjectResult(directory, session_id, log.path, result, tests, files, sha)
