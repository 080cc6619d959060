"""The MCP client's errors, and one line for any exception a server's answer or connection
raises: whatever a server sends is input, not a contract, so an answer the SDK cannot parse
becomes a one-line error for that call (or that server)."""

from __future__ import annotations

import pydantic


class McpCallError(RuntimeError):
    """A tool call did not produce a result (timeout, crash, quarantine, protocol error)."""


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
    text = first_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def first_line(text: str) -> str:
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
