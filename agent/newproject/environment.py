"""A new project's isolated environment: what its commands see, and its Python ``.venv``.

Dependencies go into the project (``.venv`` for Python, ``node_modules`` for Node, the
toolchain's own cache otherwise), never into the user's global environment and never into the
interpreter dflash-agent itself runs on. So the bash tool and the product's test run see the
project's ``.venv/bin`` (and ``node_modules/.bin``) first on PATH, the product's own virtual
environment not at all, and ``PIP_REQUIRE_VIRTUALENV=1``, which makes a ``pip`` outside a
virtual environment refuse to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from tools.bash import tool_env, with_overrides

VENV = ".venv"
SEEDED = ("pip", "pytest")
"""Installed into a new ``.venv`` from dflash-agent's own copies (no network needed): pip to
install the project's dependencies, pytest to run its tests."""


def _product_bin() -> Path | None:
    """The ``bin`` folder of the virtual environment dflash-agent runs in, if it runs in one."""
    if sys.prefix == sys.base_prefix:
        return None
    return Path(sys.prefix) / "bin"


def project_env(directory: Path, base: dict[str, str] | None = None,
                python: bool = True) -> dict[str, str | None]:
    """Variables to set (a string) or remove (None) for every process run for the project in
    ``directory``: PATH with ``.venv/bin`` and ``node_modules/.bin`` first and without
    dflash-agent's own virtual environment, ``VIRTUAL_ENV`` naming the project's (``python``;
    else removed) and ``PIP_REQUIRE_VIRTUALENV=1``. ``base``: the environment to start from
    (default ``os.environ``)."""
    source = os.environ if base is None else base
    own = _product_bin()
    kept = [p for p in source.get("PATH", os.defpath).split(os.pathsep)
            if p and not (own is not None and _same(Path(p), own))]
    first = [str(directory / VENV / "bin"), str(directory / "node_modules" / ".bin")]
    return {"PATH": os.pathsep.join(first + kept),
            "VIRTUAL_ENV": str(directory / VENV) if python else None,
            "PIP_REQUIRE_VIRTUALENV": "1", "PYTHONHOME": None}


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def with_env(overrides: dict[str, str | None], kind: str) -> dict[str, str]:
    """:func:`tools.bash.tool_env` (allow-listed, no secrets, a reaper marker tagged ``kind``)
    with ``overrides`` applied."""
    return with_overrides(tool_env(kind=kind), overrides)


def find_python(path: str) -> str | None:
    """``python3`` (or ``python``) on ``path``, else the base interpreter dflash-agent was
    made from (never its own virtual environment's); None when there is none."""
    for name in ("python3", "python"):
        found = shutil.which(name, path=path)
        if found:
            return found
    base = Path(sys.base_prefix) / "bin" / "python3"
    return str(base) if base.is_file() else None


def create_venv(directory: Path, python: str, timeout: float = 300.0) -> str:
    """Create ``directory/.venv`` with ``python`` and put pip and pytest into it; returns a
    line saying how (shown and logged). Never raises: a venv that cannot be made is said, and
    the model is left to make one with bash.

    pip and pytest are copied from dflash-agent's own installation when the venv's Python has
    the same version (offline, about a second); otherwise the venv gets pip from ``ensurepip``
    and pytest is left to the project's install step.
    """
    venv = directory / VENV
    seed = _same_version(python)
    cmd = [python, "-m", "venv", *(["--without-pip"] if seed else []), str(venv)]
    try:
        made = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not create {VENV} with {python}: {exc}"
    if made.returncode != 0:
        tail = (made.stderr or made.stdout).strip().splitlines()[-1:]
        return f"could not create {VENV} with {python}: {' '.join(tail)}"
    if not seed:
        return f"created {VENV} with {python} (pip from ensurepip; pytest not installed)"
    purelib = _purelib(venv)
    if purelib is None:
        return f"created {VENV} with {python}; could not find its site-packages"
    copied = seed_packages(purelib, SEEDED, venv / "bin")
    return f"created {VENV} with {python}; {', '.join(copied)} copied in from dflash-agent"


def _same_version(python: str) -> bool:
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out == str(sys.version_info[:2])


def _purelib(venv: Path) -> Path | None:
    try:
        out = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(out.stdout.strip())
    return path if out.returncode == 0 and path.is_dir() else None


def seed_packages(purelib: Path, names: tuple[str, ...], bin_dir: Path | None = None
                  ) -> list[str]:
    """Copy the installed distributions ``names`` and what they require (for this Python) into
    ``purelib``, each with its ``.dist-info`` so the venv's pip knows them; returns the names
    copied (``name version``). Their console scripts (``pip``, ``pytest``) are written anew
    into ``bin_dir`` for the venv's own ``python`` there (the installed ones name
    dflash-agent's interpreter); none when ``bin_dir`` is None. Only pure-Python code is
    expected here; a distribution that is not installed is skipped."""
    done: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in done:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        done[key] = f"{dist.metadata['Name']} {dist.version}"
        if bin_dir is not None:
            for entry in dist.entry_points.select(group="console_scripts"):
                _script(bin_dir / entry.name, bin_dir / "python", entry.module, entry.attr)
        for rel in dist.files or []:
            if rel.parts[0] == ".." or "__pycache__" in rel.parts:
                continue
            source = Path(str(dist.locate_file(rel)))
            if source.is_file():
                target = purelib / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return sorted(done.values())


def _script(path: Path, python: Path, module: str, attr: str) -> None:
    """A console script as pip writes one: run ``module:attr`` with ``python``."""
    path.write_text(f"#!{python}\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
                    f"if __name__ == '__main__':\n    sys.exit({attr}())\n", "utf-8")
    path.chmod(0o755)
