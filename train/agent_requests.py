"""The agent's own requests as training prompts: every turn of every fixture session
(``benchmarks/agent_sessions/*.json``), rendered by the agent's request code.

The rendering is :mod:`benchmarks.agent_turns`'s :class:`ReplayAgent` — an
:class:`agent.loop.Agent` with the agent's system prompt, tool descriptions, protocol fields,
history and result messages — so nothing of the agent's format is rebuilt here. The only
difference from the replay benchmark is who answers: a stand-in model (:class:`FixtureModel`)
records each request and replies with the fixture turn's own calls, written the way the agent
writes calls in that protocol (``CallProtocol.injected``). The history is thus a competent
session's, whatever the target would have written; the target's greedy reply to each request
is what :mod:`train.server_gen` or :mod:`train.hf_gen` then generate as the label.

Sessions are the fixtures, or files and folders of them (:mod:`train.agent_sessions` writes
synthetic ones). A request's source is ``<group>:<session>``: ``agent-<protocol>`` for a
fixture session, ``agent-synth-<protocol>`` for a synthetic one (its name starts ``synth-``),
so the held-out ``agent-text`` figure stays the fixture session's alone.

This is the one module of ``train`` that imports ``agent`` (through the replay benchmark).
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.client import Turn
from benchmarks.agent_turns import FixtureError, ReplayAgent, load_sessions, resolve_sessions
from tools.registry import default_registry
from tools.workspace import Workspace
from train.agent_sessions import PREFIX
from train.errors import InputError
from train.requests import ChatRequest

PROTOCOLS = ("text", "json", "native")


class FixtureModel:
    """Stands in for :class:`agent.client.ServerClient`: keeps every request the agent sends
    and answers with :attr:`reply`, set before each turn."""

    idle_timeout = 600.0

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply = Turn()

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict] | None = None,
                 response_format: dict | None = None, **_: Any) -> Turn:
        self.requests.append({"messages": copy.deepcopy(messages), "tools": tools,
                              "response_format": response_format})
        return self.reply


def _reply(agent: Any, protocol: str, turn: Any, number: int) -> Turn:
    """The fixture turn's calls as the model's reply, rendered by the agent in ``protocol``."""
    calls = turn.calls if protocol == "text" else turn.calls[:1]
    if protocol == "native":
        if turn.kind == "final":
            return Turn(content=calls[0].arguments["text"], finish_reason="stop")
        return Turn(finish_reason="tool_calls", tool_calls=[
            {"id": f"call_{number}_{i}", "name": c.tool,
             "arguments": json.dumps(c.arguments, ensure_ascii=False)}
            for i, c in enumerate(calls)])
    text = "\n".join(agent.calls.injected(c.tool, c.arguments)[1]["content"] for c in calls)
    return Turn(content=text, finish_reason="stop")


def group(session: str, protocol: str) -> str:
    """The source group of a session's requests: ``agent-synth-<protocol>`` for a synthetic
    session (named ``synth-…``), else ``agent-<protocol>``."""
    return f"agent-synth-{protocol}" if session.startswith(PREFIX) else f"agent-{protocol}"


def synthetic_heldout(session: str, fraction: float) -> bool:
    """Whether a synthetic session is held out at ``fraction``: a stable hash of its name, so
    the same sessions are held out in every run."""
    if not session.startswith(PREFIX) or fraction <= 0:
        return False
    digest = hashlib.sha1(session.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 10_000 < fraction * 10_000


def session_files(specs: Sequence[str] | None) -> list[Path]:
    """Session files for ``specs``: paths, names of fixtures, or folders (every ``*.json`` in
    one); every fixture when empty. Raises :class:`InputError` for a missing one or a folder
    without session files."""
    if not specs:
        specs = None
    paths: list[Path] = []
    try:
        for spec in specs or [None]:
            if spec is not None and Path(spec).is_dir():
                found = sorted(Path(spec).glob("*.json"))
                if not found:
                    raise InputError(f"no session files (*.json) in the folder {spec}")
                paths += found
            else:
                paths += resolve_sessions([spec] if spec is not None else None)
    except FixtureError as exc:
        raise InputError(str(exc)) from exc
    return paths


def session_requests(protocols: Sequence[str] = ("text",), holdout: Sequence[str] = (),
                     sessions: Sequence[str] | None = None,
                     holdout_fraction: float = 0.0) -> list[ChatRequest]:
    """One request per turn of each session under each of ``protocols``; the sessions named
    in ``holdout`` are flagged held out (all their turns), and synthetic sessions at
    ``holdout_fraction`` (:func:`synthetic_heldout`).

    ``sessions``: paths or names of session files, or folders of them (default: every
    fixture). Raises :class:`InputError` for an unknown protocol, a missing or invalid session
    file, two sessions of one name, a fraction outside [0, 1) or a holdout name that is no
    loaded session.
    """
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown or not protocols:
        raise InputError(f"protocols must be among {', '.join(PROTOCOLS)} (got "
                         f"{', '.join(protocols) or 'none'})")
    if not 0 <= holdout_fraction < 1:
        raise InputError(f"the held-out fraction must be in [0, 1) (got {holdout_fraction})")
    paths = session_files(sessions)
    with tempfile.TemporaryDirectory(prefix="train-render-") as tmp:
        registry = default_registry(Workspace(Path(tmp)))
        try:
            try:
                loaded = load_sessions(paths, registry)
            except FixtureError as exc:
                raise InputError(str(exc)) from exc
            names = [s.name for s in loaded]
            twice = sorted(n for n, k in Counter(names).items() if k > 1)
            if twice:
                raise InputError(f"session(s) given twice: {', '.join(twice[:5])}")
            missing = sorted(set(holdout) - set(names))
            if missing:
                raise InputError(f"held-out session(s) {', '.join(missing)} not among the "
                                 f"sessions ({', '.join(sorted(names)[:20])}"
                                 f"{', …' if len(names) > 20 else ''})")
            return [r for s in loaded for p in protocols
                    for r in _render(registry, s, p, s.name in holdout
                                     or synthetic_heldout(s.name, holdout_fraction))]
        finally:
            registry.close()


def _render(registry: Any, session: Any, protocol: str, heldout: bool) -> list[ChatRequest]:
    model = FixtureModel()
    agent = ReplayAgent(model, registry, session, protocol, sampling={}, max_tokens=2048,
                        tool_role=True)
    for number, turn in enumerate(session.turns):
        model.reply = _reply(agent, protocol, turn, number)
        agent.play(turn)
    out = []
    for request in model.requests:
        grammar = request["response_format"]
        schema = (json.dumps(grammar["json_schema"]["schema"], sort_keys=True)
                  if grammar else None)
        out.append(ChatRequest(messages=request["messages"], tools=request["tools"],
                               schema=schema,
                               source=f"{group(session.name, protocol)}:{session.name}",
                               heldout=heldout))
    return out
