"""Forced replies (benchmarks/forced.py, issue 23): the grammar that forces a reply's own tokens,
the reply each protocol carries, and real llama-servers decoding it byte for byte while n-gram
speculation still drafts; a template with no tool format is reported, not forced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.client import ServerClient, Turn
from agent.protocols.base import FINAL_ANSWER
from agent.protocols.calls import CallProtocol
from backend.engine.registry import Engine
from benchmarks.forced import (
    ForcedClient,
    Unforceable,
    measure_cost,
    native_reply,
    reply_text,
    token_grammar,
)
from tools.registry import default_registry
from tools.workspace import Workspace

ARGS = {"path": "inventory/report.py",  # create's own names: other agents' are read as these
        "file_text": 'def f(x):\n    """Keep x ≤ 10 — «café» 🙂."""\n    return "a\\"b"\n'}


@pytest.fixture
def protocol(tmp_path: Path):
    reg = default_registry(Workspace(tmp_path))
    yield lambda name: CallProtocol(name, reg)
    reg.close()


def test_ascii_pieces_become_token_elements():
    assert token_grammar([{"id": 12, "piece": "def"}, {"id": 7, "piece": " f"}]) == \
        "root ::= <[12]> <[7]>"


def test_tokens_that_split_a_character_become_its_literal():
    # "≤" is e2 89 a4: two tokens carrying its bytes, then an ASCII token.
    pieces = [{"id": 5, "piece": "x "}, {"id": 40533, "piece": [0xE2, 0x89]},
              {"id": 114, "piece": [0xA4]}, {"id": 9, "piece": '"'}]
    assert token_grammar(pieces) == 'root ::= <[5]> "≤" <[9]>'


@pytest.mark.parametrize("pieces", [[], [{"id": 1, "piece": [0xE2, 0x89]}]])
def test_an_empty_reply_or_one_ending_inside_a_character_is_refused(pieces):
    with pytest.raises(ValueError):
        token_grammar(pieces)


@pytest.mark.parametrize("name", ["text", "json"])
def test_the_forced_reply_parses_back_to_the_fixture_call(protocol, name: str):
    calls = CallProtocol.parse(protocol(name), Turn(content=reply_text(
        name, "create", ARGS, protocol(name).schemas)))
    assert [(c["name"], c["arguments"]) for c in calls] == [("create", ARGS)]


def test_the_plain_reply_carries_the_content_without_a_call_format(protocol):
    text = reply_text("plain", "create", ARGS, protocol("text").schemas)
    assert ARGS["file_text"].rstrip("\n") in text and "<create>" not in text
    assert "path: inventory/report.py" in text
    assert reply_text("plain", FINAL_ANSWER, {"text": "Done."}, {}) == "Done."
    with pytest.raises(ValueError, match="no forced reply"):
        reply_text("xml", "create", ARGS, {})


# --- real servers ----------------------------------------------------------------------------


def test_a_real_server_decodes_the_forced_reply_byte_for_byte(real_server, protocol):
    client = ForcedClient(real_server("baseline").base_url)
    text = reply_text("text", "create", ARGS, protocol("text").schemas)
    client.force(text)
    turn = client.complete([{"role": "user", "content": "Write the file."}],
                           sampling={"temperature": 0.0})
    assert turn.content == text and turn.finish_reason == "stop"
    check = client.last
    assert check is not None and check.exact and check.note == ""
    assert check.canonical == len(client.tokenize_pieces(text))
    assert check.decoded >= check.canonical  # plus the end-of-turn token
    # Only the next request is forced.
    free = client.complete([{"role": "user", "content": "Say hi."}], max_tokens=4)
    assert free.content != text


def test_ngram_speculation_drafts_and_is_accepted_under_forcing(real_server):
    client = ForcedClient(real_server("ngram").base_url)
    body = "".join(f"    total += item.price * {i}  # line {i}\n" for i in range(16))
    client.force(body)
    turn = client.complete([{"role": "user", "content": "Repeat this:\n" + body}],
                           sampling={"temperature": 0.0})
    assert client.last is not None and client.last.exact
    assert turn.timings is not None and (turn.timings.draft_n_accepted or 0) > 0


def test_smollm2s_template_renders_no_tool_call_so_native_is_not_forced(real_server, protocol):
    client = ServerClient(real_server("baseline").base_url)
    with pytest.raises(Unforceable, match="no tool-call format"):
        native_reply(client, protocol("native").tools, "view", {"path": "a.py"})
    # A native final answer is prose: that can be forced on any template.
    assert native_reply(client, [], FINAL_ANSWER, {"text": "Done."}) == "Done."


def test_a_tool_template_renders_the_call_and_the_agent_gets_it_as_a_tool_call(
        real_server, engine: Engine, protocol):
    template = engine.templates / "Qwen-Qwen2.5-7B-Instruct.jinja"
    state = real_server("baseline", ("--chat-template-file", str(template)))
    tools = protocol("native").tools
    client = ForcedClient(state.base_url)
    text = native_reply(client, tools, "view", {"path": "a.py"})
    assert "<tool_call>" in text and '"view"' in text
    messages = [{"role": "user", "content": "Look at a.py."}]
    free = client.complete(messages, tools=tools, max_tokens=1)
    client.force(text, ("view", {"path": "a.py"}))
    turn = client.complete(messages, tools=tools, sampling={"temperature": 0.0})
    assert client.last is not None and client.last.exact
    # What the server's own parser would have handed the agent, and the same prompt: the
    # grammar's tool_choice "none" does not change how the template renders the tools.
    assert turn.finish_reason == "tool_calls" and turn.content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in turn.tool_calls] == \
        [("view", {"path": "a.py"})]
    assert free.usage and turn.usage
    assert turn.usage["prompt_tokens"] == free.usage["prompt_tokens"]


def test_forcing_cost_is_measured_on_a_real_server(real_server):
    cost = measure_cost(ServerClient(real_server("baseline").base_url), repeats=1)
    assert cost.own_ms > 0 and cost.other_ms > 0 and cost.tokens > 20
    assert cost.cost_ms == pytest.approx(max(cost.other_ms - cost.own_ms, 0.0), abs=1e-3)
