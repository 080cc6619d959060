"""The loop's logic against a scripted OpenAI-compatible model on loopback."""

import io
import json
import os
import signal
import threading
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from agent.client import ContextOverflow, ServerClient
from agent.loop import Agent, Limits
from agent.ui import Reporter
from tests.scripted import ScriptedModel, error_reply, reply
from tools.registry import default_registry
from tools.workspace import Workspace


def make_agent(model: ScriptedModel, root: Path, protocol: str = "json", auto: bool = False,
               tool_role: bool = True, max_steps: int = 10):
    root.mkdir(exist_ok=True)
    registry = default_registry(Workspace(root))
    events: list = []
    agent = Agent(ServerClient(model.url), registry, session_id="t", protocol=protocol,
                  system="system prompt", emit=events.append, auto_switch=auto,
                  tool_role=tool_role, limits=Limits(max_steps=max_steps, max_time=120))
    return agent, events


def call(tool: str, **arguments) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


WORK = call("bash", command="true")
"""A command that succeeds: a final answer stands only after the task did some work
(agent/finish.py)."""
NATIVE_WORK = reply(tool_calls=[("bash", {"command": "true"})])


def test_json_protocol_runs_a_tool_then_finishes(tmp_path: Path):
    script = [call("create", path="a.txt", file_text="hi\n"),
              call("final_answer", text="made a.txt")]
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("make a.txt")
    assert (result.reason, result.text, result.steps) == ("done", "made a.txt", 2)
    assert (tmp_path / "ws" / "a.txt").read_text() == "hi\n"
    first, second = model.requests
    assert first["response_format"]["type"] == "json_schema"
    assert first["cache_prompt"] is True and first["id_slot"] == 0
    # The reply is stored verbatim and the result comes back as a tool message.
    assert second["messages"][-2] == {"role": "assistant", "content": script[0]["content"]}
    assert second["messages"][-1]["role"] == "tool"
    assert [e.type for e in events if e.type != "message"] == [
        "model_turn", "tool_call", "tool_result", "model_turn", "final_answer"]
    # Every message sent is logged, so a session can be rebuilt exactly.
    logged = [e.message for e in events if e.type == "message"]
    assert logged == agent.messages
    assert [e for e in events if e.type == "model_turn"][0].timings.predicted_per_second == 2500


def test_json_results_go_back_as_user_messages_when_the_template_drops_tool_role(
        tmp_path: Path):
    script = [call("view", path="."), WORK, call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        agent, _ = make_agent(model, tmp_path / "ws", tool_role=False)
        agent.run("look")
    last = model.requests[1]["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("[result of tool view]\n")


def test_requests_are_append_only_with_identical_tools(tmp_path: Path):
    script = [call("view", path="."), call("bash", command="echo hi"),
              call("final_answer", text="ok")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native")
        model.replies = [reply(tool_calls=[("view", {"path": "."})]),
                         reply(tool_calls=[("bash", {"command": "echo hi"})]),
                         reply("all done")]
        agent.run("go")
    bodies = [json.dumps(r["messages"], sort_keys=False) for r in model.requests]
    for earlier, later in zip(bodies, bodies[1:], strict=False):
        assert later.startswith(earlier[:-1])  # earlier messages byte-identical
    assert len({json.dumps(r["tools"]) for r in model.requests}) == 1


def test_malformed_json_gets_a_precise_error_and_the_loop_continues(tmp_path: Path):
    script = [reply('{"tool": "view", "arguments": {"path": '), WORK,
              call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "done"
    feedback = model.requests[1]["messages"][-1]
    assert feedback["role"] == "user" and "not valid JSON" in feedback["content"]


def test_three_malformed_replies_stop_the_loop_with_a_report(tmp_path: Path):
    with ScriptedModel([reply("nope")] * 3) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "format_errors" and "malformed" in result.text


def test_unknown_tool_and_schema_invalid_arguments_are_reported_to_the_model(tmp_path: Path):
    script = [call("launch_rocket", target="moon"), call("create", path="a.txt"), WORK,
              call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        agent.run("go")
    results = [e for e in events if e.type == "tool_result"]
    assert results[0].is_error and "unknown tool 'launch_rocket'" in results[0].text
    assert "create" in results[0].text
    assert results[1].is_error and "file_text: Field required" in results[1].text
    assert not (tmp_path / "ws" / "a.txt").exists()


def test_native_tool_calls_are_executed_and_answered_by_id(tmp_path: Path):
    script = [reply(tool_calls=[("create", {"path": "n.txt", "file_text": "x"})]),
              reply("created n.txt")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native")
        result = agent.run("go")
    assert (result.reason, result.text) == ("done", "created n.txt")
    sent = model.requests[1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "tc0"
    assert sent[-1] == {"role": "tool", "tool_call_id": "tc0", "content": "created n.txt (1 line)"}
    assert model.requests[0]["tools"][0]["function"]["name"] == "view"
    assert model.requests[0]["parallel_tool_calls"] is False


def test_native_arguments_that_are_not_json_are_a_format_error(tmp_path: Path):
    script = [reply(tool_calls=[("view", '{"path": ')]), NATIVE_WORK, reply("done")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native")
        agent.run("go")
    assert "arguments of view are not valid JSON" in model.requests[1]["messages"][-1]["content"]


def test_a_tool_call_written_as_text_is_repaired_and_auto_switches_to_json(tmp_path: Path):
    text = '<tool_call>\n{"name": "create", "arguments": {"path": "t.txt", "file_text": "x"}}' \
           "\n</tool_call>"
    script = [reply(text), call("final_answer", text="ok")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, events = make_agent(model, tmp_path / "ws", protocol="native", auto=True)
        result = agent.run("go")
    assert (tmp_path / "ws" / "t.txt").read_text() == "x"
    assert result.reason == "done" and agent.protocol == "json"
    first, second = model.requests
    assert "response_format" in second
    # The fallback keeps the prompt the template renders: same tools, earlier turns unchanged,
    # one note appended after the call's result.
    assert second["tools"] == first["tools"]
    assert second["messages"][:len(first["messages"])] == first["messages"]
    assert second["messages"][-1]["role"] == "user"
    assert "exactly one JSON object" in second["messages"][-1]["content"]
    assert [e.protocol for e in events if e.type == "model_turn"] == ["native", "json"]
    switch = [e for e in events if e.type == "protocol"]
    assert [(e.previous, e.protocol) for e in switch] == [("native", "json")]


def test_prose_before_any_native_call_switches_auto_to_json(tmp_path: Path):
    script = [reply("```python\nprint('hi')\n```"), WORK, call("final_answer", text="ok")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native", auto=True)
        result = agent.run("go")
    assert result.reason == "done" and result.text == "ok"
    note = model.requests[1]["messages"][-1]
    assert note["role"] == "user" and "exactly one JSON object" in note["content"]


@pytest.mark.parametrize("runaway", [
    reply("```python\n" + "print('hi')\n" * 300, finish_reason="length"),
    # A call the template's parser could not finish: no native call, and malformed as text.
    reply('<tool_call>\n{"name": "create", "arguments": {"path": "a.py", "file_text": "'
          + "x" * 900, finish_reason="length"),
    # A native call cut short (its arguments are not JSON): not a call made either.
    reply(tool_calls=[("create", '{"path": "a.py", "file_text": "' + "x" * 900)],
          finish_reason="length"),
], ids=["code-block", "open-call", "cut-native-call"])
def test_a_runaway_before_any_native_call_switches_auto_to_json(runaway: dict, tmp_path: Path):
    # Issue 28 item 14: a model that never made a native call and runs to max_tokens does not
    # speak the template's tool format, like one that answers in prose.
    script = [runaway, WORK, call("final_answer", text="ok")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, events = make_agent(model, tmp_path / "ws", protocol="native", auto=True)
        result = agent.run("go")
    assert (result.reason, result.text) == ("done", "ok")
    first, second = model.requests[:2]
    assert second["response_format"]["type"] == "json_schema"
    assert second["tools"] == first["tools"]  # the rendered prompt keeps its prefix
    cut, note = second["messages"][-2:]
    # The runaway is not carried into later requests: its start and a marker.
    assert cut["role"] == "assistant" and "cut at the token limit" in cut["content"]
    assert len(cut["content"]) < 400
    assert note["role"] == "user" and "exactly one JSON object" in note["content"]
    switch = [e for e in events if e.type == "protocol" and e.previous]
    assert [(e.previous, e.protocol, e.step) for e in switch] == [("native", "json", 1)]
    assert "token limit" in switch[0].reason


def test_a_runaway_after_a_native_call_still_stops_at_the_token_limit(tmp_path: Path):
    script = [reply(tool_calls=[("view", {"path": "."})]),
              reply("# " * 500, finish_reason="length")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native", auto=True)
        result = agent.run("go")
    assert result.reason == "length" and agent.protocol == "native"


def test_finish_reason_tool_calls_without_calls_is_a_format_error(tmp_path: Path):
    script = [reply("", finish_reason="tool_calls"), NATIVE_WORK, reply("done")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native")
        agent.run("go")
    assert "no call arrived" in model.requests[1]["messages"][-1]["content"]


def test_what_the_agent_tells_the_model_on_its_own_is_shown(tmp_path: Path):
    """Issue 28 item 12: the re-prompt after an empty tool-call turn reached the model but not
    the terminal; so did the note of a protocol fallback."""
    out = io.StringIO()
    reporter = Reporter()
    reporter.console = Console(file=out, force_terminal=False, width=200, soft_wrap=True)
    script = [reply("", finish_reason="tool_calls"), reply("no tool call"), WORK,
              call("final_answer", text="ok")]
    with ScriptedModel(script, supports_tools=True) as model:
        (tmp_path / "ws").mkdir()
        agent = Agent(ServerClient(model.url), default_registry(Workspace(tmp_path / "ws")),
                      session_id="t", protocol="native", system="system prompt",
                      emit=reporter.event, auto_switch=True, ui=reporter)
        agent.run("go")
    shown = [line for line in out.getvalue().splitlines() if line.startswith("told the model")]
    told = [m["content"] for m in agent.messages if m["role"] == "user"][1:]
    assert len(shown) == len(told) == 2
    assert shown[0] == "told the model: Format error: finish_reason was tool_calls but no call " \
        "arrived; call a tool with valid arguments"
    first, *rest = told[1].splitlines()
    assert rest and shown[1] == f"told the model: {first} (+{len(rest)} lines)"


def test_the_same_call_three_times_stops_with_a_report(tmp_path: Path):
    with ScriptedModel([call("view", path=".")] * 3) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "repeated_call" and "3 times in a row" in result.text
    results = [e for e in events if e.type == "tool_result"]
    assert len(results) == 3 and "not executed" in results[-1].text
    # The refused third call is shown like the two before it: new-project printed two "create"
    # lines above a stop that said "called 3 times".
    calls = [e for e in events if e.type == "tool_call"]
    assert [c.call_id for c in calls] == [r.call_id for r in results]


def test_a_refused_repeat_shows_no_more_than_the_calls_it_repeats(tmp_path: Path):
    """The third identical call is shown though never run: its preview goes through the same
    workspace checks as a run, so an edit through a symlink pointing outside shows nothing of
    the file it points at, on screen or in the log."""
    outside = tmp_path / "outside.txt"
    outside.write_text("SECRET-OUTSIDE line\n")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "link.txt").symlink_to(outside)
    edit = call("str_replace", path="link.txt", old_str="line", new_str="x")
    with ScriptedModel([edit] * 3) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "repeated_call"
    calls = [e for e in events if e.type == "tool_call"]
    assert len(calls) == 3 and all(c.preview is None for c in calls)
    assert "SECRET-OUTSIDE" not in "".join(e.model_dump_json() for e in events)
    assert outside.read_text() == "SECRET-OUTSIDE line\n"


def test_max_steps_stops_the_loop(tmp_path: Path):
    script = [call("view", path="."), call("glob", pattern="*"), call("view", path=".")]
    with ScriptedModel(script) as model:
        agent, _ = make_agent(model, tmp_path / "ws", max_steps=2)
        result = agent.run("go")
    assert (result.reason, result.steps) == ("max_steps", 2)


def test_ctrl_c_mid_tool_answers_the_call_and_kills_the_command(tmp_path: Path):
    marker = "sleep 41.5"
    with ScriptedModel([call("bash", command=marker, timeout=60)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            result = agent.run("go")
        finally:
            timer.cancel()
    assert result.reason == "interrupted"
    last = agent.messages[-1]
    assert last["role"] == "tool" and "interrupted" in last["content"]
    assert events[-1].type == "final_answer" and events[-1].reason == "interrupted"
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if marker in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


def test_context_overflow_is_raised_with_the_sizes(tmp_path: Path):
    error = {"code": 400, "type": "exceed_context_size_error", "message": "too long",
             "n_prompt_tokens": 9000, "n_ctx": 8192}
    with ScriptedModel([error_reply(400, error)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        with pytest.raises(ContextOverflow, match="9000 tokens.*8192"):
            agent.run("go")


def test_a_denied_call_goes_back_to_the_model_as_a_tool_result(tmp_path: Path):
    from agent.sessions.approval import make_approver

    # The view is the task's work that succeeded (a denied call is a failed one).
    script = [call("bash", command="touch x"), call("view", path="."),
              call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.approve = make_approver("auto-edit", ask=lambda p: "not now", interactive=True)
        result = agent.run("go")
    assert result.reason == "done" and not (tmp_path / "ws" / "x").exists()
    assert model.requests[1]["messages"][-1]["content"] == "ERROR: denied by the user: not now"


def test_a_needed_approval_without_a_terminal_stops_the_task(tmp_path: Path):
    from agent.sessions.approval import make_approver

    with ScriptedModel([call("bash", command="touch x")]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.approve = make_approver("auto-edit", interactive=False)
        result = agent.run("go")
    assert result.reason == "approval_needed" and "not a terminal" in result.text
    assert agent.messages[-1]["role"] == "tool"  # the call id is still answered
    assert not (tmp_path / "ws" / "x").exists()


def test_reasoning_is_not_sent_back_and_reasoning_alone_is_not_a_silent_stop(tmp_path: Path):
    script = [reply("", reasoning="thinking " * 50),
              reply("", tool_calls=[("bash", {"command": "true"})], reasoning="I should look"),
              reply("done")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native")
        result = agent.run("go")
    assert (result.reason, result.text) == ("done", "done")
    assert "no answer and no tool call" in model.requests[1]["messages"][-1]["content"]
    sent = json.dumps(model.requests[2]["messages"])
    assert "I should look" not in sent and "thinking" not in sent


def test_slow_prefill_is_an_idle_timeout_and_never_retried(tmp_path: Path):
    from agent.client import ServerUnavailable

    with ScriptedModel([reply("late", delay=3.0)]) as model:
        client = ServerClient(model.url, idle_timeout=1.0)
        with pytest.raises(ServerUnavailable):
            client.complete([{"role": "user", "content": "hi"}])
        assert len(model.requests) == 1  # no retry that would re-prefill
    with ScriptedModel([reply("in time", delay=0.5)]) as model:
        turn = ServerClient(model.url, idle_timeout=2.0).complete(
            [{"role": "user", "content": "hi"}])
    assert turn.content == "in time"


def test_call_ids_stay_unique_across_tasks_of_one_session(tmp_path: Path):
    script = [WORK, call("final_answer", text="one"), WORK, call("final_answer", text="two")]
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        agent.run("first")
        agent.run("second")
    ids = [e.call_id for e in events if e.type == "tool_call"]
    assert len(ids) == 2 and ids[0] != ids[1]
