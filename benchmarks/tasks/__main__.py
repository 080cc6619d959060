"""``python -m benchmarks.tasks``: run, report, list and verify the task suites; install the
peer agents (``install-peer NAME``) into their own folders outside the repository.

Exit codes: 0 done (whatever the agents scored); 2 bad usage or a broken task folder,
results file or task list; 3 a peer or server that could not be set up; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.tasks import ROOT
from benchmarks.tasks.adapters import ADAPTERS
from benchmarks.tasks.adapters.base import Adapter, BenchError
from benchmarks.tasks.adapters.dflash import DflashAgent
from benchmarks.tasks.adapters.install import PEERS, PEERS_ENV, install_peer, peers_dir
from benchmarks.tasks.adapters.peer import Peer
from benchmarks.tasks.report import markdown, plot
from benchmarks.tasks.runner import Options, read_records, run_tasks
from benchmarks.tasks.tasks import TaskError, select, verify


def _positive(kind: type) -> callable:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value
    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tasks",
                                description="Coding agents on small repository-edit tasks, "
                                "judged by hidden checks.")
    sub = p.add_subparsers(dest="command", required=True)
    tasks_help = ("a suite (repo-edit; humaneval: every 8th HumanEval problem, humaneval-all: "
                  "all 164, fetched once with pip), task ids or suite/id keys, or globs, "
                  "comma-separated (default: every folder suite)")
    run = sub.add_parser("run", help="run the tasks with one agent; one JSON line per task")
    run.add_argument("--agent", choices=sorted(ADAPTERS), default="dflash-agent")
    run.add_argument("--tasks", help=tasks_help)
    run.add_argument("--out", type=Path, required=True, help="results file (JSON lines, "
                     "appended)")
    run.add_argument("--resume", action="store_true", help="skip the tasks --out already "
                     "holds for this agent and configuration")
    run.add_argument("--tool-protocol", choices=["auto", "text", "json", "native", "whole"],
                     help="dflash-agent's tool-call protocol (default: its own, auto)")
    run.add_argument("--preset", help="the model preset (agent backend presets)")
    run.add_argument("--profile", help="dflash-agent's server profile")
    run.add_argument("--base-url", help="an OpenAI-compatible server to use instead of the "
                     "managed llama-server")
    run.add_argument("--model", help="a peer: the model id to ask for (default: the server's "
                     "first in /v1/models)")
    run.add_argument("--peer-bin", "--aider-bin", dest="peer_bin", type=Path,
                     help="a peer: its executable (default: the one install-peer put in the "
                     f"peers' folder, now {peers_dir()}, set by ${PEERS_ENV}; else its command "
                     "on PATH)")
    run.add_argument("--edit-format", help="a peer: its edit format (aider: whole, or any of "
                     "aider's; mini-swe-agent: text or tool; the others: native)")
    run.add_argument("--max-steps", type=_positive(int), help="every task's step limit")
    run.add_argument("--timeout", type=_positive(float), help="every task's wall-clock limit "
                     "in seconds")
    run.add_argument("--keep", action="store_true", help="keep each task's repository (its "
                     "path goes in the record)")
    run.add_argument("--work-dir", type=Path, help="where the task repositories are made "
                     "(default: the system's temporary folder)")
    run.add_argument("--root", type=Path, default=ROOT, help="the folder of suites")
    run.add_argument("--plot", type=Path, help="also write the chart of the whole --out file")
    rep = sub.add_parser("report", help="markdown tables (and a chart) from a results file")
    rep.add_argument("results", type=Path)
    rep.add_argument("--plot", type=Path, help="write a PNG chart here")
    lst = sub.add_parser("list", help="the tasks, one line each")
    lst.add_argument("--tasks", help=tasks_help)
    lst.add_argument("--root", type=Path, default=ROOT)
    ver = sub.add_parser("verify", help="check each task: its check fails on the starting "
                         "files and passes on its reference solution")
    ver.add_argument("--tasks", help=tasks_help)
    ver.add_argument("--root", type=Path, default=ROOT)
    peer_help = (f"install a peer agent's pinned version ({', '.join(map(str, PEERS.values()))}"
                 ") into its own folder <folder>/<name> (a venv made with this interpreter, or "
                 f"an npm prefix); the folder is ${PEERS_ENV}, else the user's cache (now "
                 f"{peers_dir()}); a folder that holds the pinned version is left alone")
    peer = sub.add_parser("install-peer", help=peer_help, description=peer_help)
    peer.add_argument("name", choices=sorted(PEERS))
    return p


def adapter_for(args: argparse.Namespace) -> Adapter:
    cls = ADAPTERS[args.agent]
    if issubclass(cls, Peer):
        return cls(base_url=args.base_url, preset=args.preset, model=args.model,
                   binary=args.peer_bin, edit_format=args.edit_format)
    protocol = None if args.tool_protocol in (None, "auto") else args.tool_protocol
    return DflashAgent(tool_protocol=protocol, preset=args.preset, base_url=args.base_url,
                       profile=args.profile)


def _report(results: Path, chart: Path | None) -> int:
    records = read_records(results, warn=lambda line: print(f"note: {line}", file=sys.stderr))
    if not records:
        raise TaskError(f"{results}: no task records (a missing or empty results file)")
    print(markdown(records))
    if chart is not None:
        why_not = plot(records, chart)
        print(f"note: {why_not}" if why_not else f"chart: {chart}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    tasks = select(args.root, args.tasks)
    adapter = adapter_for(args)
    opts = Options(out=args.out, resume=args.resume, keep=args.keep, work_dir=args.work_dir,
                   max_steps=args.max_steps, timeout_s=args.timeout)
    print(f"{len(tasks)} tasks, agent {adapter.label}, results to {args.out}", file=sys.stderr)
    run_tasks(tasks, adapter, opts, echo=lambda line: print(line, file=sys.stderr))
    if isinstance(adapter, Peer) and adapter.server_started:
        print(f"note: the managed llama-server the run started is still running at "
              f"{adapter.base_url}; `agent backend down` stops it", file=sys.stderr)
    if read_records(args.out):
        return _report(args.out, args.plot)
    return 0


def _verify(args: argparse.Namespace) -> int:
    bad = 0
    for task in select(args.root, args.tasks):
        with tempfile.TemporaryDirectory(prefix=f"verify-{task.id}-") as work:
            start, solved = verify(task, Path(work))
        ok = start.status == "failed" and solved.passed
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {task.key}: starting files {start.status}, "
              f"solution {solved.status}")
        if not ok:
            print("    " + (solved.tail if not solved.passed else start.tail)
                  .replace("\n", "\n    "))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "report":
            return _report(args.results, args.plot)
        if args.command == "verify":
            return _verify(args)
        if args.command == "install-peer":
            print(install_peer(args.name, echo=lambda line: print(line, file=sys.stderr)))
            return 0
        for task in select(args.root, args.tasks):
            first = task.instruction.splitlines()[0]
            print(f"{task.key}  [{', '.join(task.tags)}]  {first[:100]}")
        return 0
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted: the results file keeps the tasks that finished; --resume goes on",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
