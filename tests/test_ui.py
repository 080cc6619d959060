import io

import pytest
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


def test_the_create_preview_counts_the_lines_the_tool_will_report():
    """Issue 28 item 11: "create one.txt (2 lines)" for one line ending with a newline."""
    reporter, out = _reporter()
    for path, text in [("one.txt", "x\n"), ("two.txt", "a\nb"), ("none.txt", "")]:
        reporter.event(ToolCall(session_id="s", step=1, call_id=path, name="create",
                                arguments={"path": path, "file_text": text}))
    assert out.getvalue().splitlines() == ["create one.txt (1 line)", "create two.txt (2 lines)",
                                           "create none.txt (0 lines)"]


def test_the_status_line_shows_prefill_reuse_speed_and_acceptance():
    reporter, out = _reporter()
    timings = Timings(prompt_n=40, cache_n=900, predicted_n=120, predicted_per_second=88.0,
                      draft_n=100, draft_n_accepted=70)
    reporter.event(ModelTurn(session_id="s", step=3, protocol="json", content="{}",
                             timings=timings))
    line = out.getvalue()
    assert "step 3" in line and "prefill 40 (reused 900)" in line
    assert "88 tok/s" in line and "accepted 70 of 100 drafted tokens" in line
    assert reporter.totals["reused"] == 900


def test_a_slow_step_reads_its_speed_to_a_tenth_not_zero():
    """A fresh clone's first step decoded at 0.45 tok/s under load and read "0 tok/s"."""
    reporter, out = _reporter()
    for step, rate in ((1, 0.45), (2, 2.5), (3, 12.4)):
        reporter.event(ModelTurn(session_id="s", step=step, protocol="json", content="{}",
                                 timings=Timings(prompt_n=9, cache_n=0, predicted_n=55,
                                                 predicted_per_second=rate)))
    text = out.getvalue()
    assert "decode 55 at 0.5 tok/s" in text or "decode 55 at 0.4 tok/s" in text, text
    assert "at 2.5 tok/s" in text and "at 12 tok/s" in text and "at 0 tok/s" not in text


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


def _turn(step: int, prompt_n: int, cache_n: int, predicted_n: int, draft_n: int = 0,
          accepted: int = 0) -> ModelTurn:
    return ModelTurn(session_id="s", step=step, protocol="text", content="x",
                     timings=Timings(prompt_n=prompt_n, cache_n=cache_n,
                                     predicted_n=predicted_n, predicted_per_second=50.0,
                                     draft_n=draft_n, draft_n_accepted=accepted))


def test_a_step_that_prefills_the_last_reply_again_says_so():
    """Issue 14 item 4: a reply should be served from cache on the next request; turn 2's
    50-token reply was only 10 tokens in, so 40 were prefilled again."""
    reporter, out = _reporter()
    reporter.event(_turn(1, 1000, 0, 200))
    reporter.event(_turn(2, 100, 1200, 50))  # prompt 1000 + reply 200 reused: fine
    assert "re-prefilled" not in out.getvalue()
    reporter.event(_turn(3, 200, 1310, 40))  # of turn 2's 1,300 + 50, only 1,310 reused
    assert "re-prefilled 40 of the last reply" in out.getvalue()
    assert reporter.totals["reply_misses"] == 40


def test_the_session_summary_gives_the_cache_share_and_the_accepted_draft_share():
    from agent.events import FinalAnswer

    reporter, out = _reporter()
    reporter.event(_turn(1, 1000, 0, 200, draft_n=300, accepted=150))
    reporter.event(_turn(2, 100, 1200, 100, draft_n=80, accepted=30))
    reporter.event(FinalAnswer(session_id="s", text="ok", reason="done", steps=2))
    summary = out.getvalue()
    assert "1200 of 2300 prompt tokens from cache (52%)" in summary
    assert "180 of 380 drafted tokens accepted (47%), 60% of the 300 decoded" in summary


def test_a_reply_cut_and_kept_as_a_stub_is_not_counted_as_re_prefilled():
    """Issue 28 item 6: a reply cut at max_tokens is kept as a short stub (agent.loop._cut),
    so the next request prefills that stub, not the 2048 tokens decoded: the step line said
    're-prefilled 2048 of the last reply' while 91 tokens were prefilled."""
    reporter, out = _reporter()
    reporter.event(ModelTurn(session_id="s", step=1, protocol="json", content="x" * 9000,
                             finish_reason="length",
                             timings=Timings(prompt_n=1000, cache_n=0, predicted_n=2048)))
    reporter.event(_turn(1, 91, 1000, 30))  # the stub and the next task, on the prompt
    assert "re-prefilled" not in out.getvalue()
    assert reporter.totals["reply_misses"] == 0


def test_the_re_prefill_figure_never_exceeds_what_was_prefilled():
    """A shorter history (compacted) reuses less than the last prompt and reply: of the
    reply's tokens, at most what this request prefilled can have been prefilled again."""
    reporter, out = _reporter()
    reporter.event(_turn(1, 1000, 0, 200))
    reporter.event(_turn(2, 50, 900, 10))
    assert "re-prefilled 50 of the last reply" in out.getvalue()
    assert reporter.totals["reply_misses"] == 50


def test_a_build_to_a_file_or_pipe_prints_lines_not_a_silent_bar():
    # A rich progress bar prints nothing when stderr is not a terminal: the fresh-clone run
    # piped to a file showed nine silent minutes after "Building llama-server".
    reporter, out = _reporter()
    reporter.build_progress("log /h/cache/engines/llama.cpp-11434-cpu-x/build.log", None, None)
    at = 1000.0
    for step, done, total, dt in [("fetch", None, None, 0), ("unpack", None, None, 5),
                                  ("configure", None, None, 10), ("build", 1, 208, 5),
                                  ("build", 2, 208, 10), ("build", 90, 208, 30),
                                  ("build", 91, 208, 5), ("install", None, None, 500)]:
        at += dt
        reporter._build_line(step, done, total, at)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Building llama-server (first run only")
    # The line says where the log is, so a user can follow a long build (it said "beside the
    # engine", then "<engines>/<engine>/build.log" with the folder left for the user to find).
    assert "full log: /h/cache/engines/llama.cpp-11434-cpu-x/build.log)" in lines[0]
    assert lines[1:] == ["build: fetch (0 min 00 s)", "build: unpack (0 min 05 s)",
                         "build: configure (0 min 15 s)", "build: build 1/208 (0 min 20 s)",
                         "build: build 90/208 (1 min 00 s)", "build: done in 9 min 25 s"]
    # The public callback takes that path by itself on a console that is not a terminal.
    reporter, out = _reporter()
    reporter.build_progress("fetch", None, None)
    assert "build: fetch (0 min 00 s)" in out.getvalue()


def test_an_interruption_names_its_step_not_a_count_of_finished_calls():
    """A field trial: Ctrl-C during the second model call printed "after 2 model calls" beside
    the session line's "1 model calls" (the second never finished)."""
    from agent.ui import stop_line

    assert stop_line("interrupted", "", 2).startswith("interrupted (Ctrl-C) in step 2: ")
    assert stop_line("interrupted", "SIGTERM", 1).startswith("interrupted (SIGTERM) in step 1")


@pytest.mark.parametrize("reason", ["repeated_call", "format_errors", "length"])
def test_a_stop_that_advises_a_larger_model_says_where_the_presets_are(reason: str):
    """A fresh user's first command stopped with "use a larger model (--preset)": which
    presets there are, nothing said."""
    from agent.ui import stop_line

    assert "--preset NAME; `agent backend presets` lists them" in stop_line(reason, "x", 3)
