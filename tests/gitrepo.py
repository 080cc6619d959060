"""Real git repositories for tests."""

from __future__ import annotations

from pathlib import Path

import git


def committed_repo(path: Path, files: dict[str, str], message: str = "init") -> git.Repo:
    """``git init`` at ``path`` with a local identity, write ``files`` (relative path → text)
    and commit them; returns the repository."""
    repo = git.Repo.init(path)
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "Test").set_value("user", "email", "t@example.com")
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    repo.index.add(list(files))
    repo.index.commit(message)
    return repo
