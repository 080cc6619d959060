"""Diagnostics after an edit (issue 53, item 1; tools/diagnostics.py): a file that does not
parse, and the errors an edit brought in, told in the edit's result; a checker that hangs or
crashes is a note, never a failed edit."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import diagnostics
from tools.registry import Registry, default_registry
from tools.workspace import Workspace

PRICING = '''TAX_RATE = 0.2


def calc_total(lines, tax=True):
    net = sum(price * qty for price, qty in lines)
    return round(net * (1 + TAX_RATE) if tax else net, 2)
'''


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    reg = default_registry(Workspace(tmp_path))
    yield reg
    reg.close()


def replace(registry: Registry, path: str, text: str) -> str:
    registry.call("view", {"path": path})
    obs = registry.call("create", {"path": path, "file_text": text})
    assert not obs.is_error, obs.text
    return obs.text


def test_a_rename_that_drops_a_parameter_its_body_uses_is_told_with_file_and_line(
        registry: Registry, tmp_path: Path):
    """Qwen2.5-Coder-1.5B on the task benchmark's rename-function."""
    (tmp_path / "pricing.py").write_text(PRICING)
    renamed = PRICING.replace("def calc_total(lines, tax=True)", "def order_total(lines)")
    text = replace(registry, "pricing.py", renamed)
    assert "[problem: errors this edit brought in (pyflakes); fix them:\n" in text
    assert "  pricing.py:6: undefined name 'tax'" in text
    # The file is written all the same: the model fixes it with the line in hand.
    assert (tmp_path / "pricing.py").read_text() == renamed


def test_only_errors_the_edit_brought_in_are_told(registry: Registry, tmp_path: Path):
    old = "def f():\n    return missing\n"
    (tmp_path / "m.py").write_text(old)
    # The old error moves down a line: not new.
    assert "problem" not in replace(registry, "m.py", "X = 1\n\n" + old)
    text = replace(registry, "m.py", "X = 1\n\n" + old + "\n\ndef g():\n    return gone\n")
    assert "m.py:8: undefined name 'gone'" in text and "missing" not in text


def test_a_new_file_is_checked_whole_and_the_list_is_capped(registry: Registry, tmp_path: Path):
    names = "\n".join(f"print(n{i})" for i in range(8)) + "\n"
    obs = registry.call("create", {"path": "many.py", "file_text": names})
    assert not obs.is_error
    assert "many.py:1: undefined name 'n0'" in obs.text
    assert "many.py:5: undefined name 'n4'" in obs.text and "n5" not in obs.text
    assert "  and 3 more]" in obs.text


def test_style_findings_are_left_to_the_projects_linter(registry: Registry):
    obs = registry.call("create", {"path": "s.py", "file_text": "import os\nx = 1\ny = 2\n"})
    assert not obs.is_error and "problem" not in obs.text


@pytest.mark.parametrize(("name", "text", "said"), [
    ("c.json", '{"a": 1,}', "does not parse: not valid JSON"),
    ("c.toml", "a = \n", "does not parse: not valid TOML"),
    ("c.yaml", "a: [1, 2\n", "does not parse: not valid YAML"),
    ("c.py", "def f(:\n", "does not parse: SyntaxError at line 1"),
], ids=["json", "toml", "yaml", "python"])
def test_a_file_that_does_not_parse_is_told(registry: Registry, name: str, text: str,
                                           said: str):
    obs = registry.call("create", {"path": name, "file_text": text})
    assert not obs.is_error and f"[problem: {name} {said}" in obs.text


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")
def test_javascript_is_checked_with_node(registry: Registry):
    obs = registry.call("create", {"path": "a.js", "file_text": "function f( {\n"})
    assert not obs.is_error
    assert "[problem: a.js does not parse: SyntaxError" in obs.text
    good = registry.call("create", {"path": "b.mjs", "file_text": "export const x = 1;\n"})
    assert "problem" not in good.text


def fake_node(folder: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    folder.mkdir()
    node = folder / "node"
    node.write_text(f"#!/bin/sh\n{body}\n")
    node.chmod(node.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_a_checker_that_hangs_is_a_note_and_the_edit_stands(registry: Registry, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    fake_node(tmp_path.parent / f"{tmp_path.name}-bin", "sleep 30", monkeypatch)
    monkeypatch.setattr(diagnostics, "NODE_TIMEOUT_S", 0.5)
    obs = registry.call("create", {"path": "a.js", "file_text": "let x = 1;\n"})
    assert not obs.is_error and (tmp_path / "a.js").read_text() == "let x = 1;\n"
    assert "[a.js: not checked: node --check did not finish in 0 s]" in obs.text
    # The end-of-task check does not take a checker's silence for a broken file.
    assert diagnostics.problem(tmp_path / "a.js") is None


def test_a_checker_that_crashes_is_a_note(registry: Registry, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch):
    fake_node(tmp_path.parent / f"{tmp_path.name}-bin", "kill -SEGV $$", monkeypatch)
    obs = registry.call("create", {"path": "a.js", "file_text": "let x = 1;\n"})
    assert not obs.is_error and "[a.js: not checked: node --check exited -11]" in obs.text


def test_a_missing_checker_says_nothing(registry: Registry, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    obs = registry.call("create", {"path": "a.js", "file_text": "function f( {\n"})
    assert not obs.is_error and "problem" not in obs.text and "not checked" not in obs.text
