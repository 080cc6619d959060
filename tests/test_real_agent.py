"""The agent loop through the real llama-server with SmolLM2-135M (temperature 0)."""

import json
from pathlib import Path

from agent.client import ServerClient
from agent.context import ContextKeeper
from agent.loop import Agent, Limits
from agent.prompts import system_prompt
from agent.protocols.base import tools_with_final
from agent.runtime import choose_protocol, renders_tool_role
from backend.engine.registry import Engine
from tools.registry import default_registry
from tools.workspace import Workspace

GREEDY = {"temperature": 0.0}


def _agent(base_url: str, root: Path, protocol: str, auto: bool = False):
    root.mkdir(exist_ok=True)
    client = ServerClient(base_url)
    registry = default_registry(Workspace(root))
    listed = tools_with_final(registry.openai_tools()) if protocol == "json" else \
        registry.openai_tools()
    events: list = []
    agent = Agent(client, registry, session_id="real", protocol=protocol,
                  system=system_prompt(protocol, listed), emit=events.append,
                  sampling=GREEDY, auto_switch=auto, tool_role=renders_tool_role(client),
                  limits=Limits(max_steps=5, max_time=300),
                  # As in real sessions: a runaway SmolLM2 reply must not overflow the context.
                  context=ContextKeeper(client, client.n_ctx(), max_output=2048))
    return agent, events, client


def test_json_protocol_executes_a_real_tool_call_in_the_workspace(real_server, tmp_path: Path):
    server = real_server("ngram")
    agent, events, _ = _agent(server.base_url, tmp_path / "ws", "json")
    try:
        result = agent.run('Write hello.txt (content: hello) using create, then finish with '
                           'final_answer {"text": "done"}.')
    finally:
        agent.registry.close()  # the model may have started background jobs
    calls = [e for e in events if e.type == "tool_call"]
    ok = [e for e in events if e.type == "tool_result" and not e.is_error]
    assert calls and calls[0].name == "create"
    assert ok and (tmp_path / "ws" / calls[0].arguments["path"]).is_file()
    assert events[-1].type == "final_answer" and result.steps >= 1
    turns = [e for e in events if e.type == "model_turn"]
    assert all(t.timings is not None and t.timings.predicted_n for t in turns)
    # Every reply was one grammar-valid JSON object, stored verbatim.
    for turn in turns:
        assert set(json.loads(turn.content)) == {"tool", "arguments"}
    # Append-only requests: later turns reuse the cached prefix.
    assert all((t.timings.cache_n or 0) > 0 for t in turns[1:])


def test_native_protocol_with_a_tool_declaring_template(real_server, engine: Engine,
                                                       tmp_path: Path):
    template = engine.templates / "Qwen-Qwen2.5-7B-Instruct.jinja"
    server = real_server("baseline", ("--chat-template-file", str(template)))
    agent, events, client = _agent(server.base_url, tmp_path / "ws", "native", auto=True)
    assert client.supports_tools()
    assert choose_protocol("native", client)[0] == "native"
    tools = agent.registry.openai_tools()
    prompt = client.apply_template([{"role": "user", "content": "hi"}], tools=tools)
    assert '"name": "str_replace"' in prompt and "old_str" in prompt
    # A tool_call_id round trip is accepted by the server.
    history = [{"role": "user", "content": "make a.txt"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "create",
                                             "arguments": '{"path": "a.txt", "file_text": "x"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "created a.txt"}]
    turn = client.complete(history, tools=tools, sampling=GREEDY, max_tokens=32)
    assert turn.timings is not None and turn.finish_reason in {"stop", "length", "tool_calls"}
    # SmolLM2's greedy reply differs between CPUs (SIMD kernels, rounding): a native call,
    # prose, a call written as text, malformed calls or a code block run to max_tokens. Any of
    # them ends in a native call or the json switch within two steps; never in a stop under
    # native before either. Three steps leave at least one after the switch.
    agent.limits = Limits(max_steps=3, max_time=300)
    try:
        result = agent.run("Create a file named hello.txt containing the word hello.")
    finally:
        agent.registry.close()
    turns = [e for e in events if e.type == "model_turn"]
    assert turns[0].protocol == "native"
    assert agent.calls.native_calls_seen or agent.protocol == "json", result
    switches = [e for e in events if e.type == "protocol" and e.previous]
    assert [(e.previous, e.protocol) for e in switches] == \
        ([] if agent.protocol == "native" else [("native", "json")])
    for switch in switches:
        assert all(t.protocol == ("json" if t.step > switch.step else "native") for t in turns)
    if not agent.calls.native_calls_seen:
        assert switches and switches[0].step <= 2 and turns[-1].protocol == "json"
