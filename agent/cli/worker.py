"""``agent backend worker``: lend this machine to a server elsewhere as an RPC worker."""

from __future__ import annotations

from typing import Annotated

import typer

from agent.errors import UsageError
from agent.ui import Reporter, echo
from backend.models.presets import DEFAULT_RPC_PORT
from backend.serve import worker
from backend.serve.launch import ensure_engine
from backend.serve.server import interrupt_on_termination


def worker_cmd(
    host: Annotated[str, typer.Option(
        help="Address to listen on. The default, 127.0.0.1, admits only this machine; give "
             "this machine's address on a private network for a server elsewhere (rpc-server "
             "has no authentication: never expose it to an open network).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        help="Port to listen on (0: a free one, printed).")] = DEFAULT_RPC_PORT,
    cache: Annotated[bool, typer.Option(
        "--cache", help="Keep the tensors a server sends in rpc-server's local file cache "
             "(~/.cache/llama.cpp/rpc), so the next load of the same model sends only "
             "hashes.")] = False,
    threads: Annotated[int | None, typer.Option(
        min=1, help="CPU threads (rpc-server's default: half the cores).")] = None,
    device: Annotated[str | None, typer.Option(
        help="Devices to offer, comma-separated (e.g. CUDA0,CUDA1; default: every GPU, or "
             "the CPU when there is none).")] = None,
) -> None:
    """Run an RPC worker (rpc-server) in the foreground until Ctrl-C or SIGTERM: a server on
    another machine spreads the model's layers over it with `agent backend up --rpc
    HOST:PORT`. Prints its address, protocol and memory; builds the engine first when none
    here has rpc-server."""
    if not 0 <= port < 65536:
        raise UsageError(f"--port {port}: use 1 to 65535, or 0 for a free port")
    if not host.strip():
        raise UsageError("--host is empty; give an address of this machine, e.g. 127.0.0.1")
    reporter = Reporter()
    try:
        engine = ensure_engine(progress=reporter.build_progress, note=reporter.note, rpc=True)
    finally:
        reporter.close()
    chosen = worker.resolve_port(host, port)
    argv = worker.worker_argv(engine, host, chosen, cache, threads, device)
    warning = worker.exposure_warning(host)
    if warning:
        typer.echo(f"WARNING: {warning}", err=True)
    try:
        with interrupt_on_termination():
            worker.serve(argv, host, chosen, echo)
    except KeyboardInterrupt:
        echo("worker stopped")
