"""Background tasks for the MCP server: one worker process per task
(:mod:`agent.mcp_server.worker`), its progress, its approval questions, cancellation, and
warming the backend at launch.

A task gets its session id at once; its worker starts only when the backend warm-up (engine
build, model download, server start) has finished, so the first call never waits on a build.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from agent.config import load_settings
from agent.mcp_server.unfinished import NewFolder, discard_unfinished, present
from agent.mcp_server.worker import WorkerSpec
from agent.runtime import connect
from agent.sessions.log import new_session_id
from agent.ui import Reporter
from backend import secret_store
from backend.home import home, private_open

log = logging.getLogger("dflash_agent.mcp")

State = Literal["waiting for backend", "running", "done", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"done", "failed", "cancelled"})
CANCEL_GRACE = 30.0
"""Seconds a cancelled worker gets to stop cleanly (answer the pending call, checkpoint) before
it and every process under it are killed."""
NOBODY_TO_ASK = ("no: this call needs approval, but no MCP call is waiting with elicitation to "
                 "ask the user; run the task with wait=true from a host that supports "
                 "elicitation, or with approval full-auto")


class LogReporter(Reporter):
    """Backend notes to the log (stderr) and to a callback; nothing on stdout."""

    def __init__(self, on_note: Any = None) -> None:
        super().__init__()
        self.on_note = on_note
        self._last_step = ""

    def note(self, message: str) -> None:
        log.info("%s", message)
        if self.on_note is not None:
            self.on_note(message)

    def build_progress(self, step: str, done: int | None, total: int | None) -> None:
        if step != self._last_step:
            self._last_step = step
            self.note(f"building llama-server: {step}")


@dataclass
class Approval:
    """A question from the worker that waits for the MCP host's user."""

    number: int
    prompt: str
    answer: str | None = None
    asked: bool = False
    """A waiting call has put it to the user."""


@dataclass
class Job:
    """One task started through MCP. Fields are guarded by ``lock``."""

    session_id: str
    kind: Literal["run_task", "new_project"]
    spec: WorkerSpec
    state: State = "waiting for backend"
    step: int = 0
    action: str = "queued"
    progress: list[str] = field(default_factory=list)
    """Every progress line so far (step n: current action), in order."""
    result: dict[str, Any] | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    askers: int = 0
    """MCP calls now waiting on this job that can elicit an approval from the user."""
    approval: Approval | None = None
    approvals: int = 0
    cancel_requested: bool = False
    new_folder: NewFolder | None = None
    """For ``new_project``: what its call found at the directory."""
    note: str | None = None
    """What became of an unfinished project's folder (session_status and session_result)."""
    abandoned: bool = False
    """Its waiting call went away (:meth:`JobManager.abandon`): the note comes from there."""
    proc: subprocess.Popen[str] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    done_event: threading.Event = field(default_factory=threading.Event)

    def say(self, line: str) -> None:
        with self.lock:
            self.action = line
            self.progress.append(f"step {self.step}: {line}" if self.step else line)

    def status(self) -> dict[str, Any]:
        """What ``session_status`` shows."""
        with self.lock:
            out: dict[str, Any] = {
                "session_id": self.session_id, "kind": self.kind, "state": self.state,
                "step": self.step, "action": self.action, "path": self.spec.path,
                "elapsed_s": round((self.finished or time.time()) - self.started, 1)}
            if self.approval is not None and self.approval.answer is None:
                out["waiting_for_approval"] = self.approval.prompt
            if self.error:
                out["error"] = self.error
            if self.note:
                out["note"] = self.note
            return out

    def answer(self, number: int, text: str) -> None:
        """Send the user's answer to approval ``number`` to the worker (once)."""
        with self.lock:
            pending = self.approval
            if pending is None or pending.number != number or pending.answer is not None:
                return
            pending.answer = text
            self.say(f"approval {'given' if text == 'y' else 'refused'}")
            proc = self.proc
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(json.dumps({"answer": text}) + "\n")
                proc.stdin.flush()

    def leave(self, could_ask: bool) -> None:
        """A waiting MCP call ends; with nobody left to ask, a pending question is refused."""
        with self.lock:
            if could_ask:
                self.askers -= 1
            pending = self.approval
            refuse = self.askers == 0 and pending is not None and pending.answer is None
        if refuse and pending is not None:
            self.answer(pending.number, NOBODY_TO_ASK)


def describe_event(event: dict[str, Any]) -> str | None:
    """A progress line for a worker event, or None for events not worth a line."""
    kind = event.get("type")
    if kind == "session_start":
        return f"connected to the model server ({event.get('base_url')})"
    if kind == "model_turn":
        calls = [c.get("name") for c in event.get("tool_calls") or []]
        return f"model replied ({', '.join(calls) or 'text'})"
    if kind == "tool_call":
        args = json.dumps(event.get("arguments"), ensure_ascii=False)
        return f"{event.get('name')} {args[:120]}"
    if kind == "tool_result":
        first = (str(event.get("text", "")).strip().splitlines() or [""])[0][:120]
        return f"{event.get('name')} {'failed' if event.get('is_error') else 'ok'}: {first}"
    if kind == "checkpoint":
        return f"checkpoint ({event.get('kind')})"
    if kind == "final_answer":
        return f"finished: {event.get('reason')}"
    if kind == "project_checked":
        return f"project tests: {event.get('tests')}"
    if kind == "note":
        return str(event.get("text"))
    return None


class JobManager:
    """Tasks of one MCP server: start, watch, answer approvals, cancel, shut down.

    ``settings`` are overrides applied to every task (``base_url``, ``preset``, ``max_steps``…,
    as :func:`agent.config.load_settings` takes them on the command line).
    """

    def __init__(self, settings: dict[str, Any] | None = None):
        self.settings = {k: v for k, v in (settings or {}).items() if v is not None}
        self.jobs: dict[str, Job] = {}
        self.ready = threading.Event()
        self.backend = "not started"
        self._lock = threading.Lock()
        self._abandoning: list[threading.Thread] = []
        """Threads stopping tasks whose waiting call went away (:meth:`abandon`)."""

    def warm(self) -> None:
        """Build/fetch/start the backend in a background thread (returns at once)."""
        with self._lock:
            if self.backend != "not started":
                return
            self.backend = "warming up"
        threading.Thread(target=self._warm, name="mcp-warm", daemon=True).start()

    def _warm(self) -> None:
        try:
            settings = load_settings(cli=self.settings)
            backend = connect(settings, LogReporter(self._warm_note))
            backend.client.close()
            self.backend = "ready"
        except Exception as exc:
            # Tasks still try on their own and report this error in their status.
            self.backend = f"warm-up failed: {exc}"
            log.warning("backend warm-up failed: %s", exc)
        finally:
            self.ready.set()

    def _warm_note(self, message: str) -> None:
        self.backend = f"warming up: {message}"
        for job in list(self.jobs.values()):
            if job.state == "waiting for backend":
                job.say(f"waiting for the backend ({message})")

    def start(self, kind: Literal["run_task", "new_project"], text: str, path: Path,
              approval: Literal["ask", "auto-edit", "full-auto"] = "full-auto",
              overrides: dict[str, Any] | None = None,
              new_folder: NewFolder | None = None) -> Job:
        """Queue a task; its worker starts once the backend is warm. Returns at once.
        ``overrides``: settings for this task only (over the server's own); ``new_folder``:
        for a new project, what the call found at ``path``."""
        self.warm()
        session_id = new_session_id()
        spec = WorkerSpec(kind=kind, session_id=session_id, text=text, path=str(path),
                          approval=approval, settings={**self.settings, **(overrides or {})})
        job = Job(session_id, kind, spec, new_folder=new_folder)
        job.say(f"waiting for the backend ({self.backend})" if not self.ready.is_set()
                else "starting")
        self.jobs[session_id] = job
        threading.Thread(target=self._run, args=(job,), name=f"mcp-{session_id}",
                         daemon=True).start()
        return job

    def running_in(self, folder: Path) -> Job | None:
        """A task that has not finished whose folder is ``folder``, inside it or around it:
        two tasks at once in one repository each take the other's edits for their own (their
        checkpoints, diffs and undos tangle), so a second one is refused."""
        folder = folder.resolve()
        for job in list(self.jobs.values()):
            if job.state in FINISHED:
                continue
            other = Path(job.spec.path).resolve()
            if other == folder or other in folder.parents or folder in other.parents:
                return job
        return None

    def _run(self, job: Job) -> None:
        self.ready.wait()
        with job.lock:
            if job.state in FINISHED:
                return
            if job.cancel_requested:
                self._finish(job, "cancelled", error="cancelled before it started")
                return
            job.state = "running"
            job.say("starting the worker")
            logs = home().ensure().state / "mcp"
            logs.mkdir(exist_ok=True)
            stderr = private_open(logs / f"{job.session_id}.log", "ab")
            cwd = Path(job.spec.path) if job.kind == "run_task" else Path(job.spec.path).parent
            try:
                # The worker is the agent itself: it gets the secret store (HF_TOKEN for a
                # download) through a descriptor, never through its environment.
                with secret_store.handoff() as (extra, fds):
                    job.proc = subprocess.Popen(
                        [sys.executable, "-m", "agent.mcp_server.worker"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=stderr, text=True, encoding="utf-8",
                        cwd=cwd if cwd.is_dir() else None, start_new_session=True,
                        env={**os.environ, **extra}, pass_fds=fds)
            except OSError as exc:
                self._finish(job, "failed", error=f"the worker could not start: {exc}")
                return
            finally:
                stderr.close()
        proc = job.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(job.spec.model_dump_json() + "\n")
        proc.stdin.flush()
        with proc:  # closes the pipes once the worker has exited
            for line in proc.stdout:
                self._on_line(job, line)
        code = proc.wait()
        with job.lock:
            if job.state in FINISHED:
                return
            if job.cancel_requested:
                self._finish(job, "cancelled", error="cancelled (the worker was stopped)")
            else:
                self._finish(job, "failed", error=f"the worker exited with code {code} without "
                             f"a result; see {home().state / 'mcp' / job.session_id}.log")

    def _on_line(self, job: Job, line: str) -> None:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            log.warning("worker %s wrote a non-JSON line: %r", job.session_id, line[:200])
            return
        kind = message.get("type")
        if kind == "approval_request":
            self._on_approval(job, str(message.get("prompt", "")))
            return
        if kind == "done":
            reason = message.get("reason")
            state: State = "cancelled" if reason == "interrupted" else "done"
            self._finish(job, state, result=message)
            return
        if kind == "failed":
            state = "cancelled" if job.cancel_requested else "failed"
            self._finish(job, state, error=str(message.get("message")))
            return
        if kind in ("model_turn", "tool_call"):
            job.step = int(message.get("step", job.step))
        line_text = describe_event(message)
        if line_text:
            job.say(line_text)

    def _on_approval(self, job: Job, prompt: str) -> None:
        with job.lock:
            job.approvals += 1
            job.approval = Approval(job.approvals, prompt)
            job.say("waiting for approval")
            nobody = job.askers == 0
        if nobody:
            job.answer(job.approvals, NOBODY_TO_ASK)

    def _finish(self, job: Job, state: State, result: dict[str, Any] | None = None,
                error: str | None = None) -> None:
        with job.lock:
            job.state, job.result, job.error = state, result, error
            job.finished = time.time()
            job.say(f"{state}" + (f": {error}" if error else ""))
            if job.kind == "new_project" and state == "cancelled" and not job.abandoned \
                    and not (result or {}).get("commit") and present(Path(job.spec.path)):
                # Cancelled like Ctrl-C, the files stay; the result must not read as a
                # project (a field trial's host was left a half-made folder, unexplained).
                job.note = (f"the project in {job.spec.path} is unfinished: its files stay as "
                            "they are, nothing is committed; remove the folder to start again")
        job.done_event.set()

    def get(self, session_id: str) -> Job | None:
        return self.jobs.get(session_id)

    def cancel(self, job: Job, grace: float = CANCEL_GRACE) -> None:
        """Stop a task like Ctrl-C does (SIGINT: the pending call is answered, the checkpoint
        kept); after ``grace`` seconds the worker and every process under it are killed.
        Blocks until the worker has exited."""
        with job.lock:
            if job.state in FINISHED:
                return
            again = job.cancel_requested
            job.cancel_requested = True
            proc = job.proc
            if not again:
                job.say("cancelling")
        if again:
            # One SIGINT only: a second Ctrl-C could cut short the first one's clean stop
            # (its checkpoint); this caller waits for that stop, or the kill after the grace.
            job.done_event.wait()
            return
        if proc is None:
            # Not started yet: _run sees the flag once the backend is ready.
            if not self.ready.is_set():
                self._finish(job, "cancelled", error="cancelled before it started")
            job.done_event.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)
        if not job.done_event.wait(grace):
            _kill_tree(proc.pid)
            job.done_event.wait()

    def abandon(self, job: Job) -> None:
        """The call waiting on new project ``job`` ended without its result (the host
        cancelled it, its timeout did, or it went away): stop the task as :meth:`cancel`
        does, then remove what it made (:func:`discard_unfinished`). Returns at once; the
        work runs in a thread that :meth:`shutdown` waits for."""
        with job.lock:
            if job.state in FINISHED:
                return  # it ended first: its result stands, and says what it made
            job.abandoned = True
        thread = threading.Thread(target=self._abandon, args=(job,), daemon=True,
                                  name=f"mcp-abandon-{job.session_id}")
        self._abandoning.append(thread)
        thread.start()

    def _abandon(self, job: Job) -> None:
        self.cancel(job)
        proc = job.proc
        if proc is not None:
            # done_event can come with the worker's last line, before it has exited; nothing
            # may still write in the folder when it goes.
            try:
                proc.wait(timeout=CANCEL_GRACE)
            except subprocess.TimeoutExpired:
                _kill_tree(proc.pid)
        try:
            with job.lock:
                state, result = job.state, job.result
            note = discard_unfinished(job.new_folder, Path(job.spec.path), state, result,
                                      started=proc is not None)
        except Exception as exc:  # the removal must not fail silently in a daemon thread
            note = (f"the host stopped waiting before the project was finished; its folder "
                    f"{job.spec.path} could not be checked or removed ({exc}), and stays as it "
                    "is, unfinished")
        if note:
            log.warning("session %s: %s", job.session_id, note)
            with job.lock:
                job.note = note
                job.say(note)

    def shutdown(self) -> None:
        """Cancel every running task (the server is stopping), after the removals that calls
        which went away have started (:meth:`abandon`)."""
        for thread in list(self._abandoning):
            thread.join()
        for job in list(self.jobs.values()):
            if job.state not in FINISHED:
                self.cancel(job)


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
