"""The agent as an MCP server (``agent mcp serve``): MCP hosts delegate coding tasks to it.

Tools: ``new_project``, ``run_task``, ``session_status``, ``session_result``, ``cancel``,
``undo``. Tasks run in worker processes (:mod:`agent.mcp_server.jobs`); a call returns a session
id at once, or with ``wait`` blocks and sends one progress notification per step/action. Every path
must lie inside the workspace roots fixed at launch. Approval questions go to the host's user
through MCP elicitation: a server-to-client request on handshake-era connections (2025-11-25),
an ``InputRequiredResult`` round on 2026-07-28 ones (mcp 2.3 server docs, ``mcp.server.
mcpserver.resolve``). Over HTTP it is served by :mod:`agent.mcp_server.over_http`.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.elicitation import AcceptedElicitation, render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field, ValidationError

from agent.config import ConfigError, load_settings
from agent.errors import UserError, host_text
from agent.events import FinalAnswer
from agent.mcp_server.jobs import FINISHED, Job, JobManager
from agent.mcp_server.unfinished import NewFolder
from agent.sessions.checkpoints.plumbing import open_repo
from agent.sessions.record import SessionRecord, load_record
from agent.sessions.undo import diff_task, undo_task

SESSION_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
"""What :func:`agent.sessions.log.new_session_id` makes, matched whole (``fullmatch``: with
``$`` an id with a trailing newline passed)."""
DIFF_CAP = 20_000
"""Characters of diff returned by ``session_result`` (the rest is cut, with a note)."""
POLL_S = 0.2
"""How often a waiting call looks for new progress (seconds)."""

INSTRUCTIONS = """A local coding agent (dflash-agent) on its own model server. Give it a task in a
git repository with run_task, or a new project with new_project; both return a session_id at
once. Follow it with session_status, read the outcome with session_result, stop it with cancel,
and put the files back with undo. Work is limited to the workspace roots the server was started
with."""

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True,
                            openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False,
                              openWorldHint=False)


class ApprovalForm(BaseModel):
    """What the host's user answers when the agent asks to run a command or edit a file."""

    allow: bool = Field(description="Allow this call?")
    reason: str = Field("", description="If not: why, or what to do instead (told to the agent).")


class Roots:
    """The workspace roots fixed at launch; paths outside them are refused."""

    def __init__(self, roots: list[Path]):
        resolved = []
        for root in roots:
            path = root.expanduser().resolve()
            if not path.is_dir():
                raise UserError(f"workspace root {root} is not a directory; pass existing "
                                "folders with --root")
            resolved.append(path)
        self.paths = resolved or [Path.cwd().resolve()]

    def confine(self, path: str) -> Path:
        """``path`` resolved (symlinks too; relative to the first root); raises ToolError when
        it lies outside every root."""
        raw = Path(path).expanduser()
        full = (raw if raw.is_absolute() else self.paths[0] / raw).resolve()
        if not any(full.is_relative_to(root) for root in self.paths):
            raise ToolError(f"{path} is outside the workspace roots of this server "
                            f"({', '.join(map(str, self.paths))}); restart `agent mcp serve` "
                            "with --root to allow it")
        return full


def _shown(value: Any) -> str:
    """A JSON value as a host's user would name it: ``the string "yes"``, ``the number 1``."""
    if isinstance(value, str):
        return f"the string {json.dumps(value, ensure_ascii=False)[:80]}"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return f"the number {value}"
    return "an array" if isinstance(value, list) else "an object"


def argument_problems(error: ValidationError) -> str:
    """What is wrong with a call's arguments, in one line that names each argument (pydantic's
    own text spans several lines, with a URL and its model's name)."""
    problems = []
    for item in error.errors(include_url=False):
        name = ".".join(map(str, item["loc"])) or "(arguments)"
        got = _shown(item.get("input"))
        if item["type"] == "missing":
            problems.append(f"'{name}' is required")
        elif item["type"] == "bool_type":
            problems.append(f"'{name}' must be true or false (a JSON boolean), not {got}")
        elif item["type"] == "string_type":
            problems.append(f"'{name}' must be a string, not {got}")
        elif item["type"] == "literal_error":
            problems.append(f"'{name}' must be {item['ctx']['expected']}, not {got}")
        else:
            problems.append(f"'{name}': {item['msg']} (not {got})")
    return "; ".join(problems)


class AgentMCPServer(MCPServer):
    """The SDK's server, stricter with arguments: a name the tool does not have is refused
    (``wiat: true`` was dropped without a word, and the task did not wait), and a value of the
    wrong type is refused in one line naming the argument. Either way the host gets an
    ``is_error`` result, never a protocol error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.argument_names: dict[str, tuple[str, ...]] = {}
        """Each tool's arguments (its parameters but the injected ``ctx``), by tool name."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context | None = None) -> CallToolResult | InputRequiredResult:
        """Run tool ``name``; unknown or ill-typed ``arguments`` raise :class:`ToolError`."""
        known = self.argument_names.get(name)
        unknown = sorted(set(arguments) - set(known)) if known is not None else []
        if known is not None and unknown:
            raise ToolError(f"{name} has no argument {', '.join(map(repr, unknown))}; its "
                            f"arguments are {', '.join(known)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            # Only the SDK's check of the arguments (its model is "<tool>Arguments"); a tool's
            # own ToolError keeps its words.
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError) \
                    or cause.title != f"{name}Arguments":
                raise
            raise ToolError(f"{name}: invalid arguments: {argument_problems(cause)}") \
                from cause


def _result(data: dict[str, Any], is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data, indent=1))],
                          structured_content=data, is_error=is_error)


def _can_elicit(ctx: Context) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and caps.elicitation is not None


def _answer_of(result: AcceptedElicitation[ApprovalForm] | ElicitResult | Any) -> str:
    """The worker's answer from an elicitation outcome: ``y`` or a refusal reason. Anything but
    a well-formed acceptance is a refusal."""
    if isinstance(result, AcceptedElicitation):
        form = result.data
    elif isinstance(result, ElicitResult) and result.action == "accept":
        try:
            form = ApprovalForm.model_validate(result.content or {})
        except ValidationError:
            return "no: the MCP host's answer was not understood"
    else:
        return "no: the user declined in the MCP host"
    return "y" if form.allow else (form.reason or "no")


class AgentServer:
    """The MCP server's tools over a :class:`JobManager` and :class:`Roots`."""

    def __init__(self, roots: Roots, jobs: JobManager):
        self.roots, self.jobs = roots, jobs

    def lookup(self, session_id: str) -> Job | SessionRecord:
        if not SESSION_ID.fullmatch(session_id):
            raise ToolError(f"'{session_id}' is not a session id (they look like "
                            "20261130-131600-a1b2c3; run_task and new_project return them)")
        job = self.jobs.get(session_id)
        if job is not None:
            return job
        try:
            record = load_record(session_id)
        except UserError:
            raise ToolError(f"no session '{session_id}': this server did not start it and no "
                            "session log has that id") from None
        self.roots.confine(record.start.workspace)
        return record

    def outcome(self, job: Job) -> dict[str, Any]:
        with job.lock:
            out = job.status()
            if job.result:
                out.update({k: v for k, v in job.result.items() if k != "type"})
                out["answer"] = out.pop("text", "")
        if job.kind == "run_task" and job.state in ("done", "cancelled"):
            try:
                diff = diff_task(job.session_id)
            except UserError as exc:
                diff = f"(no diff: {exc})"
            out["diff"] = diff if len(diff) <= DIFF_CAP else \
                diff[:DIFF_CAP] + f"\n[... {len(diff) - DIFF_CAP} more characters cut]"
            out["undo"] = f"call undo with session_id {job.session_id} to restore the files"
        return out

    async def wait(self, job: Job, ctx: Context, resume: dict[str, Any] | None
                   ) -> CallToolResult | InputRequiredResult:
        """Report progress until the job ends; ask approvals on the way."""
        sent = 0
        if resume is not None:
            sent = int(resume.get("sent", 0))
            responses = ctx.input_responses or {}
            key = f"approval-{resume.get('approval')}"
            job.answer(int(resume.get("approval", 0)), _answer_of(responses.get(key)))
        else:
            # First, the id: a host whose wait timed out (or that cancelled the request) could
            # otherwise neither see nor cancel the task, which runs on (a field trial; a new
            # project's is stopped instead, see new_project).
            await ctx.report_progress(0, None, f"session {job.session_id} started: "
                                      "session_status, cancel and undo take this id")
        can_ask = _can_elicit(ctx)
        handed_off = False
        with job.lock:
            job.askers += can_ask
        try:
            while True:
                with job.lock:
                    lines = job.progress[sent:]
                    pending = job.approval
                    ask = (can_ask and pending is not None and pending.answer is None
                           and not pending.asked)
                    if ask and pending is not None:
                        pending.asked = True
                for line in lines:
                    sent += 1
                    await ctx.report_progress(sent, None, line)
                if job.done_event.is_set() and sent >= len(job.progress):
                    return _result(self.outcome(job), is_error=job.state == "failed")
                if ask and pending is not None:
                    message = f"dflash-agent (session {job.session_id}) asks:\n{pending.prompt}"
                    if ctx.session.can_send_request:
                        try:
                            answer = _answer_of(await ctx.elicit(message, ApprovalForm))
                        except Exception as exc:
                            answer = f"no: the MCP host could not be asked ({exc})"
                        job.answer(pending.number, answer)
                    else:
                        handed_off = True
                        request = ElicitRequest(params=ElicitRequestFormParams(
                            message=message,
                            requested_schema=render_elicitation_schema(ApprovalForm)))
                        state = {"session_id": job.session_id, "approval": pending.number,
                                 "sent": sent}
                        return InputRequiredResult(
                            input_requests={f"approval-{pending.number}": request},
                            request_state=json.dumps(state))
                await anyio.sleep(POLL_S)
        finally:
            if handed_off:
                with job.lock:
                    job.askers -= 1
            else:
                job.leave(can_ask)

    def resume_state(self, ctx: Context) -> tuple[Job, dict[str, Any]] | None:
        """The job and state of a retried call (2026-07-28 input rounds), else None."""
        if not ctx.request_state:
            return None
        state = json.loads(ctx.request_state)
        job = self.jobs.get(str(state.get("session_id")))
        if job is None:
            raise ToolError("this retried call names a session this server does not know")
        return job, state


def build_server(roots: Roots, jobs: JobManager) -> MCPServer:
    """The MCP server with the six tools; ``jobs`` runs the tasks (warm it before serving)."""
    mcp = AgentMCPServer("dflash-agent", instructions=INSTRUCTIONS, log_level="WARNING")
    agent = AgentServer(roots, jobs)

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Any]:
        # The docstring, as one line: hosts show descriptions verbatim.
        def register(fn: Callable[..., Any]) -> Any:
            mcp.argument_names[fn.__name__] = tuple(
                p for p in inspect.signature(fn).parameters if p != "ctx")
            return mcp.tool(description=" ".join((fn.__doc__ or "").split()),
                            annotations=annotations)(fn)
        return register

    @tool(DESTRUCTIVE)
    async def run_task(
        task: Annotated[str, Field(description="What to do, in plain words.")],
        repo_path: Annotated[str, Field(description="A git repository inside the server's "
                                        "workspace roots (absolute, or relative to the first "
                                        "root).")],
        ctx: Context,
        approval: Annotated[Literal["ask", "auto-edit", "full-auto"] | None, Field(
            description="ask: every command and edit is confirmed by the user (needs wait=true "
            "and a host with elicitation); auto-edit: edits run, commands are confirmed; "
            "full-auto: nothing is confirmed. Default: the user's configured mode.")] = None,
        # strict: pydantic's lax mode read "yes", "0" or 1 as a boolean, so a host that sent
        # a string was never told its call did not say what it meant.
        wait: Annotated[bool, Field(strict=True, description="Block until the task ends, "
                                    "sending progress notifications; otherwise return the "
                                    "session_id at once.")] = False,
    ) -> CallToolResult | InputRequiredResult:
        """Run a coding task in a git repository with the local agent. The working tree is
        checkpointed first (undo restores it); files in the repository may be changed and
        commands run there. Returns a session_id (and, with wait, the outcome)."""
        resumed = agent.resume_state(ctx)
        if resumed is not None:
            return await agent.wait(resumed[0], ctx, resumed[1])
        if not task.strip():
            raise ToolError("the task is empty; say what to do")
        path = roots.confine(repo_path)
        if not path.is_dir():
            raise ToolError(f"{repo_path} is not a directory")
        try:
            repo = open_repo(path)
            roots.confine(str(repo.working_tree_dir))
            mode = approval or load_settings(project=path, cli=jobs.settings).approval
        except (UserError, ConfigError) as exc:
            raise ToolError(host_text(exc)) from None
        if mode == "ask" and not _can_elicit(ctx):
            raise ToolError("approval 'ask' needs an MCP host that supports elicitation, and "
                            "this one does not; use auto-edit or full-auto")
        if mode == "ask" and not wait:
            raise ToolError("approval 'ask' needs wait=true: the questions ride the waiting "
                            "call")
        busy = jobs.running_in(Path(str(repo.working_tree_dir)))
        if busy is not None:
            # A field trial ran two at once in one repository: each one's diff showed the
            # other's edits, and an undo was refused over the other's files.
            raise ToolError(f"session {busy.session_id} is still running in {busy.spec.path}; "
                            "wait for it to end or cancel it first (two tasks at once in one "
                            "repository would each take the other's edits for their own)")
        job = jobs.start("run_task", task, path, mode)
        if wait:
            return await agent.wait(job, ctx, None)
        return _result(job.status())

    @tool(DESTRUCTIVE)
    async def new_project(
        description: Annotated[str, Field(description="What to build, in plain words.")],
        directory: Annotated[str, Field(description="New or empty directory inside the "
                                        "workspace roots.")],
        ctx: Context,
        wait: Annotated[bool, Field(strict=True, description="Block until done, sending "
                                    "progress notifications. If this call is cancelled (or "
                                    "times out) first, the project is stopped and the folder "
                                    "it made removed.")] = False,
        recipe: Annotated[Literal["auto", "simple", "full"], Field(
            description="full: the model plans the project (toolchain, files, install, "
            "tests); simple: one module and its tests, for small models; auto: by the "
            "model's size (3 B parameters and up get full).")] = "auto",
    ) -> CallToolResult | InputRequiredResult:
        """Create a project from a description: git init, the agent writes the code and its
        tests (full-auto, confined to the directory), then the project's tests are run and the
        result committed. Returns a session_id (and, with wait, the outcome: the recipe used,
        the test runner and its verdict, the commit)."""
        if not description.strip():
            raise ToolError("the project description is empty; say what to build")
        path = roots.confine(directory)
        busy = jobs.running_in(path)
        if busy is not None:
            # Two tasks in one new folder would write each other's project; and what is in
            # the folder must be this task's alone for a cancelled call to remove it.
            raise ToolError(f"session {busy.session_id} is still running in {busy.spec.path}; "
                            "wait for it to end or cancel it first, or choose another "
                            "directory")
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ToolError(f"{directory} exists and is not an empty directory; choose another")
        job = jobs.start("new_project", description, path,
                         overrides={"new_project_recipe": recipe},
                         new_folder=NewFolder.at(path))
        if not wait:
            return _result(job.status())
        try:
            return await agent.wait(job, ctx, None)
        except anyio.get_cancelled_exc_class():
            # The host cancelled the call (MCP notifications/cancelled: its user pressed stop,
            # or its timeout ran out) or went away. Nobody will read this project's result:
            # running on, it was finished unasked or, at the server's stop, left half-made
            # and unexplained (a field trial). So it stops, and the folder it made goes.
            jobs.abandon(job)
            raise

    @tool(READ_ONLY)
    async def session_status(
        session_id: Annotated[str, Field(description="From run_task or new_project.")],
    ) -> dict[str, Any]:
        """State of a session: waiting for backend, running, done, failed or cancelled; the
        current step and action, and any approval question it waits on."""
        found = agent.lookup(session_id)
        if isinstance(found, Job):
            return {**found.status(), "backend": jobs.backend}
        finals = [e for e in found.events if isinstance(e, FinalAnswer)]
        return {"session_id": session_id,
                "state": _ended_state(finals[-1]) if finals else "not running",
                **({"reason": finals[-1].reason} if finals else {}),
                "path": found.start.workspace, "note": "not started by this server"}

    @tool(READ_ONLY)
    async def session_result(
        session_id: Annotated[str, Field(description="From run_task or new_project.")],
    ) -> dict[str, Any]:
        """Outcome of a finished session: the stop reason, the agent's answer, steps, and the
        diff of its changes (new projects: the tests' verdict and the commit)."""
        found = agent.lookup(session_id)
        if isinstance(found, Job):
            if found.state not in FINISHED:
                raise ToolError(f"session {session_id} is still {found.state} (step "
                                f"{found.step}: {found.action}); see session_status")
            return await anyio.to_thread.run_sync(agent.outcome, found)
        finals = [e for e in found.events if isinstance(e, FinalAnswer)]
        if not finals:
            why = "it did not finish" if found.tasks else "it ran no task"
            raise ToolError(f"session {session_id} has no result ({why})")
        return {"session_id": session_id, "state": _ended_state(finals[-1]),
                "reason": finals[-1].reason,
                "answer": finals[-1].text, "steps": finals[-1].steps,
                "path": found.start.workspace}

    @tool(ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True,
                          openWorldHint=False))
    async def cancel(
        session_id: Annotated[str, Field(description="A running session.")],
    ) -> dict[str, Any]:
        """Stop a running task like Ctrl-C: its commands are killed, the files stay as they are
        and the checkpoint is kept (undo restores the repository)."""
        found = agent.lookup(session_id)
        if not isinstance(found, Job):
            raise ToolError(f"session {session_id} is not running in this server")
        await anyio.to_thread.run_sync(jobs.cancel, found)
        return found.status()

    @tool(DESTRUCTIVE)
    async def undo(
        session_id: Annotated[str, Field(description="A finished or cancelled run_task "
                                         "session.")],
    ) -> dict[str, Any]:
        """Restore the files the session's last task changed to their state before it (called
        again, it redoes). Refused when the user edited those files since."""
        found = agent.lookup(session_id)
        if isinstance(found, Job):
            if found.state not in FINISHED:
                raise ToolError(f"session {session_id} is still running; cancel it first")
            roots.confine(found.spec.path)
        try:
            plan = await anyio.to_thread.run_sync(undo_task, session_id)
        except UserError as exc:
            raise ToolError(host_text(exc)) from None
        return {"session_id": session_id,
                "restored": [f for f in plan.changed if f not in plan.removed],
                "removed": plan.removed,
                "stash_restored": plan.stash_restored,
                "index_restored": plan.index_restored,
                "index_unstaged": plan.index_unstaged,
                "not_restored": plan.not_restored,
                "commits_since": plan.commits_since,
                "note": "call undo again to bring the agent's changes back"}

    return mcp


def _ended_state(final: FinalAnswer) -> str:
    """A logged session's state as a job of this server would have it: an interrupted task
    (Ctrl-C, a cancel) is ``cancelled``, any other end ``done`` with its reason beside it (an
    interrupted CLI session read "done")."""
    return "cancelled" if final.reason == "interrupted" else "done"
