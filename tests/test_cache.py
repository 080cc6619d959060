import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.cache import CacheError, list_cache, record_use, remove
from backend.engine.registry import Engine


def _fake_engine(home: Path, key: str = "llama.cpp-11434-cpu-abc") -> Path:
    folder = home / "cache" / "engines" / key
    (folder / "bin").mkdir(parents=True)
    binary = folder / "bin" / "llama-server"
    binary.write_bytes(b"\0" * 2048)
    manifest = Engine(engine="llama.cpp", version="11434", key=key, binary=binary,
                      installed_at=time.time())
    (folder / "engine.json").write_text(manifest.model_dump_json())
    return binary


def _fake_model(home: Path, name: str = "m.gguf") -> Path:
    path = home / "cache" / "models" / "pypi" / "dist" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + b"\0" * 4096)
    path.with_name(name + ".size").write_text("4100")
    return path


def test_cache_lists_engines_and_models_with_size_and_last_use(agent_home: Path):
    binary = _fake_engine(agent_home)
    model = _fake_model(agent_home)
    record_use(model)
    entries = {e.name: e for e in list_cache()}
    assert entries["llama.cpp-11434-cpu-abc"].kind == "engine"
    assert entries["llama.cpp-11434-cpu-abc"].size_bytes >= 2048
    assert entries["llama.cpp-11434-cpu-abc"].last_used is None
    assert entries["m.gguf"].size_bytes == 4100 and entries["m.gguf"].last_used is not None
    assert binary.is_file()


def test_rm_deletes_a_model_or_an_engine_and_refuses_what_is_in_use(agent_home: Path):
    binary = _fake_engine(agent_home)
    model = _fake_model(agent_home)
    with pytest.raises(CacheError, match="used by a running server"):
        remove("m.gguf", in_use={model.resolve()})
    with pytest.raises(CacheError, match="used by a running server"):
        remove("llama.cpp-11434-cpu-abc", in_use={binary.resolve()})
    assert remove("m.gguf").kind == "model"
    assert not model.exists() and not model.with_name("m.gguf.size").exists()
    remove("llama.cpp-11434-cpu-abc")
    assert not binary.parent.parent.exists()
    with pytest.raises(CacheError, match="nothing called 'nope'"):
        remove("nope")


def test_cache_commands_through_the_cli(agent_home: Path):
    _fake_model(agent_home, "tiny.gguf")
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home)}

    def agent(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agent", "backend", "cache", *args],
                              capture_output=True, text=True, env=env, timeout=60)

    listed = json.loads(agent("list", "--json").stdout)
    assert [e["name"] for e in listed] == ["tiny.gguf"]
    assert "removed model tiny.gguf" in agent("rm", "tiny.gguf").stdout
    missing = agent("rm", "tiny.gguf")
    assert missing.returncode == 3 and "nothing called 'tiny.gguf'" in missing.stderr
    assert agent("list").stdout.strip() == "the cache is empty"
