"""The agent-turn replay benchmark (benchmarks/agent_turns.py): the fixture sessions, the replay
through the agent's own loop against a scripted model, the report's arithmetic on recorded
numbers, broken inputs, and short real runs through llama-server (SmolLM2; the DFlash fixture).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agent.client import ServerClient
from backend.engine.registry import Engine
from backend.measure.results import MachineInfo, ModelFile
from benchmarks import agent_turns as at
from tests.scripted import ScriptedModel, reply
from tests.test_bench import PNG_MAGIC, make_home
from tools.registry import default_registry
from tools.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "agent_turns.py"
"""Run by its path, as RESULTS.md's commands do (``python -m benchmarks.agent_turns`` too)."""


@pytest.fixture
def registry(tmp_path: Path):
    reg = default_registry(Workspace(tmp_path))
    yield reg
    reg.close()


def sessions(registry) -> list:
    return at.load_sessions(at.resolve_sessions(None), registry)


def script(*args: str, home: Path, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
                          cwd=ROOT)


# --- the fixture sessions --------------------------------------------------------------------


def test_at_least_three_sessions_of_eight_turns_with_every_kind_of_turn(registry):
    found = sessions(registry)
    assert len(found) >= 3
    copy_heavy = []
    for s in found:
        kinds = [t.kind for t in s.turns]
        assert len(s.turns) >= 8, s.name
        assert {"view", "edit", "create", "test", "fix", "final"} <= set(kinds), s.name
        assert kinds[-1] == "final"
        tools = [t.calls[0].tool for t in s.turns]
        assert {"view", "str_replace", "create", "bash"} <= set(tools)
        # Sessions with a whole-file create of a 150-400 line module (an edit-heavy session
        # creates only a short test file, so this is counted, not asked of every session).
        sizes = [len(t.calls[0].arguments["file_text"].splitlines()) for t in s.turns
                 if t.calls[0].tool == "create"]
        if any(150 <= n <= 400 for n in sizes):
            copy_heavy.append(s.name)
        # A failing test run, then a fix, then a passing run: recorded with the real tools.
        tests = [i for i, t in enumerate(s.turns) if t.kind == "test"]
        failed = next(i for i in tests if s.turns[i].results[0].is_error)
        fix = next(i for i, t in enumerate(s.turns) if t.kind == "fix")
        passed = next(i for i in tests if i > fix)
        assert failed < fix < passed
        assert "failed" in s.turns[failed].results[0].text
        assert " passed" in s.turns[passed].results[0].text
        assert "[exit code 0]" in s.turns[passed].results[0].text
        # Tool results name the session's workspace, never the machine it was recorded on.
        assert all("/tmp/tmp" not in r.text for t in s.turns for r in t.results)
    assert len(copy_heavy) >= 3, copy_heavy


def test_an_edit_heavy_session_edits_one_300_line_module_in_separate_places(registry):
    """Issue 23 item 4: a long session of str_replace edits across one module, so the cache
    and speed figures are not dominated by first turns (views and whole-file creates)."""
    found = []
    for s in sessions(registry):
        edits = [t for t in s.turns if t.kind == "edit" and t.calls[0].tool == "str_replace"]
        for path in {t.calls[0].arguments["path"] for t in edits}:
            mine = [t for t in edits if t.calls[0].arguments["path"] == path]
            if len(s.turns) >= 12 and len(mine) >= 5:
                found.append((s, path, mine))
    assert found, "no session of 12+ turns with 5+ str_replace edits to one file"
    for s, path, mine in found:
        # The module as first read: a whole-file view of about 300 lines.
        read = next(t.results[0].text for t in s.turns
                    if t.calls[0].tool == "view" and t.calls[0].arguments == {"path": path})
        assert 250 <= len(read.splitlines()) <= 400, (s.name, path)
        # Each edit matched the file's exact text (not the tool's tolerant matching), at its
        # own place: the snippets the tool returned start at different lines, spread over
        # most of the module.
        heads = [t.results[0].text.splitlines()[0] for t in mine]
        assert heads == [f"edited {path}:"] * len(mine), heads
        starts = [int(t.results[0].text.splitlines()[1].split()[0]) for t in mine]
        assert len(set(starts)) == len(starts), starts
        assert max(starts) - min(starts) >= len(read.splitlines()) // 2, starts
        # The failing run is fixed in the same module, and the session ends on a passing run.
        kinds = [t.kind for t in s.turns]
        fix = s.turns[kinds.index("fix")]
        assert fix.calls[0].arguments["path"] == path
        last_test = [t for t in s.turns if t.kind == "test"][-1]
        assert not last_test.results[0].is_error


def _scripted_reply(protocol: str, turn, agent) -> dict[str, Any]:
    """The fixture's own call, written the way the agent renders it in ``protocol`` (as it
    renders calls it makes for the model: ``agent run --skill``)."""
    call = turn.calls[0]
    if protocol == "native" and turn.kind == "final":
        return reply(call.arguments["text"])
    _, message = agent.calls.injected(call.tool, call.arguments)  # the agent's renderer
    if protocol == "native":
        wire = message["tool_calls"][0]["function"]
        return reply(message["content"] or "", [(wire["name"], wire["arguments"])])
    return reply(message["content"])


@pytest.mark.parametrize("protocol", ["text", "json", "native"])
def test_every_turn_renders_and_parses_back_in_every_protocol(registry, protocol: str):
    """Each fixture turn rendered by the agent (CallProtocol.injected) and sent as the model's reply
    comes back through the agent's own parser of that protocol as the same call."""
    for session in sessions(registry):
        renderer = at.ReplayAgent(None, registry, session, protocol, sampling={},
                                  max_tokens=64, tool_role=True)
        replies = [_scripted_reply(protocol, t, renderer) for t in session.turns]
        with ScriptedModel(replies) as model:
            agent = at.ReplayAgent(ServerClient(model.url), registry, session, protocol,
                                   sampling={"temperature": 0.0}, max_tokens=64,
                                   tool_role=True)
            for number, turn in enumerate(session.turns):
                played = agent.play(turn)
                sample = at.make_sample(number, session, number, protocol, "baseline", played,
                                        registry, None)
                assert sample.outcome == "ok", (session.name, number, played.error)
                assert sample.args_valid and sample.same_tool
                if not (protocol == "native" and turn.kind == "final"):
                    assert played.calls == [(c.tool, c.arguments) for c in turn.calls]
        # The requests are the protocol's: grammar only for json, tools only for native.
        for body in model.requests:
            assert ("response_format" in body) == (protocol == "json")
            assert ("tools" in body) == (protocol == "native")
        # Append-only: every request starts with the previous one's messages.
        for first, second in zip(model.requests, model.requests[1:], strict=False):
            assert second["messages"][:len(first["messages"])] == first["messages"]


def test_the_models_reply_goes_into_the_next_request_and_the_fixture_answers_it(registry):
    session = sessions(registry)[0]
    garbage = "I will look at the code now."
    runaway = "<create>\n<path>x.py</path>\n<file_text>\n" + "x = 1\n" * 80
    good = "<view>\n<path>inventory/core.py</path>\n</view>"
    with ScriptedModel([reply(garbage), reply(runaway, finish_reason="length"),
                        reply(good), reply(good)]) as model:
        agent = at.ReplayAgent(ServerClient(model.url), registry, session, "text",
                               sampling={"temperature": 0.0}, max_tokens=64, tool_role=True)
        outcomes = [at._outcome("text", agent.play(t), t) for t in session.turns[:4]]
    assert outcomes == ["format_error", "cut", "ok", "ok"]
    second, third = model.requests[1]["messages"], model.requests[2]["messages"]
    # A malformed reply is kept verbatim; the fixture's result follows, not a format error.
    assert second[-2] == {"role": "assistant", "content": garbage}
    assert second[-1]["role"] == "user"
    assert second[-1]["content"] == "[result of tool view]\n" + session.turns[0].results[0].text
    assert "Format error" not in json.dumps(model.requests)
    # A reply cut at max_tokens is kept as the agent keeps it: its start and a marker.
    assert third[-2]["content"].startswith(runaway[:200])
    assert "cut at the token limit" in third[-2]["content"]
    assert third[-1]["content"].startswith("[result of tool create]\n")


def test_a_native_reply_without_a_call_gets_its_results_as_user_messages(registry):
    session = sessions(registry)[0]
    with ScriptedModel([reply("Let me read the file."),
                        reply("", [("view", {"path": "inventory/core.py"})]),
                        reply("done")]) as model:
        agent = at.ReplayAgent(ServerClient(model.url), registry, session, "native",
                               sampling={}, max_tokens=64, tool_role=True)
        plays = [agent.play(t) for t in session.turns[:3]]
    assert [at._outcome("native", p, t) for p, t in zip(plays, session.turns, strict=False)] \
        == ["no_call", "ok", "no_call"]
    second, third = model.requests[1]["messages"], model.requests[2]["messages"]
    assert second[-2] == {"role": "assistant", "content": "Let me read the file."}
    assert second[-1]["role"] == "user" and second[-1]["content"].startswith(
        "[result of tool view]\n")
    # With a native call, the fixture's result answers that call's id.
    assert third[-2]["tool_calls"][0]["id"] == "tc0"
    assert third[-1] == {"role": "tool", "tool_call_id": "tc0",
                         "content": session.turns[1].results[0].text}


def test_the_plain_chain_has_no_tool_format_and_asks_for_the_step(registry):
    session = sessions(registry)[0]
    with ScriptedModel([reply("inventory/core.py"), reply("x = 1")]) as model:
        chain = at.PlainChain(ServerClient(model.url), session, sampling={}, max_tokens=64)
        for turn in session.turns[:2]:
            chain.play(turn)
    first, second = model.requests
    assert "tools" not in first and "response_format" not in first
    assert "<view>" not in json.dumps(first["messages"])
    assert first["messages"][1]["content"] == session.task + "\n\n" + session.turns[0].ask
    assert second["messages"][2] == {"role": "assistant", "content": "inventory/core.py"}
    # The same results text the text protocol sends, then the next step in words.
    assert second["messages"][3]["content"] == ("[result of tool view]\n"
                                                + session.turns[0].results[0].text + "\n\n"
                                                + session.turns[1].ask)


# --- the report on recorded numbers ----------------------------------------------------------


def sample(index: int, protocol: str, profile: str, turn: int, kind: str, *, tokens: int,
           ms: float, prompt: int = 10, cache: int = 0, drafted: int = 0, accepted: int = 0,
           drafts: int | None = None, outcome: str = "ok") -> Any:
    return at.TurnSample(
        index=index, session="s", turn=turn, kind=kind, protocol=protocol, profile=profile,
        prompt_n=prompt, cache_n=cache, prompt_ms=1.0, predicted_n=tokens, predicted_ms=ms,
        draft_n=drafted, draft_accepted=accepted, drafts=drafts, finish_reason="stop",
        outcome=outcome, reply_chars=1, reply_sha1="x", reply_head="x")


RECORDED = [
    # text: a view turn, then an edit turn; baseline 100 tok/s, ngram 250 tok/s on the edit.
    sample(0, "text", "baseline", 0, "view", tokens=10, ms=100, prompt=500),
    sample(1, "text", "ngram", 0, "view", tokens=10, ms=100, prompt=500),
    sample(2, "text", "baseline", 1, "edit", tokens=100, ms=1000, prompt=30, cache=510),
    sample(3, "text", "ngram", 1, "edit", tokens=100, ms=400, prompt=30, cache=510,
           drafted=80, accepted=60, drafts=20),
    sample(4, "text", "baseline", 2, "final", tokens=10, ms=100, prompt=5, cache=640,
           outcome="format_error"),
    sample(5, "text", "ngram", 2, "final", tokens=10, ms=100, prompt=5, cache=640),
    # plain: the same edit turn decodes 3x faster with ngram.
    sample(6, "plain", "baseline", 0, "view", tokens=10, ms=100, outcome="plain"),
    sample(7, "plain", "ngram", 0, "view", tokens=10, ms=100, outcome="plain"),
    sample(8, "plain", "baseline", 1, "edit", tokens=100, ms=1000, outcome="plain"),
    sample(9, "plain", "ngram", 1, "edit", tokens=100, ms=1000 / 3, outcome="plain"),
]


def recorded_result() -> Any:
    samples = at.link_replies(RECORDED)
    groups = at.summarize(samples, ["baseline", "ngram"], ["text"])
    return at.ReplayResult(
        date=datetime(2026, 12, 1, tzinfo=UTC), command="python benchmarks/agent_turns.py",
        machine=MachineInfo(platform="linux", cpu="cpu", cpu_threads=2, ram_bytes=1, gpus=[]),
        engine="e", engine_version="b11434", binary=Path("/bin/llama-server"),
        flavour="upstream", build_info="b11434", preset="smollm2-135m",
        model=ModelFile(path=Path("/m.gguf"), size_bytes=1), draft=None,
        profiles=["baseline", "ngram"], reference_profile="baseline", protocols=["text"],
        sessions={"s": 3}, max_tokens=64, ctx_size=8192, sampling={"temperature": 0.0},
        tool_role=True, servers=[], samples=samples, groups=groups,
        targets=at.check_targets(groups), wall_s=1.0)


def group(result: Any, protocol: str, profile: str, scope: str) -> Any:
    return next(g for g in result.groups
                if (g.protocol, g.profile, g.scope) == (protocol, profile, scope))


def test_speedups_fractions_reuse_and_validity_from_recorded_numbers():
    result = recorded_result()
    edit = group(result, "text", "ngram", "edit-turns")
    assert edit.decode_tok_s == pytest.approx(250.0)
    assert edit.speedup == pytest.approx(2.5)
    assert edit.plain_speedup == pytest.approx(3.0)
    assert edit.of_plain == pytest.approx(2.5 / 3.0)
    # One edit turn: the paired ratio is that turn's.
    assert (edit.paired_speedup, edit.paired_plain) == (pytest.approx(2.5), pytest.approx(3.0))
    assert edit.paired_of_plain == pytest.approx(2.5 / 3.0)
    assert (edit.acceptance, edit.accepted_per_draft) == (pytest.approx(0.75), 3.0)
    every = group(result, "text", "ngram", "all")
    assert every.speedup == pytest.approx((120 / 0.6) / (120 / 1.2))
    # Per turn 1.0, 2.5 and 1.0: their geometric mean, not the ratio of the totals.
    assert every.paired_speedup == pytest.approx(2.5 ** (1 / 3))
    # Reuse counts requests 2..N only: (510 + 640) / (510 + 640 + 30 + 5).
    assert (every.reused, every.prefilled) == (1150, 35)
    assert every.reuse == pytest.approx(1150 / 1185)
    # reply_misses: request 2 reused 510 of request 1's 500 + 10 (all kept); request 3 640
    # of 540 + 100 (all kept).
    assert every.reply_missed == 0
    assert (every.carried, every.kept, every.kept_share) == (510 + 640, 1150, 1.0)
    # Everything carried was kept: the reuse is all the new results left possible.
    assert every.reuse_ceiling == pytest.approx(every.reuse)
    base = group(result, "text", "baseline", "all")
    assert (base.format_errors, base.invalid_per_100) == (1, pytest.approx(100 / 3))
    assert group(result, "plain", "ngram", "all").invalid_per_100 is None
    checks = {c.name: c for c in result.targets}
    assert checks["text edit turns, ngram over baseline (paired)"].met is True
    assert checks["text edit turns, ngram: fraction of the plain-text speedup (paired)"].met \
        is False
    assert checks["text prefix reuse, requests 2..N (lowest profile)"].met is False
    assert "0.97 possible with these results" in \
        checks["text prefix reuse, requests 2..N (lowest profile)"].target
    assert checks["text prefix reuse, requests 2..N (lowest profile)"].value == \
        pytest.approx(1150 / 1185)


def test_a_reply_the_next_request_prefilled_again_is_counted():
    samples = at.link_replies([
        sample(0, "json", "baseline", 0, "view", tokens=40, ms=10, prompt=600),
        sample(1, "json", "baseline", 1, "edit", tokens=5, ms=10, prompt=700, cache=600)])
    assert samples[0].reply_missed == 40 and samples[1].reply_missed is None
    assert (samples[0].carried, samples[1].carried) == (None, 640)
    row = at.summarize(samples, ["baseline"], ["json"])[0]
    assert (row.kept, row.carried) == (600, 640) and row.kept_share == pytest.approx(600 / 640)


def test_a_compaction_is_told_apart_from_the_agents_own_cache_miss():
    # Request 2 continues request 1 byte for byte; request 3 comes after the context keeper
    # shortened the history (as on the H200 run: 735 of 4,592 kept), request 4 follows it.
    samples = at.link_replies([
        sample(0, "text", "baseline", 0, "view", tokens=100, ms=10, prompt=1000),
        sample(1, "text", "baseline", 1, "view", tokens=100, ms=10, prompt=900, cache=1100),
        sample(2, "text", "baseline", 2, "edit", tokens=100, ms=10, prompt=1500, cache=500)
        .model_copy(update={"compacted": True}),
        sample(3, "text", "baseline", 3, "test", tokens=10, ms=10, prompt=50, cache=2100)])
    row = at.summarize(samples, ["baseline"], ["text"])[0]
    assert row.kept_share_uncut == pytest.approx((1100 + 500 + 2100) / (1100 + 2100 + 2100))
    assert row.kept_share_whole == pytest.approx(1.0)
    checks = {c.name: c for c in at.check_targets(at.summarize(samples, ["baseline"],
                                                               ["text"]), "baseline")}
    assert checks["text: the same where the agent shortened nothing (no cut reply, no "
                  "compaction)"].value == pytest.approx(1.0)
    share = checks["text prefix reuse as a share of what these results left possible "
                   "(lowest profile)"].value
    assert share == pytest.approx(row.reuse / row.reuse_ceiling) and share < 1.0


def test_the_reuse_ceiling_leaves_out_a_runaway_reply_the_agent_cut():
    # Request 1's 2,048-token reply hit max_tokens: the agent keeps a stub of it, so request 2
    # (1,000 old prompt tokens + 60 new) could reuse at most the old prompt, not 1,060.
    samples = at.link_replies([
        sample(0, "text", "baseline", 0, "view", tokens=2048, ms=10, prompt=1000)
        .model_copy(update={"finish_reason": "length", "outcome": "cut"}),
        sample(1, "text", "baseline", 1, "edit", tokens=10, ms=10, prompt=60, cache=1000)])
    assert (samples[1].carried, samples[1].reachable) == (3048, 1000)
    row = at.summarize(samples, ["baseline"], ["text"])[0]
    assert row.reuse_ceiling == pytest.approx(1000 / 1060) == row.reuse


def test_the_tables_fit_80_columns_and_the_chart_is_a_png(tmp_path: Path):
    pytest.importorskip("matplotlib")
    result = recorded_result()
    console = Console(width=80, record=True, color_system=None)
    at.show(result, console)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" not in text  # nothing cut to fit
    assert "text" in text and "plain" in text and "MISSED" in text
    png = at.plot_result(result, tmp_path / "chart.png")
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_metrics_text_is_parsed():
    text = ("# HELP llamacpp:spec_decode_num_drafts_total Speculative\n"
            "llamacpp:spec_decode_num_drafts_total 12\nllamacpp:tokens_predicted_total 300\n"
            "garbage line here\n")
    assert at.parse_metrics(text) == {"spec_decode_num_drafts_total": 12.0,
                                      "tokens_predicted_total": 300.0}


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "message"), [
    ('{"name": "x", "turns": [', "is not valid JSON (line 1"),
    ('{"name": "x", "workspace": "/w", "task": "t", "turns": []}',
     "is not a replay session: turns"),
    ('{"name": "x", "workspace": "/w", "task": "t", "turns": [{"kind": "view", "ask": "a", '
     '"calls": [{"tool": "teleport", "arguments": {}}], "results": [{"text": "r"}]}]}',
     "calls unknown tool teleport"),
    ('{"name": "x", "workspace": "/w", "task": "t", "turns": [{"kind": "view", "ask": "a", '
     '"calls": [{"tool": "view", "arguments": {"path": 3}}], "results": [{"text": "r"}]}]}',
     "do not pass the tool's argument model"),
    ('{"name": "x", "workspace": "/w", "task": "t", "turns": [{"kind": "view", "ask": "a", '
     '"calls": [{"tool": "view", "arguments": {"path": "a"}}], "results": []}]}',
     "has 1 call(s) but 0 result(s)"),
])
def test_a_broken_fixture_file_is_a_clear_error(tmp_path: Path, content: str, message: str):
    bad = tmp_path / "bad.json"
    bad.write_text(content, "utf-8")
    proc = script("--sessions", str(bad), home=tmp_path / "home", timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
    assert str(bad) in proc.stderr


def test_unknown_session_protocol_and_profile_are_usage_errors(tmp_path: Path):
    proc = script("--sessions", "no-such-session", home=tmp_path / "home", timeout=600)
    assert proc.returncode == 2 and "no session file no-such-session" in proc.stderr
    assert "inventory-report" in proc.stderr  # the sessions there are listed
    proc = script("--protocols", "text,xml", "--turns", "1", home=tmp_path / "home",
                  timeout=600)
    assert proc.returncode == 2 and "--protocols 'text,xml'" in proc.stderr
    proc = script("--profiles", "baseline,dflash", "--turns", "1", home=tmp_path / "home",
                  timeout=600)
    assert proc.returncode == 2 and "needs a draft model" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- real runs -------------------------------------------------------------------------------


def test_a_short_replay_through_real_llama_servers(engine: Engine, smollm2: Path,
                                                   tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tiny]\nmodel = "{smollm2}"\nprofile = "ngram"\n'
                     "ctx_size = 4096\n")
    out, png = tmp_path / "turns.json", tmp_path / "turns.png"
    proc = script("--preset", "tiny", "--profiles", "baseline,ngram", "--sessions",
                  "inventory-report", "--turns", "2", "--max-tokens", "24", "--json",
                  str(out), "--plot", str(png), home=home)
    assert proc.returncode == 0, proc.stderr
    result = at.ReplayResult.model_validate_json(out.read_text("utf-8"))
    assert result.profiles == ["baseline", "ngram"] and result.protocols == list(at.PROTOCOLS)
    assert result.model.path == smollm2 and result.sessions == {"inventory-report": 2}
    assert result.sampling["temperature"] == 0.0  # the agent's tool_temperature
    assert len(result.samples) == 2 * 4 * 2  # turns x (3 protocols + plain) x profiles
    # Interleaved: each turn of each conversation went to both servers back to back.
    for i in range(0, len(result.samples), 2):
        pair = result.samples[i:i + 2]
        assert {s.profile for s in pair} == {"baseline", "ngram"}
        assert len({(s.protocol, s.turn) for s in pair}) == 1
    for s in result.samples:
        assert s.prompt_n + s.cache_n > 0 and s.predicted_n > 0
    # The second request of each conversation reuses at least the first one's prompt, less
    # what the template re-renders around a reply (text: no grammar, the reply re-sent).
    for s in result.samples:
        if s.turn == 1:
            first = next(f for f in result.samples if f.turn == 0 and
                         (f.protocol, f.profile) == (s.protocol, s.profile))
            assert s.cache_n >= first.cache_n + first.prompt_n - 3, (s, first)
    assert {g.scope for g in result.groups} >= {"all", "edit-turns", "view", "create"}
    assert png.read_bytes().startswith(PNG_MAGIC)
    table = proc.stdout.split("results:")[0]
    assert all(len(line) <= 80 for line in table.splitlines())
    assert "2 turns of 1 session(s)" in table and "edit turns" in table and "of plain" in table


def test_a_forced_replay_decodes_the_fixture_replies_and_reports_native_it_cannot_force(
        engine: Engine, smollm2: Path, tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tiny]\nmodel = "{smollm2}"\nprofile = "ngram"\n'
                     "ctx_size = 4096\n")
    out = tmp_path / "forced.json"
    proc = script("--preset", "tiny", "--profiles", "baseline,ngram", "--protocols",
                  "text,native", "--sessions", "inventory-report", "--turns", "1", "--forced",
                  "--json", str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    result = at.ReplayResult.model_validate_json(out.read_text("utf-8"))
    assert result.forced and result.forcing is not None and result.forcing.own_ms > 0
    assert "forcing costs" in proc.stderr
    sent = [s for s in result.samples if s.protocol in ("text", "plain")]
    assert len(sent) == 4 and all(s.forced_exact and s.forced_tokens for s in sent)
    assert all(s.outcome in ("ok", "plain") and s.same_tool is not False for s in sent)
    # SmolLM2's template has no tool-call format: native is reported, not sent, not counted.
    native = [s for s in result.samples if s.protocol == "native"]
    assert len(native) == 2 and all(s.outcome == "unforced" for s in native)
    assert all("no tool-call format" in (s.error or "") for s in native)
    assert not any(g.protocol == "native" for g in result.groups)
    assert "cannot be forced" in proc.stderr
    row = group(result, "text", "ngram", "all")
    assert row.forced_turns == 1 and row.forced_inexact == 0 and row.tokens_per_step >= 1.0
    table = proc.stdout.split("results:")[0]
    assert "forced replies" in table and all(len(line) <= 80 for line in table.splitlines())


def test_the_dflash_path_reports_drafts_per_verification(engine: Engine, tiny_dflash: dict,
                                                         tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tinyd]\nmodel = "{tiny_dflash["target"]}"\n'
                     f'draft = "{tiny_dflash["draft"]}"\nprofile = "dflash"\n'
                     "ctx_size = 2048\n")
    out = tmp_path / "dflash.json"
    # dflash-fixed always drafts; the tuned dflash profile turns the random draft off.
    proc = script("--preset", "tinyd", "--profiles", "baseline,dflash,dflash-fixed",
                  "--protocols", "text", "--no-plain", "--sessions", "inventory-report",
                  "--turns", "1", "--max-tokens", "16", "--json", str(out), "-q", home=home)
    assert proc.returncode == 0, proc.stderr
    result = at.ReplayResult.model_validate_json(out.read_text("utf-8"))
    assert result.profiles == ["baseline", "dflash", "dflash-fixed"]
    assert all(s.draft_n == 0 for s in result.samples if s.profile == "dflash")
    dflash = [s for s in result.samples if s.profile == "dflash-fixed"]
    assert dflash and all(s.draft_n > 0 and s.drafts for s in dflash)
    row = group(result, "text", "dflash-fixed", "all")
    assert row.accepted_per_draft == pytest.approx(row.draft_accepted / row.drafts)


def test_sampled_replays_of_two_plain_profiles_write_the_same_replies(
        engine: Engine, tiny_dflash: dict, tmp_path: Path):
    """Every replayed request carries one seed: at 0.7 the tuned dflash profile, which turns
    the random draft off, writes baseline's replies turn for turn (each server drew its own
    seed before, and the conversations parted at the first sampled token)."""
    home = make_home(tmp_path, engine, f'[tinyd]\nmodel = "{tiny_dflash["target"]}"\n'
                     f'draft = "{tiny_dflash["draft"]}"\nprofile = "dflash"\n'
                     "ctx_size = 2048\n")
    out = tmp_path / "sampled.json"
    proc = script("--preset", "tinyd", "--profiles", "baseline,dflash", "--protocols", "text",
                  "--no-plain", "--sessions", "inventory-report", "--turns", "2",
                  "--max-tokens", "24", "--temperature", "0.7", "--json", str(out), "-q",
                  home=home)
    assert proc.returncode == 0, proc.stderr
    result = at.ReplayResult.model_validate_json(out.read_text("utf-8"))
    assert result.sampling["temperature"] == 0.7
    replies: dict[tuple[int, str], str] = {(s.turn, s.profile): s.reply_sha1
                                           for s in result.samples}
    assert len(replies) == 4 and all(s.draft_n == 0 for s in result.samples)
    assert all(replies[(turn, "baseline")] == replies[(turn, "dflash")] for turn in (0, 1))


def test_a_saved_result_is_reported_again_from_its_samples(tmp_path: Path):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "result.json"
    data = json.loads(recorded_result().model_dump_json())
    del data["groups"][0]["kept_share_uncut"]  # an older file: groups are computed again
    saved.write_text(json.dumps(data), "utf-8")
    png = tmp_path / "again.png"
    proc = script("--report", str(saved), "--plot", str(png), home=tmp_path / "home",
                  timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert ["text", "ngram"] in [r[:2] for r in rows] and "MISSED" in proc.stdout
    assert png.read_bytes().startswith(PNG_MAGIC)
    saved.write_text("{}", "utf-8")
    proc = script("--report", str(saved), home=tmp_path / "home", timeout=600)
    assert proc.returncode == 3 and "not a readable agent-turns result" in proc.stderr
    assert "Traceback" not in proc.stderr


def _session(name: str, turns: int) -> Any:
    turn = {"kind": "view", "ask": "a", "calls": [{"tool": "view", "arguments": {"path": "."}}],
            "results": [{"text": "r"}]}
    return at.FixtureSession.model_validate({"name": name, "workspace": "/w", "task": "t",
                                             "turns": [turn] * turns})


def test_a_resumed_run_keeps_the_complete_conversations_only():
    previous = recorded_result()  # text: 3 turns x 2 profiles; plain: 2 of its 3 turns
    kept, done = at.resumable(previous, [_session("s", 3)], ["baseline", "ngram"], ["text"],
                              True, "smollm2-135m", 64, {"temperature": 0.0})
    assert done == {("s", "text")}
    assert [x.protocol for x in kept] == ["text"] * 6 and [x.index for x in kept] == list(
        range(6))
    with pytest.raises(at.BenchError, match="max_tokens 64, this one 128"):
        at.resumable(previous, [_session("s", 3)], ["baseline", "ngram"], ["text"], True,
                     "smollm2-135m", 128, {"temperature": 0.0})


def test_a_server_that_fails_mid_run_leaves_what_was_measured(registry):
    session = sessions(registry)[0]
    good = "<view>\n<path>inventory/core.py</path>\n</view>"
    measured: list = []
    # The third request fails: the script has two replies.
    with ScriptedModel([reply(good), reply(good)]) as model, \
            pytest.raises(at.BenchError, match="turn 3 .text. on the baseline server"):
        at.replay({"baseline": ServerClient(model.url)}, [session], ["text"], registry,
                  sampling={}, max_tokens=64, tool_role=True, into=measured)
    assert [(s.turn, s.outcome) for s in measured] == [(0, "ok"), (1, "ok")]


def test_the_fraction_of_a_plain_speedup_that_is_no_speedup_is_not_judged():
    slower_plain = [s if (s.protocol, s.profile, s.kind) != ("plain", "ngram", "edit")
                    else s.model_copy(update={"predicted_ms": 2000.0}) for s in RECORDED]
    groups = at.summarize(at.link_replies(slower_plain), ["baseline", "ngram"], ["text"])
    check = next(c for c in at.check_targets(groups) if "fraction" in c.name)
    assert check.met is None and "moot" in check.target and check.value == pytest.approx(5.0)


def test_edit_turns_cover_creates_edits_and_fixes_apart_from_the_edit_kind():
    samples = [sample(i, "text", p, t, kind, tokens=10, ms=10)
               for i, (p, t, kind) in enumerate([("baseline", 0, "create"), ("ngram", 0, "create"),
                                                 ("baseline", 1, "edit"), ("ngram", 1, "edit"),
                                                 ("baseline", 2, "fix"), ("ngram", 2, "fix"),
                                                 ("baseline", 3, "view"), ("ngram", 3, "view")])]
    groups = at.summarize(at.link_replies(samples), ["baseline", "ngram"], ["text"])
    turns = {g.scope: g.turns for g in groups if g.profile == "ngram"}
    assert turns == {"all": 4, "edit-turns": 3, "create": 1, "edit": 1, "fix": 1, "view": 1}
