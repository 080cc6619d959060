"""Connections to MCP servers, kept on a background event loop for a synchronous agent loop.

The ``mcp`` SDK is async (anyio) and a ``Client`` must be closed in the task that opened it, so
each server gets one runner task on a private asyncio loop thread: it connects, lists the tools
and then waits to be stopped. Tool calls are submitted to that loop from the agent's thread with
a per-call timeout. A server whose connection drops during a call is restarted once; when it
drops again it is quarantined for the rest of the session (recorded for ``agent mcp list``).

Whatever a server sends is input, not a contract: an answer the SDK cannot parse becomes a
one-line error for that call (or that server) (:mod:`tools.mcp.errors`), and a tool whose
definition is invalid is left out on its own (:mod:`tools.mcp.screen`).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pydantic

from tools.mcp.config import ServerConfig
from tools.mcp.errors import McpCallError, describe_error, first_line, validation_summary
from tools.mcp.screen import ToolScreen
from tools.mcp.state import ServerState, quarantine_file
from tools.mcp.transport import open_transport, route_sdk_logs

# The SDK (mcp, mcp_types: ~0.8 s) is imported where a server is connected, so a session or
# command with no MCP server configured never loads it.
if TYPE_CHECKING:
    import mcp_types
    from mcp.client import Client


STOP_GRACE_S = 10.0
"""Seconds a runner gets to close its connection (the SDK bounds its own shutdown at ~5 s)."""
CLOSED_STREAM = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
"""anyio's words for a stream whose other end is gone: a call that meets one lost its
connection."""


class McpManager:
    """All configured servers of one session.

    ``start()`` connects every server concurrently (each within its ``startup_timeout``) and
    returns when all are ready or failed; ``call()`` runs one tool call; ``close()`` stops
    everything. ``cwd`` is the default working directory of stdio servers (the workspace).
    """

    def __init__(self, configs: Iterable[ServerConfig], cwd: Path | None = None,
                 session_id: str = ""):
        self.servers: dict[str, ServerState] = {c.name: ServerState(c) for c in configs}
        self.cwd = cwd
        self.session_id = session_id
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        """Set by :meth:`close`: a connection closing now is ours, not a crash to restart."""

    def _submit(self, coro: Any) -> Future[Any]:
        assert self._loop is not None, "start() first"
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _wait(self, future: Future[Any]) -> Any:
        """The result of ``future``; Ctrl-C cancels the coroutine before re-raising."""
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def start(self) -> None:
        """Connect all servers concurrently; failures are recorded, never raised."""
        if self._loop is None:
            route_sdk_logs()
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client",
                                            daemon=True)
            self._thread.start()
        self._wait(self._submit(self._start_all(list(self.servers.values()))))

    async def _start_all(self, states: list[ServerState]) -> None:
        async with anyio.create_task_group() as tg:
            for state in states:
                tg.start_soon(self._start_one, state)

    async def _start_one(self, state: ServerState) -> None:
        state.status, state.error, state.tools = "starting", None, []
        state.stray, state.stray_count, state.invalid, state.stderr_tail = [], 0, {}, None
        state.log = None
        state.stop, state.done = anyio.Event(), anyio.Event()
        ready = anyio.Event()
        asyncio.get_running_loop().create_task(self._run(state, ready))
        await ready.wait()

    async def _run(self, state: ServerState, ready: anyio.Event) -> None:
        import mcp_types  # deferred: startup time
        from mcp.client import Client

        cfg = state.config
        client_info = mcp_types.Implementation(name="dflash-agent", version="1")
        assert state.stop is not None and state.done is not None
        try:
            with anyio.CancelScope() as scope:
                scope.deadline = anyio.current_time() + cfg.startup_timeout
                async with AsyncExitStack() as stack:
                    screen = ToolScreen(state)
                    transport = screen.wrap(await open_transport(state, stack, self.cwd))
                    client = Client(transport, client_info=client_info,
                                    read_timeout_seconds=cfg.startup_timeout,
                                    message_handler=_stray_recorder(state))
                    screen.version = lambda: client.session.protocol_version
                    await stack.enter_async_context(client)
                    state.tools = await _list_tools(client)
                    scope.deadline = math.inf
                    state.client, state.status = client, "ready"
                    ready.set()
                    await state.stop.wait()
            if scope.cancelled_caught and state.status == "starting":
                state.status = "failed"
                state.error = f"did not start within {cfg.startup_timeout:g} s"
                state.stderr_tail = _stderr_tail(state)
        except Exception as exc:
            if state.status == "starting":
                state.status, state.error = "failed", _start_error(state, exc)
        finally:
            state.client = None
            if state.status == "ready":
                state.status = "stopped"
            ready.set()
            state.done.set()

    async def _stop(self, state: ServerState) -> None:
        if state.stop is None or state.done is None:
            return
        state.stop.set()
        with anyio.move_on_after(STOP_GRACE_S):
            await state.done.wait()

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``tool`` on ``server``; returns the server's result (``is_error`` included).

        Raises :class:`McpCallError` for a timeout (the call is cancelled), a server that is
        not running, quarantined, crashed or lost its connection during the call (restarted
        once), a malformed answer, a server that never stops asking for input, or a protocol
        error; each says which."""
        state = self.servers[server]
        if state.status == "quarantined":
            raise McpCallError(f"MCP server '{server}' is quarantined for this session "
                               f"({state.error})")
        if state.status == "stopped":
            # The connection ended between calls: the same path as a crash during one.
            raise McpCallError(self._wait(self._submit(self._crashed(state, tool))))
        if state.status != "ready" or state.client is None:
            raise McpCallError(f"MCP server '{server}' is not running "
                               f"({state.error or state.status})")
        return self._wait(self._submit(self._call(state, tool, arguments)))

    async def _call(self, state: ServerState, tool: str,
                    arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        import mcp_types  # deferred: startup time
        from mcp.client import InputRequiredRoundsExceededError
        from mcp.shared.exceptions import MCPError

        name = state.config.name
        timeout = state.config.tool_timeout
        client = state.client
        if client is None:
            # The connection ended between call()'s look at the status and now.
            raise McpCallError(await self._lost(state, tool))
        try:
            with anyio.fail_after(timeout):
                return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except TimeoutError:
            raise McpCallError(f"{state.config.name}: {tool} timed out after {timeout:g} s; "
                               "the call was cancelled") from None
        except MCPError as exc:
            if exc.error.code == mcp_types.REQUEST_TIMEOUT:
                raise McpCallError(f"{state.config.name}: {tool} timed out after {timeout:g} "
                                   "s; the call was cancelled") from None
            if exc.error.code != mcp_types.CONNECTION_CLOSED:
                raise McpCallError(f"{state.config.name}: {describe_error(exc)}") from None
        except pydantic.ValidationError as exc:
            raise McpCallError(f"MCP server '{name}' answered {tool} with a malformed result "
                               f"({exc.title}: {validation_summary(exc)})") from None
        except InputRequiredRoundsExceededError as exc:
            # The server answered every round, validly, but never with a result.
            raise McpCallError(f"MCP server '{name}' did not finish {tool}: it answered "
                               f"'input required' (more input, or retry later) "
                               f"{exc.max_rounds} times in a row without a result, so the "
                               "call was given up") from None
        except Exception as exc:
            # The SDK raises RuntimeError for a result that breaks the tool's output schema,
            # and also for a call on a connection that closed under it: the first is the
            # server's malformed answer, the second is no answer at all.
            if isinstance(exc, CLOSED_STREAM) or _connection_gone(state, client):
                raise McpCallError(await self._lost(state, tool)) from None
            if isinstance(exc, RuntimeError) and _from_result_check(exc):
                raise McpCallError(f"MCP server '{name}' answered {tool} with a malformed "
                                   f"result ({first_line(str(exc))})") from None
            raise McpCallError(f"MCP server '{name}': the call to {tool} failed without an "
                               f"answer ({describe_error(exc)})") from None
        raise McpCallError(await self._lost(state, tool, "crashed"))

    async def _lost(self, state: ServerState, tool: str, what: str = "lost its connection"
                    ) -> str:
        """What to say of a call whose connection closed under it: the session is stopping
        its servers (nothing to restart), or :meth:`_crashed` (``what`` happened)."""
        if self._closing:
            return (f"the call to {tool} on MCP server '{state.config.name}' was cut off: "
                    "the session is stopping its MCP servers")
        return await self._crashed(state, tool, what)

    async def _crashed(self, state: ServerState, tool: str, what: str = "crashed") -> str:
        """Restart a server whose connection dropped, or quarantine it the second time.
        ``what`` happened to it: ``crashed`` (the server ended the connection) or ``lost its
        connection`` (it closed under the call, cause unknown)."""
        name = state.config.name
        await self._stop(state)
        where = f" (its stderr: {state.log})" if state.log else ""
        if state.restarts >= 1:
            state.status = "quarantined"
            state.error = f"{what} again during {tool}"
            self._record_quarantine(state)
            return (f"MCP server '{name}' {what} again during {tool}{where}; it is "
                    "quarantined for the rest of this session")
        state.restarts += 1
        await self._start_one(state)
        if state.status != "ready":
            state.status = "quarantined"
            reason = state.error
            state.error = f"{what} during {tool} and did not restart: {reason}"
            self._record_quarantine(state)
            return (f"MCP server '{name}' {what} during {tool}{where} and did not restart "
                    f"({reason}); it is quarantined for the rest of this session")
        return (f"MCP server '{name}' {what} during {tool}{where}; it was restarted, so the "
                "call can be tried again (check whether it had an effect first)")

    def _record_quarantine(self, state: ServerState) -> None:
        record = {"server": state.config.name, "reason": state.error,
                  "session": self.session_id, "time": time.time()}
        path = quarantine_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def close(self) -> None:
        """Stop every server and the loop thread (idempotent)."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        self._closing = True
        states = list(self.servers.values())

        async def stop_all() -> None:
            async with anyio.create_task_group() as tg:
                for state in states:
                    tg.start_soon(self._stop, state)

        self._wait(self._submit(stop_all()))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=STOP_GRACE_S)
        if not self._thread.is_alive():
            self._loop.close()


def _start_error(state: ServerState, exc: BaseException) -> str:
    """The one-line error of a failed start; a stdio server's last stderr line is kept too.

    The SDK reports a server that exits (or closes stdout) before answering as a bare
    "Connection closed": say what that means for a process we started."""
    import mcp_types  # deferred: startup time
    from mcp.shared.exceptions import MCPError

    state.stderr_tail = _stderr_tail(state)
    leaves = _leaves(exc)
    if state.log is not None and len(leaves) == 1 and isinstance(leaves[0], MCPError) \
            and leaves[0].error.code == mcp_types.CONNECTION_CLOSED:
        return ("the server closed the connection before answering (it exited, or closed "
                "its stdout)")
    return describe_error(exc)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside anyio's (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _connection_gone(state: ServerState, client: Client) -> bool:
    """Whether the connection ``client`` made has closed: the runner has ended or replaced it,
    or the ``Client`` has left its context (its ``session`` then raises RuntimeError)."""
    if state.client is not client or (state.done is not None and state.done.is_set()):
        return True
    try:
        client.session  # noqa: B018 - the property is the SDK's own "still connected" test
    except RuntimeError:
        return True
    return False


def _from_result_check(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the SDK's check of a tool result against the tool's
    declared output schema (``ClientSession.validate_tool_result``): the SDK's one RuntimeError
    that means the server's answer broke its own declaration. Its type cannot tell: the same
    class is raised when a closed connection is used."""
    frame = exc.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        if code.co_name == "validate_tool_result" and \
                frame.tb_frame.f_globals.get("__name__", "").startswith("mcp.client"):
            return True
        frame = frame.tb_next
    return False


def _stderr_tail(state: ServerState) -> str | None:
    """The last non-blank line a stdio server wrote to stderr during this start (capped)."""
    if state.log is None:
        return None
    try:
        with state.log.open("rb") as log:
            log.seek(state.log_start)
            text = log.read()[-4096:].decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    return lines[-1] if len(lines[-1]) <= 200 else lines[-1][:200] + " …"


def _stray_recorder(state: ServerState) -> Any:
    """A ``message_handler`` that records transport errors (a stdio server's non-MCP stdout
    lines) on ``state``; server notifications need nothing from us."""
    async def handle(message: Any) -> None:
        if isinstance(message, Exception):
            state.note_stray(message)
    return handle


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools
