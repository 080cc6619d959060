"""Running tasks: a fresh repository per task, the agent through its adapter with a step and a
wall-clock limit, then the hidden check; one JSON line per task, appended as it finishes."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import Adapter, Limits, run_agent
from benchmarks.tasks.tasks import Task, TaskError, prepare_repo, run_check


@dataclass
class Options:
    out: Path
    resume: bool = False
    keep: bool = False
    work_dir: Path | None = None
    max_steps: int | None = None
    """Overrides every task's own step limit."""
    timeout_s: float | None = None
    """Overrides every task's own wall-clock limit."""


def config_key(adapter: Adapter) -> str:
    """What ``--resume`` matches: the agent's label and its configuration."""
    return json.dumps({"agent": adapter.label, **adapter.config()}, sort_keys=True)


def read_records(path: Path, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The records of a results file; a line that is not a JSON object is skipped (with a
    warning naming it: a run killed mid-write leaves half a line)."""
    records = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: cannot read the results file ({exc})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and "task" in record:
            records.append(record)
        elif warn is not None:
            warn(f"{path}:{number}: not a task record, skipped")
    return records


def done_tasks(path: Path, key: str) -> set[str]:
    """``suite/id`` of the tasks ``path`` already holds for the configuration ``key``."""
    return {f"{r.get('suite')}/{r['task']}" for r in read_records(path)
            if r.get("config_key") == key}


def run_task(task: Task, adapter: Adapter, opts: Options) -> dict[str, Any]:
    """Run ``task`` with ``adapter`` in a fresh repository; its record."""
    limits = Limits(max_steps=opts.max_steps or task.max_steps,
                    timeout_s=opts.timeout_s or task.timeout_s)
    if opts.work_dir is not None:
        opts.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"task-{task.id}-", dir=opts.work_dir))
    started = datetime.now(UTC)
    try:
        repo = prepare_repo(task, work / "repo")
        argv = adapter.command(task, repo, limits, work / "agent")
        run = run_agent(argv, repo, adapter.env(), adapter.timeout(limits))
        fields = adapter.parse(run)
        check = run_check(task, repo)
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    passed = check.passed
    record: dict[str, Any] = {
        "task": task.id, "suite": task.suite, "tags": list(task.tags),
        "agent": adapter.label, "config": adapter.config(), "config_key": config_key(adapter),
        "pass": passed, "exit_code": run.exit_code,
        # an agent that says it finished (exit 0) while the hidden check fails
        "false_success": run.exit_code == 0 and not passed,
        **fields,
        "wall_s": round(run.seconds, 2),
        "limits": {"max_steps": limits.max_steps, "timeout_s": limits.timeout_s},
        "check": check.as_dict(), "output_tail": adapter.output_tail(run),
        "started_at": started.isoformat(timespec="seconds"),
        "agent_info": adapter.info(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": sys.platform},
    }
    if opts.keep:
        record["work_dir"] = str(work)
    return record


def progress_line(index: int, total: int, record: dict[str, Any]) -> str:
    verdict = "PASS" if record["pass"] else "fail"
    if record["false_success"]:
        verdict += " (false success: exit 0, check failed)"
    return (f"[{index}/{total}] {record['suite']}/{record['task']}: {verdict}; exit "
            f"{record['exit_code']}, {record.get('stop_reason')}, {record.get('steps')} steps, "
            f"{record['wall_s']:.1f} s, check {record['check']['status']}")


def run_tasks(tasks: list[Task], adapter: Adapter, opts: Options,
              echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run ``tasks`` in order, appending each record to ``opts.out`` as it finishes (so an
    interrupted run keeps what it did); with ``resume``, tasks already recorded for this
    agent and configuration are skipped. The adapter is set up once, only when a task is left
    to run. Returns the new records."""
    key = config_key(adapter)
    skip = done_tasks(opts.out, key) if opts.resume else set()
    todo = [t for t in tasks if t.key not in skip]
    if skip:
        echo(f"resume: {len(tasks) - len(todo)} of {len(tasks)} tasks already in {opts.out} "
             f"for {adapter.label}; running {len(todo)}")
    if not todo:
        return []
    adapter.setup()
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    for index, task in enumerate(todo, start=1):
        record = run_task(task, adapter, opts)
        with opts.out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        records.append(record)
        echo(progress_line(index, len(todo), record))
    return records
