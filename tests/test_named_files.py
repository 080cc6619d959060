"""The files a task names are viewed before the model's first step (agent/sessions/named_files)."""

from __future__ import annotations

from pathlib import Path

from agent.sessions.named_files import MAX_FILES, first_views, named_files
from tools.workspace import Workspace


def test_named_files_in_order_inside_the_workspace_only(tmp_path: Path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "buffer.py").write_text("class B: ...\n")
    (root / ".env").write_text("KEY=secret\n")
    (root / "big.log").write_text("x" * 100_000)
    (tmp_path / "outside.py").write_text("y = 2\n")
    ws = Workspace(root)
    task = ("Fix src/app.py, then `buffer.py`. Don't read .env, big.log, ../outside.py "
            "or missing.py; buffer.py again.")
    assert named_files(task, ws) == ["src/app.py", "buffer.py"]
    assert first_views(task, ws) == [("view", {"path": "src/app.py"}),
                                     ("view", {"path": "buffer.py"})]


def test_a_task_naming_no_file_gets_the_root_listing(tmp_path: Path):
    assert first_views("rename calc_total to order_total everywhere", Workspace(tmp_path)) \
        == [("view", {"path": "."})]


def test_at_most_max_files_are_viewed(tmp_path: Path):
    names = [f"m{i}.py" for i in range(MAX_FILES + 2)]
    for name in names:
        (tmp_path / name).write_text("pass\n")
    assert named_files(" ".join(names), Workspace(tmp_path)) == names[:MAX_FILES]
