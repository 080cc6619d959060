import json
from pathlib import Path

from agent.doom import LoopDetector
from tests.scripted import ScriptedModel, reply
from tests.test_loop_scripted import make_agent


def call(tool: str, **arguments) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


def test_identical_calls_warn_then_stop():
    d = LoopDetector()
    assert d.observe("view", {"path": "a"}) == "ok"
    assert d.observe("view", {"path": "a"}) == "warn"
    assert d.observe("view", {"path": "a"}) == "stop"
    assert "3 times in a row" in d.report


def test_an_a_b_a_b_cycle_warns_then_stops():
    d = LoopDetector()
    verdicts = [d.observe("view", {"path": p}) for p in "ababab"]
    assert verdicts == ["ok", "ok", "ok", "warn", "warn", "stop"]
    assert "alternate" in d.report


def test_progress_is_not_a_loop():
    d = LoopDetector()
    assert all(d.observe("view", {"path": p}) == "ok" for p in "abcabd")


def test_the_loop_stops_an_alternating_model_with_a_report(tmp_path: Path):
    script = [call("view", path="."), call("glob", pattern="*")] * 3
    with ScriptedModel(script) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("go")
    assert result.reason == "repeated_call" and "alternate" in result.text
    results = [e for e in events if e.type == "tool_result"]
    assert "once more stops the task" in results[3].text  # warned first
    assert results[-1].text.startswith("not executed")


def test_a_run_of_four_calls_repeated_whole_warns_then_stops():
    """Qwen2.5-Coder-1.5B wrote the same four files over and over, each unchanged."""
    detector = LoopDetector()
    calls = [("create", {"path": p}) for p in ("a.py", "b.py", "c.py", "d.py")]
    verdicts = [detector.observe(name, args) for name, args in calls * 3]
    assert verdicts[:7] == ["ok"] * 7 and verdicts[7] == "warn" and verdicts[-1] == "stop"
    assert detector.report == "the last 12 calls repeat the same 4 calls 3 times without progress"


def test_calls_that_vary_are_no_repeat():
    detector = LoopDetector()
    names = ["view", "grep", "bash", "view", "grep", "create", "view", "grep", "bash"]
    assert {detector.observe(n, {}) for n in names} == {"ok"}
