"""The bash tools driven through the registry with real processes: exit codes, closed stdin,
timeouts that kill whole process groups, capped output, background jobs and a filtered
environment."""

import http.client
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tools.registry import Registry, default_registry
from tools.workspace import Workspace


def unique_sleep() -> str:
    """A ``sleep`` argument no other process on the machine uses, to find ours by cmdline."""
    return f"300.{secrets.randbelow(10**9):09d}1"


def live_processes_with(marker: str) -> list[psutil.Process]:
    """Running (non-zombie) processes whose command line mentions ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(marker in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def wait_until(condition, timeout: float = 10.0) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(port: int) -> int | None:
    """Status of ``GET /`` on loopback ``port``, or None when nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


@pytest.fixture
def stdin_never_ends() -> Iterator[None]:
    """Make this process's stdin a pipe that never reaches end of file, so a command that
    inherited it would block."""
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def init_repo(repo: Path) -> None:
    git(repo, "init", "-q")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "commit.gpgsign", "false")


# --- exit codes and interactivity -----------------------------------------------------------


def test_echo_reports_its_output_and_exit_code_zero(reg: Registry):
    obs = reg.call("bash", {"command": "echo hello world"})
    assert not obs.is_error
    assert obs.text == "hello world\n\n[exit code 0]"


def test_a_silent_command_reports_just_the_exit_code(reg: Registry):
    obs = reg.call("bash", {"command": "true"})
    assert not obs.is_error
    assert obs.text == "[exit code 0]"


def test_a_nonzero_exit_is_an_error_with_the_code(reg: Registry):
    obs = reg.call("bash", {"command": "echo oops >&2; exit 3"})
    assert obs.is_error
    assert obs.text == "oops\n\n[exit code 3]"


def test_stderr_and_stdout_are_interleaved_in_order(reg: Registry):
    obs = reg.call("bash", {"command": "echo one; echo two >&2; echo three"})
    assert obs.text == "one\ntwo\nthree\n\n[exit code 0]"


def test_commands_run_in_the_workspace_root_by_default(reg: Registry, ws: Path):
    assert reg.call("bash", {"command": "pwd"}).text == f"{ws}\n\n[exit code 0]"


def test_cwd_selects_a_subdirectory_of_the_workspace(reg: Registry, ws: Path):
    (ws / "sub").mkdir()
    assert reg.call("bash", {"command": "pwd", "cwd": "sub"}).text == f"{ws / 'sub'}\n\n" \
                                                                      "[exit code 0]"


@pytest.mark.parametrize("cwd", ["..", "../..", "/", "/tmp"])
def test_cwd_outside_the_workspace_is_refused(reg: Registry, ws: Path, cwd: str):
    obs = reg.call("bash", {"command": "touch escaped", "cwd": cwd})
    assert obs.is_error
    assert obs.text.startswith(f"{cwd} is outside the workspace {ws}")
    assert not (ws.parent / "escaped").exists()


def test_cwd_that_is_a_file_is_refused(reg: Registry, ws: Path):
    (ws / "f.txt").write_text("x")
    obs = reg.call("bash", {"command": "pwd", "cwd": "f.txt"})
    assert obs.is_error
    assert obs.text == "cwd f.txt is not a directory"


def test_cat_waiting_on_stdin_returns_promptly(reg: Registry, stdin_never_ends: None):
    obs = reg.call("bash", {"command": "cat", "timeout": 5})
    assert not obs.is_error  # a cat left waiting would have been killed at the timeout
    assert obs.text == "[exit code 0]"


def test_read_from_stdin_gets_end_of_file_at_once(reg: Registry, stdin_never_ends: None):
    obs = reg.call("bash", {"command": "read x; echo got:$x", "timeout": 5})
    assert obs.text == "got:\n\n[exit code 0]"


def test_git_commit_without_message_aborts_instead_of_waiting_for_an_editor(
        reg: Registry, ws: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LC_ALL", "C")  # git's messages untranslated
    init_repo(ws)
    (ws / "a.txt").write_text("a\n")
    git(ws, "add", "a.txt")
    obs = reg.call("bash", {"command": "git commit", "timeout": 60})
    assert obs.is_error  # an editor left waiting would end in a timeout, not git's abort
    assert "Aborting commit due to empty commit message" in obs.text
    assert re.search(r"\[exit code [1-9]\d*\]$", obs.text)
    head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=ws,
                          capture_output=True, text=True)
    assert head.returncode != 0  # no commit was made


# --- timeouts and process groups ------------------------------------------------------------


def test_a_timeout_kills_the_whole_process_group(reg: Registry):
    marker = unique_sleep()
    command = f"echo started; bash -c 'sleep {marker} & sleep {marker}'"
    started = time.monotonic()
    obs = reg.call("bash", {"command": command, "timeout": 1})
    assert time.monotonic() - started < 15
    assert obs.is_error
    assert obs.text.startswith("started\n")
    assert obs.text.endswith("[killed after 1 s timeout; use background=true for long-running "
                             "processes]")
    assert wait_until(lambda: not live_processes_with(marker), timeout=10), \
        live_processes_with(marker)


def test_a_child_left_running_in_the_background_is_killed_when_the_command_ends(
        reg: Registry):
    marker = unique_sleep()
    started = time.monotonic()
    obs = reg.call("bash", {"command": f"sleep {marker} & echo spawned", "timeout": 60})
    assert time.monotonic() - started < 15
    assert obs.text == "spawned\n\n[exit code 0]"
    assert wait_until(lambda: not live_processes_with(marker), timeout=10)


def test_a_setsid_child_of_a_command_that_timed_out_is_killed_with_it(reg: Registry):
    marker = unique_sleep()
    obs = reg.call("bash", {"command": f"setsid sleep {marker} & sleep 60", "timeout": 1})
    assert obs.is_error and "[killed after 1 s timeout" in obs.text
    # Killed before the tool returned, not eventually: nothing of it runs on unsupervised.
    assert wait_until(lambda: not live_processes_with(marker), timeout=2), \
        live_processes_with(marker)


def test_a_setsid_child_left_by_a_finished_command_is_killed_when_it_ends(reg: Registry):
    marker = unique_sleep()
    obs = reg.call("bash", {"command": f"setsid sleep {marker} & sleep 0.5; echo spawned"})
    assert obs.text == "spawned\n\n[exit code 0]"
    assert wait_until(lambda: not live_processes_with(marker), timeout=2), \
        live_processes_with(marker)


def test_bash_kill_also_stops_what_the_job_detached_with_setsid(reg: Registry):
    marker = unique_sleep()
    reg.call("bash", {"command": f"setsid sleep {marker} & sleep {marker}",
                      "background": True})
    assert wait_until(lambda: len(live_processes_with(marker)) >= 3)  # bash and two sleeps
    assert reg.call("bash_kill", {"job_id": 1}).text.startswith("job 1 stopped")
    assert wait_until(lambda: not live_processes_with(marker), timeout=2), \
        live_processes_with(marker)


def test_a_timeout_below_one_second_is_refused_by_validation(reg: Registry):
    obs = reg.call("bash", {"command": "true", "timeout": 0})
    assert obs.is_error
    assert obs.text == ("invalid arguments for bash: timeout: Input should be greater than or "
                        "equal to 1")


def test_a_timeout_above_the_maximum_is_refused_by_validation(reg: Registry):
    obs = reg.call("bash", {"command": "true", "timeout": 1801})
    assert obs.is_error
    assert obs.text == ("invalid arguments for bash: timeout: Input should be less than or "
                        "equal to 1800")


def test_a_missing_command_is_named(reg: Registry):
    obs = reg.call("bash", {"timeout": 5})
    assert obs.is_error
    assert obs.text == "invalid arguments for bash: command: Field required"


# --- output cap and spill file --------------------------------------------------------------


def test_huge_output_is_capped_and_spilled_in_full_to_a_scratch_file(reg: Registry, ws: Path):
    obs = reg.call("bash", {"command": "yes | head -c 5000000"})
    assert not obs.is_error
    assert len(obs.text) < 50_000
    assert obs.text.startswith("y\ny\n")
    assert obs.text.endswith("y\n\n[exit code 0]")
    assert "[... 4984000 characters omitted; the full output is in " in obs.text
    spill = re.search(r"view_range on \.dflash-agent/(\S+\.full\.txt)", obs.text)
    assert spill
    full = ws / ".dflash-agent" / spill.group(1)
    assert full.read_text() == "y\n" * 2_500_000


def test_the_spill_file_of_a_huge_output_is_viewable_with_the_view_tool(reg: Registry):
    obs = reg.call("bash", {"command": "seq 1 1000000"})
    spill = re.search(r"view_range on (\.dflash-agent/\S+\.full\.txt)", obs.text)
    assert spill
    page = reg.call("view", {"path": spill.group(1), "view_range": [499999, 500001]})
    assert not page.is_error
    assert page.text == ("499999\t499999\n500000\t500000\n500001\t500001")
    tail = reg.call("view", {"path": spill.group(1), "view_range": [1000000, -1]})
    assert tail.text == "1000000\t1000000"


def test_a_flood_of_output_is_capped_on_disk_and_never_held_whole_in_memory(
        reg: Registry, ws: Path, monkeypatch: pytest.MonkeyPatch):
    # Issue 28 item 10, scaled down: a 256 KiB head and tail instead of the real caps, and
    # 15 MB of output instead of a chatty command running to its timeout.
    from tools import spill

    monkeypatch.setattr(spill, "SPILL_HEAD", 256 * 1024, raising=False)
    monkeypatch.setattr(spill, "SPILL_TAIL", 256 * 1024, raising=False)
    tracemalloc.start()
    try:
        obs = reg.call("bash", {"command": "seq 1 2000000"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not obs.is_error
    total = sum(len(f"{n}\n") for n in range(1, 2000001))
    # Streamed: never the whole output (nor its text) in memory at once.
    assert peak < total // 4, peak
    assert obs.text.startswith("1\n2\n3\n") and obs.text.endswith("\n2000000\n\n[exit code 0]")
    found = re.search(r"view_range on (\.dflash-agent/(\S+\.txt))", obs.text)
    assert found and f"the output was {total} bytes" in obs.text, obs.text[7990:8400]
    kept = ws / ".dflash-agent" / found.group(2)
    # On disk: its head and tail with a marker between, not all of it.
    assert kept.stat().st_size < 2 * 256 * 1024 + 400
    data = kept.read_text()
    assert data.startswith("1\n2\n3\n") and data.endswith("\n1999999\n2000000\n")
    marker = re.search(r"^\[\.\.\. (\d+) bytes dropped here.*$", data, re.MULTILINE)
    assert marker, data[250_000:270_000]
    # head + "\n" + marker + "\n" + tail: what was dropped and what was kept add up.
    assert int(marker.group(1)) + len(data) - len(marker.group(0)) - 2 == total
    lines = data.count("\n")
    last = reg.call("view", {"path": found.group(1), "view_range": [lines, -1]})
    assert last.text.endswith("\t2000000")


def test_output_within_the_cap_is_returned_whole_and_not_spilled(reg: Registry, ws: Path):
    obs = reg.call("bash", {"command": "seq 1 1000"})
    assert obs.text == "\n".join(str(n) for n in range(1, 1001)) + "\n\n[exit code 0]"
    assert list((ws / ".dflash-agent").iterdir()) == []


def test_invalid_utf8_output_is_replaced_not_fatal(reg: Registry):
    obs = reg.call("bash", {"command": r"printf 'caf\xe9\n'"})
    assert not obs.is_error
    assert obs.text == "caf\ufffd\n\n[exit code 0]"


# --- background jobs ------------------------------------------------------------------------


def test_a_background_server_answers_is_listed_and_is_stopped_by_bash_kill(reg: Registry):
    port = free_port()
    command = f"{shlex.quote(sys.executable)} -m http.server {port} --bind 127.0.0.1"
    obs = reg.call("bash", {"command": command, "background": True})
    assert not obs.is_error  # a server run in the foreground would end in a timeout
    assert re.fullmatch(r"started background job 1 \(pid \d+\); output goes to "
                        r"\.dflash-agent/\S+\.out", obs.text)
    assert wait_until(lambda: http_status(port) == 200, timeout=20)

    jobs = reg.call("bash_jobs", {})
    assert not jobs.is_error
    assert re.match(rf"job 1 pid \d+ running: {re.escape(command)}\n  last output: ",
                    jobs.text)

    killed = reg.call("bash_kill", {"job_id": 1})
    assert not killed.is_error
    assert killed.text.startswith("job 1 stopped (exit ")
    assert wait_until(lambda: http_status(port) is None, timeout=5)
    assert re.match(r"job 1 pid \d+ exited \(-?\d+\): ", reg.call("bash_jobs", {}).text)


def test_bash_jobs_shows_the_recent_output_of_a_job(reg: Registry):
    reg.call("bash", {"command": "echo ready-$((6 * 7)); exec sleep 30", "background": True})
    assert wait_until(lambda: "last output: ready-42" in reg.call("bash_jobs", {}).text)


def test_bash_jobs_without_jobs_says_so(reg: Registry):
    assert reg.call("bash_jobs", {}).text == "no background jobs"


def test_bash_kill_of_an_unknown_job_is_an_error(reg: Registry):
    obs = reg.call("bash_kill", {"job_id": 99})
    assert obs.is_error
    assert obs.text == "no background job 99 (jobs: none)"
    reg.call("bash", {"command": "sleep 30", "background": True})
    obs = reg.call("bash_kill", {"job_id": 7})
    assert obs.is_error
    assert obs.text == "no background job 7 (jobs: 1)"


def test_bash_kill_of_a_job_that_already_exited_reports_its_exit_code(reg: Registry):
    reg.call("bash", {"command": "exit 4", "background": True})
    job = reg.jobs.jobs[1]
    assert wait_until(lambda: job.proc.poll() is not None)
    obs = reg.call("bash_kill", {"job_id": 1})
    assert obs.text == "job 1 stopped (exit 4)"


def test_closing_the_registry_stops_remaining_background_jobs(ws: Path):
    registry = default_registry(Workspace(ws))
    marker = unique_sleep()
    try:
        registry.call("bash", {"command": f"sleep {marker} & sleep {marker}",
                               "background": True})
        registry.call("bash", {"command": f"exec sleep {marker}", "background": True})
        assert wait_until(lambda: len(live_processes_with(marker)) >= 3)
    finally:
        registry.close()
    assert all(job.proc.poll() is not None for job in registry.jobs.jobs.values())
    assert wait_until(lambda: not live_processes_with(marker), timeout=10), \
        live_processes_with(marker)


# --- environment ----------------------------------------------------------------------------


def test_secrets_in_the_environment_are_not_passed_to_commands(
        reg: Registry, monkeypatch: pytest.MonkeyPatch):
    secret_vars = {"MY_API_KEY": "s3cr3t-api", "GITHUB_TOKEN": "s3cr3t-gh",
                   "DB_PASSWORD": "s3cr3t-db", "AWS_SECRET_ACCESS_KEY": "s3cr3t-aws",
                   "PIP_INDEX_PASSWORD": "s3cr3t-pip"}
    for name, value in secret_vars.items():
        monkeypatch.setenv(name, value)
    obs = reg.call("bash", {"command": "env"})
    assert not obs.is_error
    assert "s3cr3t" not in obs.text
    names = {line.split("=", 1)[0] for line in obs.text.splitlines()}
    assert names.isdisjoint(secret_vars)


def test_credentials_in_allowed_urls_are_stripped_from_commands_environment(
        reg: Registry, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:s3cr3t-pip@pypi.example.invalid/simple")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:s3cr3t-proxy@proxy.example.invalid:3128")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://s3cr3t-tok@git.example.invalid/simple")
    obs = reg.call("bash", {"command": "env"})
    assert "s3cr3t" not in obs.text
    lines = set(obs.text.splitlines())
    assert {"PIP_INDEX_URL=https://pypi.example.invalid/simple",
            "HTTPS_PROXY=http://proxy.example.invalid:3128",
            "PIP_EXTRA_INDEX_URL=https://git.example.invalid/simple"} <= lines


def test_unknown_environment_variables_are_not_passed_but_allowed_ones_are(
        reg: Registry, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SOME_RANDOM_SETTING", "leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    obs = reg.call("bash", {"command": "env"})
    lines = set(obs.text.splitlines())
    assert "LANG=C.UTF-8" in lines
    assert not any(line.startswith("SOME_RANDOM_SETTING=") for line in lines)


def test_commands_get_a_non_interactive_environment(reg: Registry,
                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PAGER", "less")
    monkeypatch.setenv("GIT_EDITOR", "vim")
    obs = reg.call("bash", {"command": "env"})
    lines = set(obs.text.splitlines())
    for expected in ("CI=1", "GIT_EDITOR=true", "EDITOR=true", "PAGER=cat", "GIT_PAGER=cat",
                     "GIT_TERMINAL_PROMPT=0", "TERM=dumb"):
        assert expected in lines


# --- scratch directory ----------------------------------------------------------------------


def test_the_scratch_dir_is_excluded_from_git_in_a_git_workspace(reg: Registry, ws: Path):
    init_repo(ws)
    obs = reg.call("bash", {"command": "seq 1 100000"})
    assert "full output is in" in obs.text
    assert any((ws / ".dflash-agent").iterdir())  # a spill file git could see
    assert "/.dflash-agent/" in (ws / ".git" / "info" / "exclude").read_text().splitlines()
    assert git(ws, "status", "--porcelain", "--untracked-files=all") == ""


def test_the_scratch_exclude_line_is_added_once_and_after_a_newline(ws: Path):
    init_repo(ws)
    exclude = ws / ".git" / "info" / "exclude"
    exclude.write_text("*.log")  # no trailing newline
    registry = default_registry(Workspace(ws))
    registry.call("bash", {"command": "true"})
    (ws / ".dflash-agent").rmdir()  # the next command recreates it
    registry.call("bash", {"command": "true"})
    registry.close()
    assert exclude.read_text() == "*.log\n/.dflash-agent/\n"


def test_the_scratch_dir_in_a_plain_folder_creates_no_git_dir(reg: Registry, ws: Path):
    reg.call("bash", {"command": "true"})
    assert (ws / ".dflash-agent").is_dir()
    assert not (ws / ".git").exists()


def test_a_symlink_planted_at_the_next_output_file_is_not_written_through(
        reg: Registry, ws: Path, tmp_path: Path):
    # Output file names are predictable; a link left there by an earlier command must not make
    # the agent write a command's output into a file outside the workspace.
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    scratch = reg.tools["bash"].ctx.workspace.scratch
    scratch.mkdir(parents=True, exist_ok=True)
    for n in range(1, 4):
        (scratch / f"bash-{os.getpid()}-{n}.out").symlink_to(outside)
    obs = reg.call("bash", {"command": "echo written"})
    assert "written" in obs.text
    assert outside.read_text() == "keep me\n"
