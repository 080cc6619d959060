import io

from rich.console import Console

from agent.events import ModelTurn, Timings, ToolCall
from agent.ui import Reporter


def _reporter() -> tuple[Reporter, io.StringIO]:
    out = io.StringIO()
    reporter = Reporter()
    reporter.console = Console(file=out, force_terminal=False, width=200, soft_wrap=True)
    return reporter, out


def test_edits_show_as_a_diff_and_commands_as_a_prompt_line():
    reporter, out = _reporter()
    reporter.event(ToolCall(session_id="s", step=1, call_id="c", name="str_replace",
                            arguments={"path": "a.py", "old_str": "x = 1", "new_str": "x = 2"}))
    reporter.event(ToolCall(session_id="s", step=2, call_id="d", name="bash",
                            arguments={"command": "pytest -q"}))
    text = out.getvalue()
    assert "edit a.py" in text and "-x = 1" in text and "+x = 2" in text
    assert "$ pytest -q" in text


def test_the_status_line_shows_prefill_reuse_speed_and_acceptance():
    reporter, out = _reporter()
    timings = Timings(prompt_n=40, cache_n=900, predicted_n=120, predicted_per_second=88.0,
                      draft_n=100, draft_n_accepted=70)
    reporter.event(ModelTurn(session_id="s", step=3, protocol="json", content="{}",
                             timings=timings))
    line = out.getvalue()
    assert "step 3" in line and "prefill 40 (reused 900)" in line
    assert "88 tok/s" in line and "accepted 70/100" in line
    assert reporter.totals["reused"] == 900


def test_prose_streams_but_json_calls_do_not():
    reporter, out = _reporter()
    reporter.request_started("native")
    reporter.stream("Hello ")
    reporter.stream("world")
    reporter.request_done()
    reporter.request_started("json")
    reporter.stream('{"tool": "view"}')
    reporter.request_done()
    assert "Hello world" in out.getvalue() and '"tool"' not in out.getvalue()
