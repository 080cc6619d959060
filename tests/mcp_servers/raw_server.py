"""A hand-written MCP server (stdio, no SDK) that answers ``tools/list`` and ``tools/call`` with
exactly the JSON given in its argument, valid or not: ``{"tools": [...], "call": {...}}``.

The SDK's server side validates what it sends, so it cannot produce the malformed answers real
servers have been seen to give; this one answers the handshake by hand and sends the rest
verbatim. Unknown methods get "method not found"; notifications are ignored.
"""

import json
import sys

ANSWERS = json.loads(sys.argv[1])


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    method, rid = request.get("method"), request["id"]
    if method == "initialize":
        version = request["params"].get("protocolVersion", "2025-11-25")
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": ANSWERS.get("tools", [])}
    elif method == "tools/call":
        result = ANSWERS.get("call", {"content": []})
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601,
                                                       "message": f"no method {method}"}})
        continue
    send({"jsonrpc": "2.0", "id": rid, "result": result})
