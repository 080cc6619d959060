"""The one error root (:class:`backend.errors.StatedError`): the command line says any of its
subclasses in one line and exits with the code the error carries, with no list of classes to
keep up to date."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer

from agent.cli import main as cli
from backend.errors import EXIT_USAGE, StatedError


def run_main(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> int:
    """Run :func:`agent.cli.main.main` on an app whose one command raises ``exc``; returns
    the exit code."""
    app = typer.Typer()

    @app.callback()
    def group() -> None:
        """The app's group, so that ``boom`` is a command of it."""

    @app.command()
    def boom() -> None:
        """Raise the error under test."""
        raise exc

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(cli.secret_store, "start", lambda: None)
    monkeypatch.setattr(sys, "argv", ["agent", "boom"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    return int(ended.value.code)


def test_an_unknown_subclass_of_the_root_exits_3_with_its_message(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        agent_home: Path) -> None:
    class NovelError(StatedError, RuntimeError):
        """An error no list names."""

    code = run_main(monkeypatch, NovelError("the novel cause; do this instead"))
    said = capsys.readouterr().err
    assert code == 3, said
    assert "error: the novel cause; do this instead" in said
    assert "internal error" not in said
    # Not plain: its crash log is written and named.
    assert "details: " in said and list((agent_home / "state" / "crashes").glob("*NovelError*"))


def test_a_plain_usage_subclass_exits_2_without_a_crash_log(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class NovelUsage(StatedError, ValueError):
        """A usage error no list names."""

        plain = True
        exit_code = EXIT_USAGE

    code = run_main(monkeypatch, NovelUsage("--flag: not like that"))
    said = capsys.readouterr().err
    assert code == 2, said
    assert "error: --flag: not like that" in said and "details: " not in said


def test_any_other_exception_is_still_an_internal_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_main(monkeypatch, RuntimeError("unforeseen"))
    said = capsys.readouterr().err
    assert code == 4, said
    assert "internal error: RuntimeError: unforeseen" in said
