"""The loop under the ``text`` tool-call protocol, against a scripted model on loopback."""

from __future__ import annotations

import json
from pathlib import Path

from agent.client import ServerClient
from agent.loop import Agent, Limits
from agent.prompts import system_prompt
from agent.protocols.choice import decide
from agent.runtime import choose_protocol
from agent.sessions.approval import make_approver
from tests.scripted import ScriptedModel, reply
from tools.registry import default_registry
from tools.workspace import Workspace

AUTO = decide("auto", {})


def make_agent(model: ScriptedModel, root: Path, auto_switch=AUTO, max_steps: int = 10,
               history: list | None = None):
    root.mkdir(exist_ok=True)
    registry = default_registry(Workspace(root))
    events: list = []
    agent = Agent(ServerClient(model.url), registry, session_id="t", protocol="text",
                  system=system_prompt("text", registry.openai_tools()),
                  emit=events.append, auto_switch=auto_switch, history=history,
                  limits=Limits(max_steps=max_steps, max_time=120))
    return agent, events


FINISH = "<final_answer>\n<text>done</text>\n</final_answer>"
WORK = "<bash>\n<command>true</command>\n</bash>"
"""A command that succeeds: a final answer stands only after the task did some work
(agent/finish.py)."""


def test_several_calls_in_one_reply_run_in_order_and_answer_in_one_message(tmp_path: Path):
    first = ("I'll write the file and check it.\n<create>\n<path>a.py</path>\n<file_text>\n"
             'print("hi")\n</file_text>\n</create>\n<view>\n<path>a.py</path>\n</view>\n'
             "<bash><command>python a.py</command></bash>")
    with ScriptedModel([reply(first), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
    assert (result.reason, result.text, result.steps) == ("done", "done", 2)
    assert (tmp_path / "ws" / "a.py").read_text() == 'print("hi")\n'
    for body in model.requests:
        assert "tools" not in body and "response_format" not in body
    sent = model.requests[1]["messages"]
    # The reply is stored verbatim, prose included; its three results come back as one user
    # message, in call order.
    assert sent[-2] == {"role": "assistant", "content": first}
    results = sent[-1]
    assert results["role"] == "user"
    heads = [line for line in results["content"].splitlines() if line.startswith("[result")]
    assert heads == ["[result of tool create]", "[result of tool view]",
                     "[result of tool bash]"]
    assert "hi" in results["content"].split("[result of tool bash]")[1]
    assert [e.name for e in events if e.type == "tool_call"] == ["create", "view", "bash"]
    assert [e.message for e in events if e.type == "message"] == agent.messages


def test_the_decision_is_logged_before_the_first_request(tmp_path: Path):
    with ScriptedModel([reply(WORK), reply(FINISH)], supports_tools=True) as model:
        protocol, decision = choose_protocol("auto", ServerClient(model.url))
        assert (protocol, decision.fallback) == ("text", "json")
        assert decision.facts == {"supports_tools": True, "model": "model.gguf",
                                  "llama_server": True}
        agent, events = make_agent(model, tmp_path / "ws", auto_switch=decision)
        agent.run("go")
    choice = events[0]
    assert choice.type == "protocol" and choice.protocol == "text"
    assert choice.setting == "auto" and choice.fallback == "json" and "speculation" in \
        choice.reason
    assert events[1].type == "message" and events[1].message["role"] == "system"
    assert choose_protocol("json", ServerClient(model.url))[1].fallback is None


def test_a_call_cut_by_max_tokens_is_not_run_and_not_kept_whole(tmp_path: Path):
    runaway = "<create>\n<path>big.py</path>\n<file_text>\n" + "x = 1\n" * 2000
    script = [reply(runaway, finish_reason="length"), reply(WORK), reply(FINISH)]
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write big.py")
        assert result.reason == "length"
        assert "cut at the token limit" in result.text
        assert "inside the <create> call opened on line 1" in result.text
        assert not (tmp_path / "ws" / "big.py").exists()
        assert not [e for e in events if e.type == "tool_call"]
        agent.run("try again, smaller")
    kept = model.requests[1]["messages"][-2]
    assert kept["role"] == "assistant" and kept["content"].startswith(runaway[:100])
    assert len(kept["content"]) < 400 and "cut at the token limit" in kept["content"]


def test_complete_calls_before_a_cut_do_not_run_either(tmp_path: Path):
    text = "<create><path>a.txt</path><file_text>a</file_text></create>\n" * 3
    with ScriptedModel([reply(text, finish_reason="length")]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "length" and "after its last complete call" in result.text
    assert not (tmp_path / "ws" / "a.txt").exists()


def test_a_format_error_says_what_where_and_the_form(tmp_path: Path):
    broken = "Sure.\n<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</create>"
    with ScriptedModel([reply(broken), reply(WORK), reply(FINISH)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "done"
    sent = model.requests[1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": broken}
    feedback = sent[-1]["content"]
    assert feedback.startswith("Format error: line 2: <file_text> (line 4) is not closed")
    assert "<create>\n<path>…</path>\n<file_text>…</file_text>\n</create>" in feedback
    assert not (tmp_path / "ws" / "a.py").exists()


def test_a_prose_only_reply_is_a_format_error_showing_how_to_call(tmp_path: Path):
    with ScriptedModel([reply("I would write a file."), reply(WORK), reply(FINISH)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.run("go")
    feedback = model.requests[1]["messages"][-1]["content"]
    assert "no tool call" in feedback and "<final_answer>\n<text>…</text>" in feedback


def test_final_answer_ends_the_task_and_later_calls_do_not_run(tmp_path: Path):
    # A final answer after calls in the same reply is never seen: the reply ends after its
    # last call before it (CallBlockEnd), so the calls after it never run either.
    text = ("<create><path>a.txt</path><file_text>a</file_text></create>\n" + FINISH +
            "\n<create><path>b.txt</path><file_text>b</file_text></create>")
    # A final answer first in its reply ends the task: the call after it never runs.
    last = FINISH + "\n<create><path>c.txt</path><file_text>c</file_text></create>"
    with ScriptedModel([reply(text), reply(last)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert (result.reason, result.text, result.steps) == ("done", "done", 2)
    assert (tmp_path / "ws" / "a.txt").exists() and not (tmp_path / "ws" / "b.txt").exists()
    assert not (tmp_path / "ws" / "c.txt").exists()
    assert agent.messages[2]["content"].endswith("</create>")
    # The result of the call before final_answer is still answered.
    assert agent.messages[3]["content"].startswith("[result of tool create]")


def test_argument_errors_come_from_the_registry_with_the_text_form(tmp_path: Path):
    # The unknown tool first: a reply ends after a known tool's call when something other than
    # another known tool's call follows (CallBlockEnd). <body> is no alias of file_text.
    text = ("<launch_rocket>\n<target>moon</target>\n</launch_rocket>\n"
            "<create>\n<path>a.txt</path>\n<body>x</body>\n</create>")
    with ScriptedModel([reply(text), reply(WORK), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        agent.run("go")
    results = [e for e in events if e.type == "tool_result"]
    assert results[0].is_error and "unknown tool 'launch_rocket'" in results[0].text
    assert results[1].is_error and "file_text: Field required" in results[1].text
    assert "<create>\n<path>…</path>\n<file_text>…</file_text>\n</create>" in results[1].text
    assert not (tmp_path / "ws" / "a.txt").exists()


def test_a_call_written_the_json_way_is_repaired(tmp_path: Path):
    text = '{"tool": "create", "arguments": {"path": "j.txt", "file_text": "j"}}'
    with ScriptedModel([reply(text), reply(FINISH)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.run("go")
    assert (tmp_path / "ws" / "j.txt").read_text() == "j"


def test_repeated_format_errors_fall_back_to_json_keeping_the_prefix(tmp_path: Path):
    script = [reply("hello"), reply("<view>\n<path>a"),
              reply(json.dumps({"tool": "bash", "arguments": {"command": "true"}})),
              reply(json.dumps({"tool": "final_answer", "arguments": {"text": "ok"}}))]
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert (result.reason, result.text) == ("done", "ok") and agent.protocol == "json"
    before, at_switch, after = model.requests[:3]
    assert "response_format" not in at_switch and "tools" not in at_switch
    assert after["response_format"]["type"] == "json_schema" and "tools" not in after
    # Byte-identical: the system prompt and every earlier turn, as serialised on the wire.
    for earlier in (before, at_switch):
        n = len(earlier["messages"])
        assert json.dumps(after["messages"][:n]) == json.dumps(earlier["messages"])
    assert after["messages"][0]["content"] == before["messages"][0]["content"]
    note = after["messages"][-1]
    assert len(after["messages"]) == len(at_switch["messages"]) + 2  # the reply + one note
    assert note["role"] == "user" and note["content"].startswith("Format error: line 1:")
    assert "From now on answer every turn with exactly one JSON object" in note["content"]
    switch = [e for e in events if e.type == "protocol"][-1]
    assert (switch.previous, switch.protocol, switch.step) == ("text", "json", 2)
    assert [e.protocol for e in events if e.type == "model_turn"] == ["text", "text", "json",
                                                                      "json"]


def test_an_explicit_text_setting_does_not_fall_back(tmp_path: Path):
    with ScriptedModel([reply("hello")] * 3) as model:
        agent, _ = make_agent(model, tmp_path / "ws", auto_switch=decide("text", {}))
        result = agent.run("go")
    assert result.reason == "format_errors" and agent.protocol == "text"
    assert all("response_format" not in r for r in model.requests)


def test_a_resumed_history_after_the_fallback_continues_in_json(tmp_path: Path):
    work = reply('{"tool": "bash", "arguments": {"command": "true"}}')
    script = [reply("hello"), reply("again"), work,
              reply('{"tool": "final_answer", "arguments": {"text": "ok"}}')]
    with ScriptedModel(script) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.run("go")
    with ScriptedModel([work, reply('{"tool": "final_answer", "arguments": {"text": "again"}}')]) \
            as model:
        resumed, events = make_agent(model, tmp_path / "ws", auto_switch=False,
                                     history=agent.messages)
        result = resumed.run("next")
    assert resumed.protocol == "json" and result.text == "again"
    assert "response_format" in model.requests[0]
    assert not [e for e in events if e.type == "protocol"]


def test_injected_calls_read_like_the_model_wrote_them(tmp_path: Path):
    # The injected call is the product's, not the model's work: the model's own call comes
    # before its final answer.
    with ScriptedModel([reply(WORK), reply(FINISH)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.run("go", first_calls=[("view", {"path": ".", "view_range": [1, 2]})])
    call, result = model.requests[0]["messages"][-2:]
    assert call == {"role": "assistant",
                    "content": "<view>\n<path>.</path>\n<view_range>[1, 2]</view_range>\n</view>"}
    assert result["role"] == "user" and result["content"].startswith("[result of tool view]")


def test_a_stop_mid_reply_answers_every_call_in_one_message(tmp_path: Path):
    text = "<view><path>.</path></view>\n<bash><command>touch x</command></bash>"
    with ScriptedModel([reply(text)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.approve = make_approver("auto-edit", interactive=False)
        result = agent.run("go")
    assert result.reason == "approval_needed" and not (tmp_path / "ws" / "x").exists()
    last = agent.messages[-1]
    assert last["role"] == "user" and agent.messages[-2]["role"] == "assistant"
    assert "[result of tool view]" in last["content"]
    assert "[result of tool bash]\nERROR:" in last["content"]
