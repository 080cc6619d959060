"""The parts of new-project that need no model: plan parsing and checks, the toolchain refusal,
the recipe choice, the project's environment, runner detection and verdicts, the commit
message."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import pytest

from agent.config import FlagError, load_settings
from agent.loop import LoopResult
from agent.newproject.commit import commit_message
from agent.newproject.environment import project_env, seed_packages
from agent.newproject.plan import (
    Plan,
    executables,
    outside_project,
    parse_plan,
    refusal,
    simple_plan,
)
from agent.newproject.recipe import choose_recipe
from agent.newproject.result import ProjectResult
from agent.newproject.runners import (
    TestReport,
    _cargo_verdict,
    _go_verdict,
    _maven_verdict,
    _node_verdict,
    counts,
    detect,
    run_project_tests,
    summarise,
)
from agent.newproject.work import _exists
from tests.scripted import ScriptedModel

GOOD = {"toolchain": "node", "language": "JavaScript", "summary": "adds", "files":
        ["package.json", "src/add.js", "test/add.test.js"], "install": [], "test": "npm test",
        "run": ""}


def test_a_good_plan_parses_also_inside_a_code_fence():
    plan, problems = parse_plan("```json\n" + json.dumps(GOOD) + "\n```")
    assert problems == [] and plan is not None and plan.toolchain == "node"


def test_each_broken_plan_says_what_to_fix():
    cases = {
        "not json at all": "not valid JSON",
        "[1, 2]": "one JSON object",
        json.dumps({**GOOD, "toolchain": "cobol"}): "unknown toolchain 'cobol'; use one of",
        json.dumps({k: v for k, v in GOOD.items() if k != "test"}): "'test' is missing",
        json.dumps({**GOOD, "test": "  "}): "'test' is empty",
        json.dumps({**GOOD, "files": []}): "'files' is empty",
        json.dumps({**GOOD, "files": ["../escape.js"]}): "not a path inside the project",
        json.dumps({**GOOD, "files": ["/etc/x"]}): "not a path inside the project",
        json.dumps({**GOOD, "colour": "red"}): "'colour' is not a plan key",
        json.dumps({**GOOD, "install": ["npm install -g left-pad"]}): "installs outside",
        json.dumps({**GOOD, "install": "npm install"}): "'install'",
        json.dumps({**GOOD, "files": [7]}): "'files.0'",
        json.dumps({**GOOD, "test": "npm\u0000test"}): "NUL character",
        json.dumps({**GOOD, "files": ["a" * 300]}): "not a path inside the project",
        json.dumps({**GOOD, "toolchain": None}): "'toolchain'",
    }
    for text, expected in cases.items():
        plan, problems = parse_plan(text)
        assert plan is None and any(expected in p for p in problems), (text, problems)


def test_only_installs_outside_the_project_are_refused():
    for command in ("sudo apt install x", "npm i --global x", "pip install --user x",
                    "python -m pip install --break-system-packages x", "cd a && npm -g i x"):
        assert outside_project(command), command
    for command in ("npm install left-pad", "python -m pip install requests", "gcc -g -o t t.c",
                    "cargo test", "make test"):
        assert not outside_project(command), command


def test_the_programs_a_command_line_starts():
    assert executables("cd app && CI=1 npm test | tee out; ./run.sh") == ["npm", "tee",
                                                                          "./run.sh"]
    assert executables("export X=1; go test ./...") == ["go"]


def test_a_plan_is_refused_with_what_to_install_when_its_tools_are_not_on_path(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("node", "npm"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    node = Plan.model_validate(GOOD)
    assert refusal(node, str(bin_dir)) is None
    rust = Plan.model_validate({**GOOD, "toolchain": "rust", "test": "cargo test"})
    said = refusal(rust, str(bin_dir))
    assert said and said.startswith("the plan needs cargo (Rust)") and "rustup" in said
    # A program the commands start is checked too, not only the toolchain's own tools.
    jest = Plan.model_validate({**GOOD, "test": "yarn test"})
    assert "yarn" in (refusal(jest, str(bin_dir)) or "")
    # What the project's own .venv provides is not asked of the machine.
    python = Plan.model_validate({**GOOD, "toolchain": "python", "test": "python -m pytest"})
    (bin_dir / "python3").write_text("#!/bin/sh\n")
    (bin_dir / "python3").chmod(0o755)
    assert refusal(python, str(bin_dir)) is None


def test_the_recipe_follows_the_setting_then_the_models_size():
    with ScriptedModel([]) as model:
        assert choose_recipe("full", model.url).name == "full"
        unknown = choose_recipe("auto", model.url)
        assert unknown.name == "simple" and "--recipe full" in unknown.reason
        model.models = {"data": [{"meta": {"n_params": 134_515_008}}]}
        small = choose_recipe("auto", model.url)
        assert small.name == "simple" and "0.13 B parameters" in small.reason
        model.models = {"data": [{"meta": {"n_params": 30_700_000_000}}]}
        big = choose_recipe("auto", model.url)
        assert big.name == "full" and "30.70 B parameters" in big.reason
        assert choose_recipe("simple", model.url).name == "simple"


def test_the_projects_environment_puts_its_venv_first_and_hides_the_products(tmp_path: Path):
    own = Path(sys.prefix) / "bin"
    env = project_env(tmp_path, {"PATH": f"{own}{os.pathsep}/usr/bin", "VIRTUAL_ENV": "x"})
    path = str(env["PATH"]).split(os.pathsep)
    assert path[:2] == [str(tmp_path / ".venv" / "bin"), str(tmp_path / "node_modules" / ".bin")]
    if sys.prefix != sys.base_prefix:  # the suite runs in a virtual environment
        assert str(own) not in path
    assert path[-1] == "/usr/bin"
    assert env["VIRTUAL_ENV"] == str(tmp_path / ".venv")
    assert env["PIP_REQUIRE_VIRTUALENV"] == "1"
    assert project_env(tmp_path, {"PATH": "/usr/bin"}, python=False)["VIRTUAL_ENV"] is None


def test_seeding_copies_a_distribution_and_its_requirements(tmp_path: Path):
    copied = seed_packages(tmp_path, ("pluggy", "no-such-distribution"))
    assert [c.split()[0] for c in copied] == ["pluggy"]
    assert (tmp_path / "pluggy" / "__init__.py").is_file()
    assert list(tmp_path.glob("pluggy-*.dist-info/METADATA"))
    assert not list(tmp_path.rglob("__pycache__"))


def test_seeded_console_scripts_run_with_the_venvs_python(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seed_packages(tmp_path / "lib", ("pytest",), bin_dir)
    script = (bin_dir / "pytest").read_text()
    assert script.startswith(f"#!{bin_dir / 'python'}\n")
    assert "from _pytest.config import _console_main" in script
    assert os.access(bin_dir / "pytest", os.X_OK)


def test_runner_verdicts_tell_no_tests_from_passed():
    assert _node_verdict(0, "ℹ tests 0\nℹ pass 0\n") == "no tests"
    assert _node_verdict(0, "# tests 2\n# pass 2\n") == "passed"
    assert _node_verdict(1, "ℹ fail 1\n") == "failed"
    assert _cargo_verdict(0, "running 0 tests\ntest result: ok. 0 passed\n") == "no tests"
    assert _cargo_verdict(0, "running 0 tests\nrunning 2 tests\n") == "passed"
    assert _cargo_verdict(101, "error: could not compile") == "failed"
    assert _go_verdict(0, "?   \texample.com/x\t[no test files]\n") == "no tests"
    assert _go_verdict(0, "ok  \texample.com/x\t0.01s\n") == "passed"
    assert _maven_verdict(0, "Tests run: 0, Failures: 0\n") == "no tests"
    assert _maven_verdict(0, "Tests run: 3, Failures: 0\n") == "passed"


def test_a_project_without_a_test_script_or_target_has_no_tests(tmp_path: Path):
    (tmp_path / "package.json").write_text(json.dumps(
        {"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}))
    report = run_project_tests(tmp_path, "node")
    assert report.status == "no tests" and "no \"test\" script" in report.detail
    (tmp_path / "package.json").unlink()
    (tmp_path / "Makefile").write_text("all:\n\techo hi\n")
    assert run_project_tests(tmp_path, "c-make").status == "no tests"
    (tmp_path / "Makefile").unlink()
    report = run_project_tests(tmp_path)
    assert report.status == "not run" and "no test runner detected" in report.detail


def test_a_python_plan_without_python_files_is_judged_by_pytest(tmp_path: Path):
    """A 135 M model once wrote only a README in a Python project: the verdict was "not run"
    with no runner named (CI failed on it); pytest's own verdict is the honest one."""
    (tmp_path / "README.md").write_text("adds two numbers\n")
    report = run_project_tests(tmp_path, "python", own_pytest=True)
    assert (report.status, report.runner.split()[1:3]) == ("no tests", ["-m", "pytest"])
    assert run_project_tests(tmp_path).status == "not run"


def test_the_plans_toolchain_is_tried_first(tmp_path: Path):
    (tmp_path / "Makefile").write_text("test:\n\ttrue\n")
    (tmp_path / "helper.py").write_text("x = 1\n")
    found = detect(tmp_path, "c-make")
    assert not isinstance(found, str) and found.argv == ["make", "test"]
    found = detect(tmp_path)
    assert not isinstance(found, str) and found.ecosystem == "python"


def test_a_runner_missing_from_path_is_not_run(tmp_path: Path):
    (tmp_path / "Cargo.toml").write_text("[package]\nname = \"x\"\n")
    report = run_project_tests(tmp_path, "rust", {"PATH": str(tmp_path)})
    assert (report.status, report.detail) == ("not run", "cargo is not on PATH")


def test_the_summary_keeps_totals_printed_before_the_failure_details():
    out = "\n".join(["ℹ tests 3", "ℹ pass 2", "ℹ fail 1"] + [f"detail {i}" for i in range(30)])
    lines = summarise(out).splitlines()
    assert lines[:3] == ["ℹ tests 3", "ℹ pass 2", "ℹ fail 1"] and lines[-1] == "detail 29"
    assert counts(out) == "ℹ tests 3; ℹ pass 2; ℹ fail 1"
    assert counts("..\n===== 2 passed, 1 failed in 0.1s =====\n") == "2 passed, 1 failed in 0.1s"
    cargo = ("test result: ok. 3 passed; 0 failed; 0 ignored\n"
             "test result: FAILED. 1 passed; 2 failed; 0 ignored\n")
    assert counts(cargo) == "4 passed, 2 failed (2 test targets)"


def test_the_commit_message_says_what_exists_and_how_the_tests_went(tmp_path: Path):
    failing = ProjectResult(tmp_path, "s", tmp_path / "log", LoopResult("", "max_steps", 30),
                            TestReport("failed", "1 failed, 2 passed", "cargo test"),
                            files=["Cargo.toml", "src/main.rs"],
                            plan=Plan.model_validate({**GOOD, "toolchain": "rust",
                                                      "language": "Rust",
                                                      "files": ["Cargo.toml", "src/main.rs",
                                                                "README.md"]}),
                            unwritten=["README.md"])
    message = commit_message("a word counter", failing)
    assert message.splitlines()[0] == "New project: a word counter (tests: failed)"
    assert "Files: 2 (Cargo.toml, src/main.rs)" in message
    assert "Planned but not written: README.md" in message
    assert "Tests, run by dflash-agent with `cargo test`: failed" in message
    assert "    1 failed, 2 passed" in message
    assert "The agent stopped before finishing (max_steps, 30 steps)." in message
    passing = ProjectResult(tmp_path, "s", tmp_path / "log", LoopResult("", "done", 3),
                            TestReport("passed", "2 passed", "make test"), files=["Makefile"],
                            plan=simple_plan("calc"))
    message = commit_message("a calculator", passing)
    assert message.splitlines()[0] == "New project: a calculator"
    assert "2 passed" not in message and "stopped" not in message


def test_without_pytest_in_the_venv_only_the_simple_recipe_falls_back_to_the_products(
        tmp_path: Path):
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    # A Python without site-packages: a venv nothing was installed into.
    base = Path(sys.base_prefix) / "bin" / "python3"
    venv_python.write_text(f'#!/bin/sh\nexec "{base}" -S "$@"\n')
    venv_python.chmod(0o755)
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    report = run_project_tests(tmp_path, "python")
    assert report.status == "not run" and "pytest is not installed in .venv" in report.detail
    own = run_project_tests(tmp_path, "python", own_pytest=True)
    assert own.status == "passed" and own.runner.startswith(sys.executable)


def test_a_name_the_file_system_refuses_counts_as_not_written(tmp_path: Path):
    assert not _exists(tmp_path / ("a" * 300))  # Path.exists raises ENAMETOOLONG here
    assert not _exists(tmp_path / "a\x00b")
    assert _exists(tmp_path)


def test_a_bad_recipe_flag_is_named_as_the_user_typed_it():
    with pytest.raises(FlagError, match=r"^--recipe foo: Input should be 'auto', 'simple' or "):
        load_settings(cli={"new_project_recipe": "foo"})


def test_a_test_run_past_its_time_is_a_timeout_and_leaves_nothing_running(tmp_path: Path):
    (tmp_path / "Makefile").write_text("test:\n\tsleep 31.7 & sleep 31.7\n")
    report = run_project_tests(tmp_path, "c-make", timeout=1)
    assert report.status == "timeout" and "did not finish within 1 s" in report.detail
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] == ["sleep", "31.7"]]
    assert left == []
