"""The files a task names are read and put before the task (agent/sessions/named_files)."""

from __future__ import annotations

from pathlib import Path

from agent.sessions.named_files import MAX_FILES, named_files, with_named_files
from tools.registry import default_registry
from tools.workspace import Workspace


def test_named_files_in_order_inside_the_workspace_only(tmp_path: Path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "buffer.py").write_text("class B: ...\n")
    (root / ".env").write_text("KEY=secret\n")
    (root / "big.log").write_text("x" * 100_000)
    (tmp_path / "outside.py").write_text("y = 2\n")
    task = ("Fix src/app.py, then `buffer.py`. Don't read .env, big.log, ../outside.py "
            "or missing.py; buffer.py again.")
    assert named_files(task, Workspace(root)) == ["src/app.py", "buffer.py"]


def test_the_files_come_first_as_they_are_then_the_task_and_count_as_seen(tmp_path: Path):
    (tmp_path / "a.py").write_text("x = 1\n")
    ws = Workspace(tmp_path)
    registry = default_registry(ws)
    message = with_named_files("set x to 2 in a.py", registry, ws)
    assert message == "a.py\n```python\nx = 1\n```\n\nThe task: set x to 2 in a.py"
    # Seen: create may replace it now without a view of the model's own.
    obs = registry.call("create", {"path": "a.py", "file_text": "x = 2\n"})
    assert not obs.is_error and (tmp_path / "a.py").read_text() == "x = 2\n"
    registry.close()


def test_a_task_naming_no_file_gets_the_root_listing(tmp_path: Path):
    (tmp_path / "orders.py").write_text("def calc_total(): ...\n")
    ws = Workspace(tmp_path)
    registry = default_registry(ws)
    message = with_named_files("rename calc_total to order_total", registry, ws)
    assert message.startswith("The project's files:\n") and "orders.py" in message
    assert message.endswith("\n\nThe task: rename calc_total to order_total")
    registry.close()


def test_at_most_max_files_are_named(tmp_path: Path):
    names = [f"m{i}.py" for i in range(MAX_FILES + 2)]
    for name in names:
        (tmp_path / name).write_text("pass\n")
    assert named_files(" ".join(names), Workspace(tmp_path)) == names[:MAX_FILES]


def test_a_code_file_written_inside_a_markdown_fence_loses_the_fence(tmp_path: Path):
    """Shown its files in fences, the 1.5B wrote the fence into test_pagination.py."""
    registry = default_registry(Workspace(tmp_path))
    obs = registry.call("create", {"path": "a.py", "file_text": "```python\nx = 1\n```\n"})
    assert not obs.is_error and "the markdown fence around the content was left out" in obs.text
    assert (tmp_path / "a.py").read_text() == "x = 1\n"
    registry.call("create", {"path": "notes.md", "file_text": "```python\nx = 1\n```\n"})
    assert (tmp_path / "notes.md").read_text() == "```python\nx = 1\n```\n"
    registry.close()
