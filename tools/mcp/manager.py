"""Connections to MCP servers, kept on a background event loop for a synchronous agent loop.

The ``mcp`` SDK is async (anyio) and a ``Client`` must be closed in the task that opened it, so
each server gets one runner task on a private asyncio loop thread: it connects, lists the tools
and then waits to be stopped. Tool calls are submitted to that loop from the agent's thread with
a per-call timeout. A server whose connection drops during a call is restarted once; when it
drops again it is quarantined for the rest of the session (recorded for ``agent mcp list``).

Whatever a server sends is input, not a contract: an answer the SDK cannot parse becomes a
one-line error for that call (or that server), and a tool whose definition is invalid is left
out on its own (:class:`_ToolScreen`) instead of failing the server's whole listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Future
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import httpx2
import pydantic

from backend.home import home
from backend.secret_store import SECRET_NAME, strip_url_credentials
from tools import reaper
from tools.mcp.config import ServerConfig

# The SDK (mcp, mcp_types: ~0.8 s) is imported where a server is connected, so a session or
# command with no MCP server configured never loads it.
if TYPE_CHECKING:
    import mcp_types
    from mcp.client import Client
    from mcp.shared.message import SessionMessage

Status = Literal["starting", "ready", "failed", "quarantined", "stopped"]
STOP_GRACE_S = 10.0
"""Seconds a runner gets to close its connection (the SDK bounds its own shutdown at ~5 s)."""
CLOSED_STREAM = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
"""anyio's words for a stream whose other end is gone: a call that meets one lost its
connection."""
STRAY_KEPT = 3
"""Non-protocol stdout lines kept per server for the warning (the rest are only counted)."""
BASE_ENV = ("HOME", "LOGNAME", "USER", "PATH", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_ALL",
            "LC_CTYPE", "TZ", "TMPDIR")
"""What a stdio server gets besides its config's ``env``: enough to start, nothing secret."""


def server_env(cfg: ServerConfig) -> dict[str, str]:
    """The whole environment of a stdio server: :data:`BASE_ENV` from ours (URL credentials
    stripped), the config's ``env`` (``${VAR}`` already expanded, from the secret store too),
    and the :mod:`tools.reaper` marker so it dies with the agent.

    Explicit because the SDK merges ``get_default_environment()`` under whatever it is given:
    every name it would add is in :data:`BASE_ENV`, so the result is exactly this dict."""
    from mcp.client.stdio import get_default_environment  # deferred: startup time

    base = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    base.update(get_default_environment())
    env = {k: strip_url_credentials(v) for k, v in base.items() if not SECRET_NAME.search(k)}
    env.update(cfg.env)
    env[reaper.OWNER_ENV] = reaper.new_marker(f"mcp-{cfg.name}")
    return env


class McpCallError(RuntimeError):
    """A tool call did not produce a result (timeout, crash, quarantine, protocol error)."""


def state_dir() -> Path:
    """``<state>/mcp``: server stderr logs and the quarantine record."""
    return home().state / "mcp"


def quarantine_file() -> Path:
    """JSON lines, one per quarantine: server, reason, session, time."""
    return state_dir() / "quarantines.jsonl"


class McpStartError(RuntimeError):
    """A server cannot be started for a reason we found ourselves; the message says it all."""


def describe_error(exc: BaseException) -> str:
    """One line for an exception, looking inside anyio's exception groups.

    Never several lines: pydantic and the SDK describe a bad answer in dozens of them, and
    this line goes into a warning, a status row or a tool result."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in exc.exceptions)
    from mcp.shared.exceptions import MCPError  # deferred: startup time

    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    if isinstance(exc, McpStartError):
        return str(exc)
    if isinstance(exc, pydantic.ValidationError):
        return f"malformed answer from the server: {exc.title}: {validation_summary(exc)}"
    if isinstance(exc, UnicodeDecodeError):
        return (f"the server wrote bytes to stdout that are not UTF-8 JSON (byte "
                f"0x{exc.object[exc.start]:02x}); MCP over stdio is UTF-8 JSON, one message "
                "a line")
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"command not found: {exc.filename}"
    text = _first_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(text: str) -> str:
    """The first non-blank line of ``text``, with `` …`` when more lines followed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


def validation_summary(exc: pydantic.ValidationError, skip: int = 0) -> str:
    """The first problem pydantic found, as ``where: what``, and how many more there are;
    ``skip`` drops that many leading path items (the list index of a tool checked alone)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(map(str, first["loc"][skip:]))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


class _SdkLog(logging.Handler):
    """Appends the SDK's records to ``<state>/mcp/sdk.log`` of the home current at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            state_dir().mkdir(parents=True, exist_ok=True)
            with (state_dir() / "sdk.log").open("a", encoding="utf-8") as out:
                out.write(self.format(record) + "\n")
        except OSError:
            self.handleError(record)


def _route_sdk_logs() -> None:
    """Keep the SDK's log records (garbage lines, transport tracebacks) off the terminal."""
    logger = logging.getLogger("mcp")
    if any(isinstance(h, _SdkLog) for h in logger.handlers):
        return
    handler = _SdkLog()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


@dataclass
class ServerState:
    """One server's connection and what is known about it."""

    config: ServerConfig
    status: Status = "starting"
    error: str | None = None
    tools: list[mcp_types.Tool] = field(default_factory=list)
    restarts: int = 0
    client: Client | None = None
    stop: anyio.Event | None = None
    done: anyio.Event | None = None
    log: Path | None = None
    """Where a stdio server's stderr goes."""
    log_start: int = 0
    """The size of :attr:`log` when this start began: what follows is this run's stderr."""
    stray: list[str] = field(default_factory=list)
    """The first :data:`STRAY_KEPT` lines the server wrote to stdout that were not MCP."""
    stray_count: int = 0
    """How many such lines there were in all (they are skipped, the connection goes on)."""
    invalid: dict[str, str] = field(default_factory=dict)
    """Tools whose definition the SDK would reject (tool → why); :class:`_ToolScreen`."""
    stderr_tail: str | None = None
    """The last line a stdio server that failed to start wrote to stderr."""

    def note_stray(self, exc: Exception) -> None:
        """Record what the transport could not parse; stdio hands each such stdout line to
        the client as the parse error, whose ``input`` is the line itself."""
        self.stray_count += 1
        if len(self.stray) >= STRAY_KEPT:
            return
        line = describe_error(exc)
        if isinstance(exc, pydantic.ValidationError) and exc.errors():
            raw = exc.errors()[0].get("input")
            line = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        self.stray.append(line if len(line) <= 200 else line[:200] + " …")

    def stray_summary(self) -> str | None:
        """One phrase about the non-MCP stdout lines (None when there were none)."""
        if not self.stray_count:
            return None
        lines = "a line" if self.stray_count == 1 else f"{self.stray_count} lines"
        verb = "is" if self.stray_count == 1 else "are"
        shown = ", ".join(repr(line) for line in self.stray)
        return f"printed {lines} on stdout that {verb} not MCP ({shown})"

    def failure(self) -> str:
        """Why the server failed to start, in one line: the error, its last stderr line and
        where its stderr went, and the non-MCP lines it printed on stdout (a usage message or
        a banner before a crash is often the real reason)."""
        tail = f"; its last line on stderr: {self.stderr_tail!r}" if self.stderr_tail else ""
        log = f" (stderr: {self.log})" if self.log else ""
        stray = self.stray_summary()
        also = f"; it {stray}" if stray else ""
        return f"{self.error or self.status}{tail}{log}{also}"


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
            _route_sdk_logs()
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
                    screen = _ToolScreen(state)
                    transport = screen.wrap(await self._transport(state, stack))
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

    async def _transport(self, state: ServerState, stack: AsyncExitStack) -> Any:
        # deferred: startup time
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        cfg = state.config
        if cfg.url:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=cfg.headers, timeout=httpx2.Timeout(30.0, read=cfg.tool_timeout + 30)))
            return streamable_http_client(cfg.url, http_client=http)
        cwd = Path(cfg.cwd) if cfg.cwd else self.cwd
        if cwd is not None and not cwd.is_absolute() and self.cwd is not None:
            cwd = self.cwd / cwd
        if cwd is not None and not cwd.is_dir():
            # The OS reports a missing working folder as the command's FileNotFoundError,
            # naming the folder: "command not found: <folder>" would send the user astray.
            raise McpStartError(f"working folder (cwd) does not exist: {cwd}")
        state_dir().mkdir(parents=True, exist_ok=True)
        state.log = state_dir() / f"{cfg.name}.stderr.log"
        errlog: IO[str] = stack.enter_context(state.log.open("a", encoding="utf-8"))
        state.log_start = errlog.tell()
        params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args),
                                       env=server_env(cfg), cwd=cwd)
        return stdio_client(params, errlog=errlog)

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
                                   f"result ({_first_line(str(exc))})") from None
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


class _ToolScreen:
    """Takes the tools the SDK would reject out of each ``tools/list`` answer, before the SDK
    sees it, and records them on the server's state (tool → why).

    The SDK validates a listing as a whole, so one tool with an invalid definition (an
    ``inputSchema`` that is not an object, or none) would fail the server and every tool on
    it, and again at each call (the SDK re-lists to learn output schemas). It sits between
    the transport and the ``Client``: requests going out mark which answers are listings;
    each tool of such an answer is checked alone, exactly as the SDK checks the whole list."""

    def __init__(self, state: ServerState):
        self.state = state
        self.listings: set[str | int] = set()
        """Ids of ``tools/list`` requests sent and not yet answered."""
        self.version: Callable[[], str | None] = lambda: None
        """The negotiated protocol version (set once the client exists)."""

    def wrap(self, transport: Any) -> Any:
        """``transport`` with its streams passed through this screen."""
        @asynccontextmanager
        async def screened() -> AsyncIterator[tuple[Any, Any]]:
            async with transport as (read, write):
                yield _ScreenedReceive(read, self), _NotedSend(write, self)
        return screened()

    def note(self, item: SessionMessage) -> None:
        import mcp_types  # deferred: startup time

        message = item.message
        if isinstance(message, mcp_types.JSONRPCRequest) and message.method == "tools/list":
            self.listings.add(message.id)

    def screen(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        import mcp_types  # deferred: startup time

        message = getattr(item, "message", None)
        if not isinstance(message, mcp_types.JSONRPCResponse) or message.id not in self.listings:
            return item
        self.listings.discard(message.id)
        tools = message.result.get("tools")
        if not isinstance(tools, list) or _listing_problem(self.version(), message.result, []):
            return item  # wrong as a whole: the SDK's own error says so
        kept = []
        for number, tool in enumerate(tools, 1):
            problem = _listing_problem(self.version(), message.result, [tool])
            if problem is None:
                kept.append(tool)
                continue
            name = tool.get("name") if isinstance(tool, dict) else None
            label = name if isinstance(name, str) and name else f"tool {number} (no name)"
            self.state.invalid[label] = f"not a valid MCP tool: {problem}"
        result = {**message.result, "tools": kept}
        return type(item)(message.model_copy(update={"result": result}), item.metadata)


def _listing_problem(version: str | None, result: dict[str, Any],
                     tools: list[Any]) -> str | None:
    """What the SDK would reject in ``result`` holding only ``tools`` (None: nothing), checked
    the way ``ClientSession.send_request`` checks a ``tools/list`` answer: against the wire
    model of the negotiated version (the SDK's fallback when none is), then the SDK's own."""
    import mcp_types  # deferred: startup time
    from mcp_types import methods

    data = {**result, "tools": tools}
    try:
        # KeyError: a version without a wire model for tools/list; the SDK skips it too.
        with contextlib.suppress(KeyError):
            methods.validate_server_result("tools/list", version or "2025-11-25", data)
        mcp_types.ListToolsResult.model_validate(data, by_name=False)
    except pydantic.ValidationError as exc:
        return validation_summary(exc, skip=2 if tools else 0)
    return None


class _ScreenedReceive(anyio.abc.ObjectReceiveStream[Any]):
    """The transport's read stream, each message passed through :meth:`_ToolScreen.screen`."""

    def __init__(self, inner: Any, screen: _ToolScreen):
        self.inner, self._screen = inner, screen

    @property
    def last_context(self) -> Any:
        """The sender's context, which the dispatcher reads off streamable HTTP's stream."""
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        return self._screen.screen(await self.inner.receive())

    async def aclose(self) -> None:
        await self.inner.aclose()


class _NotedSend(anyio.abc.ObjectSendStream[Any]):
    """The transport's write stream, each message shown to :meth:`_ToolScreen.note` first."""

    def __init__(self, inner: Any, screen: _ToolScreen):
        self.inner, self._screen = inner, screen

    async def send(self, item: Any) -> None:
        self._screen.note(item)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()


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


def read_quarantines() -> dict[str, dict[str, Any]]:
    """The latest quarantine record per server name (from any session)."""
    latest: dict[str, dict[str, Any]] = {}
    try:
        lines = quarantine_file().read_text("utf-8").splitlines()
    except FileNotFoundError:
        return latest
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("server"), str):
            latest[record["server"]] = record
    return latest
