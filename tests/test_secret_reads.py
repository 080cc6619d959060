"""Files that may hold secrets (field trial: a prompt-injected model read ``.env`` and
``.git/config``; with a remote ``--base-url`` the keys left the machine): which files
(``tools.secretfiles.holds_secrets``), look-alikes left alone, and grep's walk, which leaves
such files out and says so. Real git repositories, the real ``agent run``, the scripted
model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def leaked(model: ScriptedModel) -> list[str]:
    """The secrets (each file's text, the remote's token) found in what the model was sent;
    its own calls name "LEAK" as a grep pattern, so the values are looked for, not the word."""
    sent = json.dumps(model.requests)
    values = [text.strip() for text, _ in SECRETS.values()] + ["ghp_LEAK-remote"]
    return [value for value in values if json.dumps(value)[1:-1] in sent]


def results(model: ScriptedModel) -> list[str]:
    """The tool results of the last request, in order (json protocol: tool messages)."""
    return [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]


def test_greps_walk_skips_files_that_may_hold_secrets_and_says_so(repo: Path,
                                                                   agent_home: Path):
    """A .env git does not ignore (the ignored ones the walk never read), a key: not searched
    by a walk over the repository or a folder, and the result says which and how to search
    one; tracked look-alikes are searched."""
    # .env no longer ignored: only its name keeps it out. db.txt (ignored) the walk never reads.
    (repo / ".gitignore").write_text("secrets/db.txt\n")
    script = [call("grep", pattern="LEAK|fine"), call("grep", pattern="LEAK", path="secrets"),
              call("grep", pattern="LEAK", glob="*.env*"), call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        proc = agent("run", "search", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert leaked(model) == []
    everything, folder, env = results(model)
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
