"""Write the ``exercism-python`` suite from a checkout of Exercism's Python track (MIT licence,
Exercism; https://github.com/exercism/python).

    python -m benchmarks.tasks.vendor_exercism CHECKOUT [--every 3] [--polyglot POLYGLOT]

Every ``--every``-th active practice exercise, in the order of the track's ``config.json``
(which runs from easy to hard within each concept), becomes a task folder under
``benchmarks/tasks/exercism-python/<slug>/``: ``repo/`` holds the stub the track gives a
student; the instruction is the exercise's ``.docs/instructions.md`` (and
``instructions.append.md``) followed by the request aider's benchmark adds to each exercise;
``check/`` holds the exercise's tests (hidden until the agent stops); ``solution/`` holds the
track's example solution. The track's licence and the commit go beside the tasks
(``LICENSE``, ``SOURCE.md``). Left out: deprecated exercises, those whose tests need more than
one file, and those whose tests already pass on the stub (the refactoring exercises: ledger,
markdown), kept only when the tests fail on the stub and pass on the example.

``--polyglot`` also writes ``polyglot-python/`` from a checkout of Aider's polyglot benchmark
(https://github.com/Aider-AI/polyglot-benchmark): all of its Python exercises, the hard ones
of the same track, under the track's licence (the benchmark states that its content is
Exercism's, used under Exercism's licences)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.tasks.tasks import load_task, verify

SUITE = "exercism-python"
POLYGLOT_SUITE = "polyglot-python"
HERE = Path(__file__).resolve().parent
REQUEST = ("Use the above instructions to modify the supplied files: {files}\n"
           "Don't change the names of existing functions or classes, as they may be referenced "
           "from other code like unit tests, etc.\nOnly use standard python libraries, don't "
           "suggest installing any packages.")
"""Aider's benchmark prompt after an exercise's instructions (aider/benchmark/prompts.py,
``instructions_addendum``), so that the scores compare with its published ones."""


def instruction(exercise: Path, stub: str) -> str:
    """The exercise's instructions and the request, as one message."""
    docs = exercise / ".docs"
    parts = [(docs / "instructions.md").read_text("utf-8").strip()]
    extra = docs / "instructions.append.md"
    if extra.is_file():
        parts.append(extra.read_text("utf-8").strip())
    parts.append(REQUEST.format(files=stub))
    return "\n\n".join(parts) + "\n"


def write_task(exercise: Path, out: Path, difficulty: int, tag: str = "exercism") -> bool:
    """Write the task folder of one exercise; False (nothing left written) when its files are
    not a single stub, a single test file and an example, or when its tests do not fail on
    the stub and pass on the example."""
    files = json.loads((exercise / ".meta" / "config.json").read_text("utf-8"))["files"]
    solution, test, example = files.get("solution", []), files.get("test", []), \
        files.get("example", [])
    if len(solution) != 1 or len(test) != 1 or len(example) != 1:
        return False
    [stub], [tests], [model] = solution, test, example
    task = out / exercise.name
    for sub in ("repo", "check", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(exercise / stub, task / "repo" / stub)
    shutil.copyfile(exercise / tests, task / "check" / tests)
    shutil.copyfile(exercise / model, task / "solution" / stub)
    text = instruction(exercise, stub)
    # json.dumps writes a valid TOML basic string (\n, \", \\ and \uXXXX escapes).
    (task / "task.toml").write_text(
        f"instruction = {json.dumps(text)}\n"
        f'check = "python -m pytest -q -p no:cacheprovider {tests}"\n'
        f'tags = ["python", "{tag}", "difficulty-{difficulty}"]\n', "utf-8")
    with tempfile.TemporaryDirectory() as work:
        start, solved = verify(load_task(task, out.name), Path(work))
    if (start.status, solved.status) != ("failed", "passed"):
        shutil.rmtree(task)
        return False
    return True


def _commit(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                          text=True).stdout.strip() or "(not a git checkout)"


def vendor_polyglot(polyglot: Path, licence: Path, out: Path) -> list[str]:
    """Write every Python exercise of Aider's polyglot benchmark checkout ``polyglot`` into
    ``out`` (emptied first), with the track's ``licence``; the slugs written."""
    practice = polyglot / "python" / "exercises" / "practice"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    exercises = sorted(p for p in practice.iterdir() if (p / ".meta" / "config.json").is_file())
    written = [e.name for e in exercises if write_task(e, out, 0, tag="polyglot")]
    shutil.copyfile(licence, out / "LICENSE")
    (out / "SOURCE.md").write_text(
        f"# Source\n\nThe Python exercises of Aider's polyglot benchmark "
        f"(https://github.com/Aider-AI/polyglot-benchmark), commit `{_commit(polyglot)}`; its "
        "content is Exercism's Python track (https://github.com/exercism/python), MIT licence "
        "(`LICENSE`, Copyright (c) 2021 Exercism). Written by `python -m "
        "benchmarks.tasks.vendor_exercism CHECKOUT --polyglot POLYGLOT`: "
        f"{len(written)} of its {len(exercises)} exercises (kept when the tests fail on the "
        "stub and pass on the example). Stubs, tests and example solutions unchanged.\n",
        "utf-8")
    return written


def vendor(checkout: Path, every: int, out: Path) -> list[str]:
    """Write the suite from ``checkout`` into ``out`` (emptied first); the slugs written."""
    config = json.loads((checkout / "config.json").read_text("utf-8"))
    active = [e for e in config["exercises"]["practice"]
              if e.get("status", "active") != "deprecated"]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    written = [e["slug"] for e in active[::every]
               if write_task(checkout / "exercises" / "practice" / e["slug"], out,
                             int(e.get("difficulty", 0)))]
    shutil.copyfile(checkout / "LICENSE", out / "LICENSE")
    (out / "SOURCE.md").write_text(
        f"# Source\n\nExercism's Python track (https://github.com/exercism/python), commit "
        f"`{_commit(checkout)}`, MIT licence (`LICENSE`, Copyright (c) 2021 Exercism). "
        f"One in {every} of its {len(active)} active practice exercises in `config.json` "
        "order, written by "
        f"`python -m benchmarks.tasks.vendor_exercism CHECKOUT --every {every}`: "
        f"{len(written)} tasks (an exercise is kept when its tests fail on the stub and pass "
        "on the example). Stubs, tests and example solutions are the track's, unchanged.\n",
        "utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of exercism/python")
    parser.add_argument("--every", type=int, default=3, help="keep every N-th exercise")
    parser.add_argument("--polyglot", type=Path, help="also a checkout of "
                        "Aider-AI/polyglot-benchmark: its Python exercises, all of them")
    args = parser.parse_args(argv)
    if not (args.checkout / "config.json").is_file():
        print(f"error: {args.checkout}: no config.json (not a checkout of exercism/python)",
              file=sys.stderr)
        return 3
    if args.polyglot and not (args.polyglot / "python" / "exercises" / "practice").is_dir():
        print(f"error: {args.polyglot}: no python/exercises/practice (not a checkout of "
              "Aider-AI/polyglot-benchmark)", file=sys.stderr)
        return 3
    written = vendor(args.checkout, args.every, HERE / SUITE)
    print(f"{len(written)} tasks in {HERE / SUITE}")
    if args.polyglot:
        written = vendor_polyglot(args.polyglot, args.checkout / "LICENSE",
                                  HERE / POLYGLOT_SUITE)
        print(f"{len(written)} tasks in {HERE / POLYGLOT_SUITE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
