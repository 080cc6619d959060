"""The task benchmark (benchmarks/tasks/): every repository-edit task's check fails on its
starting files and passes on its reference solution; the runner through the real `agent run
--json` against a scripted model (a model that writes the solution, one that does nothing,
one that stops at the step limit, malformed calls); the records, resume and the report; broken
task folders; the aider adapter's command line and output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.tasks import ROOT
from benchmarks.tasks.__main__ import main
from benchmarks.tasks.adapters.aider import Aider
from benchmarks.tasks.adapters.base import AgentRun, BenchError, Limits, run_agent
from benchmarks.tasks.adapters.dflash import DflashAgent
from benchmarks.tasks.adapters.install import PEERS_ENV, install_peer, peer_bin, peers_dir
from benchmarks.tasks.adapters.server import managed_server, served_model
from benchmarks.tasks.adapters.stream import read_stream, stream_fields
from benchmarks.tasks.report import markdown, plot, summarize
from benchmarks.tasks.runner import Options, config_key, read_records, run_tasks
from benchmarks.tasks.tasks import TaskError, load_task, run_check, select, verify
from tests.scripted import ScriptedModel, reply

SUITE = select(ROOT, "repo-edit")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def call(tool: str, **arguments: object) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


# ---------------------------------------------------------------- the tasks themselves


def test_the_repo_edit_suite_has_at_least_ten_small_tasks():
    assert len(SUITE) >= 10
    for task in SUITE:
        files = task.files()
        lines = sum(len((task.repo_dir / f).read_text().splitlines()) for f in files)
        assert 1 <= len(files) <= 4 and lines < 120, (task.key, files, lines)
        assert task.check_dir.is_dir() and task.solution_dir.is_dir(), task.key
        # what a user would say: no file contents pasted
        assert "```" not in task.instruction and len(task.instruction) < 700, task.key
        # hidden: no check file is in the starting repository unless it is the same test
        for hidden in task.check_dir.iterdir():
            visible = task.repo_dir / hidden.name
            assert not visible.exists() or visible.read_text() == hidden.read_text(), hidden


@pytest.mark.parametrize("task", SUITE, ids=[t.id for t in SUITE])
def test_check_fails_on_the_starting_files_and_passes_on_the_solution(task, tmp_path: Path):
    if task.check.startswith("node") and shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    start, solved = verify(task, tmp_path)
    assert start.status == "failed", start.tail
    assert solved.status == "passed", solved.tail


# ---------------------------------------------------------------- broken task folders


def write_task(root: Path, name: str, files: dict[str, str], suite: str = "s") -> Path:
    task = root / suite / name
    for rel, text in {"repo/a.py": "x = 1\n", **files}.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


@pytest.mark.parametrize(("files", "said"), [
    ({}, "no instruction: write it in task.md or as instruction in task.toml"),
    ({"task.toml": 'instruction = "fix it\ncheck = 1'}, "task.toml: not valid TOML"),
    ({"task.toml": 'instruction = "x"\nchek = "pytest"'}, "unknown keys chek"),
    ({"task.toml": 'instruction = "x"\ncheck = "true"\ntimeout_s = -1'},
     "timeout_s must be a positive number of seconds"),
    ({"task.toml": 'instruction = "x"\ncheck = "true"\nmax_steps = 2.5'},
     "max_steps must be a positive integer"),
    ({"task.md": "fix it"}, "no check command"),
    ({"task.md": "fix it", "task.toml": 'instruction = "x"'}, "both task.md and task.toml"),
], ids=["no-instruction", "bad-toml", "unknown-key", "bad-timeout", "bad-steps", "no-check",
        "two-instructions"])
def test_a_broken_task_is_a_clear_error_not_a_traceback(tmp_path: Path, capsys, files, said):
    write_task(tmp_path, "broken", files)
    with pytest.raises(TaskError, match=said):
        select(tmp_path, None)
    code = main(["run", "--root", str(tmp_path), "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.startswith("error: ") and "Traceback" not in err
    assert not (tmp_path / "r.jsonl").exists()  # nothing ran


def test_task_selection_by_suite_id_key_and_glob(tmp_path: Path, capsys):
    for name in ("fix-a", "fix-b", "add-c"):
        write_task(tmp_path, name, {"task.md": "do it", "check/test_x.py": "def test(): pass\n"})
    keys = lambda spec: [t.key for t in select(tmp_path, spec)]  # noqa: E731
    assert keys(None) == keys("s") == ["s/add-c", "s/fix-a", "s/fix-b"]
    assert keys("fix-*") == ["s/fix-a", "s/fix-b"]
    assert keys("s/add-c,fix-a,add-c") == ["s/add-c", "s/fix-a"]
    assert select(tmp_path, "fix-a")[0].check.startswith("python -m pytest")  # default check
    with pytest.raises(TaskError, match="no task or suite matches 'nope'"):
        select(tmp_path, "nope")
    assert main(["list", "--root", str(tmp_path), "--tasks", "nope"]) == 2
    assert "error: no task or suite matches" in capsys.readouterr().err


def test_a_check_that_runs_too_long_is_a_timeout_and_its_processes_are_ended(tmp_path: Path):
    task_dir = write_task(tmp_path, "slow", {"task.toml": (
        'instruction = "x"\ncheck_timeout_s = 1\n'
        'check = "python -c \'import subprocess, time; '
        'subprocess.Popen([\\"sleep\\", \\"60.4242\\"]); time.sleep(60)\'"')})
    task = load_task(task_dir)
    repo = tmp_path / "repo"
    shutil.copytree(task.repo_dir, repo)
    result = run_check(task, repo)
    assert result.status == "timeout" and not result.passed and result.seconds < 20
    assert "check timed out after 1 s" in result.tail
    if shutil.which("pgrep"):  # the check's own child was ended with it
        leftover = subprocess.run(["pgrep", "-f", "^sleep 60.4242$"], capture_output=True,
                                  text=True)
        assert leftover.stdout.strip() == ""


def test_a_check_that_cannot_start_is_an_error(tmp_path: Path):
    task = load_task(write_task(tmp_path, "t", {"task.toml": 'instruction = "x"\n'
                                                "check = \"no-such-program-here --x\""}))
    repo = tmp_path / "repo"
    shutil.copytree(task.repo_dir, repo)
    result = run_check(task, repo)
    assert result.status == "error" and "could not start" in result.tail


# ---------------------------------------------------------------- the runner, scripted model

PAGINATION = next(t for t in SUITE if t.id == "fix-failing-test-pagination")


def solving_script(task) -> list[dict]:
    """A model that writes the reference solution through the agent's file tools."""
    script = []
    for path in sorted(task.solution_dir.rglob("*")):
        if path.is_file():
            rel = path.relative_to(task.solution_dir).as_posix()
            script += [call("view", path=rel), call("create", path=rel,
                                                    file_text=path.read_text())]
    # The check a model runs before it is done (the loop takes no final answer after an
    # unchecked edit of code: agent/finish.py).
    return script + [call("bash", command="python -m pytest -q -p no:cacheprovider"),
                     call("final_answer", text="fixed")]


def run_scripted(script: list[dict], tmp_path: Path, max_steps: int | None = None,
                 out: Path | None = None, resume: bool = False) -> list[dict[str, Any]]:
    with ScriptedModel(script) as model:
        adapter = DflashAgent(tool_protocol="json", base_url=model.url)
        opts = Options(out=out or tmp_path / "r.jsonl", resume=resume,
                       work_dir=tmp_path / "work", max_steps=max_steps, timeout_s=120)
        return run_tasks([PAGINATION], adapter, opts, echo=lambda line: None)


def test_a_model_that_writes_the_solution_passes_and_is_recorded(tmp_path: Path):
    [record] = run_scripted(solving_script(PAGINATION), tmp_path)
    assert record["pass"] is True and record["false_success"] is False
    assert record["exit_code"] == 0 and record["stop_reason"] == "done"
    assert record["task"] == PAGINATION.id and record["suite"] == "repo-edit"
    assert record["agent"] == "dflash-agent/json" and record["protocol"] == "json"
    assert record["steps"] == 4
    assert record["tool_calls"] == {"bash": 1, "create": 1, "final_answer": 1, "view": 1}
    assert record["malformed"] == {"format_errors": 0, "invalid_arguments": 0, "total": 0}
    # the scripted server's timings: prompt_n 10, cache_n 0, 5 tokens in 2 ms per turn
    assert record["prompt_tokens"] == {"prefilled": 40, "cached": 0}
    assert record["decode_tokens"] == 20 and record["decode_tok_s"] == 2500.0
    assert record["draft"] is None
    assert record["check"]["status"] == "passed" and record["wall_s"] > 0
    assert record["limits"] == {"max_steps": PAGINATION.max_steps, "timeout_s": 120}
    assert read_records(tmp_path / "r.jsonl") == [record]
    assert not list((tmp_path / "work").iterdir())  # the task repository was removed


def test_a_model_that_does_nothing_but_says_done_is_a_false_success(tmp_path: Path):
    # it looks and runs something (the loop takes no final answer from a task that changed
    # nothing and ran nothing), then says done
    script = [call("view", path="pagination.py"), call("bash", command="true"),
              call("final_answer", text="all fixed")]
    [record] = run_scripted(script, tmp_path)
    assert record["exit_code"] == 0 and record["stop_reason"] == "done"
    assert record["pass"] is False and record["false_success"] is True
    assert record["check"]["status"] == "failed" and "failed" in record["check"]["tail"]


def test_a_run_stopped_at_the_step_limit_fails_without_a_false_success(tmp_path: Path):
    [record] = run_scripted([call("view", path="pagination.py")], tmp_path, max_steps=1)
    assert record["exit_code"] == 1 and record["stop_reason"] == "max_steps"
    assert record["pass"] is False and record["false_success"] is False
    assert record["limits"]["max_steps"] == 1


def test_malformed_replies_and_invalid_arguments_are_counted(tmp_path: Path):
    script = [reply("{not json"), call("view", pathx=1), call("view", path="pagination.py"),
              call("bash", command="true"), call("final_answer", text="x")]
    [record] = run_scripted(script, tmp_path)
    assert record["malformed"] == {"format_errors": 1, "invalid_arguments": 1, "total": 2}
    assert record["tool_calls"] == {"bash": 1, "final_answer": 1, "view": 2}
    assert record["stop_reason"] == "done"


def test_resume_skips_tasks_already_recorded_for_the_same_configuration(tmp_path: Path):
    out = tmp_path / "r.jsonl"
    run_scripted([call("view", path="pagination.py"), call("final_answer", text="x")],
                 tmp_path, out=out)
    # an exhausted script: the agent would fail if it ran again
    assert run_scripted([], tmp_path, out=out, resume=True) == []
    assert len(read_records(out)) == 1
    other = DflashAgent(tool_protocol="text", base_url="http://127.0.0.1:1")
    assert config_key(other) != read_records(out)[0]["config_key"]


# ---------------------------------------------------------------- the event stream


def test_the_stream_totals_timings_drafts_fallbacks_and_errors():
    turn = {"type": "model_turn", "step": 1, "tool_calls": [],
            "timings": {"prompt_n": 100, "cache_n": 900, "predicted_n": 50,
                        "predicted_ms": 500.0, "draft_n": 40, "draft_n_accepted": 30}}
    lines = [json.dumps(turn), json.dumps({**turn, "step": 2}), "not json",
             json.dumps({"type": "protocol", "protocol": "json", "previous": "text"}),
             json.dumps({"type": "tool_result", "is_error": True, "text": "unknown tool 'x'"}),
             json.dumps({"type": "tool_result", "is_error": True, "text": "no such file"}),
             json.dumps({"type": "final_answer", "reason": "format_errors", "steps": 2,
                         "text": "stopped"})]
    final = {"type": "model_turn", "step": 3, "tool_calls": [{"id": "f1",
                                                              "name": "final_answer"}]}
    refused = [json.dumps(final), json.dumps({"type": "tool_call", "call_id": "f1",
                                              "name": "final_answer"}),
               json.dumps({**final, "tool_calls": [{"id": "f2", "name": "final_answer"}]})]
    assert read_stream(refused).tool_calls == {"final_answer": 2}  # refused once, then taken
    fields = stream_fields(read_stream(lines))
    assert fields["prompt_tokens"] == {"prefilled": 200, "cached": 1800}
    assert fields["decode_tokens"] == 100 and fields["decode_tok_s"] == 100.0
    assert fields["draft"] == {"drafted": 80, "accepted": 60, "acceptance": 0.75}
    assert fields["protocol"] == "json" and fields["protocol_fallbacks"] == 1
    assert fields["malformed"]["invalid_arguments"] == 1 and fields["tool_errors"] == 1
    assert read_stream(lines).stop_reason == "format_errors"


def test_an_agent_past_its_wall_clock_limit_is_killed(tmp_path: Path):
    run = run_agent(["sleep", "30"], tmp_path, {"PATH": "/usr/bin:/bin"}, timeout=0.5)
    assert run.exit_code is None and run.seconds < 20
    fields = DflashAgent().parse(run)
    assert fields["stop_reason"] == "killed_at_wall_limit"
    crashed = DflashAgent().parse(AgentRun([], 3, "", "error: the server is gone\n", 1.0))
    assert crashed["stop_reason"] == "error" and crashed["error"] == "error: the server is gone"


# ---------------------------------------------------------------- report


def record(suite: str, task: str, agent: str, ok: bool, exit_code: int, decoded: int,
           tok_s: float | None, draft: dict | None = None) -> dict[str, Any]:
    return {"task": task, "suite": suite, "agent": agent, "config": {"preset": None},
            "config_key": agent, "pass": ok, "exit_code": exit_code,
            "false_success": exit_code == 0 and not ok, "stop_reason": "done", "steps": 3,
            "tool_calls_total": 2, "malformed": {"total": 1}, "wall_s": 10.0,
            "prompt_tokens": {"prefilled": 100, "cached": 50}, "decode_tokens": decoded,
            "decode_tok_s": tok_s, "draft": draft, "check": {"status": "passed" if ok
                                                             else "failed"}}


def test_the_report_sums_per_suite_and_agent_and_draws_a_chart(tmp_path: Path, capsys):
    records = [record("repo-edit", "a", "dflash-agent/text", True, 0, 100, 50.0,
                      {"drafted": 10, "accepted": 5}),
               record("repo-edit", "b", "dflash-agent/text", False, 0, 300, 100.0,
                      {"drafted": 30, "accepted": 25}),
               record("repo-edit", "a", "aider/whole", False, 1, 10, None)]
    [aider, ours] = summarize(records)
    assert ours["passed"] == 1 and ours["tasks"] == 2 and ours["false_successes"] == 1
    assert ours["decode_tok_s"] == pytest.approx(400 / 5)  # ratio of sums, not mean of rates
    assert ours["acceptance"] == pytest.approx(30 / 40)
    assert aider["decode_tok_s"] is None and aider["false_successes"] == 0
    table = markdown(records)
    assert "| repo-edit | dflash-agent/text | 1/2 | 50% | 1 | 2 | 20 / 10.0 | 200 / 100 | 400 " \
           "| 80.0 | 75% |" in table
    assert "**false success**" in table
    out = tmp_path / "r.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in records) + "{half a li")
    assert main(["report", str(out), "--plot", str(tmp_path / "r.png")]) == 0
    printed = capsys.readouterr()
    assert "| suite | agent |" in printed.out and "r.jsonl:4: not a task record" in printed.err
    pytest.importorskip("matplotlib")
    assert (tmp_path / "r.png").read_bytes().startswith(PNG_MAGIC)
    assert plot(records, tmp_path / "again.png") is None
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2


# ---------------------------------------------------------------- aider


class Calls:
    """A stand-in for subprocess.run: answers by the command's last words."""

    def __init__(self, answers: dict[str, list[tuple[int, str]]]):
        self.answers, self.seen = answers, []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess:
        self.seen.append(argv)
        key = next(k for k in self.answers if " ".join(argv).endswith(k))
        code, out = self.answers[key].pop(0)
        return subprocess.CompletedProcess(argv, code, out, "")


def test_the_aider_command_line_is_its_documented_one_shot_mode(tmp_path: Path):
    calls = Calls({"--version": [(0, "aider 0.86.2\n")]})
    binary = tmp_path / "aider"
    binary.write_text("")
    aider = Aider(base_url="http://127.0.0.1:8080", model="smol.gguf", binary=binary,
                  call=calls)
    aider.setup()
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    argv = aider.command(PAGINATION, repo, Limits(max_steps=30, timeout_s=600), scratch)
    assert argv == [
        str(binary), "--model", "openai/smol.gguf", "--openai-api-base",
        "http://127.0.0.1:8080/v1", "--openai-api-key", "x", "--edit-format", "whole",
        "--yes-always", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore",
        "--no-check-update", "--no-show-release-notes", "--no-analytics",
        "--no-show-model-warnings", "--no-pretty", "--no-fancy-input",
        "--no-suggest-shell-commands", "--no-detect-urls", "--no-auto-lint",
        "--no-restore-chat-history", "--timeout", "600",
        "--chat-history-file", str(scratch / "aider.chat.history.md"),
        "--input-history-file", str(scratch / "aider.input.history"),
        "--message", PAGINATION.instruction, "pagination.py", "test_pagination.py"]
    assert aider.info()["version"] == "aider 0.86.2" and aider.label == "aider/whole"
    out = ("Applied edit to pagination.py\nTokens: 1.2k sent, 345 received.\n"
           "Tokens: 2.0k sent, 1.0k cache hit, 80 received.\n")
    fields = aider.parse(AgentRun(argv, 0, out, "", 12.0))
    assert fields["prompt_tokens"] == {"prefilled": 3200, "cached": 1000, "approximate": True}
    assert fields["decode_tokens"] == 425 and fields["steps"] == 2
    assert fields["tool_calls"] == {"edit": 1} and fields["stop_reason"] == "done"


def test_peers_use_the_managed_server_started_once(tmp_path: Path):
    listed = json.dumps([{"preset": "smollm2-135m", "url": "http://127.0.0.1:8091"}])
    calls = Calls({"status --json": [(0, "[]"), (0, listed)], "up --preset smollm2-135m":
                   [(0, "started llama-server pid 1 at http://127.0.0.1:8091")]})
    assert managed_server("smollm2-135m", calls, base=["agent"]) == \
        ("http://127.0.0.1:8091", True)
    assert [a[1:] for a in calls.seen] == [["backend", "status", "--json"],
                                           ["backend", "up", "--preset", "smollm2-135m"],
                                           ["backend", "status", "--json"]]
    running = Calls({"status --json": [(0, listed)]})
    assert managed_server("smollm2-135m", running, base=["agent"])[1] is False
    assert len(running.seen) == 1  # nothing started


def test_the_model_id_comes_from_the_server():
    with ScriptedModel([]) as model:
        model.models = {"object": "list", "data": [{"id": "SmolLM2.gguf"}]}
        assert served_model(model.url) == "SmolLM2.gguf"


def test_aider_installed_in_the_benchmark_venv_solves_a_task_with_a_scripted_model(
        tmp_path: Path):
    """The real aider through the adapter against the scripted server: a whole-file reply is
    applied and the check passes. aider is installed into the peers' folder (``install-peer``,
    README.md) when it is not there yet: once, about a minute, then reused."""
    assert install_peer("aider").startswith("aider ")
    assert Aider.default_bin().is_file()
    solution = (PAGINATION.solution_dir / "pagination.py").read_text()
    whole = f"The fix:\n\npagination.py\n```python\n{solution}```\n"
    with ScriptedModel([reply(whole)] * 3) as model:
        aider = Aider(base_url=model.url, model="scripted")
        [record] = run_tasks([PAGINATION], aider, Options(out=tmp_path / "r.jsonl",
                                                          work_dir=tmp_path, timeout_s=120),
                             echo=lambda line: None)
    assert record["agent_info"]["version"].startswith("aider ")
    assert record["pass"] is True and record["exit_code"] == 0, record["output_tail"]
    assert record["tool_calls"] == {"edit": 1} and record["steps"] == 1
    assert record["prompt_tokens"]["prefilled"] > 0 and record["decode_tokens"] > 0


class FakeVenv:
    """A stand-in for subprocess.run on a peer's venv: ``-m venv`` makes its python, pip
    installs ``version`` (or fails), the metadata query and ``--version`` report it."""

    def __init__(self, version: str | None = None, pip_ok: bool = True):
        self.version, self.pip_ok, self.seen = version, pip_ok, []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess:
        self.seen.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            python = Path(argv[-1]) / "bin" / "python"
            python.parent.mkdir(parents=True, exist_ok=True)
            python.write_text("")
            (python.parent / "aider").write_text("")
        elif argv[1:4] == ["-m", "pip", "install"]:
            if not self.pip_ok:
                return subprocess.CompletedProcess(argv, 1, "", "ERROR: No matching "
                                                   "distribution found for aider-chat==0.86.2")
            self.version = argv[-1].split("==")[1]
        elif argv[-1] == "--version":
            return subprocess.CompletedProcess(argv, 0, f"aider {self.version}\n", "")
        elif argv[-1] == "aider-chat":
            return subprocess.CompletedProcess(argv, 0 if self.version else 1,
                                               f"{self.version}\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_install_peer_makes_a_venv_outside_the_repository_once(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(PEERS_ENV, str(tmp_path / "peers"))
    assert peers_dir() == tmp_path / "peers"
    assert Aider.default_bin() == peer_bin("aider") == tmp_path / "peers/aider/bin/aider"
    monkeypatch.delenv(PEERS_ENV)
    assert ROOT.resolve() not in peers_dir().resolve().parents
    fake = FakeVenv()
    assert install_peer("aider", tmp_path, call=fake) == "aider 0.86.2"
    python = str(tmp_path / "aider/bin/python")
    assert [a[:4] for a in fake.seen[:2]] == [
        [sys.executable, "-m", "venv", "--clear"], [python, "-m", "pip", "install"]]
    assert fake.seen[1][-1] == "aider-chat==0.86.2" and "--no-cache-dir" in fake.seen[1]
    again = FakeVenv(version="0.86.2")
    assert install_peer("aider", tmp_path, call=again) == "aider 0.86.2"
    assert [a[-1] for a in again.seen] == ["aider-chat", "--version"]  # left alone
    old = FakeVenv(version="0.80.0")
    install_peer("aider", tmp_path, call=old)
    assert old.version == "0.86.2" and not any("venv" in a for a in old.seen)


def test_a_peer_that_cannot_be_installed_is_one_error_line_and_exit_3(
        tmp_path: Path, monkeypatch, capsys):
    with pytest.raises(BenchError, match="No matching distribution"):
        install_peer("aider", tmp_path, call=FakeVenv(pip_ok=False))
    monkeypatch.setenv(PEERS_ENV, str(tmp_path / "peers"))
    monkeypatch.setattr("benchmarks.tasks.adapters.install.run_command", FakeVenv(pip_ok=False))
    assert main(["install-peer", "aider"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("error:")] == [err[-1]]
    assert "pip could not install aider-chat==0.86.2" in err[-1]
    monkeypatch.setenv(PEERS_ENV, str(tmp_path / "none"))
    monkeypatch.setattr("benchmarks.tasks.adapters.peer.shutil.which", lambda name: None)
    assert main(["run", "--agent", "aider", "--base-url", "http://127.0.0.1:1", "--out",
                 str(tmp_path / "r.jsonl"), "--tasks", "rename-function"]) == 3
    assert "install-peer aider" in capsys.readouterr().err


def test_the_cli_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.tasks", "list", "--tasks",
                           "repo-edit"], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == len(SUITE)
