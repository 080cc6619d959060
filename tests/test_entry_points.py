"""Every way the agent is started keeps working after the package moves: the console script,
``python -m agent``, the MCP task worker by its module path (new and old), MCP host entries
as earlier versions of ``agent mcp install`` wrote them, ``python -m train`` and the benchmarks'
command lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from backend.home import HOME_ENV

ROOT = Path(__file__).resolve().parent.parent
AGENT_SCRIPT = Path(sys.executable).with_name("agent")
BENCHMARKS = sorted(p for pattern in ("*.py", "agent_sessions/*.py")
                    for p in (ROOT / "benchmarks").glob(pattern)
                    if 'if __name__ == "__main__":' in p.read_text("utf-8"))
"""The benchmark command lines (benchmarks/forced.py is a module agent_turns.py imports)."""


def _module(script: Path) -> str:
    """``benchmarks/agent_sessions/make_sessions.py`` →
    ``benchmarks.agent_sessions.make_sessions``."""
    return ".".join(script.relative_to(ROOT).with_suffix("").parts)
UNREACHABLE = "http://127.0.0.1:9"


@pytest.mark.parametrize("command", [[str(AGENT_SCRIPT)], [sys.executable, "-m", "agent"]],
                         ids=["console-script", "python-m-agent"])
def test_the_command_line_starts(command: list[str]) -> None:
    proc = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("dflash-agent ")


@pytest.mark.parametrize("command", [[str(AGENT_SCRIPT)], [sys.executable, "-m", "agent"]],
                         ids=["console-script", "python-m-agent"])
def test_the_command_line_shows_its_help(command: list[str]) -> None:
    proc = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "backend" in proc.stdout and "mcp" in proc.stdout


def test_the_trainer_shows_its_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "train", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m train")


@pytest.mark.parametrize("form", ["path", "module"])
@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_each_benchmark_command_line_shows_its_help(script: Path, form: str) -> None:
    # Every benchmark imports the product at its top, so a moved module breaks this at once;
    # both ``python benchmarks/x.py`` (RESULTS.md's commands) and ``python -m benchmarks.x``.
    command = [str(script)] if form == "path" else ["-m", _module(script)]
    proc = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script.name}")


@pytest.mark.parametrize("module", ["agent.mcp_server.worker", "agent.mcp_worker"])
def test_the_task_worker_starts_by_module_path_and_refuses_a_broken_spec(module: str) -> None:
    proc = subprocess.run([sys.executable, "-m", module], input="{not a spec\n",
                          capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines and lines[-1]["type"] == "failed", proc.stdout + proc.stderr
    assert "task spec on stdin" in lines[-1]["message"]
    assert "crash log" not in lines[-1]["message"]
    assert proc.returncode == 3


def _tools(command: str, args: list[str], home: Path) -> set[str]:
    async def go() -> set[str]:
        params = StdioServerParameters(command=command, args=args,
                                       env={HOME_ENV: str(home)})
        async with Client(params) as client:
            return {tool.name for tool in (await client.list_tools()).tools}
    return anyio.run(go)


@pytest.mark.parametrize("entry", ["script", "python-m"])
def test_host_entries_written_by_earlier_versions_still_start(entry: str, tmp_path: Path,
                                                             agent_home: Path) -> None:
    # The two shapes `agent mcp install` has written since it existed (mcp_server/install.py's
    # server_command): the absolute console script, or the interpreter with `-m agent`.
    args = ["mcp", "serve", "--root", str(tmp_path), "--base-url", UNREACHABLE]
    command, args = ((str(AGENT_SCRIPT), args) if entry == "script"
                     else (sys.executable, ["-m", "agent", *args]))
    assert "run_task" in _tools(command, args, agent_home)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_mcp_serve_over_stdio_ends_at_once_on_sigterm_with_stdin_open(
        sig: signal.Signals, tmp_path: Path, agent_home: Path) -> None:
    """`agent` turns SIGTERM and SIGHUP into an interrupt, which the MCP SDK's stdin reader
    thread does not see: a host's SIGTERM with our stdin still open waited until the host
    closed it. Over stdio the server cancels its tasks and ends at once (exit 128 + signal;
    tests/test_mcp_server_transports.py has one with a task running)."""
    proc = subprocess.Popen([str(AGENT_SCRIPT), "mcp", "serve", "--root", str(tmp_path),
                             "--base-url", UNREACHABLE], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, HOME_ENV: str(agent_home)})
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while b"workspace roots" not in proc.stderr.readline():
            assert time.monotonic() < deadline and proc.poll() is None
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 128 + sig
    finally:
        proc.kill()
        proc.communicate()


def test_version_from_a_source_tree_that_was_never_installed(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    # Seen on a machine without network, running the tree with PYTHONPATH: exit 4 before.
    from importlib import metadata

    from typer.testing import CliRunner

    from agent.cli.app import app

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("dflash-agent ") and "source tree, not installed" in \
        result.output


_CTRL_C_CHILD = '''
import os, signal, sys


class CtrlC:
    """A real SIGINT to this process the moment {module} starts to import."""

    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, CtrlC())
sys.argv = ["agent", "--help"]
{start}
'''
_STARTS = {"console-script": "from agent.entry import main\nsys.exit(main())",
           "python-m-agent": "import runpy\nrunpy.run_module('agent', run_name='__main__', "
                             "alter_sys=True)"}


@pytest.mark.parametrize("start", sorted(_STARTS))
@pytest.mark.parametrize("module", ["backend.secret_store", "typer"])
def test_ctrl_c_while_the_cli_imports_exits_130_without_a_traceback(start: str,
                                                                    module: str) -> None:
    """Ctrl-C in the first ~0.3 s of any command (the CLI's modules loading, before its own
    handler runs) printed a Python traceback."""
    proc = subprocess.run(
        [sys.executable, "-c", _CTRL_C_CHILD.format(module=module, start=_STARTS[start])],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "interrupted"
    assert "backend" not in proc.stdout  # stopped before the help
