"""The ``text`` protocol through the real llama-server with SmolLM2-135M (temperature 0).

SmolLM2 is too weak to follow the format, so this checks mechanics: the session decides on
``text`` (and logs why), sends neither ``tools`` nor ``response_format``, re-sends the reply
verbatim, and the server's prompt cache covers the first prompt plus that reply; when the
session falls back to ``json`` the earlier requests stay a byte-identical prefix.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.client import ServerClient
from agent.context import ContextKeeper
from agent.events import ModelTurn, ProtocolChoice
from agent.loop import Agent, Limits
from agent.prompts import system_prompt
from agent.protocols.choice import AUTO_RULES, decide
from agent.runtime import choose_protocol, renders_tool_role
from agent.ui import TEMPLATE_SLACK
from backend.serve.process import pick_port, stop
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerState
from backend.serve.server import up
from tests.conftest import home_env
from tests.test_skills_real import RecordingProxy
from tools.registry import default_registry
from tools.workspace import Workspace

WORKSPACE = "/home/user/project"
"""The workspace the system prompt names: greedy SmolLM2's reply follows every token of its
prompt, and with pytest's numbered temporary folder there it ran to max_tokens on some numbers
(CI at pytest-132: one request, no second to check)."""


@pytest.fixture
def fresh_ngram(engine, smollm2: Path, tmp_path: Path) -> Iterator[ServerState]:
    """A real ``ngram`` llama-server of this test's own: the session's shared one holds other
    tests' prompt cache and n-gram pool, which can change a greedy reply."""
    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="ngram", ctx_size=4096)
    with home_env(tmp_path / "own-home"):
        state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
        try:
            yield state
        finally:
            stop(state)


def test_a_text_session_reuses_the_cached_prompt_and_reply(fresh_ngram: ServerState,
                                                           tmp_path: Path):
    proxy = RecordingProxy(fresh_ngram.base_url)
    client = ServerClient(proxy.url)
    # The default rule; SmolLM2's own rule picks json (see agent.protocols.choice), which
    # test_the_embedded_model_gets_json_by_measurement checks.
    model = Path(client.props()["model_path"]).name
    decision = decide("auto", {"supports_tools": client.supports_tools(), "model": model},
                      rules=AUTO_RULES[-1:])
    protocol = decision.protocol
    registry = default_registry(Workspace(tmp_path))
    events: list = []
    agent = Agent(client, registry, session_id="real-text", protocol=protocol,
                  system=system_prompt(protocol, registry.openai_tools()),
                  emit=events.append, sampling={"temperature": 0.0}, auto_switch=decision,
                  tool_role=renders_tool_role(client), limits=Limits(max_steps=3, max_time=300),
                  context=ContextKeeper(client, client.n_ctx(), max_output=2048))
    try:
        # A short prose answer (SmolLM2 rarely writes a call) ends its turn quickly, and the
        # format error it earns makes the second request whose cache use is checked; a task
        # asking for a file made it run to max_tokens on some workspace paths (no 2nd request).
        # On a fresh server and a fixed prompt the reply is the same on every run.
        agent.run("Say hi in one word.")
    finally:
        registry.close()
        proxy.close()
    [choice, *switches] = [e for e in events if isinstance(e, ProtocolChoice)]
    assert (choice.protocol, choice.setting, choice.fallback) == ("text", "auto", "json")
    assert choice.facts["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"

    requests = proxy.requests()
    turns = [e for e in events if isinstance(e, ModelTurn)]
    assert len(requests) == len(turns) >= 2, [t.content[:200] for t in turns]
    first, second = requests[:2]
    assert turns[0].protocol == "text" and turns[0].finish_reason == "stop"
    assert "tools" not in first and "response_format" not in first
    assert "<final_answer>\n<text>" in first["messages"][0]["content"]
    # Request 2 is request 1 plus the reply exactly as decoded, then what answers it.
    n = len(first["messages"])
    assert second["messages"][:n] == first["messages"]
    assert second["messages"][n] == {"role": "assistant", "content": turns[0].content}
    t1, t2 = turns[0].timings, turns[1].timings
    assert t2.cache_n >= t1.prompt_n + t1.cache_n + t1.predicted_n - TEMPLATE_SLACK, (t1, t2)

    # A fallback to json (SmolLM2 answers in prose) only appends: the prefix stays cached.
    for switch in switches:
        assert (switch.previous, switch.protocol) == ("text", "json")
        after = requests[switch.step]
        before = requests[switch.step - 1]
        assert after["response_format"]["type"] == "json_schema" and "tools" not in after
        assert after["messages"][:len(before["messages"])] == before["messages"]
        t_before, t_after = turns[switch.step - 1].timings, turns[switch.step].timings
        assert t_after.cache_n >= (t_before.prompt_n + t_before.cache_n + t_before.predicted_n
                                   - TEMPLATE_SLACK), (t_before, t_after)


def test_the_embedded_model_gets_json_by_measurement(real_server):
    """auto on the embedded default: json, with the measured reason (no text fallback)."""
    client = ServerClient(real_server("baseline").base_url)
    protocol, decision = choose_protocol("auto", client)
    assert (protocol, decision.fallback) == ("json", None)
    assert "measured" in decision.reason and decision.facts["model"] == \
        "SmolLM2-135M-Instruct.Q4_1.gguf"
