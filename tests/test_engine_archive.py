"""``agent backend build --source ARCHIVE``: safe extraction, the release in the engine key, and
clear errors for broken archives and missing build tools (a toy tree; the real BeeLlama v0.3.1
archive is built in tests/test_beellama_real.py)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from backend.engine.build import build_beellama, build_llama_cpp
from backend.engine.registry import BuildError
from backend.engine.sources import (
    archive_version,
    beellama_flavour,
    extract_source_archive,
    source_version,
)

AGENT = [sys.executable, "-m", "agent"]
TINY_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(tiny C)
add_executable(llama-server main.c)
set_target_properties(llama-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
"""
TREE = {
    "CMakeLists.txt": TINY_CMAKE,
    "ggml/README": "ggml\n",
    "main.c": '#include <stdio.h>\nint main(void) { puts("version: 1 (toy)"); return 0; }\n',
    "CHANGELOG.md": "# Changelog\n\n## v0.3.1\n\n- toy\n\n## v0.3.0\n",
}


def _agent(*args: str, home: Path, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess:
    full = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", **(env or {})}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=600,
                          env=full, stdin=subprocess.DEVNULL)


def _tar(path: Path, files: dict[str, str], top: str = "beellama.cpp-v0.3.1",
         extra: list[tarfile.TarInfo] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)
    return path


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_versions_and_flavours_come_from_the_changelog_or_the_name(tmp_path: Path):
    archive = _tar(tmp_path / "src.tar.gz", TREE)
    assert archive_version(archive) == "v0.3.1"  # from CHANGELOG.md inside
    no_log = _tar(tmp_path / "beellama.cpp-v0.4.7.tar.gz",
                  {k: v for k, v in TREE.items() if k != "CHANGELOG.md"})
    assert archive_version(no_log) == "v0.4.7"  # from the name
    assert archive_version(_tar(tmp_path / "x.tar.gz", {"a": "b"})) is None
    root = tmp_path / "tree"
    root.mkdir()
    (root / "CHANGELOG.md").write_text("## Unreleased\n\n## v0.2.0\n")
    assert source_version(root) is None  # the top section is not a release
    assert source_version(root, "beellama-v0.3.2") == "v0.3.2"
    assert (beellama_flavour("v0.3.1"), beellama_flavour("v0.4.0"),
            beellama_flavour("main")) == ("bee-old", "bee-new", "")


def test_an_archive_builds_with_release_and_flavour_in_the_key(tmp_path: Path):
    archive = _tar(tmp_path / "beellama-src.tar.gz", TREE)
    engine = build_beellama(source=archive, cuda=False)
    assert engine.key.startswith("beellama-v0.3.1-bee-old-cpu-")
    assert engine.version == "v0.3.1" and str(archive.resolve()) in engine.source
    assert "sha256" in engine.source
    out = subprocess.run([str(engine.binary)], capture_output=True, text=True).stdout
    assert out.strip() == "version: 1 (toy)"
    assert build_beellama(source=archive, cuda=False) == engine  # a no-op
    log = (engine.binary.parent.parent / "build.log").read_text()
    assert "extracting" in log and "-DLLAMA_USE_PREBUILT_UI=OFF" in log
    # The same release from another archive (other bytes) is another engine.
    other = _tar(tmp_path / "other.tar.gz", {**TREE, "NOTE": "changed"})
    again = build_beellama(source=other, cuda=False)
    assert again.key != engine.key and again.key.startswith("beellama-v0.3.1-bee-old-cpu-")


def test_a_zip_and_a_folder_build_too(tmp_path: Path):
    archive = tmp_path / "tree.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, text in TREE.items():
            zf.writestr(f"beellama.cpp-v0.3.1/{name}", text)
    assert build_beellama(source=archive, cuda=False).key.startswith("beellama-v0.3.1-bee-old")
    folder = tmp_path / "checkout"
    extract_source_archive(archive, tmp_path / "x")
    shutil.copytree(tmp_path / "x" / "beellama.cpp-v0.3.1", folder)
    engine = build_beellama(source=folder, cuda=False)
    assert engine.key.startswith("beellama-v0.3.1-bee-old-cpu-") and engine.source == str(folder)
    # llama.cpp takes an archive as --source too.
    assert build_llama_cpp(source=archive, cuda=False).key.startswith("llama.cpp-src-")


@pytest.mark.parametrize("name, extra, message", [
    ("../evil.txt", None, "climbs out with '..'"),
    ("/etc/evil.txt", None, "is an absolute path"),
    (None, [_link("beellama.cpp-v0.3.1/link", "/etc/passwd")], "refused"),
    (None, [_link("beellama.cpp-v0.3.1/up", "../../../outside")], "refused"),
    (None, [_link("beellama.cpp-v0.3.1/hard", "/etc/passwd", tarfile.LNKTYPE)], "refused"),
])
def test_unsafe_tar_members_are_refused(tmp_path: Path, name: str | None,
                                        extra: list | None, message: str):
    archive = tmp_path / "bad.tar.gz"
    if name:
        with tarfile.open(archive, "w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    else:
        _tar(archive, TREE, extra=extra)
    with pytest.raises(BuildError, match=message) as info:
        extract_source_archive(archive, tmp_path / "out")
    assert info.value.step == "unpack"
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "outside").exists()


def test_a_device_file_is_refused(tmp_path: Path):
    dev = tarfile.TarInfo("beellama.cpp-v0.3.1/dev")
    dev.type = tarfile.CHRTYPE
    archive = _tar(tmp_path / "dev.tar.gz", TREE, extra=[dev])
    with pytest.raises(BuildError, match="refused"):
        extract_source_archive(archive, tmp_path / "out")


def test_unsafe_zip_members_are_refused(tmp_path: Path):
    climb = tmp_path / "climb.zip"
    with zipfile.ZipFile(climb, "w") as zf:
        zf.writestr("../evil.txt", "x")
    with pytest.raises(BuildError, match="climbs out"):
        extract_source_archive(climb, tmp_path / "out")
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("top/link")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(BuildError, match="symbolic link"):
        extract_source_archive(link, tmp_path / "out2")


def test_broken_archives_are_clear_errors_on_the_cli(tmp_path: Path, agent_home: Path):
    garbage = tmp_path / "beellama.tar.gz"
    garbage.write_bytes(b"this is not a tarball")
    good = _tar(tmp_path / "good.tar.gz", TREE).read_bytes()
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(good[: len(good) // 2])
    empty = _tar(tmp_path / "empty.tar.gz", {"README": "nothing"})
    cases = [(garbage, "not a readable source archive"),
             (truncated, "not a readable source archive"),
             (empty, "holds no llama.cpp source tree"),
             (tmp_path / "missing.tar.gz", "does not exist")]
    for archive, message in cases:
        proc = _agent("backend", "build", "--engine", "beellama", "--source", str(archive),
                      "--cpu", home=agent_home)
        assert proc.returncode == 3, (archive, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = _agent("backend", "build", "--engine", "beellama", "--source", str(empty),
                  "--ref", "v0.3.1", home=agent_home)
    assert proc.returncode == 2 and "drop --ref" in proc.stderr


def test_a_missing_build_tool_is_named(tmp_path: Path, agent_home: Path):
    archive = _tar(tmp_path / "src.tar.gz", TREE)
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    proc = _agent("backend", "build", "--engine", "beellama", "--source", str(archive), "--cpu",
                  home=agent_home, env={"PATH": str(bare)})
    assert proc.returncode == 3, proc.stderr
    assert "'cmake' is not installed" in proc.stderr and "Traceback" not in proc.stderr
    with_cmake = tmp_path / "bin2"
    with_cmake.mkdir()
    for tool in ("cmake", "c++", "cc"):
        found = shutil.which(tool)
        assert found
        (with_cmake / tool).symlink_to(found)
    proc = _agent("backend", "build", "--engine", "beellama", "--source", str(archive), "--cpu",
                  home=agent_home, env={"PATH": str(with_cmake)})
    assert proc.returncode == 3 and "neither 'ninja' nor 'make'" in proc.stderr, proc.stderr
