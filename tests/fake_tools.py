"""Stand-ins for machine tools the tests cannot change for real: an ``nvidia-smi`` script that
prints what a given GPU (or a broken driver) prints, on a PATH of its own."""

from __future__ import annotations

import shlex
from pathlib import Path


def gpu_line(free: int = 23800, total: int = 24564, name: str = "NVIDIA GeForce RTX 4090",
             cap: str = "8.9") -> str:
    """One GPU's line of :data:`backend.machine.GPU_FIELDS` as ``nvidia-smi`` prints it
    (``--format=csv,noheader,nounits``)."""
    return f"{name}, 550.54.14, {total}, {free}, {cap}"


RTX_4090 = gpu_line()
"""An idle 24 GB card."""
DRIVER_FAILURE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.")


def fake_nvidia_smi(bin_dir: Path, stdout: str = RTX_4090, exit_code: int = 0,
                    stderr: str = "") -> Path:
    """Write an executable ``nvidia-smi`` into ``bin_dir`` printing ``stdout`` (and ``stderr``)
    for any arguments and exiting with ``exit_code``; returns ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(stdout)}\n"
                      f"printf '%s\\n' {shlex.quote(stderr)} >&2\nexit {exit_code}\n")
    script.chmod(0o755)
    return bin_dir


_FAKE_SERVER = r'''#!{python}
"""A stand-in llama-server that dies with a signal: at start (MODE=start), or on the first
chat completion after answering /health and /props (MODE=serve)."""
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

SIGNAL, MODE = {signal_number}, {mode!r}
HELP = """----- common params -----
-m,    --model FNAME                    model path
--host HOST                             ip address to listen
--port PORT                             port to listen
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of server slots
--metrics                               enable prometheus compatible metrics endpoint
--slots                                 expose slots monitoring endpoint
--jinja                                 use jinja template for chat
--fit [on|off]                          fit unset args to device memory
-nr,   --no-repack                      disable weight repacking
--spec-type [none|ngram-mod]            type of speculative decoding
"""
if "--version" in sys.argv:
    print("version: 1 (fake)")
    sys.exit(0)
if "--help" in sys.argv:
    print(HELP)
    sys.exit(0)
print("main: loading model", flush=True)
print("llama threadpool init, n_threads = 2", flush=True)


def die():
    print("warmup: running a first computation", flush=True)
    os.kill(os.getpid(), SIGNAL)


if MODE == "start":
    die()


class Handler(BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/props"):
            self._send({{"model_path": sys.argv[sys.argv.index("-m") + 1],
                        "default_generation_settings": {{"n_ctx": 4096}},
                        "chat_template_caps": {{}}}})
        else:
            self._send({{"status": "ok", "data": []}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "completions" in self.path:
            die()
        self._send({{"prompt": "", "tokens": []}})

    def log_message(self, *args):
        pass


port = int(sys.argv[sys.argv.index("--port") + 1])
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def fake_llama_server(path: Path, signal_number: int, mode: str = "start") -> Path:
    """Write an executable stand-in ``llama-server`` at ``path`` that kills itself with
    ``signal_number`` at start (``mode="start"``, after two log lines) or on its first chat
    completion (``mode="serve"``); it answers ``--version`` and ``--help`` like the real one."""
    import sys

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_FAKE_SERVER.format(python=sys.executable, signal_number=signal_number,
                                        mode=mode))
    path.chmod(0o755)
    return path
