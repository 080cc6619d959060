"""The ``whole`` protocol (files written whole in fences, commands in bash blocks, prose to
finish) and the repeat guard (a greedy reply that repeats an earlier one is asked again with
sampling): the parser on the forms small models write, and the loop against a scripted model
on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.client import ServerClient
from agent.finish import UNCHECKED
from agent.loop import Agent, Limits
from agent.prompts import system_prompt
from agent.protocols.base import FormatError
from agent.protocols.whole import PATH_BEFORE_FENCE, in_own_words, parse_whole_calls
from agent.repeats import REPEATED, RESAMPLE
from agent.sessions.named_files import SMALL_PROJECT_FILES, with_named_files
from tests.scripted import ScriptedModel, reply
from tools.registry import default_registry
from tools.workspace import Workspace

F = "```"


def test_a_listing_after_its_path_is_a_create_and_a_bash_block_a_command():
    content = (f"The bug is in digit_sum.\n\nnumtools.py\n{F}python\ndef f():\n    return 1\n"
               f"{F}\n\nRun the tests:\n{F}bash\n$ python -m pytest -q\n{F}\n")
    assert parse_whole_calls(content) == [
        ("create", {"path": "numtools.py", "file_text": "def f():\n    return 1\n"}),
        ("bash", {"command": "python -m pytest -q"})]


@pytest.mark.parametrize("before", [
    "**src/calc.py**", "`src/calc.py`:", "### src/calc.py", "File: src/calc.py",
    "Here is the updated `src/calc.py`:", "./src/calc.py", "Filename: **src/calc.py**"])
def test_the_decorations_models_put_around_a_path_are_read_past(before: str):
    calls = parse_whole_calls(f"{before}\n{F}python\nx = 1\n{F}\n")
    assert calls == [("create", {"path": "src/calc.py", "file_text": "x = 1\n"})]


@pytest.mark.parametrize("info", ["python:src/calc.py", 'python title="src/calc.py"',
                                  "src/calc.py"])
def test_a_path_in_the_fence_info_string_counts(info: str):
    assert parse_whole_calls(f"{F}{info}\nx = 1\n{F}\n") == [
        ("create", {"path": "src/calc.py", "file_text": "x = 1\n"})]


def test_prose_alone_is_the_final_answer_and_output_fences_are_not_edits():
    assert parse_whole_calls("Renamed calc_total to order_total in three files.") == []
    assert parse_whole_calls(f"The tests pass:\n{F}\n3 passed in 0.01s\n{F}\nDone.") == []


def test_a_code_block_without_a_path_is_an_example_beside_a_listing_and_an_error_alone():
    example = f"Use it like this:\n{F}python\nprint(add(1, 2))\n{F}\n"
    listing = f"calc.py\n{F}python\ndef add(a, b):\n    return a + b\n{F}\n"
    assert parse_whole_calls(listing + "\n" + example) == [
        ("create", {"path": "calc.py", "file_text": "def add(a, b):\n    return a + b\n"})]
    with pytest.raises(FormatError) as err:
        parse_whole_calls(example)
    assert str(err.value) == PATH_BEFORE_FENCE


def test_a_sentence_that_mentions_a_file_is_not_its_path():
    # "I changed calc.py." then an example: the sentence is no path line, so no overwrite.
    with pytest.raises(FormatError):
        parse_whole_calls(f"I changed calc.py.\n{F}python\nprint(add(1, 2))\n{F}\n")


def test_a_listing_left_open_runs_to_the_end_of_the_reply():
    assert parse_whole_calls(f"calc.py\n{F}python\nx = 1\n") == [
        ("create", {"path": "calc.py", "file_text": "x = 1\n"})]


def test_a_file_holding_fences_is_listed_in_a_longer_fence():
    body = f"# Notes\n\n{F}bash\nmake\n{F}\n"
    assert parse_whole_calls(f"README.md\n````markdown\n{body}````\n") == [
        ("create", {"path": "README.md", "file_text": body})]


def make_agent(model: ScriptedModel, root: Path, sampling: dict | None = None):
    root.mkdir(exist_ok=True)
    registry = default_registry(Workspace(root))
    events: list = []
    agent = Agent(ServerClient(model.url), registry, session_id="t", protocol="whole",
                  system=system_prompt("whole", registry.openai_tools()),
                  emit=events.append, limits=Limits(max_steps=8, max_time=120),
                  sampling=sampling)
    return agent, events


def test_a_whole_session_writes_the_file_runs_the_check_and_finishes(tmp_path: Path):
    listing = f"calc.py\n{F}python\ndef add(a, b):\n    return a + b\n{F}\n"
    check = f"{F}bash\npython -c 'import calc; assert calc.add(1, 2) == 3'\n{F}\n"
    with ScriptedModel([reply(listing), reply("Added add()."), reply(check),
                        reply("Added add() to calc.py; checked it.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write calc.py with add(a, b)")
    assert (result.reason, result.text) == ("done", "Added add() to calc.py; checked it.")
    assert (tmp_path / "ws" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    results = [e for e in events if e.type == "tool_result"]
    assert [(r.name, r.is_error) for r in results] == [("create", False), ("bash", False)]
    # The first summary came before any check: refused in the protocol's own words.
    told = model.requests[2]["messages"][-1]["content"]
    assert told == in_own_words(UNCHECKED.format(files="calc.py"))
    assert "final_answer" not in told and "```bash block" in told
    # No tools and no grammar travel under whole; the prompt shows the listing form.
    first = model.requests[0]
    assert "tools" not in first and "response_format" not in first
    assert "calc.py\n```python" in first["messages"][0]["content"]


def test_a_greedy_reply_that_repeats_an_earlier_one_is_not_run_and_asked_again_sampled(
        tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "t.py").write_text("assert 1 == 2\n")
    failing = f"{F}bash\npython t.py\n{F}\n"
    fixed = f"t.py\n{F}python\nassert 1 == 1\n{F}\n\n{failing}"
    with ScriptedModel([reply(failing), reply(failing), reply(fixed),
                        reply("Fixed t.py.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws", sampling={"temperature": 0})
        agent.registry.call("view", {"path": "t.py"})
        result = agent.run("make t.py pass")
    assert result.reason == "done"
    bash_runs = [e for e in events if e.type == "tool_call" and e.name == "bash"]
    assert len(bash_runs) == 2  # the repeat did not run
    turns = [e for e in events if e.type == "model_turn"]
    assert [t.repeated for t in turns] == [False, True, False, False]
    temps = [(r.get("temperature"), r.get("top_p"), r.get("seed")) for r in model.requests]
    wide = (RESAMPLE["temperature"], RESAMPLE["top_p"], 3)
    assert temps == [(0, None, None), (0, None, None), wide, (0, None, None)]
    # The repeat stays in the history (append-only), followed by the note that it did not run.
    sent = [m["content"] for m in model.requests[2]["messages"]]
    assert sent[-2:] == [failing, in_own_words(REPEATED)]
    assert "call final_answer" not in sent[-1] and "reply with a short summary" in sent[-1]


def test_a_repeat_under_sampling_is_run_as_it_is(tmp_path: Path):
    same = f"{F}bash\ntrue\n{F}\n"
    with ScriptedModel([reply(same), reply(same), reply("Ran it.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws", sampling={"temperature": 0.7})
        agent.run("run true twice")
    assert len([e for e in events if e.type == "tool_call"]) == 2
    assert all(r.get("temperature") == 0.7 for r in model.requests)


def test_a_small_project_is_shown_whole_with_the_named_file_first(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "test_pagination.py").write_text("from pagination import page\n")
    (root / "pagination.py").write_text("def page(items, n):\n    return items\n")
    (root / "logo.png").write_bytes(b"\x89PNG\0\0")
    (root / ".env").write_text("TOKEN=secret\n")
    registry = default_registry(Workspace(root))
    task = "The tests in test_pagination.py fail; fix the code."
    message = with_named_files(task, registry, Workspace(root), whole_project=True)
    assert message.index("test_pagination.py\n```python") \
        < message.index("pagination.py\n```python\ndef page")
    assert "logo.png" not in message and "secret" not in message
    assert message.endswith(f"The task: {task}")
    # The files shown count as seen: the model may write them whole.
    assert not registry.call("create", {"path": "pagination.py",
                                        "file_text": "def page(items, n):\n    return []\n"}
                             ).is_error
    # Without whole, only the named file; a larger project is not shown whole.
    assert "def page" not in with_named_files(task, registry, Workspace(root))
    for i in range(SMALL_PROJECT_FILES):
        (root / f"m{i}.py").write_text("x = 1\n")
    assert "def page" not in with_named_files(task, registry, Workspace(root),
                                              whole_project=True)


def test_a_repeated_final_answer_is_the_ledgers_to_judge_not_held_back(tmp_path: Path):
    listing = f"calc.py\n{F}python\nx = 1\n{F}\n"
    with ScriptedModel([reply(listing), reply("Done."), reply("Done.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws", sampling={"temperature": 0})
        result = agent.run("write calc.py")
    # Refused once as unchecked, then taken: a repeat of a final answer is no repeated call.
    assert (result.reason, result.steps) == ("done", 3)
    assert not any(e.repeated for e in events if e.type == "model_turn")
    assert all(r.get("temperature") == 0 for r in model.requests)


def test_held_back_repeats_still_count_toward_the_repeated_call_stop(tmp_path: Path):
    same = f"{F}bash\nfalse\n{F}\n"
    with ScriptedModel([reply(same)] * 3) as model:
        agent, events = make_agent(model, tmp_path / "ws", sampling={"temperature": 0})
        result = agent.run("run false")
    # Run once, held back twice: three in a row stop the task as three runs did before.
    assert result.reason == "repeated_call" and "3 times in a row" in result.text
    assert len([e for e in events if e.type == "tool_call"]) == 1
    assert len(model.requests) == 3


def test_a_reply_ends_after_its_first_command_and_the_real_output_comes_back(tmp_path: Path):
    """The 1.5B wrote its files, a pytest run with made-up failures and a fix for them, until
    max_tokens cut the reply and nothing ran: the reply now ends after the command."""
    listing = f"calc.py\n{F}python\ndef add(a, b):\n    return a + b\n{F}\n\n"
    command = f"{F}bash\npython -c 'import calc; print(calc.add(2, 3))'\n{F}\n"
    imagined = f"{F}\n==== 1 failed ====\n{F}\nFix it:\ncalc.py\n{F}python\nbroken(\n{F}\n" * 20
    with ScriptedModel([reply(listing + command + imagined), reply("Added add(); it prints 5."),
                        ]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write calc.py with add(a, b) and run it")
    first = next(e for e in events if e.type == "model_turn")
    assert first.ended_early and first.content == listing + command
    assert (tmp_path / "ws" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    ran = [e for e in events if e.type == "tool_result" and e.name == "bash"]
    assert [r.text.split()[0] for r in ran] == ["5"]
    assert result.reason == "done"


def test_a_reply_ends_before_made_up_output_after_its_files(tmp_path: Path):
    """The 1.5B wrote its two files, ``python -m pytest -q`` on a line, then a fence of
    made-up pytest output that ran to 240,000 characters: the reply now ends before that fence
    and the files are written."""
    files = (f"add.py\n{F}python\ndef add(a, b):\n    return a + b\n{F}\n\n"
             f"tests/test_add.py\n{F}python\nimport add\n\n\ndef test_add():\n"
             f"    assert add.add(1, 2) == 3\n{F}\n\npython -m pytest -q\n")
    made_up = f"{F}\n==== test session starts ====\n" + "." * 400 + "\n"
    check = f"{F}bash\npython -c 'import add; assert add.add(1, 2) == 3'\n{F}\n"
    with ScriptedModel([reply(files + made_up), reply(check),
                        reply("Wrote add.py and its test.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write add.py with a test")
    assert result.reason == "done"
    first = next(e for e in events if e.type == "model_turn")
    assert first.ended_early and first.content == files
    assert (tmp_path / "ws" / "tests" / "test_add.py").is_file()


def test_a_long_command_block_after_the_files_is_made_up_output_and_ends_the_reply(
        tmp_path: Path):
    files = f"t.py\n{F}python\nx = 1\n{F}\n\npython -m pytest -q\n"
    made_up = f"{F}bash\n==== test session starts ====\n" + "    assert x == 1\n" * 40
    check = f"{F}bash\npython t.py\n{F}\n"
    with ScriptedModel([reply(files + made_up), reply(check), reply("Done.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws")
        result = agent.run("write t.py")
    first = next(e for e in events if e.type == "model_turn")
    assert first.ended_early and first.content == files
    assert result.reason == "done" and (tmp_path / "ws" / "t.py").read_text() == "x = 1\n"


def test_the_same_check_after_an_edit_is_a_new_check_not_a_repeat(tmp_path: Path):
    check = f"{F}bash\npython t.py\n{F}\n"
    broken = f"t.py\n{F}python\nassert 1 == 2\n{F}\n"
    fixed = f"t.py\n{F}python\nassert 1 == 1\n{F}\n"
    with ScriptedModel([reply(broken), reply(check), reply(fixed), reply(check),
                        reply("Fixed t.py; it runs.")]) as model:
        agent, events = make_agent(model, tmp_path / "ws", sampling={"temperature": 0})
        result = agent.run("make t.py pass")
    assert result.reason == "done"
    runs = [e for e in events if e.type == "tool_result" and e.name == "bash"]
    assert [r.is_error for r in runs] == [True, False]
    assert not any(e.repeated for e in events if e.type == "model_turn")


def test_a_listing_cannot_write_outside_the_workspace_or_under_git(tmp_path: Path):
    """A file listing is a create call: the workspace's refusals hold for it (a path in a
    model's reply, or in a file it read, is untrusted)."""
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    hostile = (f"../escaped.py\n{F}python\nx = 1\n{F}\n\n"
               f".git/hooks/post-checkout.py\n{F}python\nimport os\n{F}\n")
    with ScriptedModel([reply(hostile), reply("Done."), reply("Done.")]) as model:
        agent, events = make_agent(model, root)
        result = agent.run("write the files")
    assert result.reason == "nothing_done"  # and never exit 0
    results = [e for e in events if e.type == "tool_result" and e.name == "create"]
    assert len(results) == 2 and all(r.is_error for r in results)
    assert not (tmp_path / "escaped.py").exists()
    assert not (root / ".git" / "hooks" / "post-checkout.py").exists()
