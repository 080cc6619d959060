"""Field trial (data loss): a file the user saves while the model thinks is not overwritten.

The file tools remember what they last saw of each file (a view, or their own write) and an
edit of a file that changed since is refused with a word to the model, nothing written
(tools/edits.py has the rules). Real files throughout; the last tests go through a repo
session resumed from its log and through the loop with the scripted model on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.client import ServerClient
from agent.config import load_settings
from agent.loop import Agent, Limits
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply
from tools.registry import Registry, default_registry
from tools.workspace import Workspace

USER_WORK = b"v1\nUSER WORK\n"

CHANGED = ("f.py has changed since you last viewed or edited it (by the user, a formatter or "
           "another program); view it again before editing it, so that the change is not "
           "overwritten. Nothing was written.")
UNSEEN = ("f.py already exists and you have not viewed it as it is now (not in this session, "
          "or not since a command changed it); view it first: create replaces the whole "
          "file, and what it holds now would be lost (to change part of it, use str_replace "
          "or insert). Nothing was written.")


def ok(reg: Registry, tool: str, **arguments) -> str:
    obs = reg.call(tool, arguments)
    assert not obs.is_error, obs.text
    return obs.text


# --- the field trial's repro, and each edit tool ---------------------------------------------


def test_create_over_a_file_the_user_saved_since_the_view_is_refused(reg: Registry, ws: Path):
    (ws / "f.py").write_bytes(b"v1\n")
    ok(reg, "view", path="f.py")
    (ws / "f.py").write_bytes(USER_WORK)  # the user saves while the model thinks
    obs = reg.call("create", {"path": "f.py", "file_text": "v2\n"})
    assert obs.is_error and obs.text == CHANGED
    assert (ws / "f.py").read_bytes() == USER_WORK
    # Viewed again, the model has seen the user's work: its create is now an informed one.
    assert "USER WORK" in ok(reg, "view", path="f.py")
    # (v2 = 2: a bare ``v2`` is an undefined name, whose diagnostic would end the result)
    assert ok(reg, "create", path="f.py", file_text="v2 = 2\n") == "replaced f.py (1 line)"


@pytest.mark.parametrize(("tool", "arguments"), [
    ("str_replace", {"old_str": "v1", "new_str": "v2"}),
    ("insert", {"insert_line": 1, "text": "more"}),
])
def test_a_partial_edit_of_a_file_changed_since_the_view_is_refused_too(
        reg: Registry, ws: Path, tool: str, arguments: dict):
    """old_str would still match, but the model would edit a file it has not seen as it is."""
    (ws / "f.py").write_bytes(b"v1\n")
    ok(reg, "view", path="f.py")
    (ws / "f.py").write_bytes(USER_WORK)
    obs = reg.call(tool, {"path": "f.py", **arguments})
    assert obs.is_error and obs.text == CHANGED
    assert (ws / "f.py").read_bytes() == USER_WORK


def test_a_change_after_the_tools_own_write_is_refused(reg: Registry, ws: Path):
    ok(reg, "create", path="f.py", file_text="v1\n")
    (ws / "f.py").write_bytes(USER_WORK)
    obs = reg.call("create", {"path": "f.py", "file_text": "v2\n"})
    assert obs.is_error and obs.text == CHANGED
    assert (ws / "f.py").read_bytes() == USER_WORK


def test_the_refused_create_still_previews_as_a_replacement(reg: Registry, ws: Path):
    """The approval prompt shows a create without a preview as a new file: a create that will
    be refused must still show what it would replace."""
    (ws / "f.py").write_bytes(USER_WORK)
    preview = reg.preview("create", {"path": "f.py", "file_text": "v2\n"})
    assert preview is not None and "-USER WORK" in preview
    assert reg.call("create", {"path": "f.py", "file_text": "v2\n"}).is_error
    assert (ws / "f.py").read_bytes() == USER_WORK


# --- what keeps working ----------------------------------------------------------------------


def test_view_then_edit_after_edit_works(reg: Registry, ws: Path):
    (ws / "f.py").write_bytes(b"a = 1\nb = 2\n")
    ok(reg, "view", path="f.py")
    ok(reg, "str_replace", path="f.py", old_str="a = 1", new_str="a = 10")
    ok(reg, "insert", path="f.py", insert_line=2, text="c = 3")
    ok(reg, "str_replace", path="f.py", old_str="b = 2", new_str="b = 20")
    # The model repeating its own edit (a retry) is answered as before, not refused.
    obs = reg.call("str_replace", {"path": "f.py", "old_str": "b = 2\n", "new_str": "b = 20\n"})
    assert "already present" in obs.text and "changed since" not in obs.text
    ok(reg, "create", path="f.py", file_text="whole\n")
    # The same create again writes nothing and says so, as nothing would change; not refused
    # as a change by someone else.
    obs = reg.call("create", {"path": "f.py", "file_text": "whole\n"})
    assert "nothing was written" in obs.text and "changed since" not in obs.text, obs.text
    assert (ws / "f.py").read_bytes() == b"whole\n"
    ok(reg, "undo_edit", path="f.py")
    ok(reg, "undo_edit", path="f.py")
    assert (ws / "f.py").read_bytes() == b"a = 10\nb = 20\nc = 3\n"
    ok(reg, "str_replace", path="f.py", old_str="c = 3", new_str="c = 30")
    # The guard is on all along: a change by someone else after the chain is refused.
    (ws / "f.py").write_bytes(b"a = 10\nb = 20\nc = 30\nUSER WORK\n")
    assert reg.call("str_replace", {"path": "f.py", "old_str": "a = 10",
                                    "new_str": "a = 0"}).text == CHANGED


def test_a_partial_view_counts_as_seen(reg: Registry, ws: Path):
    (ws / "f.py").write_bytes(b"".join(b"line %d\n" % n for n in range(1, 11)))
    assert reg.call("create", {"path": "f.py", "file_text": "new\n"}).text == UNSEEN
    ok(reg, "view", path="f.py", view_range=[3, 4])
    ok(reg, "create", path="f.py", file_text="new\n")
    assert (ws / "f.py").read_bytes() == b"new\n"


def test_a_file_never_seen_takes_partial_edits_but_create_asks_for_a_view(
        reg: Registry, ws: Path):
    """The rule for a file the session never saw (a new or resumed session): str_replace and
    insert apply to the bytes as they are now; create would replace bytes the model has not
    seen, so it asks for a view; a new file is created as before."""
    (ws / "f.py").write_bytes(USER_WORK)
    ok(reg, "str_replace", path="f.py", old_str="v1", new_str="v2")
    ok(reg, "insert", path="f.py", insert_line=0, text="top")
    assert (ws / "f.py").read_bytes() == b"top\nv2\nUSER WORK\n"
    (ws / "g.py").write_bytes(USER_WORK)
    obs = reg.call("create", {"path": "g.py", "file_text": "v2\n"})
    assert obs.is_error and obs.text == UNSEEN.replace("f.py", "g.py")
    assert (ws / "g.py").read_bytes() == USER_WORK
    assert ok(reg, "create", path="new.py", file_text="x = 1\n") == "created new.py (1 line)"


def test_a_new_registry_over_the_same_files_has_seen_nothing(ws: Path):
    """What ``agent resume`` builds: a fresh registry, so every file is never seen."""
    (ws / "f.py").write_bytes(b"v1\n")
    first = default_registry(Workspace(ws))
    ok(first, "view", path="f.py")
    first.close()
    (ws / "f.py").write_bytes(USER_WORK)
    again = default_registry(Workspace(ws))
    try:
        obs = again.call("create", {"path": "f.py", "file_text": "v2\n"})
        assert obs.is_error and obs.text == UNSEEN
        assert (ws / "f.py").read_bytes() == USER_WORK
    finally:
        again.close()


# --- bash: the model's own changes -----------------------------------------------------------


def test_str_replace_after_the_models_own_sed_works(reg: Registry, ws: Path):
    (ws / "f.py").write_bytes(b"x = 1\ny = 2\n")
    ok(reg, "view", path="f.py")
    ok(reg, "bash", command="sed -i 's/x = 1/x = 5/' f.py")
    ok(reg, "str_replace", path="f.py", old_str="y = 2", new_str="y = 6")
    assert (ws / "f.py").read_bytes() == b"x = 5\ny = 6\n"
    # Its own write is seen again: the user's change after it is refused.
    (ws / "f.py").write_bytes(b"x = 5\ny = 6\nUSER WORK\n")
    assert reg.call("str_replace", {"path": "f.py", "old_str": "y = 6",
                                    "new_str": "y = 7"}).text == CHANGED


def test_create_after_the_models_own_sed_asks_for_a_view(reg: Registry, ws: Path):
    (ws / "f.py").write_bytes(b"x = 1\n")
    ok(reg, "view", path="f.py")
    ok(reg, "bash", command="sed -i 's/1/5/' f.py")
    obs = reg.call("create", {"path": "f.py", "file_text": "x = 9\n"})
    assert obs.is_error and obs.text == UNSEEN
    ok(reg, "view", path="f.py")
    ok(reg, "create", path="f.py", file_text="x = 9\n")


def test_a_command_that_leaves_the_file_alone_keeps_it_seen(reg: Registry, ws: Path):
    """Write, run the tests, rewrite: no view needed in between."""
    ok(reg, "create", path="f.py", file_text="x = 1\n")
    ok(reg, "bash", command="cat f.py > /dev/null")
    ok(reg, "create", path="f.py", file_text="x = 2\n")
    assert (ws / "f.py").read_bytes() == b"x = 2\n"
    # Kept, not forgotten: a change after the command is the user's, and refused as one.
    ok(reg, "bash", command="true")
    (ws / "f.py").write_bytes(USER_WORK)
    assert reg.call("create", {"path": "f.py", "file_text": "x = 3\n"}).text == CHANGED


# --- undo_edit -------------------------------------------------------------------------------


def test_undo_edit_after_a_user_change_is_refused(reg: Registry, ws: Path):
    (ws / "f.py").write_bytes(b"v1\n")
    ok(reg, "view", path="f.py")
    ok(reg, "str_replace", path="f.py", old_str="v1", new_str="v1\nmodel")
    (ws / "f.py").write_bytes(b"v1\nmodel\nUSER WORK\n")
    obs = reg.call("undo_edit", {"path": "f.py"})
    assert obs.is_error
    assert obs.text == ("f.py has changed since your last edit of it (by the user, a formatter, "
                        "another program or a command you ran); view it first: undo_edit would "
                        "discard that change. Nothing was written.")
    assert (ws / "f.py").read_bytes() == b"v1\nmodel\nUSER WORK\n"
    # The refusal took nothing off the history: viewed, the undo goes through.
    ok(reg, "view", path="f.py")
    ok(reg, "undo_edit", path="f.py")
    assert (ws / "f.py").read_bytes() == b"v1\n"


def test_undo_edit_of_a_created_file_the_user_changed_is_refused(reg: Registry, ws: Path):
    ok(reg, "create", path="new.py", file_text="x\n")
    (ws / "new.py").write_bytes(b"x\nUSER WORK\n")
    assert reg.call("undo_edit", {"path": "new.py"}).is_error
    assert (ws / "new.py").read_bytes() == b"x\nUSER WORK\n"


# --- a resumed repo session ------------------------------------------------------------------


def _session(url: str, repo: Path, resume: str | None = None) -> RepoSession:
    settings = load_settings(cli={"base_url": url, "approval": "full-auto",
                                  "tool_protocol": "native"})
    return RepoSession(settings, repo, Reporter(), resume=resume)


def test_a_resumed_session_has_seen_no_file(tmp_path: Path, agent_home: Path):
    """Session one views app.py; the user saves it while no agent runs; the resumed model
    writes from the view in its history: refused, as never viewed in this session, and the
    task goes on to view it and edit what is there now."""
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"}).close()
    repo = tmp_path / "repo"
    # A command before each "done": a final answer stands only after the task changed a file
    # or ran a command, and after an edit of code once a command ran (agent/finish.py).
    work = reply(tool_calls=[("bash", {"command": "true"})])
    with ScriptedModel([reply(tool_calls=[("view", {"path": "app.py"})]), work, reply("done")],
                       supports_tools=True) as model:
        session = _session(model.url, repo)
        try:
            session.run_task("look at app.py")
        finally:
            session.close()
    (repo / "app.py").write_text("x = 1\nUSER = 'work'\n")
    [log] = [p for p in (agent_home / "data" / "sessions").glob("*.jsonl")
             if p.name != "index.jsonl"]
    script = [reply(tool_calls=[("create", {"path": "app.py", "file_text": "x = 2\n"})]),
              reply(tool_calls=[("view", {"path": "app.py"})]),
              reply(tool_calls=[("str_replace", {"path": "app.py", "old_str": "x = 1",
                                                 "new_str": "x = 2"})]),
              work, reply("done")]
    with ScriptedModel(script, supports_tools=True) as model:
        session = _session(model.url, repo, resume=log.stem)
        try:
            result = session.run_task("set x to 2")
        finally:
            session.close()
    assert result.reason == "done"
    refusal = model.requests[1]["messages"][-1]
    assert refusal["role"] == "tool" and "have not viewed it as it is now" in refusal["content"]
    assert (repo / "app.py").read_text() == "x = 2\nUSER = 'work'\n"


# --- through the loop ------------------------------------------------------------------------


def test_the_refusal_reaches_the_model_and_the_task_goes_on(tmp_path: Path):
    """The repro through the loop: the user saves while the model thinks (right after the
    view's result); the model's create comes back refused as an observation; it views again
    and makes its change on top of the user's."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f.py").write_bytes(b"v = 1\n")
    # Python that parses: a final answer is refused while an edited file does not.
    user_work = b"v = 1\nUSER_WORK = 1\n"
    events: list = []

    def emit(event) -> None:
        events.append(event)
        if event.type == "tool_result" and event.name == "view" and len(
                [e for e in events if e.type == "tool_result"]) == 1:
            (root / "f.py").write_bytes(user_work)

    def call(tool: str, **arguments) -> dict:
        return reply(json.dumps({"tool": tool, "arguments": arguments}))

    script = [call("view", path="f.py"), call("create", path="f.py", file_text="v = 2\n"),
              call("view", path="f.py"),
              call("str_replace", path="f.py", old_str="v = 1", new_str="v = 2"),
              # Checked: a final answer after an edit of code no command ran is refused once.
              call("bash", command="true"), call("final_answer", text="v2 in place")]
    registry = default_registry(Workspace(root))
    with ScriptedModel(script) as model:
        agent = Agent(ServerClient(model.url), registry, session_id="t", protocol="json",
                      system="system prompt", emit=emit,
                      limits=Limits(max_steps=10, max_time=120))
        try:
            result = agent.run("make it v2")
        finally:
            registry.close()
    assert (result.reason, result.text) == ("done", "v2 in place")
    results = [e for e in events if e.type == "tool_result"]
    assert results[1].name == "create" and results[1].is_error and results[1].text.startswith(
        CHANGED)
    # The model read it as its observation, in the request after the create.
    assert CHANGED in model.requests[2]["messages"][-1]["content"]
    assert "USER_WORK" in results[2].text
    assert (root / "f.py").read_bytes() == b"v = 2\nUSER_WORK = 1\n"
