"""Replay benchmark of the agent's own turns: speed, acceptance, cache reuse and tool-call
validity per tool-call protocol and speculation profile (issue 14, item 3).

Fixture sessions (``benchmarks/agent_sessions/*.json``, written by ``make_sessions.py`` with
the agent's real tools over real files) are replayed turn by turn. For every assistant turn of
every session, and for each protocol (``text``, ``json``, ``native``), the request is built and
sent by the agent's own code: :class:`ReplayAgent` *is* an :class:`agent.loop.Agent` (system
prompt from :func:`agent.prompts.system_prompt`, the protocol's ``response_format`` / ``tools``
fields, the preset's sampling with the agent's ``tool_temperature``, the context keeper, the
reply parsed by the protocol's own parser and stored the way the loop stores it). Only the
tools do not run: the fixture's recorded results answer the turn instead, in the message shape
the loop gives results. So:

- **The model's reply is what goes into the next request** (what the agent does): verbatim
  under ``text`` and ``json``, as content plus re-serialised ``tool_calls`` under ``native``,
  a 200-character stub under every protocol when the reply hit ``max_tokens``. The cache
  numbers are therefore the agent's own. A malformed reply is stored verbatim too, but the
  fixture's result follows it instead of the loop's format-error message, so every protocol
  sees the same files and test output whatever the model wrote. A ``native`` reply with no
  call gets the results as ``user`` messages (there is no call id to answer).
- **The plain-text reference** (``plain`` rows): the same session as an ordinary chat, with no
  tool format anywhere (no tool list, no tags, no grammar): each turn's user message is the
  same results text the ``text`` protocol sends, plus the fixture turn's ``ask`` — the same
  step said in words ("Write the complete module inventory/report.py"). The ratio of a
  protocol's speedup to the plain speedup over the same turns says what the tool format costs
  speculation.

One server per profile (``baseline``, ``ngram``, and ``dflash`` when the preset has a draft)
is started side by side as ``agent backend bench`` does; within each (session, protocol) the
turn's request goes to every profile in turn, the first profile rotating, so load drift hits
all alike, and each server only ever sees one conversation at a time (its cache holds it).
Numbers come from llama-server's ``timings`` (``prompt_n``, ``cache_n``, ``predicted_n``,
``predicted_ms``, ``draft_n``, ``draft_n_accepted``) and, for the number of drafts, from
``/metrics`` (``spec_decode_num_drafts_total``). Aggregates are ratios of sums.

Usage (from the repository root)::

    python benchmarks/agent_turns.py [--preset smollm2-135m] [--profiles baseline,ngram]
        [--protocols text,json,native] [--sessions FILE_OR_NAME ...] [--turns N]
        [--max-tokens 2048] [--ctx-size N] [--temperature T] [--json OUT] [--plot PNG]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx2
from pydantic import BaseModel, Field, ValidationError
from rich import box
from rich.console import Console
from rich.table import Table

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.client import ContextOverflow, ServerClient, ServerUnavailable, Turn  # noqa: E402
from agent.config import ConfigError, load_settings  # noqa: E402
from agent.context import ContextKeeper, ContextTooSmall  # noqa: E402
from agent.events import Compaction, Event, ModelTurn, Timings  # noqa: E402
from agent.loop import KEEP_CUT_CHARS, Agent, Limits  # noqa: E402
from agent.prompts import system_prompt  # noqa: E402
from agent.protocols.base import FINAL_ANSWER, tools_with_final  # noqa: E402
from agent.protocols.calls import RESULT_PREFIX  # noqa: E402
from agent.runtime import Backend, renders_tool_role, unload_when_due  # noqa: E402
from agent.ui import reply_misses  # noqa: E402
from backend.engine.build import default_engine  # noqa: E402
from backend.engine.flavour import detect_flavour  # noqa: E402
from backend.engine.registry import BuildError, Engine  # noqa: E402
from backend.home import home  # noqa: E402
from backend.measure.bench import BenchUsage, _model_file, _server_info, _start, parse_profiles
from backend.measure.report import require_matplotlib  # noqa: E402
from backend.measure.results import (
    REFERENCE_PROFILE,
    BenchError,
    MachineInfo,
    ModelFile,
    ServerInfo,
    machine_info,
)
from backend.models.presets import Preset, PresetError, get_preset  # noqa: E402
from backend.models.sources import ModelError  # noqa: E402
from backend.serve import pipeline  # noqa: E402
from backend.serve.exits import crash_report
from backend.serve.fit import FitError  # noqa: E402
from backend.serve.launch import ensure_engine  # noqa: E402
from backend.serve.pipeline import LaunchRequest  # noqa: E402
from backend.serve.process import stop
from backend.serve.profiles import LaunchPlan  # noqa: E402
from backend.serve.records import ServerError, ServerState, keep_current_marker
from backend.serve.server import interrupt_on_termination
from backend.serve.speculation.control import request_control  # noqa: E402
from backend.serve.speculation.draft_cap import DraftCap  # noqa: E402
from backend.serve.speculation.ngram_guard import NgramGuard  # noqa: E402
from backend.serve.tuning import tune  # noqa: E402
from benchmarks.forced import (  # noqa: E402
    HEADROOM,
    ForcedClient,
    ForcingCost,
    Unforceable,
    measure_cost,
    native_reply,
    reply_text,
)
from tools.registry import Registry, default_registry  # noqa: E402
from tools.workspace import Workspace  # noqa: E402

SCHEMA_VERSION = 1
SESSIONS_DIR = Path(__file__).resolve().parent / "agent_sessions"
PROTOCOLS = ("text", "json", "native")
PLAIN = "plain"
"""The plain-text reference chain (no tool format), reported like a protocol."""
KINDS = ("view", "create", "edit", "test", "fix", "final")
EDIT_KINDS = ("create", "edit", "fix")
"""Turns that write file content: the issue's targets are about these."""
EDIT_TURNS = "edit-turns"
"""The scope of the :data:`EDIT_KINDS` turns together (``edit`` alone is the str_replace kind)."""
NOT_REPLAYED = "not run: the replayed session has no result for this call"
PLAIN_SYSTEM = ("You are a coding assistant working on the project in {workspace}. Answer in "
                "plain text. When asked for code, write only the code.")
CPU_TARGETS = {"edit_speedup": 1.5, "of_plain": 0.9, "reuse": 0.98}
"""Issue 14's CPU targets (SmolLM2, ngram, text protocol)."""


class FixtureError(ValueError):
    """A fixture session file is missing, not JSON, or not a valid session; says which."""


# --- fixture sessions ----------------------------------------------------------------------


class FixtureCall(BaseModel):
    """One call the assistant made in the recorded session."""

    tool: str = Field(min_length=1)
    arguments: dict[str, Any]


class FixtureResult(BaseModel):
    """What the tool returned for a call (recorded with the real tool)."""

    text: str
    is_error: bool = False


class FixtureTurn(BaseModel):
    """One assistant turn: its kind, its calls, their results, and the step in plain words."""

    kind: Literal["view", "create", "edit", "test", "fix", "final"]
    ask: str = Field(min_length=1, description="The same step asked in words (plain chain).")
    calls: list[FixtureCall] = Field(min_length=1)
    results: list[FixtureResult]


class FixtureSession(BaseModel):
    """A recorded coding session."""

    name: str = Field(min_length=1)
    description: str = ""
    workspace: str = Field(min_length=1, description="The workspace path the prompts name.")
    task: str = Field(min_length=1)
    turns: list[FixtureTurn] = Field(min_length=1)


def load_session(path: Path) -> FixtureSession:
    """Read one fixture session file; raises :class:`FixtureError` saying what is wrong."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FixtureError(f"cannot read the session file {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FixtureError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg})") from exc
    try:
        return FixtureSession.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise FixtureError(f"{path} is not a replay session: {where}: {first['msg']} "
                           f"({exc.error_count()} problem(s))") from exc


def resolve_sessions(specs: Sequence[str] | None, folder: Path = SESSIONS_DIR) -> list[Path]:
    """Session files for ``specs`` (paths, or names of files in ``folder``); all of
    ``folder``'s ``*.json`` when None. Raises :class:`FixtureError` for one that is missing."""
    if not specs:
        found = sorted(folder.glob("*.json"))
        if not found:
            raise FixtureError(f"no session files (*.json) in {folder}")
        return found
    paths = []
    for spec in specs:
        path = Path(spec)
        if not path.exists() and (folder / f"{spec}.json").exists():
            path = folder / f"{spec}.json"
        if not path.is_file():
            known = ", ".join(p.stem for p in sorted(folder.glob("*.json"))) or "none"
            raise FixtureError(f"no session file {spec} (sessions in {folder}: {known})")
        paths.append(path)
    return paths


def valid_arguments(registry: Registry, name: str, arguments: Any) -> bool:
    """True when ``arguments`` pass the tool's own argument model (``final_answer``: a string
    ``text``)."""
    if name == FINAL_ANSWER:
        return isinstance(arguments, dict) and isinstance(arguments.get("text"), str)
    tool = registry.tools.get(name)
    if tool is None or not isinstance(arguments, dict):
        return False
    try:
        tool.parse(arguments)
    except Exception:  # pydantic's ValidationError or the tool's ToolError
        return False
    return True


def check_session(session: FixtureSession, registry: Registry, source: str = "") -> None:
    """Raise :class:`FixtureError` when a turn calls an unknown tool, has arguments its tool
    refuses, or has results that do not match its calls (a ``final`` turn: one
    ``final_answer`` call, no results)."""
    where = source or session.name
    for number, turn in enumerate(session.turns, 1):
        names = [c.tool for c in turn.calls]
        if turn.kind == "final":
            if names != [FINAL_ANSWER] or turn.results:
                raise FixtureError(f"{where}: turn {number} (final) must be one {FINAL_ANSWER} "
                                   "call with no results")
            continue
        if FINAL_ANSWER in names:
            raise FixtureError(f"{where}: turn {number} ({turn.kind}) calls {FINAL_ANSWER}; "
                               "only the final turn may")
        if len(turn.results) != len(turn.calls):
            raise FixtureError(f"{where}: turn {number} has {len(turn.calls)} call(s) but "
                               f"{len(turn.results)} result(s)")
        for call in turn.calls:
            if call.tool not in registry.tools:
                raise FixtureError(f"{where}: turn {number} calls unknown tool {call.tool} "
                                   f"(tools: {', '.join(registry.tools)})")
            if not valid_arguments(registry, call.tool, call.arguments):
                raise FixtureError(f"{where}: turn {number}: the arguments of {call.tool} do "
                                   "not pass the tool's argument model")


def load_sessions(paths: Iterable[Path], registry: Registry,
                  turns: int | None = None) -> list[FixtureSession]:
    """Load and check every session (the first ``turns`` turns of each when given)."""
    sessions = []
    for path in paths:
        session = load_session(path)
        check_session(session, registry, str(path))
        if turns is not None:
            session = session.model_copy(update={"turns": session.turns[:turns]})
        sessions.append(session)
    return sessions


# --- replaying one conversation --------------------------------------------------------------


@dataclass
class Played:
    """What one replayed request gave."""

    turn: ModelTurn
    error: str | None
    """The agent's format error for the reply, if any."""
    calls: list[tuple[str, Any]]
    compacted: bool


class ReplayAgent(Agent):
    """The agent's loop for one replayed conversation (a session under one protocol on one
    server): requests, reply parsing and history are :class:`agent.loop.Agent`'s own; the
    model's calls are answered with the fixture turn's recorded results instead of running.

    ``client`` may be None for a conversation that only renders (tests)."""

    def __init__(self, client: ServerClient | None, registry: Registry,
                 session: FixtureSession, protocol: str, *, sampling: dict[str, Any],
                 max_tokens: int, tool_role: bool, context: ContextKeeper | None = None):
        self.events: list[Event] = []
        tools = registry.openai_tools()
        # As the agent's sessions list them: json's prompt names final_answer itself.
        listed = tools_with_final(tools) if protocol == "json" else tools
        super().__init__(client, registry, session_id=f"replay-{session.name}",  # type: ignore[arg-type]
                         protocol=protocol,  # type: ignore[arg-type]
                         system=system_prompt(protocol, listed),
                         emit=self.events.append, sampling=sampling, max_tokens=max_tokens,
                         tool_role=tool_role, context=context,
                         limits=Limits(max_steps=10**6, max_time=10.0**9))
        self._add({"role": "user", "content": session.task})  # as Agent.run starts a task
        self.repeats.enabled = False  # the fixture's turns repeat calls on purpose
        self._queue: list[tuple[str, FixtureResult]] = []
        self._error: str | None = None

    def play(self, turn: FixtureTurn) -> Played:
        """Send the next request, store the reply as the agent does, answer with ``turn``'s
        results. Raises what :meth:`ServerClient.complete` raises."""
        self.events.clear()
        self._queue = [(c.tool, r) for c, r in zip(turn.calls, turn.results, strict=False)]
        self._error = None
        self.steps += 1
        self._step()
        self.answer_rest()
        model_turn = next(e for e in reversed(self.events) if isinstance(e, ModelTurn))
        return Played(turn=model_turn, error=self._error,
                      calls=[(c.name, c.arguments) for c in model_turn.tool_calls],
                      compacted=any(isinstance(e, Compaction) for e in self.events))

    def answer_rest(self) -> None:
        """Results of the fixture turn that no call of the model took, then the results
        message (text protocol). A native reply without calls has no id to answer: its
        results go as user messages."""
        for index, (tool, result) in enumerate(self._queue):
            if self.protocol == "native" and not self._answered_any:
                content = ("ERROR: " if result.is_error else "") + result.text
                self._add({"role": "user",
                           "content": RESULT_PREFIX.format(name=tool) + content})
            else:
                self._answer(f"call_replay_{self.steps}_{index}", tool, result.text,
                             result.is_error, 0.0)
        self._queue = []
        self._flush_results()

    @property
    def _answered_any(self) -> bool:
        last = next((m for m in reversed(self.messages) if m.get("role") == "assistant"), {})
        return bool(last.get("tool_calls"))

    # The loop's hooks, replaced: nothing runs, nothing ends the replayed task.

    def _run(self, calls: list[dict[str, Any]]) -> tuple[str, str] | None:
        for call in calls:
            self._execute(call)
        return None

    def _final(self, text: str, call: dict[str, Any] | None = None, tell: bool = False
               ) -> tuple[str, str] | None:
        # A reply without calls is the fixture's turn as the model wrote it: no refusal of
        # the product's (agent/finish.py) may enter the replayed conversation.
        return None

    def _execute(self, call: dict[str, Any], note: str = "") -> int:
        if self._queue:
            tool, result = self._queue.pop(0)
            return self._answer(call["id"], tool, result.text, result.is_error, 0.0)
        return self._answer(call["id"], call["name"], NOT_REPLAYED, True, 0.0)

    def _format_error(self, turn: Turn, message: str) -> tuple[str, str] | None:
        # The loop stores the malformed reply verbatim, then its feedback: keep the reply,
        # let the fixture's results take the feedback's place.
        self._error = message
        keep = len(self.messages) + 1
        super()._format_error(turn, message)
        del self.messages[keep:]
        return None


class PlainChain:
    """The plain-text reference conversation: the same session as an ordinary chat (no tool
    format), each turn asking for its step in words; replies kept as the agent keeps them."""

    def __init__(self, client: ServerClient, session: FixtureSession, *,
                 sampling: dict[str, Any], max_tokens: int,
                 context: ContextKeeper | None = None):
        self.client, self.sampling, self.max_tokens = client, sampling, max_tokens
        self.context = context
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": PLAIN_SYSTEM.format(workspace=session.workspace)}]
        self._user = session.task

    def play(self, turn: FixtureTurn) -> Played:
        """One plain request; its reply then the turn's results (as the ``text`` protocol
        sends them) start the next user message."""
        self.messages.append({"role": "user", "content": self._user + "\n\n" + turn.ask})
        compacted = False
        if self.context is not None:
            smaller = self.context.before_request(self.messages, None)
            if smaller is not None:
                self.messages[:], compacted = smaller, True
        try:
            reply = self._send()
        except ContextOverflow as exc:
            if self.context is None or self.context.budget is None:
                raise
            self.messages[:] = self.context.after_overflow(self.messages, None,
                                                           exc.n_prompt_tokens)
            compacted = True
            reply = self._send()
        content = reply.content
        if reply.finish_reason == "length":
            content = content[:KEEP_CUT_CHARS] + " [... reply cut at the token limit]"
        self.messages.append({"role": "assistant", "content": content})
        self._user = "\n\n".join(RESULT_PREFIX.format(name=c.tool)
                                 + ("ERROR: " if r.is_error else "") + r.text
                                 for c, r in zip(turn.calls, turn.results, strict=False))
        model_turn = ModelTurn(session_id="plain", step=len(self.messages) // 2,
                               protocol=PLAIN, content=reply.content,
                               finish_reason=reply.finish_reason, timings=reply.timings)
        return Played(turn=model_turn, error=None, calls=[], compacted=compacted)

    def _send(self) -> Turn:
        return self.client.complete(self.messages, sampling=self.sampling,
                                    max_tokens=self.max_tokens)


# --- measurements ----------------------------------------------------------------------------


class TurnSample(BaseModel):
    """One replayed request, in the order requests were sent."""

    index: int
    session: str
    turn: int = Field(description="0-based turn of the session.")
    kind: str
    protocol: str
    profile: str
    prompt_n: int = Field(description="Prompt tokens prefilled (timings.prompt_n).")
    cache_n: int = Field(description="Prompt tokens served from the cache (timings.cache_n).")
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int
    draft_accepted: int
    drafts: int | None = Field(description="Drafts made (verification steps, from /metrics); "
                               "None when the server does not say.")
    finish_reason: str | None
    outcome: Literal["ok", "format_error", "no_call", "cut", "plain", "unforced"] = Field(
        description="ok: calls the agent can run (or, native, a prose final answer); "
        "format_error: the agent's parser refused the reply; no_call: a native reply "
        "without a call where the session makes one; cut: stopped by max_tokens; "
        "unforced: --forced could not force this turn (``error`` says why), nothing sent.")
    error: str | None = None
    calls: list[str] = Field(default_factory=list, description="Tools the model called.")
    args_valid: bool | None = Field(None, description="Every call passes its tool's argument "
                                    "model.")
    same_tool: bool | None = Field(None, description="The first call names the fixture's tool.")
    compacted: bool = False
    load1: float | None = Field(None, description="The machine's 1-minute load average right "
                                "after the request (other work on a shared machine).")
    reply_chars: int
    reply_sha1: str
    reply_head: str = Field(description="The reply's first 300 characters.")
    reply_missed: int | None = Field(None, description="Tokens of this reply the next request "
                                     "prefilled again (agent.ui.reply_misses); None for the "
                                     "last turn.")
    carried: int | None = Field(None, description="Tokens the previous request of this "
                                "conversation left in the cache (its whole prompt plus its "
                                "reply): what this request could reuse; None for the first.")
    reachable: int | None = Field(None, description="Of ``carried``, what this request "
                                  "could reuse as the agent builds it: all of it, or after a "
                                  "reply cut at max_tokens only the previous prompt (the "
                                  "agent keeps a short stub of a runaway reply, by design); "
                                  "None for the first.")
    forced_tokens: int | None = Field(None, description="--forced: the forced reply's own "
                                      "tokenisation (its token count); None unforced.")
    forced_exact: bool | None = Field(None, description="--forced: the decoded text was the "
                                      "forced reply byte for byte.")
    after_cut: bool = Field(False, description="The previous reply of this conversation was "
                            "cut at max_tokens (the agent keeps only its start, and would "
                            "have stopped the task there; the plain chain keeps it the same "
                            "way).")


class Group(BaseModel):
    """Totals for one protocol and profile over a set of turns (``scope``: all, edit-turns or
    a turn kind)."""

    protocol: str
    profile: str
    scope: str
    turns: int
    completion_tokens: int
    decode_ms: float
    decode_tok_s: float | None
    draft_n: int
    draft_accepted: int
    drafts: int | None
    acceptance: float | None
    accepted_per_draft: float | None
    tokens_per_step: float | None = Field(None, description="Tokens decoded per target step: "
                                          "completion tokens over (completion tokens - "
                                          "accepted draft tokens); 1.0 without speculation.")
    forced_turns: int = Field(0, description="--forced: turns decoded under forcing.")
    forced_inexact: int = Field(0, description="--forced: of those, turns whose decoded "
                                "text was not the forced reply (left out of every other "
                                "figure).")
    forced_tokens: int = Field(0, description="--forced: the forced replies' own token "
                               "count (completion_tokens also counts each end-of-turn token "
                               "and any character re-tokenised).")
    unforced: int = Field(0, description="--forced: turns that could not be forced (not "
                          "sent, not in any figure).")
    speedup: float | None = Field(description="decode_tok_s over the reference profile's, "
                                  "same protocol and scope.")
    plain_speedup: float | None = Field(description="The plain chain's speedup, same profile "
                                        "and scope.")
    of_plain: float | None = Field(description="speedup / plain_speedup.")
    paired_speedup: float | None = Field(None, description="Geometric mean over the turns of "
                                         "this profile's decode tok/s over the reference's "
                                         "on the same turn (requests sent back to back), so "
                                         "load that changes between turns cancels.")
    paired_plain: float | None = Field(None, description="The plain chain's paired speedup, "
                                       "same profile and scope.")
    paired_of_plain: float | None = Field(None, description="paired_speedup / paired_plain.")
    reused: int = Field(description="cache_n over requests 2..N of each conversation.")
    prefilled: int = Field(description="prompt_n over requests 2..N of each conversation.")
    reuse: float | None = Field(description="reused / (reused + prefilled): new tool "
                                "results count as prefilled, so long results lower it.")
    reuse_ceiling: float | None = Field(None, description="The reuse if every request kept "
                                        "all the previous one left in the cache that the agent "
                                        "keeps in its history (not a runaway reply cut at "
                                        "max_tokens): what the new tool output each request "
                                        "adds leaves possible.")
    carried: int = Field(description="Tokens the previous requests left in the cache "
                         "(prompt + reply), requests 2..N.")
    kept: int = Field(description="Of those, tokens the next request reused.")
    kept_share: float | None = Field(description="kept / carried: 1.0 when every request "
                                     "continues the cached prompt and reply byte for byte.")
    kept_share_uncut: float | None = Field(description="kept / carried over the requests "
                                           "that follow a reply not cut at max_tokens.")
    kept_share_whole: float | None = Field(None, description="kept / carried over the "
                                           "requests whose history the agent did not shorten "
                                           "(the previous reply not cut at max_tokens, no "
                                           "compaction): a loss here is the agent's own cache "
                                           "miss (a request that does not continue the cached "
                                           "prompt + reply byte for byte).")
    reply_missed: int = Field(description="Reply tokens the next request prefilled again.")
    cut_reply_missed: int = Field(description="Of those, tokens of replies cut at max_tokens "
                                  "(the agent keeps only their first 200 characters).")
    format_errors: int
    no_calls: int
    cuts: int
    invalid_per_100: float | None = Field(description="(format_errors + no_calls + cuts) "
                                          "per 100 turns: replies the agent could not run.")
    args_invalid: int
    same_tool: int
    compactions: int


class TargetCheck(BaseModel):
    """One of the issue's targets, measured."""

    name: str
    target: str
    value: float | None
    met: bool | None


class ReplayResult(BaseModel):
    """Everything one run measured (the ``--json`` file)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    date: datetime
    command: str
    machine: MachineInfo
    engine: str
    engine_version: str
    binary: Path
    flavour: str
    build_info: str | None
    preset: str
    model: ModelFile
    draft: ModelFile | None
    profiles: list[str]
    reference_profile: str
    protocols: list[str]
    sessions: dict[str, int] = Field(description="Session name → turns replayed.")
    max_tokens: int
    ctx_size: int
    sampling: dict[str, Any]
    tool_role: bool = Field(description="The template renders tool messages (json results go "
                            "as tool messages, else as user messages).")
    servers: list[ServerInfo] = Field(description="The servers the run started, one a "
                                      "profile, and after it any a profile was relaunched on "
                                      "without its draft (speculation says so).")
    samples: list[TurnSample]
    groups: list[Group]
    targets: list[TargetCheck]
    wall_s: float
    complete: bool = Field(True, description="False when the run was interrupted or a "
                           "server failed: the samples are those measured until then.")
    stopped: str | None = Field(None, description="Why an incomplete run stopped.")
    resumed: int = Field(0, description="Runs before this one whose complete conversations "
                         "this result carries on (--resume).")
    plain: bool = Field(True, description="The plain-text reference chain was part of the run.")
    forced: bool = Field(False, description="--forced: every reply was the fixture's own, "
                         "decoded under a grammar (benchmarks/forced.py).")
    forcing: ForcingCost | None = Field(None, description="--forced: what forcing adds to a "
                                        "decoded token on the reference server, measured "
                                        "before the replay.")

    def planned(self) -> int:
        """Requests a complete run of this configuration sends."""
        chains = len(self.protocols) + (1 if self.plain else 0)
        return sum(self.sessions.values()) * chains * len(self.profiles)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text (llama-server ``/metrics``) → ``{name: value}``, the ``llamacpp:``
    prefix dropped; lines that are not ``name value`` are skipped."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            values[parts[0].removeprefix("llamacpp:")] = float(parts[1])
        except ValueError:
            continue
    return values


def _metrics(base_url: str) -> dict[str, float]:
    try:
        resp = httpx2.get(base_url + "/metrics", timeout=10.0)
    except httpx2.HTTPError:
        return {}
    return parse_metrics(resp.text) if resp.status_code == 200 else {}


def _drafts_since(base_url: str, before: dict[str, float], predicted: int) -> int | None:
    """Drafts made since ``before`` was read; waits (up to 5 s) until the server has
    counted the request's ``predicted`` tokens. None when ``/metrics`` has no such counter."""
    key = "spec_decode_num_drafts_total"
    if key not in before:
        return None
    deadline = time.monotonic() + 5.0
    while True:
        now = _metrics(base_url)
        done = now.get("tokens_predicted_total", 0.0) >= \
            before.get("tokens_predicted_total", 0.0) + predicted
        if (done and key in now) or time.monotonic() > deadline:
            return int(now.get(key, before[key]) - before[key]) if key in now else None
        time.sleep(0.05)


def _outcome(protocol: str, played: Played, turn: FixtureTurn) -> str:
    if protocol == PLAIN:
        return "plain"
    if played.turn.finish_reason == "length":
        return "cut"
    if played.error is not None:
        return "format_error"
    if not played.calls:
        return "ok" if protocol == "native" and turn.kind == "final" else "no_call"
    return "ok"


def make_sample(index: int, session: FixtureSession, number: int, protocol: str,
                profile: str, played: Played, registry: Registry,
                drafts: int | None) -> TurnSample:
    """A :class:`TurnSample` from one replayed request."""
    turn = session.turns[number]
    t = played.turn.timings or Timings()
    outcome = _outcome(protocol, played, turn)
    names = [n for n, _ in played.calls]
    tool_turn = protocol != PLAIN and outcome != "cut"
    if protocol == "native" and turn.kind == "final" and not names:
        names_ok, same = True, outcome == "ok"
    else:
        names_ok = all(valid_arguments(registry, n, a) for n, a in played.calls) \
            if names else False
        same = bool(names) and names[0] == turn.calls[0].tool
    content = played.turn.content
    return TurnSample(
        index=index, session=session.name, turn=number, kind=turn.kind, protocol=protocol,
        profile=profile, prompt_n=t.prompt_n or 0, cache_n=t.cache_n or 0,
        prompt_ms=t.prompt_ms or 0.0, predicted_n=t.predicted_n or 0,
        predicted_ms=t.predicted_ms or 0.0, draft_n=t.draft_n or 0,
        draft_accepted=t.draft_n_accepted or 0, drafts=drafts,
        finish_reason=played.turn.finish_reason, outcome=outcome, error=played.error,
        calls=names, args_valid=names_ok if tool_turn else None,
        same_tool=same if tool_turn else None, compacted=played.compacted,
        load1=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        reply_chars=len(content), reply_sha1=hashlib.sha1(content.encode()).hexdigest(),
        reply_head=content[:300])


def link_replies(samples: list[TurnSample]) -> list[TurnSample]:
    """Fill ``reply_missed`` of each sample from the next request of its conversation
    (same session, protocol and profile)."""
    last: dict[tuple[str, str, str], int] = {}
    out = list(samples)
    for i, s in enumerate(out):
        key = (s.session, s.protocol, s.profile)
        if key in last:
            prev = out[last[key]]
            missed = reply_misses((prev.prompt_n + prev.cache_n, prev.predicted_n), s.cache_n)
            out[last[key]] = prev.model_copy(update={"reply_missed": missed})
            out[i] = s.model_copy(update={
                "carried": prev.prompt_n + prev.cache_n + prev.predicted_n,
                "reachable": prev.prompt_n + prev.cache_n + (
                    0 if prev.finish_reason == "length" else prev.predicted_n),
                "after_cut": prev.finish_reason == "length"})
        last[key] = i
    return out


def unforced_sample(index: int, session: FixtureSession, number: int, protocol: str,
                    profile: str, reason: str) -> TurnSample:
    """The sample of a turn --forced could not force (nothing was sent)."""
    return TurnSample(
        index=index, session=session.name, turn=number, kind=session.turns[number].kind,
        protocol=protocol, profile=profile, prompt_n=0, cache_n=0, prompt_ms=0.0,
        predicted_n=0, predicted_ms=0.0, draft_n=0, draft_accepted=0, drafts=None,
        finish_reason=None, outcome="unforced", error=reason, reply_chars=0,
        reply_sha1=hashlib.sha1(b"").hexdigest(), reply_head="")


def force_turn(client: ForcedClient, protocol: str, turn: FixtureTurn,
               schemas: Mapping[str, Mapping[str, Any]], tools: list[dict[str, Any]]) -> None:
    """Make ``client``'s next request decode ``turn``'s call as ``protocol`` writes it (one
    call per fixture turn). Raises :class:`benchmarks.forced.Unforceable`."""
    call = turn.calls[0]
    if protocol == "native":
        text = native_reply(client, tools, call.tool, call.arguments)
        client.force(text, None if call.tool == FINAL_ANSWER else
                     (call.tool, call.arguments))
    else:
        client.force(reply_text(protocol, call.tool, call.arguments, schemas))


def replay(clients: Mapping[str, ServerClient], sessions: Sequence[FixtureSession],
           protocols: Sequence[str], registry: Registry, *, sampling: dict[str, Any],
           max_tokens: int, tool_role: bool, plain: bool = True,
           note: Callable[[str], None] | None = None,
           into: list[TurnSample] | None = None,
           skip: Collection[tuple[str, str]] = (), forced: bool = False) -> list[TurnSample]:
    """Replay every session under every protocol (then the plain chain) on every server of
    ``clients`` (profile → client), profiles interleaved per turn; returns the samples in
    request order (:func:`link_replies` applied). Each sample is also appended to ``into``
    as it is measured, so an interrupted run keeps what it measured; conversations
    (session, protocol) in ``skip`` are left out (measured by an earlier run).

    ``forced`` (clients are :class:`benchmarks.forced.ForcedClient`): every reply is the
    fixture's own (:func:`force_turn`); a turn that cannot be forced is recorded as
    ``unforced`` with the reason, and so is the rest of its conversation (its history would
    not be the agent's). Raises :class:`BenchError` when a server fails."""
    say = note or (lambda _msg: None)
    offered = registry.openai_tools()
    schemas = {t["function"]["name"]: t["function"]["parameters"]
               for t in tools_with_final(offered)}
    profiles = list(clients)
    chains = [*protocols, PLAIN] if plain else list(protocols)
    samples: list[TurnSample] = [] if into is None else into
    total = len(samples) + sum(len(s.turns) for s in sessions for c in chains
                               if (s.name, c) not in skip) * len(profiles)
    rotation = 0
    for session in sessions:
        for protocol in chains:
            if (session.name, protocol) in skip:
                continue
            talks: dict[str, ReplayAgent | PlainChain] = {}
            for profile, client in clients.items():
                if isinstance(client.draft_cap, NgramGuard):
                    client.draft_cap.restart()  # each conversation is a session of its own
                keeper = ContextKeeper(client, client.n_ctx(), max_output=max_tokens)
                talks[profile] = PlainChain(client, session, sampling=sampling,
                                            max_tokens=max_tokens, context=keeper) \
                    if protocol == PLAIN else \
                    ReplayAgent(client, registry, session, protocol, sampling=sampling,
                                max_tokens=max_tokens, tool_role=tool_role, context=keeper)
            stuck: dict[str, str] = {}
            for number, turn in enumerate(session.turns):
                shift = rotation % len(profiles)
                rotation += 1
                for profile in profiles[shift:] + profiles[:shift]:
                    client = clients[profile]
                    if forced:
                        try:
                            if profile in stuck:
                                raise Unforceable(stuck[profile])
                            force_turn(client, protocol, turn, schemas,  # type: ignore[arg-type]
                                       offered)
                        except Unforceable as exc:
                            if profile not in stuck:
                                say(f"{session.name} {number + 1} {protocol} {profile}: "
                                    f"cannot be forced: {exc}")
                            stuck.setdefault(profile, f"turn {number + 1}: {exc}")
                            samples.append(unforced_sample(len(samples), session, number,
                                                           protocol, profile, stuck[profile]))
                            continue
                        except ServerUnavailable as exc:
                            raise BenchError(f"{session.name} turn {number + 1} ({protocol}) "
                                             f"on the {profile} server: {exc}") from exc
                    before = _metrics(client.base_url)
                    try:
                        played = talks[profile].play(turn)
                    except (ServerUnavailable, ContextOverflow, ContextTooSmall) as exc:
                        raise BenchError(f"{session.name} turn {number + 1} ({protocol}) on "
                                         f"the {profile} server: {exc}") from exc
                    drafts = None if played.compacted else _drafts_since(
                        client.base_url, before, (played.turn.timings or Timings())
                        .predicted_n or 0)
                    sample = make_sample(len(samples), session, number, protocol, profile,
                                         played, registry, drafts)
                    check = client.last if isinstance(client, ForcedClient) else None
                    if forced and check is not None:
                        sample = sample.model_copy(update={"forced_tokens": check.canonical,
                                                           "forced_exact": check.exact})
                        if not check.exact:
                            say(f"{session.name} {number + 1} {protocol} {profile}: the "
                                f"forced reply was not decoded as given ({check.note})")
                    samples.append(sample)
                    rate = sample.predicted_n / (sample.predicted_ms / 1000) \
                        if sample.predicted_ms else 0.0
                    say(f"[{len(samples)}/{total}] {session.name} {number + 1} {turn.kind} "
                        f"{protocol} {profile}: {sample.predicted_n} tok {rate:.1f} tok/s, "
                        f"draft {sample.draft_accepted}/{sample.draft_n}, cache "
                        f"{sample.cache_n}/{sample.cache_n + sample.prompt_n}, "
                        f"{sample.outcome}")
    return link_replies(samples)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def measured(sample: TurnSample) -> bool:
    """Whether ``sample`` enters the figures: not a turn --forced could not force, nor a forced
    turn that was not decoded as given (it measured other text; both are counted apart)."""
    return sample.outcome != "unforced" and sample.forced_exact is not False


def _group(protocol: str, profile: str, scope: str, picked: list[TurnSample]) -> Group:
    unforced = sum(s.outcome == "unforced" for s in picked)
    forced = [s for s in picked if s.forced_tokens is not None]
    picked = [s for s in picked if measured(s)]
    tokens = sum(s.predicted_n for s in picked)
    ms = sum(s.predicted_ms for s in picked)
    drafted = sum(s.draft_n for s in picked)
    accepted = sum(s.draft_accepted for s in picked)
    drafts = None if any(s.drafts is None for s in picked if s.draft_n) else \
        sum(s.drafts or 0 for s in picked)
    later = [s for s in picked if s.turn > 0]
    reused = sum(s.cache_n for s in later)
    prefilled = sum(s.prompt_n for s in later)
    carried = sum(s.carried or 0 for s in later)
    kept = sum(min(s.cache_n, s.carried or 0) for s in later)
    uncut = [s for s in later if not s.after_cut]
    carried_uncut = sum(s.carried or 0 for s in uncut)
    kept_uncut = sum(min(s.cache_n, s.carried or 0) for s in uncut)
    whole = [s for s in uncut if not s.compacted]
    carried_whole = sum(s.carried or 0 for s in whole)
    kept_whole = sum(min(s.cache_n, s.carried or 0) for s in whole)
    bad = [s for s in picked if s.outcome in ("format_error", "no_call", "cut")]
    return Group(
        protocol=protocol, profile=profile, scope=scope, turns=len(picked),
        completion_tokens=tokens, decode_ms=ms,
        decode_tok_s=tokens / (ms / 1000) if ms else None, draft_n=drafted,
        draft_accepted=accepted, drafts=drafts if drafted else None,
        acceptance=_ratio(accepted, drafted),
        accepted_per_draft=_ratio(accepted, drafts) if drafts else None,
        tokens_per_step=_ratio(tokens, tokens - accepted) if tokens > accepted else None,
        forced_turns=len(forced), forced_inexact=sum(not s.forced_exact for s in forced),
        forced_tokens=sum(s.forced_tokens or 0 for s in forced), unforced=unforced,
        speedup=None, plain_speedup=None, of_plain=None, reused=reused, prefilled=prefilled,
        reuse=_ratio(reused, reused + prefilled),
        reuse_ceiling=_ratio(sum(min(max(s.reachable or 0, s.cache_n), s.cache_n + s.prompt_n)
                                 for s in later),
                             reused + prefilled),
        carried=carried, kept=kept,
        kept_share=_ratio(kept, carried), kept_share_uncut=_ratio(kept_uncut, carried_uncut),
        kept_share_whole=_ratio(kept_whole, carried_whole),
        reply_missed=sum(s.reply_missed or 0 for s in picked),
        cut_reply_missed=sum(s.reply_missed or 0 for s in picked if s.outcome == "cut"),
        format_errors=sum(s.outcome == "format_error" for s in picked),
        no_calls=sum(s.outcome == "no_call" for s in picked),
        cuts=sum(s.outcome == "cut" for s in picked),
        invalid_per_100=100 * len(bad) / len(picked) if picked and protocol != PLAIN
        else None,
        args_invalid=sum(s.args_valid is False for s in picked),
        same_tool=sum(bool(s.same_tool) for s in picked),
        compactions=sum(s.compacted for s in picked))


def summarize(samples: Sequence[TurnSample], profiles: Sequence[str],
              protocols: Sequence[str], reference: str = REFERENCE_PROFILE) -> list[Group]:
    """Groups per protocol (then ``plain``), profile and scope (``all``, ``edit-turns``, each
    kind present), with speedups over ``reference`` and the fraction of the plain speedup."""
    chains = [*protocols, PLAIN] if any(s.protocol == PLAIN for s in samples) \
        else list(protocols)
    kinds = [k for k in KINDS if any(s.kind == k for s in samples)]
    scopes: dict[str, Callable[[TurnSample], bool]] = {
        "all": lambda s: True, EDIT_TURNS: lambda s: s.kind in EDIT_KINDS}
    for kind in kinds:
        scopes[kind] = lambda s, kind=kind: s.kind == kind
    groups: list[Group] = []
    for protocol in chains:
        for scope, test in scopes.items():
            picked = {p: [s for s in samples if s.protocol == protocol and s.profile == p
                          and test(s)] for p in profiles}
            row = [_group(protocol, p, scope, picked[p]) for p in profiles]
            base = next((g.decode_tok_s for g in row if g.profile == reference), None)
            timed = {p: [s for s in picked[p] if measured(s)] for p in profiles}
            groups += [g.model_copy(update={
                "speedup": _ratio(g.decode_tok_s, base) if g.decode_tok_s and base else None,
                "paired_speedup": paired_speedup(timed[g.profile], timed.get(reference, []))})
                for g in row if g.turns]
    plain_of = {(g.profile, g.scope): g for g in groups if g.protocol == PLAIN}
    out = []
    for g in groups:
        plain = plain_of.get((g.profile, g.scope))
        tool = g.protocol != PLAIN and plain is not None
        out.append(g.model_copy(update={
            "plain_speedup": plain.speedup if plain else None,
            "of_plain": _ratio(g.speedup, plain.speedup)
            if tool and g.speedup and plain.speedup else None,
            "paired_plain": plain.paired_speedup if plain else None,
            "paired_of_plain": _ratio(g.paired_speedup, plain.paired_speedup)
            if tool and g.paired_speedup and plain.paired_speedup else None}))
    return out


def paired_speedup(samples: Sequence[TurnSample],
                   reference: Sequence[TurnSample]) -> float | None:
    """Geometric mean, over the turns both measured, of the decode rate in ``samples`` over
    the rate of the same turn (session, turn) in ``reference``; None when no turn pairs."""
    def rate(s: TurnSample) -> float | None:
        return s.predicted_n / s.predicted_ms if s.predicted_n and s.predicted_ms > 0 else None

    base = {(s.session, s.turn): rate(s) for s in reference}
    logs = []
    for s in samples:
        mine, theirs = rate(s), base.get((s.session, s.turn))
        if mine and theirs:
            logs.append(math.log(mine / theirs))
    return math.exp(sum(logs) / len(logs)) if logs else None


def check_targets(groups: Sequence[Group], reference: str = REFERENCE_PROFILE,
                  fast: str = "ngram") -> list[TargetCheck]:
    """Issue 14's CPU targets on ``fast`` (the ``text`` protocol): edit-turn speedup, its
    fraction of the plain speedup, prefix reuse over requests 2..N (every profile), and the
    validity per protocol (reported, no threshold)."""
    def pick(protocol: str, profile: str, scope: str) -> Group | None:
        return next((g for g in groups if (g.protocol, g.profile, g.scope)
                     == (protocol, profile, scope)), None)

    checks = []
    edit = pick("text", fast, EDIT_TURNS)
    value = edit.paired_speedup if edit else None
    checks.append(TargetCheck(name=f"text edit turns, {fast} over {reference} (paired)",
                              target=f">= {CPU_TARGETS['edit_speedup']}x", value=value,
                              met=None if value is None else
                              value >= CPU_TARGETS["edit_speedup"]))
    value = edit.paired_of_plain if edit else None
    plain_gains = edit is not None and edit.paired_plain is not None and edit.paired_plain > 1
    checks.append(TargetCheck(
        name=f"text edit turns, {fast}: fraction of the plain-text speedup (paired)",
        target=f">= {CPU_TARGETS['of_plain']}" if plain_gains or value is None else
        f">= {CPU_TARGETS['of_plain']}; moot: plain text is no faster with {fast} "
        f"({_num(edit.paired_plain if edit else None)}x)",
        value=value, met=None if value is None or not plain_gains
        else value >= CPU_TARGETS["of_plain"]))
    text_all = [g for g in groups if g.protocol == "text" and g.scope == "all"
                and g.reuse is not None]
    lowest = min(text_all, key=lambda g: g.reuse or 0.0, default=None)
    value = lowest.reuse if lowest else None
    ceiling = f"; {_num(lowest.reuse_ceiling)} possible with these results" \
        if lowest and lowest.reuse_ceiling is not None else ""
    checks.append(TargetCheck(name="text prefix reuse, requests 2..N (lowest profile)",
                              target=f">= {CPU_TARGETS['reuse']}{ceiling}", value=value,
                              met=None if value is None else value >= CPU_TARGETS["reuse"]))
    kept = [g.kept_share for g in groups if g.protocol == "text" and g.scope == "all"]
    value = min((k for k in kept if k is not None), default=None)
    checks.append(TargetCheck(name="text: previous prompt + reply kept by the next request "
                              "(lowest profile)", target="reported", value=value, met=None))
    kept = [g.kept_share_uncut for g in groups if g.protocol == "text" and g.scope == "all"]
    value = min((k for k in kept if k is not None), default=None)
    checks.append(TargetCheck(name="text: the same after replies not cut at max_tokens",
                              target="reported", value=value, met=None))
    kept = [g.kept_share_whole for g in groups if g.protocol == "text" and g.scope == "all"]
    value = min((k for k in kept if k is not None), default=None)
    checks.append(TargetCheck(name="text: the same where the agent shortened nothing (no cut "
                              "reply, no compaction)", target="reported", value=value,
                              met=None))
    if lowest is not None and lowest.reuse is not None and lowest.reuse_ceiling:
        checks.append(TargetCheck(name="text prefix reuse as a share of what these results "
                                  "left possible (lowest profile)", target="reported",
                                  value=lowest.reuse / lowest.reuse_ceiling, met=None))
    for g in groups:
        if g.scope == "all" and g.protocol != PLAIN and g.profile == reference:
            checks.append(TargetCheck(name=f"{g.protocol}: replies the agent cannot run, "
                                      "per 100 turns", target="reported",
                                      value=g.invalid_per_100, met=None))
    return checks


# --- report ----------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def result_tables(result: ReplayResult) -> list[Table]:
    """Two tables within 80 columns: every turn (speed, acceptance, reuse, validity), and the
    edit turns against the plain-text reference."""
    def table(title: str, caption: str, columns: list[str]) -> Table:
        t = Table(title=title, caption=caption, caption_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
        for i, name in enumerate(columns):
            t.add_column(name, justify="left" if i < 2 else "right", no_wrap=True)
        return t

    build = result.build_info or result.engine_version
    part = "" if result.complete else f" (partial: {len(result.samples)} of " \
        f"{result.planned()} requests)"
    all_turns = table(
        f"{result.preset}, {result.flavour} {build}: "
        f"{sum(result.sessions.values())} turns of {len(result.sessions)} session(s){part}",
        "tok generated; dec/s decode tok/s; acc% drafts accepted; a/d accepted tokens per "
        f"draft; ×ref total decode speed vs {result.reference_profile}; ×pair geometric mean "
        "of per-turn ratios; reuse: prompt share from cache, requests 2..N; kept: share of "
        "the previous prompt + reply the next request reused; bad: replies the agent cannot "
        "run per 100 turns (format error, no call, cut)",
        ["proto", "profile", "tok", "dec/s", "acc%", "a/d", "×ref", "×pair", "reuse", "kept",
         "bad"])
    for g in result.groups:
        if g.scope != "all":
            continue
        all_turns.add_row(g.protocol, g.profile, str(g.completion_tokens),
                          _rate(g.decode_tok_s), _pct(g.acceptance),
                          _num(g.accepted_per_draft, 1), _num(g.speedup),
                          _num(g.paired_speedup), _num(g.reuse, 3), _num(g.kept_share, 3),
                          _num(g.invalid_per_100, 0))
    edits = table(
        "edit turns (create, str_replace, fixes) vs the plain-text reference",
        "×ref, ×pair as above; ×plain, of plain: the plain chain's ×pair on the same turns, "
        "and ×pair / that",
        ["proto", "profile", "turns", "tok", "dec/s", "acc%", "×ref", "×pair", "×plain",
         "of plain"])
    for g in result.groups:
        if g.scope == EDIT_TURNS:
            edits.add_row(g.protocol, g.profile, str(g.turns), str(g.completion_tokens),
                          _rate(g.decode_tok_s), _pct(g.acceptance), _num(g.speedup),
                          _num(g.paired_speedup), _num(g.paired_plain),
                          _num(g.paired_of_plain))
    if not result.forced:
        return [all_turns, edits]
    cost = result.forcing
    forced = table(
        "forced replies: every turn, then the edit turns",
        "exact: turns decoded byte for byte / forced (the others are left out of every "
        "figure); tok: decoded (end-of-turn tokens included, exact turns) / the replies' "
        "own; t/step: tokens per target step; acc%: drafts accepted; ×pair: a lower bound, "
        "forcing adds "
        + (f"up to {cost.cost_ms:.2f} ms a token ({cost.share:.0%} of a step) here, in "
           "every profile alike" if cost else "a cost per token (not measured)")
        + "; unf: turns not forced",
        ["proto", "profile", "scope", "exact", "tok", "t/step", "acc%", "×pair", "unf"])
    for g in result.groups:
        if g.scope in ("all", EDIT_TURNS):
            forced.add_row(g.protocol, g.profile, "edits" if g.scope == EDIT_TURNS else "all",
                           f"{g.forced_turns - g.forced_inexact}/{g.forced_turns}",
                           f"{g.completion_tokens}/{g.forced_tokens}",
                           _num(g.tokens_per_step), _pct(g.acceptance),
                           _num(g.paired_speedup), str(g.unforced))
    return [all_turns, edits, forced]


def target_lines(result: ReplayResult) -> list[str]:
    """One line per target: name, target, measured value, met or missed."""
    lines = []
    for check in result.targets:
        verdict = {True: "met", False: "MISSED", None: ""}[check.met]
        lines.append(f"{check.name}: {_num(check.value)} ({check.target}) {verdict}".rstrip())
    return lines


def plot_result(result: ReplayResult, path: Path) -> Path:
    """A PNG: paired speedup over the reference per protocol (every turn and edit turns, one
    bar group per non-reference profile), and prefix reuse per protocol and profile.

    Raises :class:`BenchError` without matplotlib (the ``plot`` extra) or when the file
    cannot be written."""
    figure_mod = require_matplotlib()
    chains = list(dict.fromkeys(g.protocol for g in result.groups))
    fig = figure_mod.Figure(figsize=(10, 4.2), dpi=100, layout="constrained")
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    fast = [p for p in result.profiles if p != result.reference_profile]
    bars = [(p, scope) for p in fast for scope in ("all", EDIT_TURNS)]
    width = 0.8 / max(len(bars), 1)
    for j, (profile, scope) in enumerate(bars):
        values = [next((g.paired_speedup or 0.0 for g in result.groups if g.protocol == c
                        and g.profile == profile and g.scope == scope), 0.0) for c in chains]
        xs = [i + (j - (len(bars) - 1) / 2) * width for i in range(len(chains))]
        drawn = left.bar(xs, values, width, label=f"{profile}, "
                         f"{'all turns' if scope == 'all' else 'edit turns'}")
        left.bar_label(drawn, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=2)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set_xticks(range(len(chains)), chains)
    left.set_ylabel(f"decode speed vs {result.reference_profile} (paired, geometric mean)")
    left.set_title("speedup per protocol (plain: no tool format)", fontsize=9)
    left.legend(fontsize=7)
    tools = [c for c in chains if c != PLAIN] + ([PLAIN] if PLAIN in chains else [])
    measures = [(p, m) for p in result.profiles for m in ("reuse", "kept_share")]
    width = 0.8 / max(len(measures), 1)
    for j, (profile, measure) in enumerate(measures):
        values = [next((getattr(g, measure) or 0.0 for g in result.groups if g.protocol == c
                        and g.profile == profile and g.scope == "all"), 0.0) for c in tools]
        xs = [i + (j - (len(measures) - 1) / 2) * width for i in range(len(tools))]
        label = f"{profile}: {'reuse' if measure == 'reuse' else 'kept'}"
        drawn = right.bar(xs, values, width, label=label,
                          hatch="//" if measure == "kept_share" else None)
        right.bar_label(drawn, labels=[f"{v:.2f}" for v in values], fontsize=6, padding=2)
    right.axhline(CPU_TARGETS["reuse"], color="grey", linewidth=0.8, linestyle="--")
    right.set_xticks(range(len(tools)), tools)
    right.set_ylim(0, 1.1)
    right.set_ylabel("requests 2..N")
    right.set_title("reuse (prompt from cache) and kept (previous prompt + reply reused)",
                    fontsize=8)
    right.legend(fontsize=6, loc="lower left")
    part = "" if result.complete else f" (partial: {len(result.samples)} of " \
        f"{result.planned()} requests)"
    fig.suptitle(f"{result.preset}: agent-turn replay, {sum(result.sessions.values())} turns "
                 f"x {len(result.sessions)} sessions, {result.date:%Y-%m-%d}{part}",
                 fontsize=10)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    except OSError as exc:
        raise BenchError(f"cannot write the chart to {path}: {exc}") from exc
    return path


# --- the run ---------------------------------------------------------------------------------


def agent_sampling(preset: Preset, temperature: float | None = None) -> dict[str, Any]:
    """The sampling the agent uses with ``preset``: the preset's, with the settings'
    ``tool_temperature`` (as ``agent.runtime.connect``), or ``temperature`` when given."""
    sampling = preset.sampling.model_dump(exclude_none=True)
    tool_temperature = load_settings().tool_temperature if temperature is None else temperature
    if tool_temperature is not None:
        sampling["temperature"] = tool_temperature
    return sampling


def parse_protocols(spec: str) -> list[str]:
    """``"text,json"`` → ``["text", "json"]``; raises :class:`BenchUsage` otherwise."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in PROTOCOLS]
    if not names or bad or len(set(names)) != len(names):
        raise BenchUsage(f"--protocols '{spec}': give distinct names from "
                         f"{', '.join(PROTOCOLS)}")
    return names


def resumable(previous: ReplayResult, sessions: Sequence[FixtureSession],
              profiles: Sequence[str], protocols: Sequence[str], plain: bool, preset: str,
              max_tokens: int, sampling: dict[str, Any], forced: bool = False
              ) -> tuple[list[TurnSample], set[tuple[str, str]]]:
    """The samples of ``previous``'s complete conversations (session, protocol measured on
    every profile for every turn), renumbered, and those conversations. Raises
    :class:`BenchError` when ``previous`` measured another configuration."""
    wanted = {"preset": preset, "profiles": list(profiles), "protocols": list(protocols),
              "max_tokens": max_tokens, "sampling": sampling, "forced": forced,
              "sessions": {s.name: len(s.turns) for s in sessions}}
    for key, value in wanted.items():
        if getattr(previous, key) != value:
            raise BenchError(f"--resume: the saved run has {key} {getattr(previous, key)!r}, "
                             f"this one {value!r}; resume with the same options")
    chains = [*protocols, PLAIN] if plain else list(protocols)
    done = {(s.name, c) for s in sessions for c in chains
            if sum(1 for x in previous.samples if (x.session, x.protocol) == (s.name, c))
            == len(s.turns) * len(profiles)}
    kept = [x for x in previous.samples if (x.session, x.protocol) in done]
    return [x.model_copy(update={"index": i}) for i, x in enumerate(kept)], done


REPLAY_SEED = 20261204
"""The sampling seed of every replayed request, on every profile: at a temperature above 0 two
profiles that decode alike then write the same replies, so their ratio compares speeds, not
different sampled conversations."""


def _client(state: ServerState, forced: bool = False,
            temperature: float | None = None) -> ServerClient:
    """The agent's client for a server the run started (with the fields a known bug of its
    build needs on every request, where the backend records them, and, on a server that
    takes its draft length per request, the agent's choice of it for every turn, for
    requests sampled at ``temperature``), every request seeded alike (:data:`REPLAY_SEED`); a
    :class:`benchmarks.forced.ForcedClient` for --forced."""
    extra = getattr(state, "request_extra", None)
    cap = request_control(state.plan, temperature=temperature)
    kind = ForcedClient if forced else ServerClient
    client = kind(state.base_url, idle_timeout=3600.0, explain=lambda: crash_report(state),
                  draft_cap=cap)
    client.request_extra = {**(extra or {}), "seed": REPLAY_SEED}
    return client


def _unloading(client: ServerClient, states: dict[str, ServerState], profile: str,
               preset: str, sampling: dict[str, Any], timeout: float,
               note: Callable[[str], None] | None,
               servers: list[ServerInfo] | None = None) -> None:
    """Let the replay's client of ``profile`` relaunch its server without the draft as a
    session would (:func:`agent.runtime.unload_when_due`; the replay stores no observations),
    keeping ``states`` (what the run stops at its end) and the replay's seed on the new
    server, and adding the new server to ``servers`` (what the results list)."""
    if not isinstance(client.draft_cap, DraftCap):
        return
    backend = Backend(client, preset, profile, sampling, states[profile], client.draft_cap)

    def hook() -> None:
        before = backend.state
        unload_when_due(backend, note or (lambda _msg: None), timeout, store=False)
        if backend.state is not before and backend.state is not None:
            states[profile] = backend.state
            client.request_extra = {**backend.state.request_extra, "seed": REPLAY_SEED}
            if servers is not None:
                servers.append(_server_info(profile, backend.state, "relaunched without the "
                                            "draft: its requests had turned drafting off, and "
                                            "the loaded draft cost what a relaunch does"))

    client.before_request = hook


def _plan(preset: Preset, engine: Engine, profile: str, ctx_size: int | None,
          note: Callable[[str], None] | None, temperature: float | None = None
          ) -> tuple[LaunchPlan, str | None]:
    """The plan ``profile`` replays with, tuned as a launch would tune it
    (backend.serve.tuning) for requests at ``temperature``, and the tuning's line (None for
    untuned profiles)."""
    request = LaunchRequest(preset, profile=profile, ctx_size=ctx_size, temperature=temperature)
    plan = pipeline.resolve(request, engine=engine, note=note).plan
    plan, choice = tune(plan, note=note, temperature=temperature)
    line = choice.line() if choice else None
    if line and note is not None:
        note(f"{profile}: {line}")
    # Its own alias: never the user's managed server, nor a concurrent `backend bench`'s.
    return plan.model_copy(update={"extra_flags": (*plan.extra_flags, "--alias",
                                                   f"dflash-agent-turns-{profile}")}), line


def run(preset: Preset, engine: Engine, profiles: list[str], protocols: list[str],
        sessions: list[FixtureSession], registry: Registry, *, max_tokens: int,
        sampling: dict[str, Any], ctx_size: int | None = None, plain: bool = True,
        force: bool = False, start_timeout: float = 600.0, command: str = "",
        note: Callable[[str], None] | None = None,
        previous: ReplayResult | None = None, forced: bool = False) -> ReplayResult:
    """Start one server per profile side by side, replay, stop them; the measured result.

    ``forced``: every reply is the fixture's own (benchmarks/forced.py), and what forcing
    costs a decoded token is measured on the reference server first.

    ``previous``: an earlier, incomplete run of the same configuration; its complete
    conversations are kept and not measured again (:func:`resumable`). A server that fails
    mid-run ends the run with what was measured (``complete`` False, ``stopped`` says why).
    Raises :class:`BenchError` (also for a ``previous`` of another configuration),
    ``FitError``, ``ModelError``, ``PresetError``, ``ServerError``.
    """
    started_at, clock = datetime.now(UTC), time.monotonic()
    reference = REFERENCE_PROFILE if REFERENCE_PROFILE in profiles else profiles[0]
    with keep_current_marker():  # a tuning probe starts a server of its own
        tuned = {p: _plan(preset, engine, p, ctx_size, note, sampling.get("temperature"))
                 for p in profiles}
    plans = {p: plan for p, (plan, _) in tuned.items()}
    states: dict[str, ServerState] = {}
    measured, done = resumable(previous, sessions, profiles, protocols, plain, preset.name,
                               max_tokens, sampling, forced) if previous else ([], set())
    forcing = previous.forcing if previous else None
    complete, stopped = True, None
    with interrupt_on_termination(), keep_current_marker(), \
            httpx2.Client(timeout=httpx2.Timeout(60.0)) as http:
        try:
            for profile, plan in plans.items():
                states[profile] = _start(profile, plan, preset, http, force, start_timeout,
                                         note)
            servers = [_server_info(p, s, tuned[p][1]) for p, s in states.items()]
            clients = {p: _client(s, forced, sampling.get("temperature"))
                       for p, s in states.items()}
            for profile, client in clients.items():
                _unloading(client, states, profile, preset.name, sampling, start_timeout, note,
                           servers)
            tool_role = renders_tool_role(clients[reference])
            try:
                if forced and forcing is None:
                    forcing = _forcing_cost(clients[reference], note)
                replay(clients, sessions, protocols, registry, sampling=sampling,
                       max_tokens=max_tokens, tool_role=tool_role, plain=plain, note=note,
                       into=measured, skip=done, forced=forced)
            except (KeyboardInterrupt, BenchError) as exc:
                # Keep what was measured: a long run on a loaded machine is worth its part.
                complete = False
                stopped = str(exc) if isinstance(exc, BenchError) else "interrupted"
        finally:
            for state in states.values():
                stop(state)
    samples = link_replies(measured)
    groups = summarize(samples, profiles, protocols, reference)
    fast = next((p for p in profiles if p != reference), reference)
    first = next(iter(plans.values()))
    draft = next((p.draft for p in plans.values() if p.draft is not None), None)
    try:
        flavour = detect_flavour(engine.binary)
    except OSError:
        flavour = "unknown"
    return ReplayResult(
        date=started_at, command=command, machine=machine_info(), engine=engine.key,
        engine_version=engine.version, binary=engine.binary, flavour=flavour,
        build_info=servers[0].build_info, preset=preset.name, model=_model_file(first.model),
        draft=_model_file(draft) if draft else None, profiles=profiles,
        reference_profile=reference, protocols=protocols,
        sessions={s.name: len(s.turns) for s in sessions}, max_tokens=max_tokens,
        ctx_size=first.ctx_size, sampling=sampling, tool_role=tool_role, servers=servers,
        samples=samples, groups=groups, targets=check_targets(groups, reference, fast),
        wall_s=round(time.monotonic() - clock + (previous.wall_s if previous else 0.0), 1),
        complete=complete, stopped=stopped,
        resumed=previous.resumed + 1 if previous else 0, plain=plain, forced=forced,
        forcing=forcing)


def _forcing_cost(client: ServerClient, note: Callable[[str], None] | None) -> ForcingCost:
    """:func:`benchmarks.forced.measure_cost` on ``client``, said; raises
    :class:`BenchError` when the server fails."""
    try:
        cost = measure_cost(client)
    except ServerUnavailable as exc:
        raise BenchError(f"measuring what forcing costs: {exc}") from exc
    if note is not None:
        note(f"forcing costs {cost.cost_ms:.2f} ms a decoded token here ({cost.share:.0%} of "
             f"a decode step at {cost.own_ms:.2f} ms): forced speedups are lower bounds")
    return cost


def recheck_forced(sample: TurnSample) -> TurnSample:
    """``sample`` with ``forced_exact`` False when its numbers show it was not the forced reply
    (cut, or more tokens than the reply allows): results saved before the forced client left
    a compaction's summary request unforced said True for the turn that followed it."""
    # A forced native call ends "tool_calls": the client hands it back as the server's parse.
    if sample.forced_exact and (sample.finish_reason not in ("stop", "tool_calls")
                                or sample.forced_tokens is None
                                or sample.predicted_n > sample.forced_tokens + HEADROOM):
        return sample.model_copy(update={"forced_exact": False})
    return sample


def load_result(path: Path) -> ReplayResult:
    """A saved result with its groups and targets computed again from its samples (so an
    older file is reported with today's arithmetic). Raises :class:`BenchError`."""
    try:
        data = json.loads(path.read_text("utf-8"))
        samples = link_replies([recheck_forced(TurnSample.model_validate(s))
                                for s in data["samples"]])
        groups = summarize(samples, data["profiles"], data["protocols"],
                           data["reference_profile"])
        fast = next((p for p in data["profiles"] if p != data["reference_profile"]),
                    data["reference_profile"])
        data.update(samples=samples, groups=groups,
                    targets=check_targets(groups, data["reference_profile"], fast))
        return ReplayResult.model_validate(data)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{path} is not a readable agent-turns result: {exc}") from exc


def write_result(result: ReplayResult, path: Path) -> Path:
    """Write ``result`` as indented JSON; raises :class:`BenchError` when it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json(indent=1), "utf-8")
    except OSError as exc:
        raise BenchError(f"cannot write the results to {path}: {exc}") from exc
    return path


def show(result: ReplayResult, console: Console) -> None:
    """Print both tables and the target lines."""
    for t in result_tables(result):
        console.print(t)
        console.print()
    for line in target_lines(result):
        console.print(line, highlight=False)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agent_turns.py", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--profiles", help="comma-separated (default: baseline, ngram, and "
                        "dflash when the preset has a draft)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--sessions", nargs="+", metavar="FILE_OR_NAME",
                        help=f"session files or names in {SESSIONS_DIR} (default: all)")
    parser.add_argument("--turns", type=int, help="replay only the first N turns of each")
    parser.add_argument("--max-tokens", type=int, default=2048,
                        help="per reply (default 2048, the agent's)")
    parser.add_argument("--ctx-size", type=int, help="server context (default: the preset's)")
    parser.add_argument("--temperature", type=float,
                        help="override the agent's tool_temperature")
    parser.add_argument("--no-plain", action="store_true",
                        help="skip the plain-text reference chain")
    parser.add_argument("--forced", action="store_true",
                        help="decode the fixture's own replies (a grammar per reply) instead "
                        "of the model's: speculation measured on the replies a capable model "
                        "writes")
    parser.add_argument("--json", type=Path, help="result file (default: "
                        "<state>/bench/agent-turns-<date>.json)")
    parser.add_argument("--plot", type=Path, help="write a PNG chart (needs matplotlib)")
    parser.add_argument("--force", action="store_true", help="start servers the fit check "
                        "refuses")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-request lines")
    parser.add_argument("--resume", type=Path, metavar="RESULT_JSON",
                        help="carry on an incomplete run (same options): its complete "
                        "conversations are kept, the others measured")
    parser.add_argument("--report", type=Path, metavar="RESULT_JSON",
                        help="run nothing: show a saved result (and --plot it, --json: write "
                        "it again), its numbers computed again from its samples")
    args = parser.parse_args(argv)
    if args.turns is not None and args.turns < 1:
        parser.error("--turns must be at least 1")
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    return args


def default_profiles(preset: Preset) -> str:
    """baseline and ngram, plus dflash when the preset has a draft model."""
    return ",".join(["baseline", "ngram"] + (["dflash"] if preset.draft else []))


def main(argv: Sequence[str] | None = None) -> int:
    """The command: replay, print the tables, write the JSON (and chart). Exit codes: 0 done,
    2 bad usage or fixture, 3 a backend or server error, 130 interrupted."""
    args = _arguments(argv)
    err = Console(stderr=True, highlight=False)
    note = None if args.quiet else (lambda msg: err.print(msg, markup=False))
    command = shlex.join(["python", "benchmarks/agent_turns.py",
                          *(sys.argv[1:] if argv is None else argv)])
    if args.report is not None:
        try:
            result = load_result(args.report)
            if args.json is not None:
                write_result(result, args.json)
            if args.plot is not None:
                plot_result(result, args.plot)
        except BenchError as exc:
            err.print(f"error: {exc}", markup=False)
            return 3
        show(result, Console(width=80, highlight=False))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        registry = default_registry(Workspace(Path(tmp)))
        try:
            if args.plot is not None:
                require_matplotlib()
            sessions = load_sessions(resolve_sessions(args.sessions), registry, args.turns)
            preset = get_preset(args.preset)
            profiles = parse_profiles(args.profiles or default_profiles(preset), preset)
            protocols = parse_protocols(args.protocols)
            sampling = agent_sampling(preset, args.temperature)
            previous = load_result(args.resume) if args.resume else None
            engine = default_engine() or ensure_engine(note=note)
            result = run(preset, engine, profiles, protocols, sessions, registry,
                         max_tokens=args.max_tokens, sampling=sampling,
                         ctx_size=args.ctx_size, plain=not args.no_plain, force=args.force,
                         command=command, note=note, previous=previous, forced=args.forced)
            out = args.json or home().state / "bench" / \
                f"agent-turns-{result.date:%Y%m%d-%H%M%S}.json"
            write_result(result, out)
            if args.plot is not None:
                plot_result(result, args.plot)
        except (FixtureError, BenchUsage) as exc:
            err.print(f"error: {exc}", markup=False)
            return 2
        except (BenchError, FitError, ModelError, PresetError, ServerError, BuildError,
                ConfigError) as exc:
            err.print(f"error: {exc}", markup=False)
            return 3
        except KeyboardInterrupt:
            err.print("interrupted", markup=False)
            return 130
        finally:
            registry.close()
    show(result, Console(width=80, highlight=False))
    print(f"results: {out}" + (f", chart: {args.plot}" if args.plot else ""))
    if not result.complete:
        print(f"stopped after {len(result.samples)} requests ({result.stopped}): the numbers "
              f"cover those; carry on with --resume {out}")
        return 130 if result.stopped == "interrupted" else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
