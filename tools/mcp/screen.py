"""Each ``tools/list`` answer screened before the SDK sees it: a tool whose definition is
invalid is left out on its own (:class:`ToolScreen`) instead of failing the server's whole
listing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio.abc
import pydantic

from tools.mcp.errors import validation_summary
from tools.mcp.state import ServerState

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage


class ToolScreen:
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
    """The transport's read stream, each message passed through :meth:`ToolScreen.screen`."""

    def __init__(self, inner: Any, screen: ToolScreen):
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
    """The transport's write stream, each message shown to :meth:`ToolScreen.note` first."""

    def __init__(self, inner: Any, screen: ToolScreen):
        self.inner, self._screen = inner, screen

    async def send(self, item: Any) -> None:
        self._screen.note(item)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()
