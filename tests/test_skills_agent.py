"""Skills inside the agent loop, with the scripted model on loopback (loop logic) and real git
repositories, tools and scripts: activation, the read-only skill folder, allowed-tools,
deduplication, compaction and `agent run --skill`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import load_settings
from agent.context import PROTECTED, SUMMARY_HEADER
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply

GUIDE = "Greetings end with an exclamation mark. Token: REF-7731."
SCRIPT = ("import sys, pathlib\n"
          "pathlib.Path('greeting.txt').write_text('Hello, ' + sys.argv[1] + '!\\n')\n"
          "print('greeted', sys.argv[1])\n")


def call(tool: str, **arguments) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user home with one skill in ~/.agents/skills (outside every workspace)."""
    home = tmp_path / "home"
    folder = home / ".agents" / "skills" / "greeter"
    (folder / "references").mkdir(parents=True)
    (folder / "scripts").mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: greeter\ndescription: Greets people by name. Use when asked to greet.\n"
        "allowed-tools: Bash(python3:*) Read\n---\n# Greeter\n\n1. Read references/guide.md.\n"
        "2. Run scripts/greet.py NAME in the workspace.\n")
    (folder / "references" / "guide.md").write_text(GUIDE + "\n")
    (folder / "scripts" / "greet.py").write_text(SCRIPT)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return Path(committed_repo(tmp_path / "repo", {"README.md": "demo\n"}).working_tree_dir)


def agent_run(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "DFLASH_AGENT_HOME": str(home / "agent-home"),
           "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "agent", "run", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def session(model: ScriptedModel, repo: Path, **kwargs) -> RepoSession:
    settings = load_settings(project=repo, cli={"base_url": model.url, "tool_protocol": "json"})
    return RepoSession(settings, repo, Reporter(json_mode=True), interactive=False, **kwargs)


def wrote(name: str) -> dict:
    """A file of the task's own, written before its final answer (auto-edit asks nothing for
    it): a final answer stands only after the task changed a file or ran a command
    (agent/finish.py)."""
    return call("create", path=name, file_text="notes\n")


def results(model: ScriptedModel) -> list[dict]:
    """The messages of the last request after the task (tool results and calls)."""
    return model.requests[-1]["messages"]


def test_model_activates_a_skill_reads_a_reference_and_runs_its_script(home: Path, repo: Path):
    folder = (home / ".agents" / "skills" / "greeter").resolve()
    script = [call("activate_skill", name="greeter"),
              call("view", path=str(folder / "references" / "guide.md")),
              call("bash", command=f"python3 {folder}/scripts/greet.py Ada"),
              call("final_answer", text="greeted Ada")]
    # A context whose catalog share (5 %) holds every skill with its location.
    with ScriptedModel(script, n_ctx=32768) as model:
        proc = agent_run("greet Ada", "--base-url", model.url, "--tool-protocol", "json",
                         home=home, cwd=repo)
    # auto-edit mode and no terminal: bash ran only because the skill's allowed-tools
    # pre-approves `python3 ...` while it is active.
    assert proc.returncode == 0, proc.stderr
    assert (repo / "greeting.txt").read_text() == "Hello, Ada!\n"
    system = model.requests[0]["messages"][0]["content"]
    assert f"- greeter: Greets people by name. Use when asked to greet. ({folder}/SKILL.md)" \
        in system
    assert all(r["messages"][0]["content"] == system for r in model.requests)
    grammar = json.dumps(model.requests[0]["response_format"])
    assert '"enum": ["c-project", "focused-commit", "go-project", "greeter", "java-project", ' \
        '"node-project", "python-project", "rust-project", "test-before-done"]' in grammar
    messages = results(model)
    activation = messages[3]
    assert activation[PROTECTED] is True and "# Greeter" in activation["content"]
    assert f"Skill folder: {folder}" in activation["content"]
    assert "Files: references/guide.md, scripts/greet.py" in activation["content"]
    assert GUIDE in messages[5]["content"]
    assert "greeted Ada" in messages[7]["content"] and "[exit code 0]" in messages[7]["content"]


def test_without_allowed_tools_the_script_still_needs_approval(home: Path, repo: Path):
    skill_md = home / ".agents" / "skills" / "greeter" / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace("allowed-tools: Bash(python3:*) Read\n", ""))
    folder = skill_md.parent.resolve()
    script = [call("activate_skill", name="greeter"),
              call("bash", command=f"python3 {folder}/scripts/greet.py Ada")]
    with ScriptedModel(script) as model:
        proc = agent_run("greet Ada", "--base-url", model.url, "--tool-protocol", "json",
                         home=home, cwd=repo)
    assert proc.returncode == 1 and "needs approval" in proc.stderr + proc.stdout
    assert not (repo / "greeting.txt").exists()


def test_a_repositorys_own_skill_pre_approves_nothing_until_trusted(home: Path, repo: Path):
    """A skill that came with the repository (a clone, a pull request) could otherwise approve
    any command by listing Bash in allowed-tools; trust covers the folder as it was."""
    user_folder = home / ".agents" / "skills" / "greeter"
    folder = repo / ".agents" / "skills" / "greeter"
    folder.parent.mkdir(parents=True)
    user_folder.rename(folder)
    folder = folder.resolve()

    def greet() -> tuple[subprocess.CompletedProcess, ScriptedModel]:
        script = [call("activate_skill", name="greeter"),
                  call("bash", command=f"python3 {folder}/scripts/greet.py Ada"),
                  call("final_answer", text="greeted")]
        with ScriptedModel(script, n_ctx=32768) as model:
            proc = agent_run("greet Ada", "--base-url", model.url, "--tool-protocol", "json",
                             home=home, cwd=repo)
        return proc, model

    proc, model = greet()
    assert proc.returncode == 1 and "needs approval" in proc.stderr + proc.stdout
    assert not (repo / "greeting.txt").exists()
    assert "pre-approve nothing (a project skill the user has not trusted)" in json.dumps(
        model.requests[-1]["messages"])
    env = {**os.environ, "HOME": str(home), "DFLASH_AGENT_HOME": str(home / "agent-home"),
           "NO_COLOR": "1"}
    listed = subprocess.run([sys.executable, "-m", "agent", "skills", "list"], cwd=repo,
                            env=env, capture_output=True, text=True, timeout=120)
    assert "not trusted: pre-approves nothing until `agent skills trust greeter`" in \
        listed.stdout
    trusted = subprocess.run([sys.executable, "-m", "agent", "skills", "trust", "greeter"],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert trusted.returncode == 0 and "pre-approves: Bash(python3:*) Read" in trusted.stdout
    proc, _ = greet()
    assert proc.returncode == 0, proc.stderr
    assert (repo / "greeting.txt").read_text() == "Hello, Ada!\n"
    # A changed script (a later pull) is not what was trusted.
    (folder / "scripts" / "greet.py").write_text(SCRIPT.replace("Hello", "Pwned"))
    (repo / "greeting.txt").unlink()
    proc, _ = greet()
    assert proc.returncode == 1 and "needs approval" in proc.stderr + proc.stdout
    assert not (repo / "greeting.txt").exists()


def test_the_skill_folder_is_read_only_and_readable_only_once_active(home: Path, repo: Path):
    folder = (home / ".agents" / "skills" / "greeter").resolve()
    guide = str(folder / "references" / "guide.md")
    script = [call("view", path=guide),
              call("activate_skill", name="greeter"),
              call("create", path=str(folder / "new.md"), file_text="x"),
              call("str_replace", path=guide, old_str="Token", new_str="Tok"),
              call("grep", pattern="REF-\\d+", path=str(folder)),
              call("glob", pattern="**/*.py", path=str(folder)),
              call("activate_skill", name="greeter"),
              call("activate_skill", name="nope"),
              wrote("skill-notes.md"), call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        s = session(model, repo)
        try:
            result = s.run_task("look at the greeter skill")
        finally:
            s.close()
    assert result.reason == "done"
    out = [m["content"] for m in results(model) if m["role"] in ("user", "tool")][1:]
    assert "outside the workspace" in out[0]
    assert "# Greeter" in out[1]
    assert "read-only folder" in out[2] and not (folder / "new.md").exists()
    assert "read-only folder" in out[3] and "Token" in Path(guide).read_text()
    assert f"{guide}:1: {GUIDE}" in out[4]
    assert out[5].strip() == f"{folder}/scripts/greet.py"
    assert "already active" in out[6] and "# Greeter" not in out[6]
    assert "ERROR" in out[7] and "greeter" in out[7]
    assert sum("# Greeter" in c for c in out) == 1


def test_compaction_keeps_the_skill_content_verbatim(home: Path, repo: Path):
    big = "x" * 3000
    script = [call("activate_skill", name="greeter")]
    script += [call("create", path=f"f{i}.txt", file_text=big) for i in range(4)]
    script += [call("final_answer", text="done"), reply("SUMMARY: made files f0-f3.")]
    with ScriptedModel(script, n_ctx=8192) as model:
        s = session(model, repo)
        try:
            s.run_task("make files")
            before = list(s.agent.messages)
            assert s.agent.compact()
            after = s.agent.messages
        finally:
            s.close()
    skill = [m for m in before if m.get(PROTECTED)]
    assert len(skill) == 1 and skill[0] in after
    assert any(str(m.get("content", "")).startswith(SUMMARY_HEADER) for m in after)
    assert len(after) < len(before)


def test_run_with_skill_activates_it_before_the_model_starts(home: Path, repo: Path):
    # The activation is the product's call, not the task's work: a file of its own follows.
    with ScriptedModel([wrote("hi.md"), call("final_answer", text="ok")]) as model:
        proc = agent_run("say hi", "--skill", "greeter", "--base-url", model.url,
                         "--tool-protocol", "json", home=home, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    messages = model.requests[0]["messages"]
    assert [m["role"] for m in messages][:3] == ["system", "user", "assistant"]
    assert json.loads(messages[2]["content"]) == {"tool": "activate_skill",
                                                  "arguments": {"name": "greeter"}}
    assert "# Greeter" in messages[3]["content"] and messages[3][PROTECTED]
    assert "# Greeter" not in messages[0]["content"]


def test_run_with_an_unknown_skill_is_a_usage_error(home: Path, repo: Path):
    proc = agent_run("x", "--skill", "nope", "--base-url", "http://127.0.0.1:9", home=home,
                     cwd=repo)
    assert proc.returncode == 2
    assert "no skill named 'nope'" in proc.stderr and "greeter" in proc.stderr


def test_a_resumed_session_keeps_the_activated_skill_folder_readable(home: Path, repo: Path):
    folder = (home / ".agents" / "skills" / "greeter").resolve()
    with ScriptedModel([call("activate_skill", name="greeter"), wrote("activated.md"),
                        call("final_answer", text="ok")]) as model:
        s = session(model, repo)
        try:
            s.run_task("activate")
        finally:
            s.close()
    guide = str(folder / "references" / "guide.md")
    with ScriptedModel([call("view", path=guide), wrote("read.md"),
                        call("final_answer", text="ok")]) as model:
        s = session(model, repo, resume=s.id)
        try:
            s.run_task("read the guide")
        finally:
            s.close()
    assert GUIDE in model.requests[1]["messages"][-1]["content"]  # the view's result
