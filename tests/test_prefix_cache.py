"""Prefix-cache stability measured on the real server's own timings."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import git

from agent.events import ModelTurn
from agent.sessions.log import read_events

SLACK = 24
"""Tokens per request the template may re-render differently (end-of-turn markers)."""


def test_a_five_task_chat_prefills_only_what_each_request_adds(real_server, tmp_path: Path,
                                                               agent_home: Path):
    server = real_server("ngram")
    repo = git.Repo.init(tmp_path / "repo")
    root = Path(repo.working_tree_dir)
    (root / "README.md").write_text("# demo\n")
    tasks = ["Create a file named a.txt containing the word alpha.",
             "Create a file named b.txt containing the word beta.",
             "Show the contents of a.txt with the view tool.",
             "Create a file named c.txt containing the word gamma.",
             "Call final_answer with the text: all done."]
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "DFLASH_AGENT_MAX_STEPS": "3"}
    proc = subprocess.run([sys.executable, "-m", "agent", "chat", "--approval", "full-auto",
                           "--tool-protocol", "json", "--base-url", server.base_url],
                          input="\n".join([*tasks, "/exit"]) + "\n", capture_output=True,
                          text=True, cwd=root, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    log = next((agent_home / "data" / "sessions").glob("2*.jsonl"))
    events = read_events(log)
    assert sum(e.type == "task_start" for e in events) == 5
    turns = [e.timings for e in events if isinstance(e, ModelTurn)]
    assert len(turns) >= 5 and all(t is not None for t in turns)
    # Consecutive requests, except across a compaction (which rewrites history by design).
    pairs, prev, compacted = [], None, False
    for e in events:
        if e.type == "compaction":
            compacted = True
        elif isinstance(e, ModelTurn):
            if prev is not None and not compacted:
                pairs.append((prev, e.timings))
            prev, compacted = e.timings, False
    assert len(pairs) >= 4
    prefilled = added = 0
    for prev, cur in pairs:
        # Tokens this request adds to the previous prompt: the model's last reply (its
        # re-tokenized text is prefilled again) and the new tool result or task.
        new_tokens = (cur.prompt_n + cur.cache_n) - (prev.prompt_n + prev.cache_n)
        assert cur.cache_n >= prev.prompt_n + prev.cache_n - SLACK, (prev, cur)
        assert cur.prompt_n <= new_tokens + SLACK, (prev, cur)
        prefilled += cur.prompt_n
        added += new_tokens
    assert prefilled <= added + SLACK * len(pairs)


def test_the_system_prompt_and_tools_carry_no_clock(tmp_path: Path):
    from agent.prompts import system_prompt
    from tools.registry import default_registry
    from tools.workspace import Workspace

    tools = default_registry(Workspace(tmp_path)).openai_tools()
    first = system_prompt("json", tools)
    time.sleep(1.1)
    assert system_prompt("json", tools) == first
    assert json.dumps(default_registry(Workspace(tmp_path)).openai_tools()) == json.dumps(tools)
    assert time.strftime("%Y-%m-%d") not in first and time.strftime("%H:%M") not in first


def test_two_sessions_on_one_server_keep_their_caches(engine, smollm2, tmp_path: Path):
    from agent.config import load_settings
    from agent.sessions.repo import RepoSession
    from agent.ui import Reporter
    from backend.serve.process import pick_port, stop
    from backend.serve.profiles import LaunchPlan
    from backend.serve.server import up

    plan = LaunchPlan(binary=engine.binary, model=smollm2, profile="baseline", ctx_size=8192,
                      parallel=2)
    state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=120)
    sessions = {}
    try:
        settings = load_settings(cli={"base_url": state.base_url, "approval": "full-auto",
                                      "max_steps": 2, "tool_protocol": "json"})
        for name in ("a", "b"):
            repo = git.Repo.init(tmp_path / name)
            sessions[name] = RepoSession(settings, Path(repo.working_tree_dir), Reporter())
        for name in ("a", "b", "a", "b"):
            sessions[name].run_task(f"Create a file named {name}.txt containing the word "
                                    f"{name}.")
        for session in sessions.values():
            events = read_events(session.log.path)
            second_task = max(i for i, e in enumerate(events) if e.type == "task_start")
            before = [e.timings for e in events[:second_task] if isinstance(e, ModelTurn)]
            after = [e.timings for e in events[second_task:] if isinstance(e, ModelTurn)]
            # The other session's task ran in between on the other slot: nothing was evicted.
            assert after[0].cache_n >= before[-1].prompt_n + before[-1].cache_n - SLACK
    finally:
        for session in sessions.values():
            session.close()
        stop(state)
