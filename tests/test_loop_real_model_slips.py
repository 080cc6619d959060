"""The slips a real small coder model makes (issue 49: Qwen2.5-Coder-1.5B solved 0 of 8 small
repository tasks), each against a scripted model on loopback: argument names of other agents,
replies that run on past their calls, a final answer before the calls' results, a stray
parameter tag as a file's content, and a task that did nothing but ends "done"."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.client import ServerClient
from agent.finish import (
    AFTER_CALLS,
    AFTER_FAILURES,
    BROKEN,
    EMPTY_CHECK,
    NOTHING_DONE,
    UNCHANGED,
    UNCHECKED,
)
from agent.loop import Agent, Limits
from agent.prompts import system_prompt
from tests.scripted import ScriptedModel, reply, runaway_reply
from tools.registry import default_registry
from tools.workspace import Workspace

FINISH = "<final_answer>\n<text>done</text>\n</final_answer>"
RUN = "<bash>\n<command>true</command>\n</bash>"


def make_agent(model: ScriptedModel, root: Path, protocol: str = "text", approve=None):
    root.mkdir(exist_ok=True)
    registry = default_registry(Workspace(root))
    events: list = []
    agent = Agent(ServerClient(model.url), registry, session_id="t", protocol=protocol,
                  system=system_prompt(protocol, registry.openai_tools()),
                  emit=events.append, limits=Limits(max_steps=8, max_time=120),
                  approve=approve)
    return agent, events


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def results_of(events: list) -> list:
    return [e for e in events if e.type == "tool_result"]


def test_other_agents_argument_names_are_read_as_ours_and_said_once(tmp_path: Path):
    seen: list[dict] = []

    def approve(call: dict) -> None:
        seen.append(call["arguments"])  # approval must see the names it checks (path)

    create = ("<create>\n<file_path>a.py</file_path>\n<content>\nx = 1\n</content>\n"
              "</create>")
    view = "<view>\n<filename>a.py</filename>\n<range>[1, 1]</range>\n</view>"
    with ScriptedModel([reply(create), reply(view), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws", approve=approve)
        result = agent.run("write a.py")
    assert result.reason == "done"
    # a.py was written and never run: the first final answer asks for a check, once.
    assert results_of(events)[2].text == UNCHECKED.format(files="a.py")
    assert (tmp_path / "ws" / "a.py").read_text() == "x = 1\n"
    assert seen == [{"path": "a.py", "file_text": "x = 1\n"},
                    {"path": "a.py", "view_range": [1, 1]}]
    first, second = results_of(events)[:2]
    assert not first.is_error and "read file_path as path, content as file_text" in first.text
    assert not second.is_error and "read filename as path, range as view_range" in second.text
    calls = [e for e in events if e.type == "tool_call"]
    assert calls[0].arguments == {"path": "a.py", "file_text": "x = 1\n"}


def test_aliases_under_json_and_a_real_parameter_is_never_renamed(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    view = json.dumps({"tool": "view", "arguments": {"file_path": "a.py"}})
    edit = json.dumps({"tool": "str_replace", "arguments": {
        "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}})
    both = json.dumps({"tool": "view", "arguments": {"path": "a.py", "file_path": "b.py"}})
    done = json.dumps({"tool": "final_answer", "arguments": {"text": "ok"}})
    script = [reply(view), reply(edit), reply(both), reply(done), reply(done)]
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws", protocol="json")
        result = agent.run("set x to 2")
    assert (result.reason, result.steps) == ("done", 5)  # the first done follows a failure
    assert (tmp_path / "ws" / "a.py").read_text() == "x = 2\n"
    last = results_of(events)[2]
    # Both names given: the alias stays what it is, and the tool refuses it.
    assert last.is_error and "file_path" in last.text and "Extra inputs" in last.text


def test_a_reply_that_runs_on_past_its_calls_ends_there_and_its_calls_run(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    # The model writes its call, then imagines the result and goes on (for ever).
    piece = ("<view>\n<path>a.py</path>\n</view>\n[result of tool view]\n1\tx = 1\n"
             "Now I will change it.\n")
    with ScriptedModel([runaway_reply(piece, 100_000, 0.001), reply(RUN),
                        reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("look at a.py")
        wait_for(lambda: model.cut_off == 1, "the runaway stream was never closed")
        assert model.requests[0].get("timings_per_token") is True
    assert result.reason == "done"
    turn = next(e for e in events if e.type == "model_turn")
    assert turn.ended_early and turn.content == "<view>\n<path>a.py</path>\n</view>"
    assert agent.messages[2] == {"role": "assistant", "content": turn.content}
    assert [e.name for e in events if e.type == "tool_call"] == ["view", "bash"]


def test_prose_then_another_call_goes_on_but_a_final_answer_after_calls_waits(
        tmp_path: Path):
    two = ("<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</file_text>\n</create>\n"
           "<view>\n<path>a.py</path>\n</view>\n" + FINISH)
    with ScriptedModel([reply(two), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
    assert (result.reason, result.steps) == ("done", 3)
    # The refused final answer (nothing ran since the edit) is shown like a call.
    assert [e.name for e in events if e.type == "tool_call"] == ["create", "view",
                                                                  "final_answer"]
    # The first reply was kept up to its last tool call: its final answer was never taken.
    assert agent.messages[2]["content"].endswith("</view>")


def test_a_final_answer_with_calls_in_one_reply_is_refused_until_their_results_are_seen(
        tmp_path: Path):
    """The repaired-json route has no stream stop: the loop itself holds the answer back."""
    # Hermes-style calls, as Qwen's chat template teaches them.
    both = ('<tool_call>\n{"name": "bash", "arguments": {"command": "false"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "final_answer", "arguments": {"text": "fixed it"}}\n'
            '</tool_call>')
    fixed = json.dumps({"tool": "bash", "arguments": {"command": "true"}})
    with ScriptedModel([reply(both), reply(fixed), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("fix it")
    assert (result.reason, result.steps) == ("done", 3)
    refused = results_of(events)[1]
    assert refused.name == "final_answer" and refused.is_error and refused.text == AFTER_CALLS


def test_a_final_answer_right_after_failed_calls_is_refused_once(tmp_path: Path):
    ok = "<bash>\n<command>true</command>\n</bash>"
    fail = "<view>\n<path>missing.py</path>\n</view>"
    with ScriptedModel([reply(ok), reply(fail), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("look")
    assert (result.reason, result.steps) == ("done", 4)
    assert results_of(events)[2].text == AFTER_FAILURES.format(
        what="every call of your last reply")


def test_a_task_that_did_nothing_never_ends_done(tmp_path: Path):
    failing = "<view>\n<path>missing.py</path>\n</view>"
    with ScriptedModel([reply(failing), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("fix missing.py")
    assert result.reason == "nothing_done" and "nothing was done" in result.text
    assert results_of(events)[1].text == NOTHING_DONE
    assert events[-1].type == "final_answer" and events[-1].reason == "nothing_done"


def test_a_prose_answer_before_any_work_is_refused_under_native(tmp_path: Path):
    with ScriptedModel([reply("All done!"), reply("Done."), reply("Done.")],
                       supports_tools=True) as model:
        agent, _ = make_agent(model, tmp_path / "ws", protocol="native")
        result = agent.run("write a.py")
        told = model.requests[1]["messages"][-1]
    assert told == {"role": "user", "content": NOTHING_DONE}
    assert result.reason == "nothing_done"


def test_a_parameter_tag_as_a_files_content_is_a_format_error_and_writes_nothing(
        tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("def f():\n    return 1\n")
    stray = ("<create>\n<path>a.py</path>\n<file_text>\n<view_range>[1, 40]</view_range>\n"
             "</file_text>\n</create>")
    with ScriptedModel([reply(stray), reply("<view>\n<path>a.py</path>\n</view>"),
                        reply(RUN), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("fix a.py")
        feedback = model.requests[1]["messages"][-1]["content"]
    assert result.reason == "done"
    assert (tmp_path / "ws" / "a.py").read_text() == "def f():\n    return 1\n"
    assert "holds only a <view_range> tag" in feedback


def test_the_system_prompt_names_no_absolute_path(tmp_path: Path):
    registry = default_registry(Workspace(tmp_path))
    for protocol in ("text", "json", "native"):
        prompt = system_prompt(protocol, registry.openai_tools())
        assert str(tmp_path) not in prompt and "relative to the project's root" in prompt


def test_the_task_comes_again_after_what_the_product_read_first(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    with ScriptedModel([reply("<bash>\n<command>true</command>\n</bash>"),
                        reply(FINISH)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        agent.run("set x to 2 in a.py", first_calls=[("view", {"path": "a.py"})])
        sent = model.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2]["content"] == "<view>\n<path>a.py</path>\n</view>"
    assert "x = 1" in sent[3]["content"]
    assert sent[3]["content"].endswith("The task: set x to 2 in a.py")


def test_an_edit_that_breaks_a_file_says_so_and_the_task_cannot_end_done(tmp_path: Path):
    broken = ('<create>\n<path>numtools.py</path>\n<file_text>\n"""x"""\n"""\n'
              'def f():\n    return 1\n"""\n"""\n</file_text>\n</create>')
    with ScriptedModel([reply(broken), reply("<bash>\n<command>true</command>\n</bash>"),
                        reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("fix numtools.py")
    written = results_of(events)[0]
    assert not written.is_error
    assert "[problem: numtools.py does not parse: SyntaxError at line" in written.text
    refused = results_of(events)[2]
    assert refused.text.startswith(BROKEN.split("{")[0]) and "numtools.py" in refused.text
    assert result.reason == "broken_files" and "does not parse" in result.text


def test_a_failed_check_after_the_last_edit_is_refused_then_stops_the_task(tmp_path: Path):
    edit = "<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</file_text>\n</create>"
    check = "<bash>\n<command>exit 3</command>\n</bash>"
    look = "<view>\n<path>a.py</path>\n</view>"
    with ScriptedModel([reply(edit), reply(check), reply(look), reply(FINISH),
                        reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
    assert AFTER_FAILURES.format(what="your last check `exit 3`") == results_of(events)[3].text
    assert result.reason == "check_failed" and result.steps == 5


def test_a_passing_check_after_the_last_edit_lets_the_task_end_done(tmp_path: Path):
    edit = "<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</file_text>\n</create>"
    check = "<bash>\n<command>python a.py</command>\n</bash>"
    with ScriptedModel([reply(edit), reply(check), reply(FINISH)]) as model:
        agent, _ = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
    assert (result.reason, result.steps) == ("done", 3)


def test_a_task_that_changed_nothing_and_ran_nothing_never_ends_done(tmp_path: Path):
    """The 1.5B listed the folder twice and said the rename across three files was done."""
    look = "<view>\n<path>.</path>\n</view>"
    with ScriptedModel([reply(look), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("rename calc_total to order_total")
    assert results_of(events)[1].text == UNCHANGED
    assert (result.reason, result.steps) == ("nothing_changed", 3)
    assert "if it was a question, the answer is above" in result.text


def test_a_call_wrapped_in_another_runs_as_itself(tmp_path: Path):
    wrapped = ("<view>\n<create>\n<file_path>v.py</file_path>\n<file_text>\nx = 1\n"
               "</file_text>\n</create>\n</view>")
    with ScriptedModel([reply(wrapped), reply("<bash>\n<command>python v.py</command>\n"
                                              "</bash>"), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write v.py")
    assert result.reason == "done" and (tmp_path / "ws" / "v.py").read_text() == "x = 1\n"


def test_a_later_unchecked_edit_is_asked_about_again(tmp_path: Path):
    edit = "<create>\n<path>a.py</path>\n<file_text>\nx = {n}\n</file_text>\n</create>"
    with ScriptedModel([reply(edit.format(n=1)), reply(FINISH), reply(edit.format(n=2)),
                        reply(FINISH), reply("<bash>\n<command>python a.py</command>\n</bash>"),
                        reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
    refusals = [r.text for r in results_of(events) if r.name == "final_answer"]
    assert refusals == [UNCHECKED.format(files="a.py")] * 2
    assert (result.reason, result.steps) == ("done", 6)


def test_a_native_reply_calling_a_tool_that_does_not_exist_is_no_final_answer(tmp_path: Path):
    ghost = '```json\n{"name": "test_before_done", "arguments": {"path": "a.py"}}\n```'
    script = [reply(tool_calls=[("bash", {"command": "true"})]), reply(ghost),
              reply("All done."), reply("All done.")]
    with ScriptedModel(script, supports_tools=True) as model:
        agent, events = make_agent(model, tmp_path / "ws", protocol="native")
        result = agent.run("check it")
    unknown = results_of(events)[1]
    assert unknown.is_error and "unknown tool 'test_before_done'" in unknown.text
    # The failed call's reply is followed by one refusal, as any failed reply is.
    assert (result.reason, result.steps) == ("done", 4)


@pytest.mark.parametrize(("command", "said"), [
    ("python -m unittest discover", "Ran 0 tests"),
    # pytest exits 5 when it collects nothing: not a failed test but no check (the 1.5B ran
    # pytest in a project without tests, was told its check "failed" and said they passed).
    ("python -m pytest -q -p no:cacheprovider", "no tests ran"),
])
def test_a_check_that_ran_no_test_is_no_check_and_told_to_write_one(tmp_path: Path,
                                                                    command: str, said: str):
    (tmp_path / "ws").mkdir()
    edit = "<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</file_text>\n</create>"
    empty = f"<bash>\n<command>{command}</command>\n</bash>"
    with ScriptedModel([reply(edit), reply(empty), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
    assert said in results_of(events)[1].text
    refusal = results_of(events)[2].text
    assert refusal == EMPTY_CHECK.format(command=command)
    assert "write a short test file" in refusal
    assert result.reason == "check_failed"


def test_a_command_started_in_the_background_is_no_check(tmp_path: Path):
    edit = "<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</file_text>\n</create>"
    job = "<bash>\n<command>sleep 30</command>\n<background>true</background>\n</bash>"
    with ScriptedModel([reply(edit), reply(job), reply(FINISH), reply(FINISH)]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write a.py")
        agent.registry.close()
    refusals = [r.text for r in results_of(events) if r.name == "final_answer"]
    assert refusals == [UNCHECKED.format(files="a.py")]
    assert (result.reason, result.steps) == ("done", 4)
