"""``hf://`` model sources, fetched with the real ``huggingface_hub`` from a loopback stand-in."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend import secret_store
from backend.models.sources import ModelError, fetch_hf, parse_hf, resolve_model
from tests.hf_standin import HfStandin

REPO = "acme/tiny-GGUF"
FILE = "tiny-Q4_K_S.gguf"
DATA = b"GGUF" + bytes(range(256)) * 64  # 16388 bytes
GATED = "acme/gated-GGUF"
TOKEN = "hf_standin_token"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HfStandin]:
    """A stand-in hub serving one public and one gated GGUF, reached through HF_ENDPOINT."""
    with HfStandin({(REPO, FILE): DATA, (GATED, FILE): DATA}, gated={GATED: TOKEN}) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        yield standin


def test_an_hf_source_downloads_into_the_model_cache_and_resolves(hub: HfStandin,
                                                                  agent_home: Path):
    path = resolve_model(f"hf://{REPO}/{FILE}")
    assert path.read_bytes() == DATA
    assert (agent_home / "cache" / "models" / "hf") in path.parents
    resolve = f"/{REPO}/resolve/main/{FILE}"
    # Our size/space check and huggingface_hub's own metadata check, then one download; no
    # telemetry request (huggingface_hub would otherwise GET /api/agent-harnesses).
    assert [(r.method, r.path) for r in hub.requests] == [
        ("HEAD", resolve), ("HEAD", resolve), ("GET", resolve)]


def test_a_second_resolve_uses_the_cache_without_downloading(hub: HfStandin):
    first = resolve_model(f"hf://{REPO}/{FILE}")
    second = resolve_model(f"hf://{REPO}/{FILE}")
    assert first == second
    assert len(hub.gets()) == 1


def test_a_revision_after_at_is_requested(hub: HfStandin):
    from tests.hf_standin import COMMIT

    path = resolve_model(f"hf://{REPO}/{FILE}@{COMMIT}")
    assert path.read_bytes() == DATA
    assert hub.gets()[0].path == f"/{REPO}/resolve/{COMMIT}/{FILE}"


def test_a_dropped_connection_resumes_with_a_range_request(hub: HfStandin,
                                                          monkeypatch: pytest.MonkeyPatch):
    # huggingface_hub resumes inside the same call (its temporary file is per call and removed
    # on failure), counting only whole chunks: shrink its 10 MiB chunk to fit the small file.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)
    hub.drop_after[(REPO, FILE)] = 4096
    path = fetch_hf(f"hf://{REPO}/{FILE}")
    assert path.read_bytes() == DATA
    gets = hub.gets()
    assert len(gets) == 2
    assert gets[0].range is None
    assert gets[1].range == "bytes=4096-"


def test_a_corrupted_download_is_rejected_and_not_cached(hub: HfStandin, agent_home: Path):
    hub.corrupt.add((REPO, FILE))
    with pytest.raises(ModelError, match="checksum mismatch.*fetch it again"):
        fetch_hf(f"hf://{REPO}/{FILE}")
    sha = hashlib.sha256(DATA).hexdigest()
    cache = agent_home / "cache" / "models" / "hf"
    assert not list(cache.rglob(sha))
    assert not [p for p in cache.rglob(FILE)]
    hub.corrupt.clear()
    assert fetch_hf(f"hf://{REPO}/{FILE}").read_bytes() == DATA


def test_a_missing_file_or_repo_says_to_check_the_names(hub: HfStandin):
    with pytest.raises(ModelError, match="file not found.*check the repo id and file name"):
        fetch_hf(f"hf://{REPO}/nope.gguf")
    with pytest.raises(ModelError, match="repository not found.*check the repo id and file"):
        fetch_hf(f"hf://acme/no-such-repo/{FILE}")


def test_a_gated_repo_without_a_token_says_to_accept_the_license(hub: HfStandin):
    with pytest.raises(ModelError, match=f"hf://{GATED}: access denied .*accept the license on "
                       f"the hub at {hub.url}/{GATED} while signed in, then start agent with "
                       "HF_TOKEN"):
        fetch_hf(f"hf://{GATED}/{FILE}")
    assert not hub.gets()


def test_a_gated_repo_downloads_with_hf_token_set(hub: HfStandin,
                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert fetch_hf(f"hf://{GATED}/{FILE}").read_bytes() == DATA
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in hub.requests)


def test_a_gated_repo_downloads_with_hf_token_kept_in_the_secret_store(
        hub: HfStandin, monkeypatch: pytest.MonkeyPatch):
    # `agent` moves HF_TOKEN out of its environment at start; the download asks the store.
    monkeypatch.setitem(secret_store._values, "HF_TOKEN", TOKEN)
    assert "HF_TOKEN" not in os.environ
    assert fetch_hf(f"hf://{GATED}/{FILE}").read_bytes() == DATA
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in hub.requests)


def test_offline_mode_uses_a_cached_file_without_any_request(hub: HfStandin,
                                                            monkeypatch: pytest.MonkeyPatch):
    online = fetch_hf(f"hf://{REPO}/{FILE}")
    seen = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch_hf(f"hf://{REPO}/{FILE}") == online
    assert len(hub.requests) == seen


def test_offline_mode_with_nothing_cached_says_to_download_once_online(
        hub: HfStandin, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE is set and .* is not cached; "
                                         "download it once online"):
        fetch_hf(f"hf://{REPO}/{FILE}")
    assert not hub.requests


def test_a_file_that_is_not_gguf_is_refused(monkeypatch: pytest.MonkeyPatch):
    with HfStandin({(REPO, FILE): b"<html>nope</html>"}) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        with pytest.raises(ModelError, match="not a GGUF file"):
            fetch_hf(f"hf://{REPO}/{FILE}")


def test_an_hf_source_is_parsed_into_repo_file_and_revision():
    assert parse_hf("hf://unsloth/gemma-4-31B-it-GGUF/gemma-4-31B-it-Q4_K_S.gguf") == (
        parse_hf("hf://unsloth/gemma-4-31B-it-GGUF/gemma-4-31B-it-Q4_K_S.gguf"))
    src = parse_hf("hf://org/repo/sub/dir/m.gguf@v1.0")
    assert (src.repo_id, src.filename, src.revision) == ("org/repo", "sub/dir/m.gguf", "v1.0")
    assert parse_hf("hf://org/repo/m.gguf").revision is None


@pytest.mark.parametrize("source", [
    "hf://", "hf://org", "hf://org/repo", "hf://org/repo/", "hf://org//m.gguf",
    "hf:///repo/m.gguf", "hf://org/repo/m.gguf@", "hf://org/repo/../m.gguf",
])
def test_malformed_hf_sources_are_refused_with_the_expected_form(source: str):
    with pytest.raises(ModelError, match=r"expected hf://OWNER/REPO/PATH/TO/FILE\[@REVISION\]"):
        resolve_model(source)


def test_a_download_that_does_not_fit_on_disk_is_refused_with_numbers(
        hub: HfStandin, monkeypatch: pytest.MonkeyPatch):
    import shutil

    import backend.models.sources

    monkeypatch.setattr(backend.models.sources.shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(ModelError, match="needs 16388 bytes but only 1000 bytes is free"):
        fetch_hf(f"hf://{REPO}/{FILE}")
    assert not hub.gets()
