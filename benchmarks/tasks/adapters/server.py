"""The server the peers share: dflash-agent's managed llama-server (started once when none
runs) or a given OpenAI-compatible URL, and the model id it serves."""

from __future__ import annotations

import json
import urllib.request

from benchmarks.tasks.adapters.base import BenchError, Call, last_line, run_command
from benchmarks.tasks.adapters.dflash import agent_command


def served_model(base_url: str, timeout: float = 10.0) -> str:
    """The model id the server at ``base_url`` lists first (``/v1/models``)."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/v1/models", timeout=timeout) as r:
            data = json.loads(r.read())
        return str(data["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"cannot read the model id from {base_url}/v1/models: {exc}") from None


def managed_server(preset: str | None, call: Call = run_command,
                   base: list[str] | None = None) -> tuple[str, bool]:
    """The URL of dflash-agent's managed llama-server for ``preset`` (any preset when None),
    read from ``agent backend status --json``; when none runs, ``agent backend up [--preset
    P]`` starts one first (once). Returns (url, whether this call started it)."""
    base = base or agent_command()

    def find() -> str | None:
        proc = call([*base, "backend", "status", "--json"])
        if proc.returncode != 0:
            raise BenchError(f"`agent backend status --json` failed: {last_line(proc.stderr)}")
        try:
            servers = json.loads(proc.stdout)
        except ValueError:
            raise BenchError("`agent backend status --json` printed no JSON list") from None
        for info in servers if isinstance(servers, list) else []:
            if preset is None or info.get("preset") == preset:
                return str(info["url"])
        return None

    url = find()
    if url is not None:
        return url, False
    up = call([*base, "backend", "up", *(["--preset", preset] if preset else [])])
    if up.returncode != 0:
        raise BenchError(f"`agent backend up` failed (exit {up.returncode}): "
                         f"{last_line(up.stderr) or last_line(up.stdout)}")
    url = find()
    if url is None:
        raise BenchError("`agent backend up` succeeded but `agent backend status --json` "
                         f"lists no server for preset {preset or '(default)'}")
    return url, True
