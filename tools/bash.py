"""``bash``, ``bash_jobs``, ``bash_kill``: run shell commands safely for an unattended model.

Every command runs in a new process group with stdin closed and a non-interactive environment
(docs/design/field-cases.md, class 7); the environment is filtered so secrets are not passed (names
and URL credentials; the agent's own environment holds none either, see
:mod:`backend.secret_store`); when a command ends or times out its whole group is killed, and so is
every process carrying its marker (:mod:`tools.reaper`: ``setsid`` children too); output is capped
to head + tail with the full text saved in the workspace's scratch directory (class 8), itself
capped on disk and streamed, never held whole in memory (:mod:`tools.spill`). ``background: true``
starts a long-running process (a dev server) that ``bash_jobs`` lists and ``bash_kill`` stops; all
are stopped when the session ends, and the watchdog kills them if the agent dies.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field

from pydantic import Field

from backend.secret_store import SECRET_NAME, strip_url_credentials
from tools import reaper
from tools.base import Observation, Tool, ToolArgs, ToolContext, ToolError
from tools.edits import forget_changed, resolve
from tools.spill import Spill

MAX_TIMEOUT = 1800

NON_INTERACTIVE = {
    "CI": "1", "GIT_EDITOR": "true", "EDITOR": "true", "VISUAL": "true", "PAGER": "cat",
    "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "npm_config_yes": "true",
    "DEBIAN_FRONTEND": "noninteractive", "PIP_NO_INPUT": "1", "TERM": "dumb",
}
_ALLOWED = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_\w+|TZ|TMPDIR|TEMP|TMP|PWD|HOSTNAME|"
    r"VIRTUAL_ENV|CONDA_\w+|PYTHON\w*|PIP_\w+|UV_\w+|JAVA_HOME|GOPATH|GOROOT|CARGO_HOME|"
    r"RUSTUP_HOME|NVM_DIR|NODE_PATH|CUDA_\w+|LD_LIBRARY_PATH|PKG_CONFIG_PATH|XDG_\w+|"
    r"(HTTP|HTTPS|NO)_PROXY|(http|https|no)_proxy|SSL_CERT_\w+|REQUESTS_CA_BUNDLE|CC|CXX)$")
def tool_env(base: dict[str, str] | None = None, kind: str = "cmd") -> dict[str, str]:
    """The environment for one tool process: allow-listed names, never secret-looking ones,
    URL credentials (``https://user:pass@host``) stripped from the values, the non-interactive
    settings, and a fresh :data:`tools.reaper.OWNER_ENV` marker tagged ``kind`` (read it back
    from the result to kill that command's processes)."""
    source = os.environ if base is None else base
    env = {k: strip_url_credentials(v) for k, v in source.items()
           if _ALLOWED.match(k) and not SECRET_NAME.search(k)}
    env.update(NON_INTERACTIVE)
    env[reaper.OWNER_ENV] = reaper.new_marker(kind)
    return env


def with_overrides(env: dict[str, str], overrides: dict[str, str | None]) -> dict[str, str]:
    """``env`` with each of ``overrides`` set (a string) or removed (None); changes ``env``
    in place and returns it."""
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _kill_group(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if sig == signal.SIGTERM:
            time.sleep(0.2)


@dataclass
class Job:
    """A background process started by the model."""

    id: int
    command: str
    proc: subprocess.Popen
    output: Spill
    """Its output, streamed into its log file (capped like a command's)."""
    marker: str = ""
    """Its :data:`tools.reaper.OWNER_ENV` value."""

    def stop(self) -> None:
        """Kill its process group and whatever else carries its marker; reap it; finish its
        log."""
        if self.proc.poll() is None:
            _kill_group(self.proc.pid)
            self.proc.wait()
        if self.marker:
            reaper.kill_tagged(self.marker)
        self.output.close()


@dataclass
class JobTable:
    """Background jobs of one session."""

    jobs: dict[int, Job] = field(default_factory=dict)
    next_id: int = 1

    def stop_all(self) -> None:
        """Stop every job (called when the session ends)."""
        for job in self.jobs.values():
            job.stop()


class BashArgs(ToolArgs):
    command: str = Field(description="Shell command, run with bash -c. stdin is closed.")
    timeout: int = Field(120, ge=1, le=MAX_TIMEOUT, description="Seconds before it is killed.")
    background: bool = Field(False, description="Start a long-running process (a server) "
                             "and return at once; see bash_jobs / bash_kill.")
    cwd: str = Field(".", description="Working directory, relative to the workspace root.")


class Bash(Tool):
    name = "bash"
    description = ("Run a shell command in the workspace (non-interactive: stdin closed, no "
                   "editor or pager). Use background=true for servers.")
    Args = BashArgs

    def __init__(self, ctx: ToolContext, jobs: JobTable, counter: list[int] | None = None):
        super().__init__(ctx)
        self.jobs = jobs
        self.counter = counter if counter is not None else [0]

    def run(self, args: BashArgs) -> Observation:
        cwd = resolve(self.ctx, args.cwd)
        if not cwd.is_dir():
            raise ToolError(f"cwd {args.cwd} is not a directory")
        self.counter[0] += 1
        out_path = self.ctx.workspace.scratch / f"bash-{os.getpid()}-{self.counter[0]}.out"
        env = with_overrides(tool_env(kind="job" if args.background else "bash"),
                             self.ctx.env)
        marker = env[reaper.OWNER_ENV]
        output = Spill(out_path)
        try:
            proc = subprocess.Popen(["bash", "-c", args.command], cwd=cwd, env=env,
                                    stdin=subprocess.DEVNULL, stdout=output.fd,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except BaseException:
            output.close()
            raise
        output.detach()
        if args.background:
            job = Job(self.jobs.next_id, args.command, proc, output, marker)
            self.jobs.jobs[job.id] = job
            self.jobs.next_id += 1
            return Observation(text=f"started background job {job.id} (pid {proc.pid}); "
                               f"output goes to .dflash-agent/{out_path.name}")
        timed_out = False
        try:
            code = proc.wait(args.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            _kill_group(proc.pid)
            proc.wait()
            reaper.kill_tagged(marker)
            output.close()
            forget_changed(self.ctx)
            raise
        # Kill stragglers too (e.g. `cmd &` without background=true, or `setsid cmd &`, which
        # left the group but carries the marker): no orphans survive.
        _kill_group(proc.pid)
        if timed_out:
            code = proc.wait()
        reaper.kill_tagged(marker)
        output.close()
        # What the command changed is the model's own doing (sed -i): the file tools must not
        # refuse it as someone else's change (tools.edits.forget_changed). A background job
        # is not waited for: a file it changes later is refused until viewed again.
        forget_changed(self.ctx)
        shown = output.shown(out_path.stem + (".capped.txt" if output.dropped else ".full.txt"))
        if timed_out:
            return Observation(is_error=True, text=f"{shown}\n[killed after {args.timeout} s "
                               "timeout; use background=true for long-running processes]")
        status = f"[exit code {code}]"
        return Observation(text=f"{shown}\n{status}" if shown else status, is_error=code != 0)


class JobsArgs(ToolArgs):
    """No arguments."""


class BashJobs(Tool):
    name = "bash_jobs"
    description = "List background jobs started with bash background=true, with recent output."
    Args = JobsArgs

    def __init__(self, ctx: ToolContext, jobs: JobTable):
        super().__init__(ctx)
        self.jobs = jobs

    def run(self, args: JobsArgs) -> Observation:
        if not self.jobs.jobs:
            return Observation(text="no background jobs")
        lines = []
        for job in self.jobs.jobs.values():
            code = job.proc.poll()
            state = "running" if code is None else f"exited ({code})"
            tail = job.output.recent(400).strip()
            lines.append(f"job {job.id} pid {job.proc.pid} {state}: {job.command}\n"
                         f"  last output: {tail[-300:] or '(none)'}")
        return Observation(text="\n".join(lines))


class KillArgs(ToolArgs):
    job_id: int = Field(description="Id from bash_jobs.")


class BashKill(Tool):
    name = "bash_kill"
    description = "Stop a background job (its whole process group)."
    Args = KillArgs

    def __init__(self, ctx: ToolContext, jobs: JobTable):
        super().__init__(ctx)
        self.jobs = jobs

    def run(self, args: KillArgs) -> Observation:
        job = self.jobs.jobs.get(args.job_id)
        if job is None:
            known = ", ".join(str(i) for i in self.jobs.jobs) or "none"
            raise ToolError(f"no background job {args.job_id} (jobs: {known})")
        job.stop()
        return Observation(text=f"job {job.id} stopped (exit {job.proc.returncode})")
