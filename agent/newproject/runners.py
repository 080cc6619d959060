"""The project's own test runner, found from its files and run by the product itself.

``pytest`` in the project's ``.venv``, ``npm test``, ``cargo test``, ``go test ./...``,
``mvn test``, ``gradle test`` or ``make test``; the verdict is one of ``passed``, ``failed``,
``no tests``, ``timeout``, ``not run`` (with the reason) or ``error (...)`` when the runner
itself broke. Each verdict comes from the runner's exit code and, where a zero exit can still
mean "ran nothing" (node's runner, cargo, go, maven), from its summary line.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agent.newproject.environment import VENV, with_env
from agent.newproject.toolchains import ECOSYSTEMS, have
from tools import reaper
from tools.ignore import walk

TIMEOUT_S = 600.0
TAIL_LINES = 15
LINE_CHARS = 300
"""A line of the runner's output is cut to this many characters where it is shown, logged,
committed and sent back to the model (a test that prints megabytes on one line would otherwise
fill the model's context and the commit message)."""
MAX_OUTPUT = 256 << 20
"""Bytes of output after which the runner is stopped (a test printing in a loop)."""
POLL_S = 0.5
"""Seconds between checks of the output's size while the runner runs."""
READ_HEAD = 1 << 20
READ_TAIL = 4 << 20
"""Bytes of the runner's output read from its beginning and its end; the middle of a larger
output is left out."""


@dataclass
class TestReport:
    """What the product saw when it ran the project's tests."""

    __test__ = False  # not a pytest test class, though its name says Test
    status: str
    """passed, failed, no tests, timeout, not run or ``error (...)``."""
    detail: str = ""
    """The runner's last lines, or why nothing ran."""
    runner: str = ""
    """The command the product ran (empty when none ran)."""
    counts: str = ""
    """The runner's own totals (``1 passed in 0.01s``; ``# tests 3; # pass 3``), or empty."""


@dataclass
class Runner:
    """A test command and how to read its result."""

    ecosystem: str
    argv: list[str]
    verdict: Callable[[int, str], str]
    """(exit code, output) → status."""
    directory: Path | None = None
    """The project root; paths under it are shown relative to it."""

    @property
    def shown(self) -> str:
        """The command as the user would type it in the project folder."""
        if self.directory is None:
            return shlex.join(self.argv)
        root = str(self.directory)
        return shlex.join("." if a == root else a.removeprefix(root + os.sep)
                          for a in self.argv)


_PYTEST_STATUS = {0: "passed", 1: "failed", 5: "no tests"}
_PROJECT_INIS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
"""pytest's configuration files, in the order pytest looks for them."""
_NPM_PLACEHOLDER = "no test specified"


def _pytest_verdict(code: int, out: str) -> str:
    return _PYTEST_STATUS.get(code, f"error (pytest exit {code})")


def _node_verdict(code: int, out: str) -> str:
    if code != 0:
        return "failed"
    # node --test prints TAP-like totals; 0 tests is not a pass.
    return "no tests" if re.search(r"^[#ℹ] tests 0\b", out, re.M) else "passed"


def _cargo_verdict(code: int, out: str) -> str:
    if code != 0:
        return "failed"
    counts = [int(n) for n in re.findall(r"^running (\d+) tests?", out, re.M)]
    return "passed" if any(counts) else "no tests"


def _go_verdict(code: int, out: str) -> str:
    if code != 0:
        return "failed"
    return "passed" if re.search(r"^ok\s", out, re.M) else "no tests"


def _maven_verdict(code: int, out: str) -> str:
    if code != 0:
        return "failed"
    runs = [int(n) for n in re.findall(r"Tests run: (\d+)", out)]
    return "passed" if any(runs) else "no tests"


def _exit_verdict(code: int, out: str) -> str:
    return "passed" if code == 0 else "failed"


def _pytest_config(directory: Path) -> Path | None:
    """The file pytest would take its settings from in ``directory``, or None.

    pytest's own rule (``_pytest.config.findpaths.locate_config``): ``pytest.ini`` and
    ``.pytest.ini`` whatever they hold; ``pyproject.toml`` only with a ``[tool.pytest]`` or
    ``[tool.pytest.ini_options]`` table, ``tox.ini`` only with ``[pytest]``, ``setup.cfg`` only
    with ``[tool:pytest]``. A file that does not parse is taken, so pytest reports it in its own
    words instead of the project's settings being dropped in silence."""
    for name in _PROJECT_INIS:
        path = directory / name
        if not path.is_file():
            continue
        if name in ("pytest.ini", ".pytest.ini"):
            return path
        try:
            text = path.read_text("utf-8")
            if name == "pyproject.toml":
                tool = tomllib.loads(text).get("tool")
                found = isinstance(tool, dict) and isinstance(tool.get("pytest"), dict)
            else:
                parser = configparser.ConfigParser(interpolation=None)
                parser.read_string(text)
                found = parser.has_section("pytest" if name == "tox.ini" else "tool:pytest")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, configparser.Error):
            return path
        if found:
            return path
    return None


def _python_runner(directory: Path) -> Runner:
    venv_python = directory / VENV / "bin" / "python"
    ini = _pytest_config(directory)
    # Confined to the project (its own config file or none), so a project made inside another
    # is not judged by the outer project's pytest settings.
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(directory),
            "-c", str(ini) if ini else os.devnull]
    python = str(venv_python) if venv_python.is_file() else sys.executable
    return Runner("python", [python, *args], _pytest_verdict, directory)


def _make_has_test(directory: Path) -> bool:
    for name in ECOSYSTEMS["c-make"].markers:
        path = directory / name
        if path.is_file() and re.search(r"^test\s*:", path.read_text("utf-8", "replace"),
                                        re.M):
            return True
    return False


def _npm_has_test(directory: Path) -> bool:
    try:
        scripts = json.loads((directory / "package.json").read_text("utf-8")).get("scripts")
    except (OSError, ValueError, AttributeError):
        return False
    test = scripts.get("test") if isinstance(scripts, dict) else None
    return isinstance(test, str) and bool(test.strip()) and _NPM_PLACEHOLDER not in test


def detect(directory: Path, preferred: str | None = None) -> Runner | str:
    """The test runner of the project in ``directory`` (``preferred``: the plan's toolchain,
    tried first), or why there is none (a sentence)."""
    order = list(ECOSYSTEMS)
    if preferred in ECOSYSTEMS:
        order.remove(preferred)
        order.insert(0, preferred)
    for name in order:
        eco = ECOSYSTEMS[name]
        if name == "python":
            # pytest needs no marker file: a Python plan is always judged by it (a project
            # whose model wrote no .py file gets pytest's own "no tests", not "not run").
            if name == preferred or any((directory / m).is_file() for m in eco.markers) \
                    or any(p.suffix == ".py" for p in walk(directory, directory)):
                return _python_runner(directory)
            continue
        if not any((directory / m).is_file() for m in eco.markers):
            continue
        if name == "node":
            if not _npm_has_test(directory):
                return "package.json has no \"test\" script: no tests to run"
            return Runner(name, ["npm", "test"], _node_verdict)
        if name == "rust":
            return Runner(name, ["cargo", "test"], _cargo_verdict)
        if name == "go":
            return Runner(name, ["go", "test", "./..."], _go_verdict)
        if name == "java-maven":
            return Runner(name, ["mvn", "-B", "test"], _maven_verdict)
        if name == "java-gradle":
            wrapper = directory / "gradlew"
            gradle = ["./gradlew"] if wrapper.is_file() else ["gradle"]
            return Runner(name, [*gradle, "test", "--console=plain"], _exit_verdict)
        if name == "c-make":
            if not _make_has_test(directory):
                return "the Makefile has no `test` target: no tests to run"
            return Runner(name, ["make", "test"], _exit_verdict)
    return ("no test runner detected (no pyproject.toml or .py files, package.json, "
            "Cargo.toml, go.mod, pom.xml, build.gradle or Makefile)")


def run_project_tests(directory: Path, preferred: str | None = None,
                      env: dict[str, str | None] | None = None,
                      timeout: float = TIMEOUT_S, own_pytest: bool = False) -> TestReport:
    """Find and run the tests of the project in ``directory`` and report honestly; never
    raises. ``preferred``: the plan's toolchain; ``env``: the project's environment overrides
    (:func:`agent.newproject.environment.project_env`); ``timeout`` in seconds.
    ``own_pytest``: when the project's ``.venv`` has no pytest, run dflash-agent's own (the
    simple recipe, which installs nothing) instead of reporting ``not run``."""
    found = detect(directory, preferred)
    if isinstance(found, str):
        status = "no tests" if "no tests to run" in found else "not run"
        return TestReport(status, found)
    proc_env = with_env(env or {}, kind="tests")
    executable = found.argv[0]
    if "/" not in executable and have((executable,), proc_env.get("PATH")) is None:
        return TestReport("not run", f"{executable} is not on PATH", found.shown)
    if found.ecosystem == "python" and not _has_pytest(found.argv[0], proc_env):
        if not own_pytest:
            return TestReport("not run", f"pytest is not installed in {VENV}; install it "
                              f"with {VENV}/bin/python -m pip install pytest", found.shown)
        found.argv[0] = sys.executable
    # One stream, in the order it was written (the summary line comes last), into a file
    # rather than a pipe: a process the tests leave running in the background keeps a pipe
    # open, and reading it to its end would wait for that process (up to the timeout) after
    # the tests themselves are done; a file also bounds what is held in memory.
    with tempfile.TemporaryFile() as sink, \
            tempfile.TemporaryDirectory(prefix="dflash-agent-pycache-") as cache:
        if found.ecosystem == "python":
            # Python reuses a compiled module whose source kept its size and modification
            # second: an edit made within a second of the last run (`+` to `-`) was tested as
            # the file was before. An empty cache folder for each run compiles every module
            # from its source.
            proc_env = {**proc_env, "PYTHONPYCACHEPREFIX": cache,
                        "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            proc = subprocess.Popen(found.argv, cwd=directory, stdout=sink,
                                    stderr=subprocess.STDOUT, env=proc_env,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            return TestReport("not run", f"{found.shown} could not start: {exc}", found.shown)
        try:
            code = _wait(proc, sink, timeout)
        except subprocess.TimeoutExpired:
            # What it printed before it hung says where it hung (for the user and the model).
            said = summarise(_read_output(sink))
            return TestReport("timeout", f"{found.shown} did not finish within {timeout:.0f} s"
                              + (f"; its last lines:\n{said}" if said else ""), found.shown)
        except _TooMuchOutput:
            said = summarise(_read_output(sink))
            return TestReport(f"error (more than {MAX_OUTPUT >> 20} MiB of output)",
                              f"{found.shown} was stopped after printing more than "
                              f"{MAX_OUTPUT >> 20} MiB; its last lines:\n{said}", found.shown)
        finally:
            # What the project's tests left running (a server fixture without teardown) goes
            # too.
            reaper.kill_tagged(proc_env[reaper.OWNER_ENV])
        out = _read_output(sink)
    return TestReport(found.verdict(code, out), summarise(out), found.shown, counts(out))


class _TooMuchOutput(Exception):
    """The runner printed more than :data:`MAX_OUTPUT` bytes (it was killed)."""


def _wait(proc: subprocess.Popen, sink: IO[bytes], timeout: float) -> int:
    """``proc``'s exit code; it is killed when ``timeout`` seconds pass
    (:class:`subprocess.TimeoutExpired`) or ``sink`` grows past :data:`MAX_OUTPUT`
    (:class:`_TooMuchOutput`), the disk being all that would stop it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return proc.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                proc.kill()
                proc.wait()
                raise
        if os.fstat(sink.fileno()).st_size > MAX_OUTPUT:
            proc.kill()
            proc.wait()
            raise _TooMuchOutput


def _read_output(sink: IO[bytes]) -> str:
    """The runner's output in ``sink``: all of it up to :data:`READ_HEAD` +
    :data:`READ_TAIL` bytes, else its beginning (cargo's per-target lines) and its end (the
    totals) with a line saying how much was left out."""
    size = sink.seek(0, os.SEEK_END)
    sink.seek(0)
    if size <= READ_HEAD + READ_TAIL:
        data = sink.read()
    else:
        head = sink.read(READ_HEAD)
        sink.seek(size - READ_TAIL)
        left_out = f"\n[... {size - READ_HEAD - READ_TAIL} bytes of output left out ...]\n"
        data = head + left_out.encode() + sink.read()
    return data.decode("utf-8", "replace")


_SUMMARY = re.compile(r"^\s*(?:[#ℹ] (?:tests|pass|fail) \d+|test result:|Tests run:|ok\s|FAIL\b"
                      r"|=+ .*\b(?:passed|failed|errors?|no tests ran)\b.* =+$"
                      r"|\d+ (?:passed|failed)\b)")


def counts(out: str) -> str:
    """The runner's totals: its last summary lines (at most three), joined with ``; ``; cargo's
    one line per test target is summed up instead."""
    suites = re.findall(r"^test result: \w+\. (\d+) passed; (\d+) failed", out, re.M)
    if suites:
        passed, failed = (sum(int(n[i]) for n in suites) for i in (0, 1))
        return f"{passed} passed, {failed} failed ({len(suites)} test targets)"
    found = [line.strip().strip("=").strip() for line in out.splitlines()
             if _SUMMARY.match(line)]
    return "; ".join(_cut(line) for line in found[-3:])


def summarise(out: str) -> str:
    """The runner's summary lines (counts of passed and failed tests) followed by its last
    :data:`TAIL_LINES` lines; runners that print failure details after their totals (node's)
    would otherwise lose the totals."""
    lines = out.strip().splitlines()
    tail = lines[-TAIL_LINES:]
    counts = [line for line in lines[:-TAIL_LINES] if _SUMMARY.match(line)][-6:]
    return "\n".join(_cut(line) for line in counts + tail)


def _cut(line: str) -> str:
    """``line`` at most :data:`LINE_CHARS` characters, saying how many were left out."""
    if len(line) <= LINE_CHARS:
        return line
    return f"{line[:LINE_CHARS]} [... {len(line) - LINE_CHARS} more characters]"


def _has_pytest(python: str, env: dict[str, str]) -> bool:
    try:
        return subprocess.run([python, "-c", "import pytest"], capture_output=True,
                              timeout=60, env=env, stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
