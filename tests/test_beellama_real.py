"""The real BeeLlama.cpp v0.3.1 (bee-old), built through the product from its source archive and
run on CPU with SmolLM2-135M and the trained DFlash draft (shared/dflash, converted to
BeeLlama's old format). Marked ``beellama``: CI runs them; a local run skips them until the
engine is built (``DFLASH_AGENT_BEELLAMA=1``, see tests/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from backend.engine.build import build_beellama
from backend.engine.flavour import binary_devices, binary_facts, binary_help, detect_flavour
from backend.engine.helpfacts import check_argv, stored_facts
from backend.engine.registry import Engine
from backend.models.drafts import draft_for, gguf_architecture
from backend.models.presets import ServerOptions, get_preset, load_presets
from backend.serve.fit import FitError, check_fit
from backend.serve.launch import plan_for
from backend.serve.process import pick_port, stop
from backend.serve.profiles import PROFILES, LaunchPlan, server_argv
from backend.serve.quirks import NEUTRAL_LOGIT_BIAS
from backend.serve.records import ServerError, ServerState
from backend.serve.server import launch_argv, up
from backend.serve.speculation.probe import PROBE_PROMPTS
from backend.serve.speculation.store import load_observations
from backend.serve.tuning import tune
from tests.conftest import BEELLAMA_ARCHIVE, home_env

pytestmark = [pytest.mark.beellama, pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "shared" / "dflash" / "smollm2-135m-dflash-v1.gguf"
SEED = ROOT / "shared" / "seed" / "000_ca204131beb4469f.txt"
AGENT = [sys.executable, "-m", "agent"]
CODE_PROMPT = ("Write a Python function `is_prime(n)` that returns True when n is a prime "
               "number, and three tests for it. Reply with the code only.")


def _agent(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=1800,
                          env=env, stdin=subprocess.DEVNULL)


def chat(state: ServerState, prompt: str, max_tokens: int = 160, *, workaround: bool = True,
         **body: object) -> dict:
    """One non-streamed completion at temperature 0 (with the server's request fields)."""
    payload = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
               "temperature": 0.0, "cache_prompt": False, **body}
    if workaround:
        payload = {**state.request_extra, **payload}
    resp = httpx2.post(f"{state.base_url}/v1/chat/completions", json=payload, timeout=600)
    resp.raise_for_status()
    return resp.json()


@pytest.fixture(scope="module")
def old_draft(tmp_path_factory: pytest.TempPathFactory, bee_home: Path) -> Path:
    """The trained draft in BeeLlama's format, made by ``agent backend convert-draft``."""
    if not TRAINED.is_file():
        pytest.skip(f"the trained draft {TRAINED} is not here")
    out = tmp_path_factory.mktemp("bee-draft") / "smollm2-135m-dflash-v1-old.gguf"
    proc = _agent("backend", "convert-draft", str(TRAINED), str(out), "--to", "dflash-draft",
                  home=bee_home)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def launch(bee_home: Path) -> Iterator:
    """``launch(plan)`` → a started server, stopped after the test."""
    started: list[ServerState] = []

    def start(plan: LaunchPlan, timeout: float = 300) -> ServerState:
        with home_env(bee_home):
            state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=timeout)
        started.append(state)
        return state

    yield start
    for state in started:
        stop(state)


def _plan(engine: Engine, model: Path, profile: str = "dflash", draft: Path | None = None,
          ctx: int = 2048, **options: object) -> LaunchPlan:
    return LaunchPlan(binary=engine.binary, model=model, profile=profile, ctx_size=ctx,
                      draft=draft, options=ServerOptions(**options))


def test_v031_is_built_from_the_archive_through_the_product(bee_old: Engine, bee_home: Path):
    assert bee_old.key.startswith("beellama-v0.3.1-bee-old-cpu-")
    assert bee_old.version == "v0.3.1" and bee_old.flavour == "bee-old"
    assert "b714aaf94d555205d394cb80f56d3c3120a37ebf4e23595f66f53144ac4e0ec9" in bee_old.source
    flags = set(bee_old.configure_flags)
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
            "-DGGML_AMX_BF16=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_BUILD_UI=OFF"} <= flags
    assert not any("CUDA" in f for f in flags)
    log = (bee_old.binary.parent.parent / "build.log").read_text("utf-8", errors="replace")
    assert "# flavour (from --help): bee-old" in log
    assert "Downloading" not in log
    # The CLI finds the same engine (a no-op) and says its key.
    # (bee_old is built with RPC: tests/test_rpc_real.py uses its rpc-server)
    proc = _agent("backend", "build", "--engine", "beellama", "--source", str(BEELLAMA_ARCHIVE),
                  "--cpu", "--rpc", home=bee_home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].strip() == f"engine {bee_old.key}: {bee_old.binary}"
    with home_env(bee_home):
        assert build_beellama(source=BEELLAMA_ARCHIVE, cuda=False, rpc=True) == bee_old


def test_the_real_help_is_bee_old_and_has_every_flag_the_product_passes(bee_old: Engine,
                                                                        bee_home: Path,
                                                                        smollm2: Path):
    with home_env(bee_home):
        assert detect_flavour(bee_old.binary) == "bee-old"
        facts = binary_facts(bee_old.binary)
        text = binary_help(bee_old.binary)
    assert "--spec-dflash-cross-ctx" in facts.flags and "turbo4" in facts.cache_types
    assert "dflash" in facts.spec_types
    # Adaptive draft-max is on by default; the product turns it off only with a length it
    # chose (tests/test_flavours.py), never for a plan without one.
    assert re.search(r"enable adaptive draft-max controller \(default: true\)", text)
    presets = load_presets()
    option_sets = [p.server for p in presets.values()] + [
        ServerOptions(cache_type_k="turbo4", cache_type_v="turbo4", flash_attn="on"),
        ServerOptions(cache_type_k="q5_0", cache_type_v="q4_1", flash_attn="on",
                      gpu_layers="all", draft_gpu_layers="all", batch_size=2048,
                      ubatch_size=512, ctx_checkpoints=8, kv_unified=True, no_host=True,
                      cache_ram=0, lock_memory=True, reasoning="off", dflash_cross_ctx=1024)]
    stored = stored_facts("beellama-v0.3.2")
    checked = 0
    for options in option_sets:
        for profile in PROFILES:
            plan = LaunchPlan(binary=bee_old.binary, model=smollm2, profile=profile,
                              ctx_size=4096, draft=smollm2, options=options)
            if profile == "dflash+ngram":  # refused on bee-old, never run there
                with pytest.raises(ValueError, match="not proven on BeeLlama"):
                    server_argv(plan, "127.0.0.1", 8080, "bee-old")
                checked += 1
                continue
            argv = server_argv(plan, "127.0.0.1", 8080, "bee-old")
            assert check_argv(argv, facts) == [], (profile, argv)
            assert check_argv(argv, stored) == [], (profile, argv)  # the source facts agree
            assert "--no-spec-dm-adaptive" not in argv
            checked += 1
    assert checked == len(option_sets) * len(PROFILES)


def _seed_dflash_line() -> list[str]:
    """The seed's own DFlash ``llama-server`` command (section 7 of the write-up)."""
    text = SEED.read_text("utf-8")
    block = text[text.index("--spec-type dflash") - 200:]
    start = block.index("./llama-server")
    end = block.index("--min-p 0.0") + len("--min-p 0.0")
    return shlex.split(block[start:end].replace("\\\n", " "))


def _pairs(argv: list[str], help_text: str) -> dict[str, str]:
    """Options of ``argv`` by one canonical name (the first long alias on its ``--help`` line;
    ``--no-…`` forms stay themselves) → value ('' for a switch)."""
    alias: dict[str, str] = {}
    for line in help_text.splitlines():
        if not line.startswith("-"):
            continue
        names = []
        for token in line.replace(",", " ").split():
            if not token.startswith("-"):
                break
            names.append(token)
        longs = [n for n in names if n.startswith("--") and not n.startswith("--no-")]
        for name in names:
            alias.setdefault(name, name if name.startswith("--no-") or not longs else longs[0])
    out: dict[str, str] = {}
    i = 1
    while i < len(argv):
        name = alias.get(argv[i], argv[i])
        has_value = i + 1 < len(argv) and argv[i + 1] not in alias
        out[name] = argv[i + 1] if has_value else ""
        i += 2 if has_value else 1
    return out


def test_the_seeds_dflash_line_as_a_preset_launches_unchanged_in_meaning(
        bee_old: Engine, bee_home: Path, smollm2: Path, launch):
    seed = _seed_dflash_line()
    assert seed[:1] == ["./llama-server"] and "--spec-dflash-cross-ctx" in seed
    config = bee_home / "config"
    config.mkdir(parents=True, exist_ok=True)
    # The seed's flags as a preset, with SmolLM2 and the trained draft in place of Gemma 4 31B
    # (a CPU here); sampling is sent per request by the product.
    (config / "presets.toml").write_text(f'''
[seed-dflash]
model = "{smollm2}"
draft = "{TRAINED}"
profile = "dflash"
ctx_size = 32768
extra_flags = ["--log-timestamps", "--log-prefix"]
[seed-dflash.sampling]
temperature = 0.7
top_k = 64
top_p = 0.95
min_p = 0.0
[seed-dflash.server]
gpu_layers = "all"
draft_gpu_layers = "all"
flash_attn = "on"
batch_size = 2048
ubatch_size = 512
kv_unified = true
no_host = true
cache_ram = 0
lock_memory = true
reasoning = "off"
dflash_cross_ctx = 1024
''', "utf-8")
    with home_env(bee_home):
        preset = get_preset("seed-dflash")
        plan = plan_for(preset, bee_old)
        text = binary_help(bee_old.binary)
        cpu_only = not binary_devices(bee_old.binary)
        product = launch_argv(plan, "0.0.0.0", 8910)  # translated and checked, quirks included
    assert plan.draft is not None and gguf_architecture(plan.draft) == "dflash-draft"
    theirs, ours = _pairs(seed, text), _pairs(product, text)
    models = {"--model", "--spec-draft-model"}
    sampling = {"--temp": "temperature", "--top-k": "top_k", "--top-p": "top_p",
                "--min-p": "min_p"}
    for name, value in theirs.items():
        if name in models:
            assert name in ours
        elif name in sampling:  # per request: the preset's sampling says the same
            assert float(getattr(preset.sampling, sampling[name])) == float(value), name
        else:
            assert ours.get(name) == value, (name, value, ours.get(name))
    added = set(ours) - set(theirs)
    # What the product adds, each the build's default, read-only, or needed on this machine:
    # /slots; the draft's KV types pinned to f16 (v0.3.1's default; a quantized draft KV
    # collapses acceptance); on a build without GPU devices the draft kept in host memory
    # (backend.serve.quirks: v0.3.1 would otherwise put it on a GPU 0 that does not exist).
    expected = {"--slots", "--spec-draft-type-k", "--spec-draft-type-v"}
    assert added == expected | ({"--spec-draft-device"} if cpu_only else set()), added
    assert ours["--spec-draft-type-k"] == ours["--spec-draft-type-v"] == "f16"
    assert "(default: f16)" in text.split("--spec-draft-type-k", 1)[1].split("\n-", 1)[0]
    # And it launches: the DFlash contract is accepted and drafts are made.
    state = launch(plan)
    body = chat(state, CODE_PROMPT, max_tokens=48)
    log = state.log.read_text("utf-8", errors="replace")
    assert "dflash: contract ok" in log and "target_layer_ids=[1,14,27]" in log
    assert body["timings"].get("draft_n", 0) > 0


@pytest.fixture(scope="module")
def dflash_run(bee_old: Engine, bee_home: Path, smollm2: Path, old_draft: Path) -> Iterator:
    """One DFlash server (SmolLM2 + the converted trained draft) and one 200-token answer."""
    plan = _plan(bee_old, smollm2, draft=old_draft, ctx=2048)
    with home_env(bee_home):
        state, _ = up(plan, port=pick_port("127.0.0.1", 0), timeout=300)
    try:
        yield state, chat(state, CODE_PROMPT, max_tokens=200)
    finally:
        stop(state)


def test_the_converted_trained_draft_drafts_on_bee_old(dflash_run):
    state, body = dflash_run
    log = state.log.read_text("utf-8", errors="replace")
    assert "dflash: contract ok" in log and "target_layer_ids=[1,14,27]" in log
    assert body["timings"].get("draft_n", 0) > 0, body["timings"]


CPU_ACCEPTANCE = (
    "measured on the 2-core dev CPU (benchmarks/RESULTS.md): BeeLlama v0.3.1's CPU DFlash path "
    "drafts but accepts rarely with the trained draft (0 to 2 of ~400 drafted tokens per "
    "answer), where b11434 on the same CPU accepts 1.6 % with the same weights and the same "
    "converted file accepted 2.65 % on an H200 (docs/design/beellama.md); acceptance is proven "
    "on the H200 run")


@pytest.mark.xfail(reason=CPU_ACCEPTANCE, strict=False)
def test_the_converted_trained_draft_accepts_on_bee_old(dflash_run):
    _, body = dflash_run
    assert body["timings"].get("draft_n_accepted", 0) > 0, body["timings"]



def test_the_tuned_profile_probes_the_draft_on_bee_old_and_launches_without_it(
        bee_old: Engine, bee_home: Path, smollm2: Path, old_draft: Path):
    # Tuned like upstream (backend.serve.tuning): a probe at the longest calibrated length
    # with v0.3.1's adaptive controller off, then the choice. The trained draft accepts 0-2 of
    # ~400 tokens here (CPU_ACCEPTANCE) and a CPU step costs ~2.3 plain ones even at length 1,
    # so drafting cannot pay: the launch is a server without the draft.
    plan = _plan(bee_old, smollm2, draft=old_draft)
    notes: list[str] = []
    with home_env(bee_home):
        tuned, choice = tune(plan, note=notes.append)
        seen = load_observations(plan.model_copy(update={"profile": "dflash-fixed"}))
        argv = server_argv(tuned, "127.0.0.1", 8080, "bee-old")
    assert any("probing the draft's acceptance at length 15" in n for n in notes), notes
    assert len(seen) == len(PROBE_PROMPTS) and {o.n_max for o in seen} == {15}
    assert all(o.source == "probe" and o.draft_n > 0 for o in seen), seen
    assert choice is not None and choice.n_max == 0 and tuned.draft_n_max == 0, choice
    assert "under the 1.05x it must beat plain decoding by" in choice.reason
    assert not any(a.startswith("--spec") for a in argv), argv


def test_calibrate_times_the_real_draft_at_each_length_on_bee_old(bee_old: Engine,
                                                                  bee_home: Path,
                                                                  smollm2: Path):
    # v0.3.1 has no --spec-synth-rates: the stated fallback times the real draft at each length,
    # and each length is the one launched (its adaptive controller off): at most one drafted
    # token a step at length 1, more than one at 7. Through the CLI, as a user runs it.
    config = bee_home / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "presets.toml").write_text(
        f'[smol-cal]\nmodel = "{smollm2}"\ndraft = "{TRAINED}"\nprofile = "dflash"\n'
        'ctx_size = 2048\n', "utf-8")
    out = bee_home / "cal-bee.json"
    args = ("backend", "calibrate", "--preset", "smol-cal", "--lengths", "1,7", "--tokens",
            "48", "--repeats", "1", "--json", str(out))
    for _ in range(3):
        proc = _agent(*args, home=bee_home)
        # The drift check refuses a run whose plain rate moved between first and last (a busy
        # machine; CI on 2 cores once read 160.8 then 190.6 tok/s twice in a row): what it
        # tells the user to do is calibrate again.
        if not (proc.returncode == 3 and "do not hold together" in proc.stderr):
            break
    assert proc.returncode == 0, proc.stderr
    assert "timing the real draft at each length" in proc.stderr + proc.stdout
    rows = {r["n_max"]: r for r in json.loads(out.read_text("utf-8"))["rows"]}
    steps = {k: r["tokens"] - r["accepted"] for k, r in rows.items()}
    assert 0 < rows[1]["drafted"] <= steps[1], rows
    assert steps[7] < rows[7]["drafted"] <= 7 * steps[7], rows
    assert all(r["step_ms"] > 0 for r in rows.values())

def test_an_unconverted_b11434_draft_does_not_load_on_bee_old(bee_old: Engine, smollm2: Path,
                                                              launch):
    with pytest.raises(ServerError) as info:
        launch(_plan(bee_old, smollm2, draft=TRAINED), timeout=120)
    assert info.value.log is not None
    # ...which is why the product converts it (backend.models.drafts.draft_for).
    assert gguf_architecture(draft_for(TRAINED, "bee-old")) == "dflash-draft"


def test_the_llama_target_crash_is_worked_around_and_logged(bee_old: Engine, smollm2: Path,
                                                            old_draft: Path, dflash_run, launch):
    state, body = dflash_run  # answered with the workaround: the server is alive
    assert state.request_extra == NEUTRAL_LOGIT_BIAS
    log = state.log.read_text("utf-8", errors="replace")
    assert "# dflash-agent workaround: BeeLlama <=0.3 DFlash aborts" in log
    assert body["choices"][0]["finish_reason"] in ("length", "stop")
    # Without it the first greedy DFlash request kills the server (the bug is real on CPU).
    doomed = launch(_plan(bee_old, smollm2, draft=old_draft, ctx=1024))
    with pytest.raises(httpx2.HTTPError):
        chat(doomed, CODE_PROMPT, max_tokens=16, workaround=False)
    log = doomed.log.read_text("utf-8", errors="replace")
    assert "GGML_ASSERT" in log and "logits" in log


def test_a_neutral_logit_bias_changes_nothing_on_baseline(bee_old: Engine, smollm2: Path,
                                                          launch):
    state = launch(_plan(bee_old, smollm2, profile="baseline", ctx=2048))
    assert state.request_extra == {}
    plain = chat(state, CODE_PROMPT, max_tokens=64)
    biased = chat(state, CODE_PROMPT, max_tokens=64, **NEUTRAL_LOGIT_BIAS)
    assert plain["choices"][0]["message"]["content"] == \
        biased["choices"][0]["message"]["content"]


def test_drafting_inside_a_json_schema_tool_call_vs_plain(bee_old: Engine, smollm2: Path,
                                                          old_draft: Path, launch):
    """The measured fact (numbers in benchmarks/RESULTS.md): bee-old keeps drafting under a
    json_schema grammar (not a lazy tool-call grammar), with fewer tokens accepted."""
    state = launch(_plan(bee_old, smollm2, draft=old_draft, ctx=4096))
    schema = {"type": "object", "properties": {
        "tool": {"const": "create"},
        "arguments": {"type": "object", "properties": {"path": {"type": "string"},
                                                        "file_text": {"type": "string"}},
                      "required": ["path", "file_text"]}}, "required": ["tool", "arguments"]}
    grammar = chat(state, CODE_PROMPT + " Answer as a create tool call.", max_tokens=64,
                   response_format={"type": "json_schema",
                                    "json_schema": {"name": "call", "schema": schema}})
    plain = chat(state, CODE_PROMPT, max_tokens=64)
    assert grammar["choices"][0]["message"]["content"].lstrip().startswith("{")
    assert plain["timings"].get("draft_n", 0) > 0
    assert grammar["timings"].get("draft_n", 0) > 0


@pytest.mark.parametrize("flash_attn, ours, theirs", [
    ("on", "do not divide this model's K head size (64)",
     "K cache type turbo4 with block size 128 does not divide n_embd_head_k=64"),
    ("off", "must be entirely on a GPU",
     "require all KV cache layers on GPU; layer 0 is assigned to CPU"),
])
def test_turbo4_kv_is_refused_where_the_real_binary_refuses_it(
        bee_old: Engine, smollm2: Path, bee_home: Path, launch, flash_attn: str, ours: str,
        theirs: str):
    plan = _plan(bee_old, smollm2, profile="baseline", ctx=1024, cache_type_k="turbo4",
                 cache_type_v="turbo4", flash_attn=flash_attn)
    with home_env(bee_home), pytest.raises(FitError, match=re.escape(ours)):
        check_fit(plan)
    # The real binary agrees: forced past the fit check (as --force does), it refuses too.
    with pytest.raises(ServerError) as info:
        launch(plan, timeout=120)
    assert info.value.log is not None
    assert theirs in info.value.log.read_text("utf-8", errors="replace")


def test_print_cmd_shows_the_bee_old_command_with_the_converted_draft(bee_old: Engine,
                                                                      bee_home: Path,
                                                                      smollm2: Path):
    config = bee_home / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "presets.toml").write_text(
        f'[smol-dflash]\nmodel = "{smollm2}"\ndraft = "{TRAINED}"\nprofile = "dflash"\n'
        'ctx_size = 2048\n[smol-dflash.server]\ndflash_cross_ctx = 512\n', "utf-8")
    # dflash-fixed: the engine's own draft length and adaptive controller (the reference).
    proc = _agent("backend", "up", "--preset", "smol-dflash", "--profile", "dflash-fixed",
                  "--print-cmd", home=bee_home)
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip())
    assert argv[0] == str(bee_old.binary)
    assert argv[argv.index("--spec-type") + 1] == "dflash"
    assert argv[argv.index("--spec-dflash-cross-ctx") + 1] == "512"
    assert "--spec-draft-n-max" not in argv and "--fit" not in argv
    assert "--no-spec-dm-adaptive" not in argv
    assert argv[argv.index("--spec-draft-model") + 1].endswith("-dflash-draft.gguf")
    assert "converts it once to 'dflash-draft'" in proc.stderr
    # The tuned profile is tuned on bee-old too: nothing is known about this draft yet, so the
    # command shown drafts nothing and says the launch probes it first.
    proc = _agent("backend", "up", "--preset", "smol-dflash", "--print-cmd", home=bee_home)
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip())
    assert "--spec-draft-model" not in argv and "--spec-type" not in argv
    assert "nothing measured about this draft yet" in proc.stderr
    assert "probes the draft first" in proc.stderr
