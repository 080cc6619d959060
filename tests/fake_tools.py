"""Stand-ins for machine tools the tests cannot change for real: an ``nvidia-smi`` script that
prints what a given GPU (or a broken driver) prints, on a PATH of its own."""

from __future__ import annotations

import shlex
from pathlib import Path

RTX_4090 = "23800, 24564"
"""``--query-gpu=memory.free,memory.total --format=csv,noheader,nounits`` of an idle 24 GB card."""
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
