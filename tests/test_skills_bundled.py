"""The bundled skills' scripts run for real: the Python-project scaffold passes its own pytest,
the test runner reports pass and fail, the commit checker judges staged files and messages;
allowed-tools parsing maps other clients' tool names onto ours."""

import os
import subprocess
import sys
from pathlib import Path

import git

from skills.activation import Permission, parse_allowed_tools
from skills.loader import BUNDLED_DIR

KNOWN = {"view", "create", "str_replace", "insert", "undo_edit", "grep", "glob", "bash"}


def script(skill: str, name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BUNDLED_DIR / skill / "scripts" / name), *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_python_project_scaffold_passes_its_own_tests(tmp_path: Path):
    made = script("python-project", "scaffold.py", "todo_app", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "src" / "todo_app" / "core.py").is_file()
    assert 'name = "todo-app"' in (tmp_path / "pyproject.toml").read_text()
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert tests.returncode == 0 and "2 passed" in tests.stdout, tests.stdout
    again = script("python-project", "scaffold.py", "todo_app", cwd=tmp_path)
    assert again.returncode == 1 and "exist already" in again.stderr
    bad = script("python-project", "scaffold.py", "Todo App", cwd=tmp_path / "src")
    assert bad.returncode == 1 and "not a valid name" in bad.stderr


def test_run_tests_reports_passed_failed_and_missing(tmp_path: Path, monkeypatch):
    # As on a user's machine, Python keeps compiled modules (__pycache__).
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert script("python-project", "scaffold.py", "calc", cwd=tmp_path).returncode == 0
    ok = script("test-before-done", "run_tests.py", cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.strip().endswith("TESTS PASSED")
    # The user's own pytest run leaves the compiled modules behind.
    subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=tmp_path, capture_output=True,
                   timeout=300, stdin=subprocess.DEVNULL)
    assert list((tmp_path / "src" / "calc" / "__pycache__").glob("core.*.pyc"))
    core = tmp_path / "src" / "calc" / "core.py"
    before = core.stat()
    core.write_text(core.read_text().replace("return a + b", "return a - b"))
    # The same size and modification time as when the passing run compiled it: an edit within
    # the same second, which Python's bytecode cache took for the old file.
    os.utime(core, ns=(before.st_atime_ns, before.st_mtime_ns))
    failed = script("test-before-done", "run_tests.py", str(tmp_path), cwd=tmp_path.parent)
    assert failed.returncode == 1 and "TESTS FAILED" in failed.stdout.splitlines()[-1]
    (tmp_path / "empty").mkdir()
    none = script("test-before-done", "run_tests.py", cwd=tmp_path / "empty")
    assert none.returncode == 2 and "no tests found" in none.stdout


def test_check_commit_judges_staged_files_and_the_message(tmp_path: Path):
    repo = git.Repo.init(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    nothing = script("focused-commit", "check_commit.py", "Add a", cwd=tmp_path)
    assert nothing.returncode == 1 and "nothing is staged" in nothing.stdout
    repo.index.add(["a.py"])
    good = script("focused-commit", "check_commit.py",
                  "Add the x setting\n\nThe loader needs a default.", cwd=tmp_path)
    assert good.returncode == 0, good.stdout
    assert "staged: a.py" in good.stdout and "not staged: notes.txt" in good.stdout
    assert good.stdout.strip().endswith("OK")
    vague = script("focused-commit", "check_commit.py", "fixes.", cwd=tmp_path)
    assert vague.returncode == 1 and "vague" in vague.stdout and "full stop" in vague.stdout
    long = script("focused-commit", "check_commit.py", "Add " + "x" * 80 + "\nbody",
                  cwd=tmp_path)
    assert "characters" in long.stdout and "blank line" in long.stdout
    outside = script("focused-commit", "check_commit.py", "Add a", cwd=tmp_path.parent)
    assert outside.returncode == 2


def test_allowed_tools_map_client_names_and_patterns():
    perms, unknown = parse_allowed_tools(["Bash(git", "add:*)", "Read,", "Edit", "WebFetch",
                                          "grep"], KNOWN)
    assert Permission("bash", "git add:*") in perms and Permission("view") in perms
    assert {p.tool for p in perms} >= {"str_replace", "insert", "undo_edit", "grep"}
    assert unknown == ["WebFetch"]
    bash = Permission("bash", "git add:*")
    assert bash.allows({"name": "bash", "arguments": {"command": "git add a.py"}})
    assert not bash.allows({"name": "bash", "arguments": {"command": "git addx"}})
    assert not bash.allows({"name": "bash", "arguments": {"command": "git add a; rm -rf /"}})
    assert not bash.allows({"name": "bash", "arguments": {"command": "git add $(rm x)"}})
    assert not bash.allows({"name": "create", "arguments": {"command": "git add a"}})
    files = Permission("create", "docs/*.md")
    assert files.allows({"name": "create", "arguments": {"path": "docs/a.md"}})
    assert not files.allows({"name": "create", "arguments": {"path": "src/a.py"}})
