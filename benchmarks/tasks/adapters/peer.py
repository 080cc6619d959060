"""What the peer agents share: the executable from ``install-peer`` (else on PATH), its version,
the server (the managed llama-server unless a URL is given) and the model id it serves, and the
record's fields every peer fills the same way."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import (
    Adapter,
    AgentRun,
    BenchError,
    Call,
    last_line,
    run_command,
    tail,
)
from benchmarks.tasks.adapters.install import PEERS, peer_bin
from benchmarks.tasks.adapters.server import managed_server, served_model
from benchmarks.tasks.tasks import TaskError


class Peer(Adapter):
    """A peer agent installed by ``install-peer NAME`` (``PEERS[NAME]``) and pointed at the
    same OpenAI-compatible server as dflash-agent. Subclasses give ``name``, ``FORMATS`` (the
    edit formats it can run, the first the default) and ``command``/``parse``."""

    FORMATS: tuple[str, ...] = ()
    """The edit formats this peer runs; the first is the default."""
    ANY_FORMAT = False
    """Whether a format outside ``FORMATS`` is passed on for the peer to judge."""

    @classmethod
    def default_bin(cls) -> Path:
        """The peer in the peers' folder (``install-peer NAME``)."""
        return peer_bin(cls.name)

    def __init__(self, base_url: str | None = None, preset: str | None = None,
                 model: str | None = None, binary: Path | None = None,
                 edit_format: str | None = None, call: Call = run_command):
        """``edit_format`` outside ``FORMATS`` raises TaskError (a usage error, exit 2)."""
        self.base_url, self.preset, self.model = base_url, preset, model
        self.edit_format = edit_format or self.FORMATS[0]
        if not self.ANY_FORMAT and self.edit_format not in self.FORMATS:
            raise TaskError(f"{self.name} has no edit format {self.edit_format!r} (it has: "
                            f"{', '.join(self.FORMATS)})")
        found, default = shutil.which(PEERS[self.name].command), self.default_bin()
        self.binary = Path(binary) if binary else (
            default if default.is_file() else Path(found) if found else None)
        self.version: str | None = None
        self.server_started = False
        self._call = call

    @property
    def label(self) -> str:
        return f"{self.name}/{self.edit_format}"

    def config(self) -> dict[str, Any]:
        return {"edit_format": self.edit_format, "preset": self.preset,
                "server": "given" if self.base_url else "managed"}

    def flags(self) -> list[str]:
        """The options that make its run non-interactive and pick its edit format."""
        return []

    def info(self) -> dict[str, Any]:
        return {"version": self.version, "binary": str(self.binary), "model": self.model,
                "flags": self.flags(), "server_started_by_runner": self.server_started}

    def read_version(self) -> str:
        """What ``<binary> --version`` prints; BenchError when it does not run."""
        try:
            proc = self._call([str(self.binary), "--version"])
        except (OSError, subprocess.SubprocessError) as exc:
            raise BenchError(f"`{self.binary} --version` failed: {exc}") from None
        if proc.returncode != 0:
            raise BenchError(f"`{self.binary} --version` failed: {last_line(proc.stderr)}")
        return proc.stdout.strip()

    def setup(self) -> None:
        if self.binary is None or not self.binary.is_file():
            where = self.binary or self.default_bin()
            raise BenchError(f"{self.name} is not installed ({where} not found): `python -m "
                             f"benchmarks.tasks install-peer {self.name}` installs "
                             f"{PEERS[self.name]} into {self.default_bin().parents[1]} "
                             f"(or give --peer-bin)")
        self.version = self.read_version()
        if self.base_url is None:
            self.base_url, self.server_started = managed_server(self.preset, self._call)
        if self.model is None:
            self.model = served_model(self.base_url)

    def endpoint(self) -> tuple[str, str, Path]:
        """The server's OpenAI base URL (``<url>/v1``), the model id and the executable, once
        set up; TaskError before."""
        if self.base_url is None or self.model is None or self.binary is None:
            raise TaskError(f"the {self.name} adapter was not set up (no server URL or model)")
        return f"{self.base_url.rstrip('/')}/v1", self.model, self.binary

    def output_tail(self, run: AgentRun) -> str:
        return tail(run.stdout + "\n" + run.stderr)

    def stop_reason(self, run: AgentRun) -> str:
        """``done`` (exit 0), ``exit_<code>`` or ``killed_at_wall_limit``."""
        if run.exit_code is None:
            return "killed_at_wall_limit"
        return "done" if run.exit_code == 0 else f"exit_{run.exit_code}"

    def fields(self, run: AgentRun, *, steps: int, tool_calls: dict[str, int],
               format_errors: int = 0, tool_errors: int = 0, prefilled: int = 0,
               cached: int = 0, decoded: int = 0, decode_ms: float = 0.0,
               approximate: bool = False, error: str | None = None) -> dict[str, Any]:
        """The record's fields from a peer's counts; a decode speed only where the peer kept
        llama-server's timings for every reply (``decode_ms``, summed), no drafts;
        ``error`` defaults to the last line of stderr of a run that failed."""
        calls = {k: v for k, v in sorted(tool_calls.items()) if v}
        prompt: dict[str, Any] = {"prefilled": prefilled, "cached": cached}
        if approximate:
            prompt["approximate"] = True
        if error is None and run.exit_code not in (0, None):
            error = last_line(run.stderr)
        return {"steps": steps, "tool_calls": calls, "tool_calls_total": sum(calls.values()),
                "malformed": {"format_errors": format_errors, "invalid_arguments": 0,
                              "total": format_errors},
                "tool_errors": tool_errors, "protocol": self.edit_format,
                "protocol_fallbacks": 0, "model": self.model,
                "prompt_tokens": prompt, "decode_tokens": decoded,
                "decode_tok_s": round(decoded / (decode_ms / 1000), 2) if decode_ms else None,
                "draft": None, "stop_reason": self.stop_reason(run), "error": error}
