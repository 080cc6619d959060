"""The MCP server over streamable HTTP (path ``/mcp``): it listens on 127.0.0.1 only, requires
``Authorization: Bearer <token>`` and refuses a foreign ``Origin`` or ``Host`` (DNS rebinding).
"""

from __future__ import annotations

import hmac

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send


class BearerGuard:
    """ASGI wrapper: every HTTP request needs ``Authorization: Bearer <token>`` (401 otherwise)."""

    def __init__(self, app: ASGIApp, token: str):
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b"missing or wrong bearer token (printed by `agent mcp serve --http`)"
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, token: str, port: int) -> ASGIApp:
    """The streamable-HTTP app: bearer token required, Host and Origin limited to loopback."""
    local = [f"127.0.0.1:{port}", f"localhost:{port}"]
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=local,
                                         allowed_origins=[f"http://{h}" for h in local])
    app = server.streamable_http_app(transport_security=security, host="127.0.0.1")
    return BearerGuard(app, token)


def serve_http(server: MCPServer, token: str, port: int) -> None:
    """Serve on 127.0.0.1:``port`` until interrupted (uvicorn logs go to stderr)."""
    config = uvicorn.Config(http_app(server, token, port), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on")
    uvicorn.Server(config).run()
