"""Agent adapters: one small class per agent builds its command line and reads its output
into the task record. ``dflash-agent`` runs ``agent run ... --json`` and reads the event
stream; ``aider`` runs aider's documented one-shot mode (``--message``) against the managed
llama-server. Later peers (mini-swe-agent, OpenCode, Qwen Code) get a class here too."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from benchmarks.tasks.tasks import Task, TaskError, end_group

EXIT_REASONS = {2: "usage_error", 3: "error", 4: "internal_error", 130: "interrupted"}
"""``agent``'s exit codes (README) as a stop reason, for a run with no final event."""
INVALID_ARGS = ("invalid arguments for ", "unknown tool ")
"""How a tool result that refused a call's arguments (or its tool name) starts."""
FORMAT_ERROR = "Format error:"
"""How the loop's feedback on a malformed reply starts (agent/loop.py)."""
GRACE_S = 60.0
"""Past the task's time limit, how long the runner waits before it kills the agent (the agent
stops itself at ``--max-time``; this is for one that does not)."""


class BenchError(Exception):
    """A peer or server that cannot be set up; one ``error:`` line, exit 3."""


PEERS = {"aider": "aider-chat==0.86.2"}
"""Each peer agent's pinned package: ``install-peer NAME`` puts it in its own venv."""
PEERS_ENV = "DFLASH_AGENT_BENCH_PEERS"
"""A folder holding the peers' venvs (``<name>/``), instead of the default."""


def peers_dir() -> Path:
    """Where the peers' venvs live: ``$DFLASH_AGENT_BENCH_PEERS``, else the user's cache folder
    (``platformdirs.user_cache_dir("dflash-agent-bench")/peers``); never inside the repository
    (a venv is not relocatable, and linters and the device copies would walk it)."""
    given = os.environ.get(PEERS_ENV)
    if given:
        return Path(given).expanduser()
    return Path(platformdirs.user_cache_dir("dflash-agent-bench")) / "peers"


def peer_bin(name: str, folder: Path | None = None) -> Path:
    """The peer's executable in its venv (its command has the peer's name)."""
    return (folder or peers_dir()) / name / "bin" / name


def _pip_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (proc.stderr + "\n" + proc.stdout).splitlines()
             if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or [f"exit {proc.returncode}"])[-1][:300]


def _installed_version(python: Path, dist: str, call: Call) -> str | None:
    """The version of ``dist`` installed in the venv of ``python``; None when it has none (or
    the venv's interpreter does not run)."""
    if not python.is_file():
        return None
    proc = call([str(python), "-c", "import importlib.metadata as m, sys; "
                 "print(m.version(sys.argv[1]))", dist])
    return proc.stdout.strip() if proc.returncode == 0 else None


def install_peer(name: str, folder: Path | None = None, call: Call | None = None,
                 echo: Callable[[str], None] = lambda line: None) -> str:
    """Install the peer ``name`` (its pinned package, ``PEERS``) into its own venv
    ``<folder>/<name>`` (default ``peers_dir()``), made with this interpreter (``-m venv``);
    a venv that already holds the pinned version is left alone. Returns what ``<name>
    --version`` prints. A venv that cannot be made, a pip that fails (offline, say) or a peer
    that does not run raises BenchError."""
    call = call or _call
    if name not in PEERS:
        raise BenchError(f"unknown peer {name!r} (known: {', '.join(sorted(PEERS))})")
    requirement = PEERS[name]
    dist, version = requirement.split("==")
    venv = (folder or peers_dir()) / name
    python = venv / "bin" / "python"
    try:
        if _installed_version(python, dist, call) != version:
            if not python.is_file() or call([str(python), "-c", ""]).returncode != 0:
                echo(f"making the venv {venv} ({sys.executable} -m venv)")
                made = call([sys.executable, "-m", "venv", "--clear", str(venv)])
                if made.returncode != 0:
                    raise BenchError(f"cannot make the venv {venv}: {_pip_error(made)}")
            echo(f"installing {requirement} into {venv} (about a minute)")
            pip = call([str(python), "-m", "pip", "install", "--no-cache-dir",
                        "--disable-pip-version-check", "--quiet", requirement])
            if pip.returncode != 0:
                raise BenchError(f"pip could not install {requirement} into {venv}: "
                                 f"{_pip_error(pip)}")
            found = _installed_version(python, dist, call)
            if found != version:
                raise BenchError(f"{venv} holds {dist} {found} after pip installed "
                                 f"{requirement}")
        binary = peer_bin(name, folder)
        proc = call([str(binary), "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        raise BenchError(f"cannot install {requirement} into {venv}: {exc}") from None
    if proc.returncode != 0:
        raise BenchError(f"`{binary} --version` failed: {_pip_error(proc)}")
    return proc.stdout.strip()


@dataclass
class Limits:
    max_steps: int
    timeout_s: float


@dataclass
class AgentRun:
    """What the agent's process did."""

    argv: list[str]
    exit_code: int | None
    """None: killed at the wall-clock limit."""
    stdout: str
    stderr: str
    seconds: float


def agent_command() -> list[str]:
    """dflash-agent's own entry point: the ``agent`` beside this interpreter, else
    ``python -m agent``."""
    beside = Path(sys.executable).parent / "agent"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "agent"]


def run_agent(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> AgentRun:
    """Run the agent in its own process group with stdout and stderr to unnamed files; at
    ``timeout`` it gets SIGTERM (then SIGKILL)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return AgentRun(argv, 127, "", f"cannot start {argv[0]}: {exc}", 0.0)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        end_group(proc, timed_out=code is None)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return AgentRun(argv, code, out.read().decode("utf-8", "replace"),
                        err.read().decode("utf-8", "replace"), seconds)


def _last_line(text: str) -> str:
    """The last ``error:`` line of ``text`` (the agent's one-line reason; a crash log's
    ``details:`` line may follow it), else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [""])[-1][:300]


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(line[:300] for line in text.strip().splitlines()[-lines:])


@dataclass
class Stream:
    """Totals of one ``agent run --json`` event stream."""

    steps: int = 0
    turns: int = 0
    tool_calls: Counter = field(default_factory=Counter)
    format_errors: int = 0
    invalid_arguments: int = 0
    tool_errors: int = 0
    fallbacks: int = 0
    protocol: str | None = None
    model: str | None = None
    prefilled: int = 0
    cached: int = 0
    decoded: int = 0
    decode_ms: float = 0.0
    drafted: int | None = None
    accepted: int = 0
    turns_without_timings: int = 0
    stop_reason: str | None = None
    final_text: str = ""
    error: str | None = None
    unreadable_lines: int = 0
    call_ids: set[str] = field(default_factory=set)
    final_calls: list[str] = field(default_factory=list)


def read_stream(lines: Iterable[str]) -> Stream:
    """Add up an ``agent run --json`` stream (agent/events.py): model turns (llama-server's
    ``timings``: ``prompt_n`` prefilled, ``cache_n`` cached, ``predicted_n`` decoded in
    ``predicted_ms``, ``draft_n``/``draft_n_accepted``), tool calls by name, malformed replies
    (the loop's "Format error:" feedback), calls refused for their arguments, other failed
    calls, protocol fallbacks and the final event's stop reason."""
    s = Stream()
    for line in lines:
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            s.unreadable_lines += 1
            continue
        if not isinstance(ev, dict):
            s.unreadable_lines += 1
            continue
        kind = ev.get("type")
        if kind == "session_start":
            s.model = ev.get("model")
        elif kind == "protocol":
            s.protocol = ev.get("protocol")
            s.fallbacks += bool(ev.get("previous"))
        elif kind == "model_turn":
            _add_turn(s, ev)
        elif kind == "tool_call":
            s.tool_calls[str(ev.get("name"))] += 1
            s.call_ids.add(str(ev.get("call_id")))
        elif kind == "tool_result" and ev.get("is_error"):
            if str(ev.get("text", "")).startswith(INVALID_ARGS):
                s.invalid_arguments += 1
            else:
                s.tool_errors += 1
        elif kind == "message":
            message = ev.get("message") or {}
            if message.get("role") == "user" and \
                    str(message.get("content", "")).startswith(FORMAT_ERROR):
                s.format_errors += 1
        elif kind == "final_answer":
            s.stop_reason = ev.get("reason")
            s.steps = int(ev.get("steps") or s.steps)
            s.final_text = str(ev.get("text", ""))[:300]
        elif kind == "error":
            s.error = f"{ev.get('kind')}: {ev.get('message')}"[:300]
    # a final_answer the loop refused (nothing done yet) has its tool_call event already
    s.tool_calls["final_answer"] += sum(i not in s.call_ids for i in s.final_calls)
    if not s.tool_calls["final_answer"]:
        del s.tool_calls["final_answer"]
    return s


def _add_turn(s: Stream, ev: dict[str, Any]) -> None:
    s.turns += 1
    s.steps = max(s.steps, int(ev.get("step") or 0))
    for call in ev.get("tool_calls") or []:
        if call.get("name") == "final_answer":  # taken, it ends the loop with no tool_call
            s.final_calls.append(str(call.get("id")))
    t = ev.get("timings")
    if not t:
        s.turns_without_timings += 1
        usage = ev.get("usage") or {}
        s.prefilled += int(usage.get("prompt_tokens") or 0)
        s.decoded += int(usage.get("completion_tokens") or 0)
        return
    s.prefilled += int(t.get("prompt_n") or 0)
    s.cached += int(t.get("cache_n") or 0)
    s.decoded += int(t.get("predicted_n") or 0)
    s.decode_ms += float(t.get("predicted_ms") or 0.0)
    if t.get("draft_n") is not None:
        s.drafted = (s.drafted or 0) + int(t["draft_n"])
        s.accepted += int(t.get("draft_n_accepted") or 0)


def stream_fields(s: Stream) -> dict[str, Any]:
    """The record's fields from a stream's totals."""
    draft = None
    if s.drafted is not None:
        draft = {"drafted": s.drafted, "accepted": s.accepted,
                 "acceptance": round(s.accepted / s.drafted, 4) if s.drafted else None}
    return {"steps": s.steps, "tool_calls": dict(sorted(s.tool_calls.items())),
            "tool_calls_total": sum(s.tool_calls.values()),
            "malformed": {"format_errors": s.format_errors,
                          "invalid_arguments": s.invalid_arguments,
                          "total": s.format_errors + s.invalid_arguments},
            "tool_errors": s.tool_errors, "protocol": s.protocol,
            "protocol_fallbacks": s.fallbacks, "model": s.model,
            "prompt_tokens": {"prefilled": s.prefilled, "cached": s.cached},
            "decode_tokens": s.decoded,
            "decode_tok_s": round(s.decoded / (s.decode_ms / 1000), 2) if s.decode_ms else None,
            "draft": draft, "turns_without_timings": s.turns_without_timings,
            "final_text": s.final_text}


class Adapter:
    """One agent: how to run it on a task and read what it did."""

    name = ""

    @property
    def label(self) -> str:
        """The agent's name in results and tables (with what distinguishes its variants)."""
        return self.name

    def config(self) -> dict[str, Any]:
        """What identifies this agent's runs for ``--resume`` (no ports or paths)."""
        return {}

    def info(self) -> dict[str, Any]:
        """Recorded with every task: version, flags."""
        return {}

    def setup(self) -> None:
        """Once, before the first task (a version, a server)."""

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}

    def timeout(self, limits: Limits) -> float:
        return limits.timeout_s + GRACE_S

    def parse(self, run: AgentRun) -> dict[str, Any]:
        raise NotImplementedError

    def output_tail(self, run: AgentRun) -> str:
        """The end of what the agent printed besides its results, for the record."""
        return tail(run.stderr)


class DflashAgent(Adapter):
    """``agent run TASK --repo DIR --approval full-auto --json --max-steps N --max-time S``."""

    name = "dflash-agent"

    def __init__(self, tool_protocol: str | None = None, preset: str | None = None,
                 base_url: str | None = None, profile: str | None = None,
                 command: list[str] | None = None):
        self.tool_protocol, self.preset, self.base_url = tool_protocol, preset, base_url
        self.profile = profile
        self.base = command or agent_command()

    @property
    def label(self) -> str:
        return f"{self.name}/{self.tool_protocol or 'auto'}"

    def config(self) -> dict[str, Any]:
        return {"tool_protocol": self.tool_protocol or "auto", "preset": self.preset,
                "profile": self.profile, "server": "given" if self.base_url else "managed"}

    def info(self) -> dict[str, Any]:
        return {"command": self.base, "flags": ["--approval", "full-auto", "--json"]}

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        argv = [*self.base, "run", task.instruction, "--repo", str(repo), "--approval",
                "full-auto", "--json", "--max-steps", str(limits.max_steps),
                "--max-time", f"{limits.timeout_s:g}"]
        for flag, value in (("--tool-protocol", self.tool_protocol), ("--preset", self.preset),
                            ("--profile", self.profile), ("--base-url", self.base_url)):
            if value:
                argv += [flag, value]
        return argv

    def parse(self, run: AgentRun) -> dict[str, Any]:
        s = read_stream(run.stdout.splitlines())
        fields = stream_fields(s)
        if run.exit_code is None:
            fields["stop_reason"] = "killed_at_wall_limit"
        else:
            fields["stop_reason"] = s.stop_reason or EXIT_REASONS.get(run.exit_code,
                                                                      f"exit_{run.exit_code}")
        error = s.error or (_last_line(run.stderr) if run.exit_code not in (0, 1) else None)
        fields["error"] = error
        return fields


def served_model(base_url: str, timeout: float = 10.0) -> str:
    """The model id the server at ``base_url`` lists first (``/v1/models``)."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/v1/models", timeout=timeout) as r:
            data = json.loads(r.read())
        return str(data["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"cannot read the model id from {base_url}/v1/models: {exc}") from None


Call = Callable[[list[str]], subprocess.CompletedProcess]


def _call(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=3600,
                          stdin=subprocess.DEVNULL)


def managed_server(preset: str | None, call: Call = _call,
                   base: list[str] | None = None) -> tuple[str, bool]:
    """The URL of dflash-agent's managed llama-server for ``preset`` (any preset when None),
    read from ``agent backend status --json``; when none runs, ``agent backend up [--preset
    P]`` starts one first (once). Returns (url, whether this call started it)."""
    base = base or agent_command()

    def find() -> str | None:
        proc = call([*base, "backend", "status", "--json"])
        if proc.returncode != 0:
            raise BenchError(f"`agent backend status --json` failed: {_last_line(proc.stderr)}")
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
                         f"{_last_line(up.stderr) or _last_line(up.stdout)}")
    url = find()
    if url is None:
        raise BenchError("`agent backend up` succeeded but `agent backend status --json` "
                         f"lists no server for preset {preset or '(default)'}")
    return url, True


TOKENS = re.compile(r"Tokens: ([\d.]+k?) sent(?:, ([\d.]+k?) cache write)?"
                    r"(?:, ([\d.]+k?) cache hit)?, ([\d.]+k?) received")


def _count(text: str | None) -> int:
    if not text:
        return 0
    return round(float(text[:-1]) * 1000) if text.endswith("k") else int(float(text))


class Aider(Adapter):
    """aider's one-shot scripting mode: ``--message TASK`` with the starting files named, the
    whole-file edit format, every confirmation answered yes, no commits, no network extras.
    Installed in its own venv outside the repository (``install-peer aider``: ``peers_dir()``),
    never the product's."""

    name = "aider"
    FLAGS = ["--yes-always", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore",
             "--no-check-update", "--no-show-release-notes", "--no-analytics",
             "--no-show-model-warnings", "--no-pretty", "--no-fancy-input",
             "--no-suggest-shell-commands", "--no-detect-urls", "--no-auto-lint",
             "--no-restore-chat-history"]
    """The documented options of a non-interactive run (``aider --help``)."""

    @staticmethod
    def default_bin() -> Path:
        """aider in the peers' folder (``install-peer aider``)."""
        return peer_bin("aider")

    def __init__(self, base_url: str | None = None, preset: str | None = None,
                 model: str | None = None, binary: Path | None = None,
                 edit_format: str = "whole", call: Call = _call):
        self.base_url, self.preset, self.model = base_url, preset, model
        self.edit_format = edit_format
        found, default = shutil.which("aider"), self.default_bin()
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

    def info(self) -> dict[str, Any]:
        return {"version": self.version, "binary": str(self.binary), "model": self.model,
                "flags": ["--edit-format", self.edit_format, *self.FLAGS],
                "server_started_by_runner": self.server_started}

    def setup(self) -> None:
        if self.binary is None or not self.binary.is_file():
            where = self.binary or self.default_bin()
            raise BenchError(f"aider is not installed ({where} not found): `python -m "
                             f"benchmarks.tasks install-peer aider` installs {PEERS['aider']} "
                             f"into {self.default_bin().parents[1]} (or give --aider-bin)")
        try:
            proc = self._call([str(self.binary), "--version"])
        except (OSError, subprocess.SubprocessError) as exc:
            raise BenchError(f"`{self.binary} --version` failed: {exc}") from None
        if proc.returncode != 0:
            raise BenchError(f"`{self.binary} --version` failed: {_last_line(proc.stderr)}")
        self.version = proc.stdout.strip()
        if self.base_url is None:
            self.base_url, self.server_started = managed_server(self.preset, self._call)
        if self.model is None:
            self.model = served_model(self.base_url)

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        if self.base_url is None or self.model is None or self.binary is None:
            raise TaskError("the aider adapter was not set up (no server URL or model)")
        scratch.mkdir(parents=True, exist_ok=True)
        return [str(self.binary), "--model", f"openai/{self.model}",
                "--openai-api-base", f"{self.base_url.rstrip('/')}/v1",
                "--openai-api-key", "x", "--edit-format", self.edit_format, *self.FLAGS,
                "--timeout", f"{limits.timeout_s:g}",
                "--chat-history-file", str(scratch / "aider.chat.history.md"),
                "--input-history-file", str(scratch / "aider.input.history"),
                "--message", task.instruction, *task.files()]

    def timeout(self, limits: Limits) -> float:
        return limits.timeout_s  # aider has no time limit of its own

    def output_tail(self, run: AgentRun) -> str:
        return tail(run.stdout + "\n" + run.stderr)

    def parse(self, run: AgentRun) -> dict[str, Any]:
        sent = received = cached = 0
        exchanges = 0
        for m in TOKENS.finditer(run.stdout):
            exchanges += 1
            sent += _count(m.group(1))
            cached += _count(m.group(3))
            received += _count(m.group(4))
        edits = len(re.findall(r"^Applied edit to ", run.stdout, re.M))
        # aider's own words for a reply it could not apply (coders/base_coder.py)
        nonconforming = (run.stdout + run.stderr).count("did not conform to the edit format")
        stop = "killed_at_wall_limit" if run.exit_code is None else \
            "done" if run.exit_code == 0 else f"exit_{run.exit_code}"
        return {"steps": exchanges, "tool_calls": {"edit": edits} if edits else {},
                "tool_calls_total": edits,
                "malformed": {"format_errors": nonconforming, "invalid_arguments": 0,
                              "total": nonconforming},
                "tool_errors": 0, "protocol": self.edit_format, "protocol_fallbacks": 0,
                "model": self.model,
                "prompt_tokens": {"prefilled": sent, "cached": cached, "approximate": True},
                "decode_tokens": received, "decode_tok_s": None, "draft": None,
                "stop_reason": stop,
                "error": _last_line(run.stderr) if run.exit_code not in (0, None) else None}


ADAPTERS: dict[str, type[Adapter]] = {"dflash-agent": DflashAgent, "aider": Aider}
