"""``agent new-project`` end to end: recipe, plan, a new directory with ``git init``, its
isolated environment, the agent in full-auto inside it, the project's own tests run by the
product, and a commit whose message says what exists and how the tests went."""

from __future__ import annotations

import keyword
import os
import re
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from agent.client import ServerClient
from agent.config import Settings
from agent.context import DEFAULT_N_CTX, ContextKeeper
from agent.errors import UsageError, UserError, interrupted_by
from agent.events import (
    ErrorEvent,
    Event,
    FinalAnswer,
    ModelTurn,
    ProjectChecked,
    ProjectPlan,
    SessionStart,
    TaskStart,
    Timings,
)
from agent.loop import Agent, Limits, LoopResult
from agent.newproject.environment import VENV, create_venv, find_python, project_env
from agent.newproject.plan import Plan, parse_plan, refusal, simple_plan
from agent.newproject.recipe import (
    PLAN_FORMAT,
    PLANNER_SYSTEM,
    Recipe,
    choose_recipe,
    full_task,
    plan_request,
    simple_task,
)
from agent.newproject.runners import TIMEOUT_S, TestReport, run_project_tests
from agent.newproject.toolchains import ECOSYSTEMS, available
from agent.prompts import system_prompt
from agent.protocols.base import tools_with_final
from agent.protocols.choice import ProtocolDecision
from agent.runtime import Backend, choose_protocol, connect, record_speculation, renders_tool_role
from agent.sessions.log import SessionLog, new_session_id
from agent.sessions.slots import server_slot
from agent.ui import Reporter
from backend.serve.records import ServerState
from skills.activation import TOOL_NAME as SKILL_TOOL
from skills.loader import Discovery
from skills.session import UnknownSkill, attach_skills, find_skills
from tools import reaper
from tools.base import ToolContext
from tools.registry import default_registry
from tools.workspace import SCRATCH_NAME, Workspace, hide_from_git

MAX_PLAN_ATTEMPTS = 3
"""Plans the model may write before the task stops (each rejected one is sent back with its
problems)."""
PLAN_MAX_TOKENS = 1024
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


class ToolchainMissing(UserError):
    """The plan needs a toolchain this machine lacks; nothing was written (exit 3)."""


class CommitFailed(UserError):
    """The project's repository could not take the final commit; the files stay (exit 3)."""


def _git_reason(exc: BaseException) -> str:
    """The last line git wrote to stderr for ``exc``, else the exception's first line."""
    stderr = str(getattr(exc, "stderr", "") or "").strip().strip("'").strip()
    lines = (stderr or str(exc)).splitlines()
    return lines[-1].strip() if lines else type(exc).__name__


_FILLER = frozenset({"a", "an", "the", "with", "and", "or", "for", "of", "to", "in", "on",
                     "that", "which", "using", "from", "by", "into", "my", "some",
                     # Portuguese, the seed's user's language ("uma API de gestão de preços")
                     "um", "uma", "uns", "umas", "o", "os", "as", "de", "do", "da", "dos",
                     "das", "com", "para", "por", "em", "no", "na", "nos", "nas", "que", "e",
                     "ou", "meu", "minha", "usando"})
"""Words a slug loses first when the whole description does not fit."""


_UNDECOMPOSED = str.maketrans({"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d",
                               "ð": "d", "þ": "th", "ı": "i", "ħ": "h", "ŋ": "ng"})
"""Latin letters that Unicode does not decompose into a base letter and an accent."""


def _words(text: str) -> list[str]:
    """The lowercase ASCII words of ``text``: accents dropped ("preços" is ``precos``), any
    other character a separator (a dash, an arrow, a CJK character: "price—list" is two
    words, which dropping them glued into ``pricelist``)."""
    folded = unicodedata.normalize("NFKD", text.lower().translate(_UNDECOMPOSED))
    kept = "".join(c for c in folded if not unicodedata.combining(c))
    return re.findall(r"[a-z0-9]+", kept)


def slugify(description: str, limit: int = 40) -> str:
    """A directory name from a description: lowercase words joined by hyphens, at most
    ``limit`` characters. When all the words do not fit, the filler words (:data:`_FILLER`) go
    first, then whole words from the end; a first word longer than ``limit`` is cut. Accented
    letters lose their accents ("gestão de preços" is ``gestao-de-precos``, where it was
    ``gest-o-de-pre-os``); a description with no Latin letter or digit gives ``new-project``."""
    words = _words(description)
    if not words:
        return "new-project"
    if len("-".join(words)) > limit:
        # Cutting at the limit alone kept "with" and dropped "tests" ("a CLI todo app with tests").
        words = [w for w in words if w not in _FILLER] or words
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or words[0][:limit]


_TESTS_CLAUSE = re.compile(r"""[\s,;]* \b(?:with|including|plus|com|incluindo|e) \s+
                               (?:\w+\s+)?  # ", with unit"
                               (?:tests?(?:\s+suite)?  # English; Portuguese puts the adjective
                                |testes?(?:\s+(?:unit[aá]rios|automatizados|automáticos))?)
                               \s* (?:$|[,.;:!(]|\b(?:and|or|e|ou)\b)  # ends: not "test data"
                               .*""", re.IGNORECASE | re.DOTALL | re.VERBOSE)
"""A clause asking for tests ("with tests", ", including unit tests.", "com testes
unitários"), and all after it."""


def module_name(description: str) -> str:
    """The simple recipe's Python module name for ``description``: its slug as an
    identifier (without a clause asking for tests, :data:`_TESTS_CLAUSE`, and without filler
    words, :data:`_FILLER`, unless nothing else is left), prefixed with
    ``project_`` where the slug could not be imported as itself (a leading digit, a keyword,
    a standard-library module it would shadow)."""
    # "with tests" tells the agent what to write; it names nothing the module holds
    # ("a CLI todo app with tests" gave cli_todo_app_tests.py). Nor do filler words, even
    # where they would fit ("a CLI that counts words" made a_cli_that_counts_words.py).
    text = _TESTS_CLAUSE.sub("", description) or description
    words = [w for w in _words(text) if w not in _FILLER]
    name = slugify(" ".join(words) or text, 24).replace("-", "_")
    if not name.isidentifier() or keyword.iskeyword(name) or name in sys.stdlib_module_names:
        return f"project_{name}"
    return name


@dataclass
class ProjectResult:
    """What ``new-project`` made: ``created`` is False when it stopped before writing
    anything (no usable plan)."""

    directory: Path
    session_id: str
    log: Path
    loop: LoopResult
    tests: TestReport
    files: list[str] = field(default_factory=list)
    commit: str | None = None
    recipe: Recipe | None = None
    plan: Plan | None = None
    created: bool = True
    environment: str = ""
    """How the isolated environment was made (empty when none was)."""
    unwritten: list[str] = field(default_factory=list)
    """Files of the plan that do not exist at the end."""
    plan_timings: list[Timings] = field(default_factory=list)
    server: ServerState | None = None
    """The managed server the session used (None with ``--base-url``): it is left running
    for the next command, and the summary says so."""

    def stats(self) -> dict[str, float | int | None]:
        """Totals over the session's turns (plan included): tokens, decode tok/s,
        acceptance rate."""
        return turn_stats(self.plan_timings + self.loop.timings)


def turn_stats(timings: list[Timings]) -> dict[str, float | int | None]:
    """Prompt tokens processed/cached, decoded tokens, decode tok/s, draft acceptance rate.
    ``cached_tokens`` is None when no turn reported its cache reuse (a server without
    llama-server's ``timings`` that does not report cached tokens either)."""
    prompt = sum(t.prompt_n or 0 for t in timings)
    reported = [t.cache_n for t in timings if t.cache_n is not None]
    cached = sum(reported) if reported or not timings else None
    decoded = sum(t.predicted_n or 0 for t in timings)
    ms = sum(t.predicted_ms or 0 for t in timings)
    drafts = sum(t.draft_n or 0 for t in timings)
    accepted = sum(t.draft_n_accepted or 0 for t in timings)
    return {"prompt_tokens": prompt, "cached_tokens": cached, "decoded_tokens": decoded,
            "decode_tok_s": round(decoded / ms * 1000, 1) if ms else None,
            "draft_tokens": drafts,
            "acceptance_rate": round(accepted / drafts, 3) if drafts else None}


_OTHER_DIR = {"cli_hint": " --dir", "mcp_hint": " directory"}
"""The end of "choose another": the command line's flag, the MCP tool's argument."""


def _check_target(directory: Path, force: bool) -> None:
    """Refuse (:class:`UsageError`) a target that is a file, not empty without ``force``,
    the user's home or the file system's root (git init and a commit of everything in it,
    even with ``force``), or a repository with uncommitted changes."""
    if directory == Path.home().resolve() or directory.parent == directory:
        what = "the root folder" if directory.parent == directory else "your home folder"
        raise UsageError(f"{directory} is {what}; new-project makes a folder of its own: give",
                         cli_hint=" --dir a new folder inside it",
                         mcp_hint=" a new folder inside it as the directory")
    try:
        directory.exists()
    except OSError as exc:  # a name longer than the file system allows, a path it refuses
        raise UsageError(f"{directory} cannot be used: {exc.strerror or exc}; choose another",
                         **_OTHER_DIR) from exc
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory; choose another",
                         **_OTHER_DIR)
    if not directory.exists():
        _check_creatable(directory)
    # A folder holding only a fresh `git init` is empty for this purpose (a field trial was
    # told such a folder "is not empty"); a repository with history is checked below.
    if directory.is_dir() and not force and any(p.name != ".git" for p in directory.iterdir()):
        raise UsageError(f"{directory} is not empty; choose another",
                         cli_hint=" --dir or pass --force", mcp_hint=" directory")
    if directory.is_dir() and force:
        hidden = _ignored_files(directory)
        if hidden:
            shown = ", ".join(hidden[:5]) + (f" and {len(hidden) - 5} more" if len(hidden) > 5
                                             else "")
            raise UsageError(f"{directory} holds files git ignores ({shown}): --force commits "
                             "the folder's files before the model writes anything, so none "
                             "is lost, and these cannot be committed; move them out of the "
                             "folder, or choose another --dir")
    outer = _enclosing_repo(directory)
    if outer is not None and directory.is_dir() and _dirty_under(outer, directory):
        raise UsageError(f"{directory} has uncommitted changes in the git repository at "
                         f"{outer}; commit or stash them first, or choose another",
                         **_OTHER_DIR)
    if (directory / ".git").exists():
        # The model may rewrite any file, and the commit takes every change: work the user
        # had not committed could be lost, or end up in the new project's commit.
        try:
            dirty = git.Repo(directory).is_dirty(untracked_files=True)
        except git.GitError as exc:
            raise UsageError(f"{directory} has a .git that git cannot read ({exc}); choose "
                             "another", **_OTHER_DIR) from exc
        if dirty:
            raise UsageError(f"{directory} has uncommitted changes; commit or stash them "
                             "first, or choose another", **_OTHER_DIR)


def _check_creatable(directory: Path) -> None:
    """Raise :class:`UsageError` when ``directory`` (which does not exist) cannot be made:
    its nearest existing parent is a file or not writable. Checked before the model is asked
    anything: ``mkdir`` failing after the plan was an internal error (exit 4), with minutes of
    the model's work thrown away."""
    parent = next(p for p in directory.parents if p.exists())
    if not parent.is_dir():
        raise UsageError(f"{directory} cannot be made: {parent} is a file; choose another",
                         **_OTHER_DIR)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{directory} cannot be made: no permission to create folders in "
                         f"{parent} (or its file system is read-only); choose another",
                         **_OTHER_DIR)


PRODUCT_EXCLUDES = (f"/{SCRATCH_NAME}/", f"/{VENV}/", "node_modules/")
"""What :func:`_prepare` keeps out of the project's commits (``.git/info/exclude``)."""
REGENERABLE = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                         ".tox", ".nox", "node_modules", SCRATCH_NAME})
"""Ignored folders that hold nothing a user wrote (caches, installed dependencies, the tools'
scratch folder of an earlier run)."""


def _ignored_files(directory: Path) -> list[str]:
    """What a commit of ``directory`` would leave out: the entries git ignores there (its
    ``.gitignore`` files, its repository's ``info/exclude`` when it has one, the user's global
    excludes) and :data:`PRODUCT_EXCLUDES`, folders as ``name/``, caches (:data:`REGENERABLE`,
    ``*.pyc``) and a virtualenv (``pyvenv.cfg``) left out. Git answers, so its rules are
    applied exactly; a folder without a repository is asked through a temporary one."""
    args = ["ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z",
            *(f"--exclude={pattern}" for pattern in PRODUCT_EXCLUDES)]
    try:
        if (directory / ".git").exists():
            listed = git.Git(directory).execute(["git", *args])
        else:
            with tempfile.TemporaryDirectory(prefix="dflash-agent-git-") as tmp:
                git.Git(tmp).init("-q")
                listed = git.Git(directory).execute(
                    ["git", f"--git-dir={Path(tmp) / '.git'}", f"--work-tree={directory}",
                     *args])
    except git.GitError as exc:
        raise UsageError(f"git cannot list the files of {directory} ({exc}); choose another",
                         **_OTHER_DIR) from exc
    hidden = []
    for entry in filter(None, str(listed).split("\0")):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name in REGENERABLE or name.endswith(".pyc") or \
                (entry.endswith("/") and (directory / entry / "pyvenv.cfg").is_file()):
            continue
        hidden.append(entry)
    return sorted(hidden)


def _enclosing_repo(directory: Path) -> Path | None:
    """The top of the git work tree that holds ``directory`` (or, for a folder not made yet,
    its nearest existing parent), when that is not ``directory`` itself."""
    start = next((p for p in (directory, *directory.parents) if p.is_dir()), None)
    if start is None:
        return None
    try:
        top = Path(git.Git(start).rev_parse("--show-toplevel")).resolve()
    except git.GitError:
        return None  # not in a work tree (or git cannot tell)
    return None if top == directory else top


def _dirty_under(top: Path, directory: Path) -> bool:
    """Whether the repository at ``top`` has uncommitted changes (untracked files too) under
    ``directory``."""
    try:
        return bool(git.Git(top).status("--porcelain", "--", str(directory)).strip())
    except git.GitError:
        return True  # unreadable: the refusal's message asks to commit first, which is safe


def _prepare(directory: Path, toolchain: str = "python") -> git.Repo:
    """``git init`` and a ``.gitignore`` for the toolchain; the isolated environment and the
    tools' scratch folder are also excluded through ``.git/info/exclude``, so a ``.gitignore``
    the model rewrites cannot put ``.venv`` or ``node_modules`` into the commit. Files already
    in a folder without commits are committed first, as they were."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what _check_creatable cannot foresee (/proc, a race)
        raise UserError(f"{directory} cannot be made: {exc.strerror or exc}; choose another "
                        "--dir") from exc
    repo = git.Repo.init(directory)
    for pattern in PRODUCT_EXCLUDES:
        hide_from_git(directory, pattern)
    if not repo.head.is_valid() and _staged_files(repo):
        # A folder that had files but no git (--force): they are committed first, as they
        # were, so whatever the model overwrites or deletes can be had back.
        _commit(repo, f"Files in {directory.name} before new-project\n\nCommitted by "
                "dflash-agent before the model wrote anything, so none of them is lost.")
    eco = ECOSYSTEMS[toolchain]
    gitignore = directory / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("".join(f"{line}\n" for line in (*eco.ignore, f"{SCRATCH_NAME}/")),
                             "utf-8")
    return repo


def commit_message(description: str, result: ProjectResult) -> str:
    """The new project's commit message: what exists, the recipe, the product's own test
    verdict (with its last lines when they did not pass) and how the agent's run ended."""
    verdict = result.tests.status
    # One line of printable text: a description with newlines would split the subject, and
    # escape sequences would reach every terminal that shows the log.
    words = "".join(c if c.isprintable() else " " for c in description).split()
    subject = f"New project: {' '.join(words)[:60]}"
    if verdict != "passed":
        subject += f" (tests: {verdict})"
    lines = [subject, ""]
    if result.plan is not None:
        lines.append(f"{result.plan.language} ({result.plan.toolchain}): "
                     f"{result.plan.summary}")
    lines.append(f"Files: {len(result.files)} ({', '.join(result.files[:12])}"
                 f"{', ...' if len(result.files) > 12 else ''})")
    if result.recipe is not None:
        lines.append(f"Recipe: {result.recipe.name} ({result.recipe.reason})")
    if result.unwritten:
        lines.append(f"Planned but not written: {', '.join(result.unwritten)}")
    runner = f" with `{result.tests.runner}`" if result.tests.runner else ""
    totals = f" ({result.tests.counts})" if result.tests.counts else ""
    lines.append(f"Tests, run by dflash-agent{runner}: {verdict}{totals}")
    if verdict != "passed" and result.tests.detail:
        lines += ["", *("    " + line for line in result.tests.detail.splitlines())]
    if result.loop.reason != "done":
        lines += ["", f"The agent stopped before finishing ({result.loop.reason}, "
                  f"{result.loop.steps} steps)."]
    lines += ["", "Created by dflash-agent."]
    return "\n".join(lines)


def _commit(repo: git.Repo, message: str) -> tuple[str | None, list[str]]:
    repo.git.add(A=True)
    if not repo.index.entries:
        return None, []
    reader = repo.config_reader()
    has_identity = reader.has_option("user", "name") and reader.has_option("user", "email")
    actor = None if has_identity else git.Actor("dflash-agent", "dflash-agent@localhost")
    commit = repo.index.commit(message, author=actor, committer=actor)
    return commit.hexsha, sorted(str(k[0]) for k in repo.index.entries)


def _present_files(repo: git.Repo) -> list[str]:
    """The files of the work tree git would take (tracked or not ignored), without touching
    the index."""
    try:
        listed = repo.git.ls_files("--cached", "--others", "--exclude-standard")
    except git.GitError:
        return []
    return sorted(set(listed.splitlines()))


def _staged_files(repo: git.Repo) -> list[str]:
    repo.git.add(A=True)
    return sorted(str(k[0]) for k in repo.index.entries)


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
    _check_target(directory, force)
    outer = _enclosing_repo(directory)
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
    return _served(_build(_Accepted(description, directory, settings, reporter, backend, log,
                                    emit, recipe, plan, plan_timings, env, protocol,
                                    auto_switch, found, tuple(skills), module)), backend)


def _served(result: ProjectResult, backend: Backend) -> ProjectResult:
    """``result`` naming the managed server the session used (``backend.state``)."""
    result.server = backend.state
    return result


def _work(agent: Agent, task: str, first: list[str], s: _Accepted
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
    try:
        return path.exists()
    except (OSError, ValueError):  # a name the file system refuses was never written
        return False


def _fixable(tests: TestReport) -> bool:
    """Whether the model could act on this verdict: tests that do not pass, or none found."""
    return tests.status in ("failed", "timeout", "no tests") or tests.status.startswith("error")


def _unmade(directory: Path, log: SessionLog, emit: Callable[[Event], None], recipe: Recipe,
            reason: str, text: str, timings: list[Timings]) -> ProjectResult:
    """The result of a session that ended before writing anything (``reason``: the
    :class:`FinalAnswer` reason)."""
    steps = MAX_PLAN_ATTEMPTS if reason == "plan_rejected" else 0
    emit(FinalAnswer(session_id=log.id, text=text, reason=reason, steps=steps))
    return ProjectResult(directory, log.id, log.path, LoopResult(text, reason, steps, timings),
                         TestReport("not run", reason if reason == "interrupted" else
                                    text or reason), recipe=recipe, created=False)


@dataclass
class _Accepted:
    """A session whose plan was accepted, before anything is written."""

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


def _build(s: _Accepted) -> ProjectResult:
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


def _make(s: _Accepted, progress: _Progress) -> ProjectResult:
    """:func:`_build`'s work; ``progress`` is updated as it goes."""
    description, directory, settings, reporter = s.description, s.directory, s.settings, \
        s.reporter
    backend, log, emit, recipe, plan, env = s.backend, s.log, s.emit, s.recipe, s.plan, s.env
    protocol, auto_switch, found, skills = s.protocol, s.auto_switch, s.found, s.skills
    client = backend.client
    session_id = log.id
    repo = _prepare(directory, plan.toolchain)
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
        project.files = _present_files(repo)
        return project
    project.unwritten = [f for f in plan.files if not _exists(directory / f)]
    try:
        project.files = _staged_files(repo)
        sha, files = _commit(repo, commit_message(description, project))
    except (git.GitError, ValueError, OSError) as exc:
        # The model's bash can break the repository (rm -rf .git, a garbled HEAD): a stated
        # cause and the files as they are, not an internal error.
        text = (f"the project's git repository could not take the commit ({_git_reason(exc)}); "
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

