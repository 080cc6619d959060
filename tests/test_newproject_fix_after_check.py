"""A new project whose model tried to finish with its own check failing gets the product's
test run back, as one that said it was done does (agent/newproject/work.py, FIXABLE_ENDS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.scripted import ScriptedModel, reply


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


def new_adder(model: ScriptedModel, target: Path, home: Path) -> subprocess.CompletedProcess:
    """``agent new-project "an adder"`` (simple recipe, json protocol) against ``model``."""
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "agent", "new-project", "an adder", "--dir", str(target),
         "--base-url", model.url, "--tool-protocol", "json", "--recipe", "simple"],
        capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)


def fix_round(script: list[dict[str, Any]], target: Path, home: Path, status: str
              ) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``script`` as the model of a new adder that ends with exit 0 after one fix round
    (the sixth request, the tests ``status``); the run and the fix round's task."""
    with ScriptedModel(script) as model:
        proc = new_adder(model, target, home)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert f"tests {status}: sending dflash-agent's own run back" in proc.stderr
    task = model.requests[5]["messages"][-1]["content"]
    assert task.startswith("dflash-agent ran the project's tests itself")
    return proc, task


def test_a_failed_check_at_the_end_goes_back_to_the_model_and_the_fix_is_committed(
        tmp_path: Path, agent_home: Path):
    target = tmp_path / "adder"
    test = "from adder import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    script = [
        call("create", path="adder.py", file_text="def add(a, b):\n    return a - b\n"),
        call("create", path="tests/test_adder.py", file_text=test),
        call("bash", command="python -m pytest -q"),
        # The qwen2.5-coder-1.5b way: the check failed and the model says it is done, twice.
        call("final_answer", text="done"),
        call("final_answer", text="done"),
        call("str_replace", path="adder.py", old_str="a - b", new_str="a + b"),
        call("bash", command="python -m pytest -q"),
        call("final_answer", text="fixed"),
    ]
    proc, _ = fix_round(script, target, agent_home, "failed")
    assert (target / "adder.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert "Tests (run by dflash-agent): passed" in proc.stdout


def test_tests_the_runner_did_not_find_go_back_as_a_task_to_write_them(tmp_path: Path,
                                                                       agent_home: Path):
    """The 1.5B wrote its tests inside its module, where pytest does not look."""
    target = tmp_path / "adder"
    module = "def add(a, b):\n    return a + b\n"
    test = "from adder import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    script = [
        call("create", path="adder.py", file_text=module),
        call("bash", command="python -c 'import adder'"),
        call("final_answer", text="done"),
        call("create", path="tests/test_adder.py", file_text=test),
        call("bash", command="python -m pytest -q"),
        call("final_answer", text="tests written"),
    ]
    with ScriptedModel(script) as model:
        proc = new_adder(model, target, agent_home)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    task = model.requests[3]["messages"][-1]["content"]
    assert ": no tests." in task and "files named tests/test_*.py" in task
    assert "Tests (run by dflash-agent): passed" in proc.stdout



def test_a_run_that_went_round_in_circles_on_an_empty_test_run_gets_a_fix_round(
        tmp_path: Path, agent_home: Path):
    """The 1.5B's temperature converter: a test file of bare asserts, which pytest collects
    nothing from, run until the loop stopped on repeated_call (exit 1, no fix round)."""
    target = tmp_path / "adder"
    module = "def add(a, b):\n    return a + b\n"
    bare = "from adder import add\n\nassert add(2, 3) == 5\n"
    test = "from adder import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    script = [
        call("create", path="adder.py", file_text=module),
        call("create", path="tests/test_adder.py", file_text=bare),
        # The same run three times: the second is held back, the third stops the loop.
        *[call("bash", command="python -m pytest -q") for _ in range(3)],
        call("create", path="tests/test_adder.py", file_text=test),
        call("bash", command="python -m pytest -q"),
        call("final_answer", text="tests written"),
    ]
    proc, task = fix_round(script, target, agent_home, "no tests")
    assert "starts with test_" in task
    assert "Tests (run by dflash-agent): passed" in proc.stdout
