"""Task folders: loading and validating them, picking them, the fresh repository a task runs
in, and its hidden check."""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_STEPS = 30
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_CHECK_TIMEOUT_S = 180.0
TASK_KEYS = {"instruction", "check", "timeout_s", "max_steps", "check_timeout_s", "tags"}
IGNORED = shutil.ignore_patterns("__pycache__", ".pytest_cache", "node_modules", "*.pyc")
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "task-bench", "GIT_AUTHOR_EMAIL": "task-bench@localhost",
                "GIT_COMMITTER_NAME": "task-bench", "GIT_COMMITTER_EMAIL": "task-bench@localhost",
                "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
                "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000"}
"""A fixed identity and date: every fresh repository of a task has the same commit."""
TAIL_LINES = 30


class TaskError(Exception):
    """A task folder, task list or results file that cannot be used; the message names the
    file and says what is wrong (shown as one ``error:`` line, never a traceback)."""


@dataclass(frozen=True)
class Task:
    id: str
    suite: str
    path: Path
    instruction: str
    check: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_steps: int = DEFAULT_MAX_STEPS
    check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S
    tags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.id}"

    @property
    def repo_dir(self) -> Path:
        return self.path / "repo"

    @property
    def check_dir(self) -> Path:
        return self.path / "check"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    def files(self) -> list[str]:
        """The starting files, relative to the repository root, sorted."""
        return sorted(p.relative_to(self.repo_dir).as_posix()
                      for p in self.repo_dir.rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)


def _number(value: object, name: str, where: Path, integer: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if not ok or isinstance(value, bool) or value <= 0:  # type: ignore[operator]
        kind = "a positive integer" if integer else "a positive number of seconds"
        raise TaskError(f"{where}: {name} must be {kind}, not {value!r}")
    return value  # type: ignore[return-value]


def _default_check(task_dir: Path) -> str:
    """The check command a task without one gets, from its check files."""
    names = [p.name for p in (task_dir / "check").glob("*")] if (task_dir / "check").is_dir() \
        else []
    if any(n.startswith("test_") and n.endswith(".py") for n in names):
        return "python -m pytest -q -p no:cacheprovider"
    if any(n.endswith((".test.js", ".test.mjs", ".test.cjs")) for n in names):
        return "node --test"
    raise TaskError(f"{task_dir}: no check command: set check in task.toml (the command whose "
                    "exit code decides pass or fail)")


def load_task(task_dir: Path, suite: str | None = None) -> Task:
    """The task in ``task_dir``; raises :class:`TaskError` saying what is missing or wrong."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise TaskError(f"{task_dir}: not a task folder")
    meta: dict = {}
    toml_path = task_dir / "task.toml"
    if toml_path.is_file():
        try:
            meta = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise TaskError(f"{toml_path}: not valid TOML ({exc})") from None
        unknown = sorted(set(meta) - TASK_KEYS)
        if unknown:
            raise TaskError(f"{toml_path}: unknown keys {', '.join(unknown)} (known: "
                            f"{', '.join(sorted(TASK_KEYS))})")
    md_path = task_dir / "task.md"
    instruction = meta.get("instruction")
    if instruction is not None and md_path.is_file():
        raise TaskError(f"{task_dir}: the instruction is in both task.md and task.toml; "
                        "keep one")
    if instruction is None and md_path.is_file():
        instruction = md_path.read_text(encoding="utf-8")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskError(f"{task_dir}: no instruction: write it in task.md or as instruction "
                        "in task.toml")
    if not (task_dir / "repo").is_dir():
        raise TaskError(f"{task_dir}: no repo/ folder with the starting files")
    check = meta.get("check")
    if check is None:
        check = _default_check(task_dir)
    if not isinstance(check, str) or not check.strip():
        raise TaskError(f"{toml_path}: check must be a command line (a non-empty string)")
    try:
        shlex.split(check)
    except ValueError as exc:
        raise TaskError(f"{toml_path}: check is not a valid command line ({exc})") from None
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskError(f"{toml_path}: tags must be a list of strings")
    where = toml_path
    return Task(id=task_dir.name, suite=suite or task_dir.parent.name, path=task_dir,
                instruction=instruction.strip(), check=check.strip(),
                timeout_s=float(_number(meta.get("timeout_s", DEFAULT_TIMEOUT_S),
                                        "timeout_s", where)),
                max_steps=int(_number(meta.get("max_steps", DEFAULT_MAX_STEPS), "max_steps",
                                      where, integer=True)),
                check_timeout_s=float(_number(meta.get("check_timeout_s",
                                                       DEFAULT_CHECK_TIMEOUT_S),
                                              "check_timeout_s", where)),
                tags=tuple(tags))


def _is_task_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists()
                                 for name in ("task.toml", "task.md", "repo"))


def suites(root: Path) -> dict[str, list[Path]]:
    """Suite name → its task folders (sorted), for every suite folder under ``root``."""
    found: dict[str, list[Path]] = {}
    for folder in sorted(Path(root).iterdir()) if Path(root).is_dir() else []:
        if folder.is_dir() and not folder.name.startswith((".", "_")):
            tasks = [p for p in sorted(folder.iterdir()) if _is_task_dir(p)]
            if tasks:
                found[folder.name] = tasks
    return found


GENERATED_SUITES: dict[str, str] = {"humaneval": "benchmarks.tasks.humaneval:tasks"}
"""Suites made on the fly rather than kept as folders: name → ``module:function`` returning
the tasks (``sample=True``: the suite's default sample; ``False``: all of them). One is made
only when a spec names it: ``<name>`` (the sample), ``<name>-all``, or an id, key or glob
beginning with ``<name>`` (over all of them); "all" stays the folder suites."""


def generated(name: str, sample: bool) -> list[Task]:
    """The tasks of the generated suite ``name`` (see :data:`GENERATED_SUITES`)."""
    module, _, function = GENERATED_SUITES[name].partition(":")
    return getattr(importlib.import_module(module), function)(sample=sample)


def _generated_hits(item: str) -> list[Task] | None:
    """The generated tasks ``item`` names, or None when it names no generated suite."""
    for name in GENERATED_SUITES:
        if item == name:
            return generated(name, sample=True)
        if item == f"{name}-all":
            return generated(name, sample=False)
        if item.startswith(name):
            return [t for t in generated(name, sample=False)
                    if fnmatch.fnmatchcase(t.id, item) or fnmatch.fnmatchcase(t.key, item)]
    return None


def select(root: Path, spec: str | None) -> list[Task]:
    """The tasks ``spec`` names, loaded: None or "all" (every folder suite), a suite name, task
    ids or ``suite/id`` keys, globs over either (``repo-edit/fix-*``), comma-separated; a
    generated suite (:data:`GENERATED_SUITES`) only when named. Every task is loaded before
    any runs, so a broken one stops the run before it starts."""
    found = suites(root)
    every = [(suite, p) for suite, paths in found.items() for p in paths]
    chosen: list[Task | tuple[str, Path]] = []
    for item in [s.strip() for s in (spec or "all").split(",") if s.strip()]:
        made = None if item in found else _generated_hits(item)
        if made is not None:
            if not made:
                raise TaskError(f"no task of a generated suite matches {item!r}")
            chosen += [t for t in made if t.key not in {c.key for c in chosen
                                                        if isinstance(c, Task)}]
            continue
        if not found:
            raise TaskError(f"{root}: no suites (folders of task folders) here")
        if item == "all":
            hits = every
        elif item in found:
            hits = [(item, p) for p in found[item]]
        else:
            hits = [(s, p) for s, p in every
                    if fnmatch.fnmatchcase(p.name, item) or fnmatch.fnmatchcase(f"{s}/{p.name}",
                                                                                 item)]
        if not hits:
            names = ", ".join([*found, *GENERATED_SUITES])
            raise TaskError(f"no task or suite matches {item!r} (suites: {names}; `list` "
                            "shows the tasks)")
        chosen += [h for h in hits if h not in chosen]
    return [c if isinstance(c, Task) else load_task(c[1], c[0]) for c in chosen]


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1"}
    proc = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false",
                           "-c", "core.hooksPath=/dev/null", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise TaskError(f"git {args[0]} failed in {repo}: {proc.stderr.strip()[-400:]}")


def prepare_repo(task: Task, dest: Path) -> Path:
    """A fresh git repository at ``dest`` holding the starting files, committed."""
    shutil.copytree(task.repo_dir, dest, ignore=IGNORED)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "--allow-empty", "-m", f"Starting files of {task.key}")
    return dest


def apply_files(src: Path, repo: Path) -> list[str]:
    """Copy every file under ``src`` into ``repo`` (same relative paths), overwriting files
    of the same name; the paths copied."""
    copied = []
    for path in sorted(src.rglob("*")) if src.is_dir() else []:
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(src)
            target = repo / rel
            if target.is_symlink() or (target.exists() and not target.is_file()):
                shutil.rmtree(target) if target.is_dir() and not target.is_symlink() \
                    else target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            copied.append(rel.as_posix())
    return copied


def check_argv(command: str) -> list[str]:
    """The check's argv: ``python``/``python3`` at its start is this interpreter, so pytest is
    the benchmark's own whatever the agent installed or left on PATH."""
    argv = shlex.split(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


@dataclass
class CheckResult:
    status: str
    """passed, failed, timeout or error (the command could not start)."""
    exit_code: int | None
    seconds: float
    tail: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def as_dict(self) -> dict:
        return {"status": self.status, "exit_code": self.exit_code,
                "seconds": round(self.seconds, 2), "tail": self.tail}


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(line[:300] for line in text.strip().splitlines()[-lines:])


def run_command(argv: list[str], cwd: Path, timeout: float,
                env: dict[str, str] | None = None) -> tuple[int | None, str, float]:
    """Run ``argv`` in its own process group, output to an unnamed file (a process it leaves
    behind cannot hold a pipe open); at ``timeout`` the group gets SIGTERM, then SIGKILL.
    Returns (exit code, or None on timeout; output; seconds). Raises OSError when it cannot
    start."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        end_group(proc, timed_out=code is None)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return code, text, time.monotonic() - started


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def end_group(proc: subprocess.Popen, timed_out: bool, grace: float = 10.0) -> None:
    """End what is left of ``proc``'s process group: one that ran out of time gets SIGTERM
    and ``grace`` seconds to stop (the agent ends its session log then), then SIGKILL for
    whatever is left (a background job of the task's own)."""
    if timed_out:
        _signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def check_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "NODE_OPTIONS")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_check(task: Task, repo: Path) -> CheckResult:
    """Copy the hidden check files into ``repo`` (they win over files of the same name) and
    run the check command there, with its timeout."""
    apply_files(task.check_dir, repo)
    try:
        code, text, seconds = run_command(check_argv(task.check), repo, task.check_timeout_s,
                                          check_env())
    except OSError as exc:
        return CheckResult("error", None, 0.0, f"the check {task.check!r} could not start: "
                           f"{exc}")
    if code is None:
        return CheckResult("timeout", None, seconds,
                           _tail(text) + f"\n[check timed out after {task.check_timeout_s:g} s]")
    return CheckResult("passed" if code == 0 else "failed", code, seconds, _tail(text))


def verify(task: Task, work: Path) -> tuple[CheckResult, CheckResult]:
    """The check on the starting files and on the reference solution (``solution/`` files
    over the starting ones): a sound task fails the first and passes the second."""
    if not task.solution_dir.is_dir():
        raise TaskError(f"{task.path}: no solution/ folder (the reference solution)")
    start = prepare_repo(task, work / "start")
    solved = prepare_repo(task, work / "solved")
    apply_files(task.solution_dir, solved)
    return run_check(task, start), run_check(task, solved)
