import os
import subprocess
import sys
from pathlib import Path

import git

from agent.newproject import run_project_tests, slugify
from agent.newproject.commit import commit_all, prepare_repo
from agent.newproject.names import module_name


def test_slugify_makes_short_directory_names():
    assert slugify("A CLI todo app, with tests!") == "a-cli-todo-app-with-tests"
    assert slugify("!!!") == "new-project"
    assert len(slugify("word " * 40)) <= 40


def test_slugify_folds_accents_instead_of_splitting_words():
    """The seed's user writes Portuguese: "gestão" became "gest-o", one word cut in two."""
    assert slugify("CLI para gestão de preços") == "cli-para-gestao-de-precos"
    assert slugify("Straße Ærø façade") == "strasse-aero-facade"
    assert slugify("一个待办事项应用") == "new-project"
    # what is not a letter with an accent separates words, as ASCII punctuation does
    assert slugify("price—list tool") == "price-list-tool"
    assert slugify("café日本bar") == "cafe-bar"
    assert slugify("Ħal Saflieni ŋoŋ") == "hal-saflieni-ngong"
    # the simple recipe's module is named from the same words
    assert module_name("Größenänderung für Bilder") == "grossenanderung_fur"
    assert module_name("CLI para gestão de preços") == "cli_gestao_precos"
    # Portuguese filler words and tests clause, as the English ones (the name was cut at
    # "uma_api_de_gestao_de")
    assert module_name("uma API de gestão de preços com testes") == "api_gestao_precos"
    assert module_name("uma API de preços, com testes unitários") == "api_precos"
    assert module_name("gestor de testes e relatórios") == "gestor_testes_relatorios"


def test_project_tests_pass_fail_and_none_are_reported_honestly(tmp_path: Path):
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "m.py").write_text("def add(a, b):\n    return a + b\n")
    assert run_project_tests(proj).status == "no tests"
    (proj / "test_m.py").write_text("from m import add\n\ndef test_add():\n"
                                    "    assert add(1, 2) == 3\n")
    assert run_project_tests(proj).status == "passed"
    (proj / "test_bad.py").write_text("def test_bad():\n    assert 1 == 2\n")
    report = run_project_tests(proj)
    assert report.status == "failed" and "1 failed" in report.detail


def test_an_edit_within_the_same_second_is_tested_as_it_is_now(tmp_path: Path, monkeypatch):
    """Python reuses a compiled module whose source kept its size and modification time: a
    model's edit of `+` to `-` made within a second of the last run was judged as before."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as on a user's machine
    proj = tmp_path / "p"
    proj.mkdir()
    m = proj / "m.py"
    m.write_text("def add(a, b):\n    return a + b\n")
    (proj / "test_m.py").write_text("from m import add\n\ndef test_add():\n"
                                    "    assert add(1, 2) == 3\n")
    assert run_project_tests(proj).status == "passed"
    # The user's own run leaves the compiled modules behind.
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=proj,
                   capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    assert list((proj / "__pycache__").glob("m.*.pyc"))
    before = m.stat()
    m.write_text("def add(a, b):\n    return a - b\n")
    os.utime(m, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert run_project_tests(proj).status == "failed"


def test_a_project_inside_another_is_not_judged_by_the_outer_pytest_config(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\n'
                                             'addopts = "--no-such-option"\n')
    proj = tmp_path / "inner"
    proj.mkdir()
    (proj / "test_ok.py").write_text("def test_ok():\n    assert True is not False\n")
    assert run_project_tests(proj).status == "passed"


def test_a_pytest_crash_is_an_error_not_a_failure(tmp_path: Path):
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\n")
    (proj / "test_ok.py").write_text("def test_ok():\n    pass\n")
    assert run_project_tests(proj).status.startswith("error (pytest exit")


def test_a_project_without_python_is_not_run(tmp_path: Path):
    (tmp_path / "index.html").write_text("<p>hi</p>")
    assert run_project_tests(tmp_path).status == "not run"


def test_commit_takes_every_file_and_ignores_scratch(tmp_path: Path):
    repo = prepare_repo(tmp_path / "p")
    (tmp_path / "p" / "a.py").write_text("x = 1\n")
    (tmp_path / "p" / ".dflash-agent").mkdir()
    (tmp_path / "p" / ".dflash-agent" / "out.txt").write_text("scratch")
    sha, files = commit_all(repo, "New project: demo")
    assert sha and files == [".gitignore", "a.py"]
    assert git.Repo(tmp_path / "p").head.commit.message.startswith("New project: demo")


def test_new_project_offers_the_skill_catalog_and_activates_a_forced_skill(tmp_path: Path,
                                                                          agent_home: Path):
    import json
    import os
    import subprocess
    import sys

    from tests.scripted import ScriptedModel, reply

    target = tmp_path / "proj"
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1",
           "HOME": str(tmp_path / "user")}
    done = reply(json.dumps({"tool": "final_answer", "arguments": {"text": "scaffolded"}}))
    # A test that passes and a command (new-project runs in full-auto): the skill's activation
    # is the product's call, a final answer stands only after the task's own work, and a run
    # that found no test would go back to the model.
    test = reply(json.dumps({"tool": "create", "arguments": {
        "path": "tests/test_todo_app.py",
        "file_text": "def test_nothing_yet():\n    assert True\n"}}))
    work = reply(json.dumps({"tool": "bash", "arguments": {"command": "true"}}))
    with ScriptedModel([test, work, done]) as model:
        proc = subprocess.run(
            [sys.executable, "-m", "agent", "new-project", "a todo app", "--dir", str(target),
             "--base-url", model.url, "--tool-protocol", "json", "--skill", "python-project"],
            capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        unknown = subprocess.run(
            [sys.executable, "-m", "agent", "new-project", "x", "--dir", str(tmp_path / "n"),
             "--base-url", model.url, "--skill", "no-such-skill"],
            capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the scripted project has no tests
    assert "Server:" not in proc.stdout  # no managed server with --base-url
    first = model.requests[0]["messages"]
    assert first[0]["role"] == "system"
    for name in ("python-project", "test-before-done", "focused-commit"):
        assert name in first[0]["content"]  # the catalog
    assert any("scripts/scaffold.py" in str(m.get("content")) for m in first[1:])  # the body
    assert unknown.returncode == 2 and "no skill named 'no-such-skill'" in unknown.stderr
    assert not (tmp_path / "n").exists()


def test_the_projects_pytest_settings_are_found_where_pytest_finds_them(tmp_path: Path):
    """A pyproject.toml with no pytest table was taken for the project's pytest settings, so a
    tox.ini's ``[pytest]`` section was ignored: its test files were never collected."""
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0.1"\n')
    (proj / "tox.ini").write_text("[pytest]\npython_files = check_*.py\n")
    (proj / "check_add.py").write_text("def test_add():\n    assert 1 + 2 == 3\n")
    report = run_project_tests(proj)
    assert (report.status, report.counts.split()[:2]) == ("passed", ["1", "passed"])
    assert "-c tox.ini" in report.runner
    # The same settings in pyproject.toml's table, and in setup.cfg's section.
    (proj / "tox.ini").unlink()
    (proj / "pyproject.toml").write_text('[tool.pytest.ini_options]\n'
                                         'python_files = ["check_*.py"]\n')
    assert run_project_tests(proj).status == "passed"
    (proj / "pyproject.toml").unlink()
    (proj / "setup.cfg").write_text("[tool:pytest]\npython_files = check_*.py\n")
    assert run_project_tests(proj).status == "passed"
    # A setup.cfg without the section sets nothing: pytest's defaults collect no check_*.py.
    (proj / "setup.cfg").write_text("[metadata]\nname = p\n")
    assert run_project_tests(proj).status == "no tests"


def test_a_broken_pytest_config_is_reported_not_skipped(tmp_path: Path):
    """A pyproject.toml that does not parse is handed to pytest, which names the error; the
    project's tests are not run as if it had no settings."""
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "pyproject.toml").write_text("[tool.pytest.ini_options\naddopts = \n")
    (proj / "test_ok.py").write_text("def test_ok():\n    assert True is not False\n")
    report = run_project_tests(proj)
    assert report.status.startswith(("failed", "error")) and "pyproject.toml" in report.detail
