"""A would-be MCP server that never answers the handshake (hangs on startup)."""

import time

while True:
    time.sleep(3600)
