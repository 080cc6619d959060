"""Files that may hold secrets reach the model only with the user's approval (field trial: a
prompt-injected model read ``.env`` and ``.git/config`` under the default ``auto-edit``, and
with a remote ``--base-url`` the keys left the machine). Real git repositories, the real
``agent run`` and sessions, and the scripted model: a read of such a file asks in a terminal,
is refused alone without one (the task goes on), runs in ``full-auto``; look-alikes read
freely; grep's walk leaves such files out and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import load_settings
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel
from tests.test_cli_ux import agent, call

SECRETS = {
    # path: (contents, words of the reason the user and the model are given)
    ".env": ("KEY=sk-LEAK-env\n", "environment file"),
    ".env.production": ("KEY=sk-LEAK-envprod\n", "environment file"),
    "secrets/prod.key": ("LEAK-key\n", "private key"),
    "secrets/db.txt": ("password=LEAK-secretsdir\n", "git ignores it, in a folder named secrets"),
    "deploy/id_ed25519": ("LEAK-ssh\n", "SSH private key"),
    "certs/server.pem": ("LEAK-pem\n", "private key or certificate"),
    ".npmrc": ("//registry.npmjs.org/:_authToken=LEAK-npm\n", "registry's token"),
    ".netrc": ("machine x login u password LEAK-netrc\n", "login credentials"),
    ".git-credentials": ("https://u:LEAK-gitcred@github.com\n", "git's stored credentials"),
    "gcp/credentials.json": ('{"key": "LEAK-gcp"}\n', "credentials file"),
    "config/secrets.yaml": ("token: LEAK-yaml\n", "named for secrets"),
}
GIT_CONFIG = ".git/config"  # the remote's URL carries LEAK-remote
LOOKALIKES = {
    "key.py": "KEY_NAME = 'fine-key-py'\n",
    "secrets_test.py": "def test(): 'fine-secrets-test'\n",
    ".env.example": "KEY=fine-env-example\n",
    "deploy/id_ed25519.pub": "ssh-ed25519 fine-pub\n",
    "tokenizer.json": '{"fine": "tokenizer"}\n',
    "src/secrets/manager.py": "'fine-secrets-package'\n",  # tracked code in a secrets folder
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The trial's repository: secrets git ignores (and some it does not), a remote whose URL
    holds a token, and tracked files that only look like secrets."""
    root = tmp_path / "repo"
    committed_repo(root, {"app.py": "import os\nKEY = os.environ['KEY']\n",
                          ".gitignore": ".env\n/secrets/\n", **LOOKALIKES}).close()
    for path, (text, _) in SECRETS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    with (root / ".git" / "config").open("a") as fh:
        fh.write('[remote "origin"]\n\turl = https://u:ghp_LEAK-remote@github.com/u/r\n')
    return root


WROTE = call("create", path="answer.md", file_text="what I found\n")
"""The task's own file, written before its final answer (auto-edit asks nothing for it): a
final answer stands only after the task changed a file or ran a command (agent/finish.py); a
task that only reads ends ``nothing_changed``. Its result comes last in :func:`results`."""


def leaked(model: ScriptedModel) -> list[str]:
    """The secrets (each file's text, the remote's token) found in what the model was sent;
    its own calls name "LEAK" as a grep pattern, so the values are looked for, not the word."""
    sent = json.dumps(model.requests)
    values = [text.strip() for text, _ in SECRETS.values()] + ["ghp_LEAK-remote"]
    return [value for value in values if json.dumps(value)[1:-1] in sent]


def results(model: ScriptedModel) -> list[str]:
    """The tool results of the last request, in order (json protocol: tool messages)."""
    return [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]


def test_the_trial_without_a_terminal_refuses_each_secret_read_and_the_task_goes_on(
        repo: Path, agent_home: Path):
    """`agent run` with stdin not a terminal, default approval: every read of a secret is
    refused alone with a result saying why, nothing of it reaches the model, and the task
    still ends with the model's answer (a command needing approval stops it instead)."""
    reads = [call("view", path=path) for path in [*SECRETS, GIT_CONFIG]]
    reads += [call("grep", pattern="LEAK", path=".env"), call("grep", pattern="url", path=".git")]
    with ScriptedModel([*reads, WROTE, call("final_answer", text="did what I could")]) as model:
        proc = agent("run", "read the config", "--tool-protocol", "json", "--base-url",
                     model.url, home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done: did what I could" in proc.stderr
    assert leaked(model) == []
    answers = results(model)[:-1]
    assert len(answers) == len(reads)
    for answer, (path, (_, why)) in zip(answers, SECRETS.items(), strict=False):
        assert answer.startswith(f"ERROR: view {path} was not run: {path} may hold secrets"), \
            answer
        assert why in answer and "none could be asked here" in answer, answer
    for answer in answers[len(SECRETS):]:
        assert "was not run" in answer and "none could be asked" in answer, answer
    assert "is in .git/" in answers[len(SECRETS)] and "credentials" in answers[len(SECRETS)]


def test_an_edit_of_a_secret_asks_too_as_its_result_shows_the_file(repo: Path,
                                                                    agent_home: Path):
    """An edit's result shows the lines around it (an insert at the top of .env returned the
    key): under auto-edit an edit of an existing secret asks too, and without a terminal it is
    refused alone. A new .env is the model's own text: created without a question."""
    script = [call("insert", path=".env", insert_line=0, text="# note\n"),
              call("str_replace", path="secrets/db.txt", old_str="password", new_str="pw"),
              call("create", path="deploy/.env.staging", file_text="KEY=placeholder\n"),
              call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        proc = agent("run", "edit", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert leaked(model) == []
    insert, replace, create = results(model)
    assert insert.startswith("ERROR: insert .env was not run: .env may hold secrets"), insert
    assert "editing it needs the user's approval" in insert
    assert replace.startswith("ERROR: str_replace secrets/db.txt was not run"), replace
    assert not create.startswith("ERROR"), create
    assert (repo / ".env").read_text() == SECRETS[".env"][0]
    assert (repo / "deploy" / ".env.staging").read_text() == "KEY=placeholder\n"


def test_lookalikes_read_freely_where_a_secret_is_refused(repo: Path, agent_home: Path):
    """Names that only look like secrets (source files, templates, public keys, tracked code
    in a folder named secrets) are read without asking, in the same run that refuses .env."""
    script = [call("view", path=path) for path in LOOKALIKES]
    script += [call("view", path=".env"), WROTE, call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        proc = agent("run", "look around", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answers = results(model)[:-1]
    for answer, text in zip(answers, LOOKALIKES.values(), strict=False):
        assert not answer.startswith("ERROR") and text.strip() in answer, answer
    assert answers[-1].startswith("ERROR: view .env was not run")
    assert leaked(model) == []


def session(model: ScriptedModel, repo: Path, approval: str, answers: list[str] | None = None,
            prompts: list[str] | None = None) -> RepoSession:
    """A session as `agent chat` or the MCP worker makes it: a terminal to ask on when
    ``answers`` are given (each prompt recorded in ``prompts``), none otherwise."""
    settings = load_settings(project=repo, cli={"base_url": model.url, "tool_protocol": "json",
                                                "approval": approval})
    queue = list(answers or [])

    def ask(prompt: str) -> str:
        if prompts is not None:
            prompts.append(prompt)
        return queue.pop(0)
    return RepoSession(settings, repo, Reporter(json_mode=True), ask=ask,
                       interactive=answers is not None)


@pytest.mark.parametrize("approval", ["auto-edit", "ask"])
def test_with_a_terminal_the_user_is_asked_with_the_reason_and_decides(
        repo: Path, agent_home: Path, approval: str):
    script = [call("view", path=".env"), call("view", path=GIT_CONFIG),
              call("grep", pattern="LEAK", path="secrets/db.txt"), call("view", path="app.py"),
              WROTE, call("final_answer", text="ok")]
    prompts: list[str] = []
    with ScriptedModel(script) as model:
        # The fourth answer is for the task's own file, which only "ask" asks about.
        chat = session(model, repo, approval, answers=["y", "n", "y", "y"], prompts=prompts)
        try:
            assert chat.run_task("read them").reason == "done"
        finally:
            chat.close()
    # Three asks of reads (app.py reads without one), each naming the read and why it asks.
    assert len(prompts) == (4 if approval == "ask" else 3), prompts
    assert prompts[0] == ("view .env\n[.env may hold secrets (an environment file: API keys, "
                          "passwords)]\nAllow view? [y/N or a reason] ")
    assert prompts[1].startswith("view .git/config\n[.git/config is in .git/")
    assert prompts[2].startswith("grep 'LEAK' in secrets/db.txt\n[secrets/db.txt may hold "
                                 "secrets (git ignores it, in a folder named secrets)]")
    env, config, grep, app, _ = results(model)
    assert "sk-LEAK-env" in env  # approved: the user chose to send it
    assert config == "ERROR: denied by the user: n"
    assert leaked(model) == ["KEY=sk-LEAK-env", "password=LEAK-secretsdir"]
    assert grep == "secrets/db.txt:1: password=LEAK-secretsdir"
    assert "import os" in app


def test_a_skill_pre_approving_view_does_not_skip_the_question(repo: Path):
    """As for an edit git would interpret: a skill's ``allowed-tools`` pre-approves the tool,
    not a read of a secret."""
    from agent.sessions.approval import make_approver
    from tools.secretfiles import holds_secrets
    from tools.workspace import Workspace

    asked: list[str] = []
    approve = make_approver("auto-edit", ask=lambda q: asked.append(q) or "no", interactive=True,
                            preapproved=lambda _call: True,
                            secret=lambda path, edit: holds_secrets(Workspace(repo), path, edit))
    assert approve({"name": "view", "arguments": {"path": ".env"}}) == "no" and asked
    assert approve({"name": "view", "arguments": {"path": "app.py"}}) is None
    assert approve({"name": "glob", "arguments": {"pattern": ".env"}}) is None  # names only


def test_full_auto_reads_and_auto_edit_without_a_terminal_does_not(repo: Path,
                                                                   agent_home: Path):
    """full-auto asks nothing, as documented: the user chose it. The same session without
    a terminal under auto-edit gets the refusal."""
    seen = {}
    for approval in ("full-auto", "auto-edit"):
        wrote = call("create", path=f"answer-{approval}.md", file_text="what I found\n")
        script = [call("view", path=".env"), call("view", path=GIT_CONFIG), wrote,
                  call("final_answer", text="ok")]
        with ScriptedModel(script) as model:
            chat = session(model, repo, approval)
            try:
                assert chat.run_task("read").reason == "done"
            finally:
                chat.close()
        seen[approval] = results(model)[:-1]
    env, config = seen["full-auto"]
    assert "sk-LEAK-env" in env and "ghp_LEAK-remote" in config
    assert all("was not run" in answer for answer in seen["auto-edit"]), seen["auto-edit"]


def test_a_symlink_to_a_secret_is_a_secret(repo: Path, agent_home: Path):
    (repo / "notes.txt").symlink_to(repo / ".env")
    (repo / "cfg").symlink_to(repo / ".git" / "config")
    script = [call("view", path="notes.txt"), call("view", path="cfg"),
              call("grep", pattern="LEAK"), WROTE, call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        proc = agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert leaked(model) == []
    notes, cfg, grep, _ = results(model)
    assert notes.startswith("ERROR: view notes.txt was not run: notes.txt may hold secrets")
    assert cfg.startswith("ERROR: view cfg was not run: cfg is in .git/")
    assert grep.startswith("no matches\n[") and "cfg" in grep and "notes.txt" in grep


def test_greps_walk_skips_files_that_may_hold_secrets_and_says_so(repo: Path,
                                                                   agent_home: Path):
    """A .env git does not ignore (the ignored ones the walk never read), a key: not searched
    by a walk over the repository or a folder, and the result says which and how to search
    one; tracked look-alikes are searched."""
    # .env no longer ignored: only its name keeps it out. db.txt (ignored) the walk never reads.
    (repo / ".gitignore").write_text("secrets/db.txt\n")
    script = [call("grep", pattern="LEAK|fine"), call("grep", pattern="LEAK", path="secrets"),
              call("grep", pattern="LEAK", glob="*.env*"), WROTE, call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        proc = agent("run", "search", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert leaked(model) == []
    everything, folder, env, _ = results(model)
    for path in LOOKALIKES:
        assert f"\n{path}:1: " in f"\n{everything}", (path, everything)
    note = everything.splitlines()[-1]
    assert note.startswith("[10 files not searched, as they may hold secrets: .env, "
                           ".env.production, .git-credentials, .netrc, .npmrc, "), note
    assert "secrets/db.txt" not in note  # ignored: left out like any ignored file, unnamed
    assert "grep with one of them as the path searches it, with the user's approval]" in note
    assert folder == ("no matches\n[1 file not searched, as it may hold secrets: "
                      "secrets/prod.key; grep with one of them as the path searches it, with "
                      "the user's approval]"), folder
    assert env.startswith("no matches\n[2 files not searched, as they may hold secrets: .env, "
                          ".env.production;"), env


@pytest.mark.parametrize("path", [*SECRETS, ".git/config", ".git", ".GIT/config",
                                  "sub/.git/config", ".hg/hgrc"])
def test_holds_secrets_says_why(repo: Path, path: str):
    from tools.secretfiles import holds_secrets
    from tools.workspace import Workspace

    if not (repo / path).exists():  # another repository's folders, .GIT as macOS spells it
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("[auth]\n")
    reason = holds_secrets(Workspace(repo), path)
    assert reason is not None and reason.startswith(path), reason


@pytest.mark.parametrize("path", [*LOOKALIKES, "app.py", "secrets", "src/secrets", ".",
                                  ".gitignore", "keys.json", "monkey.py", "env.py",
                                  ".env.sample", ".env.template", ".env.dist", "../outside.env",
                                  ".env.new"])  # none there yet: nothing to reveal
def test_holds_secrets_leaves_lookalikes_alone(repo: Path, path: str):
    from tools.secretfiles import holds_secrets
    from tools.workspace import Workspace

    assert holds_secrets(Workspace(repo), path) is None
