"""Installing the peer agents at pinned versions, each into its own folder under
``peers_dir()``, never the product's venv nor the repository: a Python peer into a venv made with
this interpreter (``-m venv``, then its pip), a Node peer with ``npm install --prefix``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from benchmarks.tasks.adapters.base import BenchError, Call, run_command


@dataclass(frozen=True)
class PeerPackage:
    """One peer's pinned package: from PyPI (``pip``) or npm (``npm``), and the name of the
    command it installs."""

    registry: str
    """``pip`` or ``npm``."""
    package: str
    version: str
    command: str
    version_flag: bool = True
    """Whether ``<command> --version`` prints the version (else the venv's metadata says)."""

    def __str__(self) -> str:
        sep = "==" if self.registry == "pip" else "@"
        return f"{self.package}{sep}{self.version}"


PEERS = {
    "aider": PeerPackage("pip", "aider-chat", "0.86.2", "aider"),
    "mini-swe-agent": PeerPackage("pip", "mini-swe-agent", "2.4.6", "mini", version_flag=False),
    "opencode": PeerPackage("npm", "opencode-ai", "1.18.33", "opencode"),
    # 0.15.10 is the newest release whose package.json accepts node 20 (later: node >= 22)
    "qwen-code": PeerPackage("npm", "@qwen-code/qwen-code", "0.15.10", "qwen"),
    "codex": PeerPackage("npm", "@openai/codex", "0.171.0", "codex"),
}
"""Each peer agent's pinned package: ``install-peer NAME`` puts it in ``<peers>/NAME``."""
PEERS_ENV = "DFLASH_AGENT_BENCH_PEERS"
"""A folder holding the peers' venvs (``<name>/``), instead of the default."""


def peers_dir() -> Path:
    """Where the peers' venvs live: ``$DFLASH_AGENT_BENCH_PEERS``, else the user's cache folder
    (``platformdirs.user_cache_dir("dflash-agent-bench")/peers``); never inside the repository
    (a venv is not relocatable, and linters and the device copies would walk it)."""
    given = os.environ.get(PEERS_ENV)
    if given:
        return Path(given).expanduser()
    return Path(platformdirs.user_cache_dir("dflash-agent-bench")) / "peers"


def peer_bin(name: str, folder: Path | None = None) -> Path:
    """The peer's executable in its folder: ``bin/<command>`` of a venv,
    ``node_modules/.bin/<command>`` of an npm prefix (a peer not in ``PEERS`` is taken to be a
    venv whose command has the peer's name)."""
    root = (folder or peers_dir()) / name
    spec = PEERS.get(name)
    if spec is not None and spec.registry == "npm":
        return root / "node_modules" / ".bin" / spec.command
    return root / "bin" / (spec.command if spec else name)


def _pip_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (proc.stderr + "\n" + proc.stdout).splitlines()
             if line.strip()]
    errors = [line for line in lines if line.startswith(("ERROR:", "npm error"))]
    return (errors or lines or [f"exit {proc.returncode}"])[-1][:300]


def _installed_version(python: Path, dist: str, call: Call) -> str | None:
    """The version of ``dist`` installed in the venv of ``python``; None when it has none (or
    the venv's interpreter does not run)."""
    if not python.is_file():
        return None
    proc = call([str(python), "-c", "import importlib.metadata as m, sys; "
                 "print(m.version(sys.argv[1]))", dist])
    return proc.stdout.strip() if proc.returncode == 0 else None


def _npm_version(prefix: Path, package: str) -> str | None:
    """The version of ``package`` under the npm prefix ``prefix`` (its package.json)."""
    try:
        meta = json.loads((prefix / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    return str(meta.get("version")) if isinstance(meta, dict) else None


def _install_pip(spec: PeerPackage, venv: Path, call: Call,
                 echo: Callable[[str], None]) -> None:
    python = venv / "bin" / "python"
    if _installed_version(python, spec.package, call) == spec.version:
        return
    if not python.is_file() or call([str(python), "-c", ""]).returncode != 0:
        echo(f"making the venv {venv} ({sys.executable} -m venv)")
        made = call([sys.executable, "-m", "venv", "--clear", str(venv)])
        if made.returncode != 0:
            raise BenchError(f"cannot make the venv {venv}: {_pip_error(made)}")
    echo(f"installing {spec} into {venv} (about a minute)")
    pip = call([str(python), "-m", "pip", "install", "--no-cache-dir",
                "--disable-pip-version-check", "--quiet", str(spec)])
    if pip.returncode != 0:
        raise BenchError(f"pip could not install {spec} into {venv}: {_pip_error(pip)}")
    found = _installed_version(python, spec.package, call)
    if found != spec.version:
        raise BenchError(f"{venv} holds {spec.package} {found} after pip installed {spec}")


def _install_npm(spec: PeerPackage, prefix: Path, call: Call,
                 echo: Callable[[str], None]) -> None:
    if _npm_version(prefix, spec.package) == spec.version:
        return
    npm = shutil.which("npm")
    if npm is None:
        raise BenchError(f"npm is not on PATH: it installs {spec} (Node.js 20 or later)")
    echo(f"installing {spec} into {prefix} (npm install --prefix)")
    proc = call([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                 "--save-exact", str(spec)])
    if proc.returncode != 0:
        raise BenchError(f"npm could not install {spec} into {prefix}: {_pip_error(proc)}")
    found = _npm_version(prefix, spec.package)
    if found != spec.version:
        raise BenchError(f"{prefix} holds {spec.package} {found} after npm installed {spec}")


def install_peer(name: str, folder: Path | None = None, call: Call | None = None,
                 echo: Callable[[str], None] = lambda line: None) -> str:
    """Install the peer ``name`` (its pinned package, ``PEERS``) into its own folder
    ``<folder>/<name>`` (default ``peers_dir()``): a venv made with this interpreter for a
    Python peer, an npm prefix for a Node one; a folder that already holds the pinned version
    is left alone. Returns what ``<command> --version`` prints (``<name> <version>`` for a
    peer without that flag). An unknown peer, a venv that cannot be made, a pip or npm that
    fails (offline, say) or a peer that does not run raises BenchError."""
    call = call or run_command
    if name not in PEERS:
        raise BenchError(f"unknown peer {name!r} (known: {', '.join(sorted(PEERS))})")
    spec = PEERS[name]
    root = (folder or peers_dir()) / name
    install = _install_pip if spec.registry == "pip" else _install_npm
    try:
        install(spec, root, call, echo)
        binary = peer_bin(name, folder)
        if not spec.version_flag:
            return f"{name} {_installed_version(root / 'bin' / 'python', spec.package, call)}"
        proc = call([str(binary), "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        raise BenchError(f"cannot install {spec} into {root}: {exc}") from None
    if proc.returncode != 0:
        raise BenchError(f"`{binary} --version` failed: {_pip_error(proc)}")
    return proc.stdout.strip()
