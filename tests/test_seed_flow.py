"""The seed's flow in miniature, through the CLI: a preset whose target and old-format DFlash
draft come from the hub (a loopback stand-in behind HF_ENDPOINT), `backend up --print-cmd`, then
`backend up` downloads, converts the draft for the upstream build, checks the fit, launches
with the flavour's flags, and the server drafts. The profile is ``dflash-fixed``: the tuned
``dflash`` would turn the fixture's random draft off (tests/test_speculation_real.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx2

from backend.engine.registry import Engine
from tests.dflash_fixture import write_old_format_draft, write_tiny_target
from tests.hf_standin import HfStandin

AGENT = [sys.executable, "-m", "agent"]
TARGET = ("acme/tiny-llama-GGUF", "tiny-Q8_0.gguf")
DRAFT = ("acme/tiny-llama-DFlash-GGUF", "tiny-dflash-old.gguf")


def _agent(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL)


def test_a_hub_preset_with_an_old_format_draft_goes_from_nothing_to_drafting(
        engine: Engine, smollm2: Path, tmp_path: Path):
    target = write_tiny_target(tmp_path / "t.gguf", tokenizer_from=smollm2)
    draft = write_old_format_draft(tmp_path / "d.gguf", target)
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "presets.toml").write_text(
        f'[tiny-seed]\nmodel = "hf://{TARGET[0]}/{TARGET[1]}"\n'
        f'draft = "hf://{DRAFT[0]}/{DRAFT[1]}"\nprofile = "dflash-fixed"\nctx_size = 1024\n'
        '[tiny-seed.sampling]\ntemperature = 0.0\n'
        '[tiny-seed.server]\nbatch_size = 512\nubatch_size = 256\nlock_memory = false\n')
    with HfStandin({TARGET: target.read_bytes(), DRAFT: draft.read_bytes()}) as hub:
        env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "HF_ENDPOINT": hub.url,
               "NO_COLOR": "1"}
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
            env.pop(var, None)
        assert _agent("backend", "build", "--server-bin", str(engine.binary),
                      env=env).returncode == 0
        printed = _agent("backend", "up", "--preset", "tiny-seed", "--print-cmd", env=env)
        assert printed.returncode == 0, printed.stderr
        command = printed.stdout.strip()
        assert "--spec-type draft-dflash --spec-draft-n-max 15" in command
        assert f"-m hf://{TARGET[0]}/{TARGET[1]}" in command and "--fit off" in command
        assert "is not downloaded yet" in printed.stderr
        assert hub.gets() == []  # printing the command downloads nothing
        up = _agent("backend", "up", "--preset", "tiny-seed", env=env)
        assert "converting it once" in up.stderr
        again = _agent("backend", "up", "--preset", "tiny-seed", "--print-cmd", env=env)
        assert "/converted/" in again.stdout
        assert "in the 'dflash-draft' format, which upstream builds do not load" in again.stderr
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(_agent("backend", "status", "--json", env=env).stdout)
        assert status[0]["profile"] == "dflash-fixed"
        body = httpx2.post(f"{status[0]['url']}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "count: 1 2 3 4 5 6 7 8"}],
            "max_tokens": 32, "temperature": 0}).json()
        assert body["timings"].get("draft_n", 0) > 0
    finally:
        _agent("backend", "down", "--all", env=env)
