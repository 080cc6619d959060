"""`agent backend bench`: real servers side by side (SmolLM2; the tiny DFlash fixture), the
JSON result checked against its model and its own samples, the chart, and every broken input."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from backend.engine.registry import Engine
from backend.measure.bench import different_answers, parse_temperatures
from backend.measure.prompts import EDIT_PROMPTS, SEED_PROMPTS, PromptsError, load_prompts
from backend.measure.report import prompt_labels, require_matplotlib, result_table
from backend.measure.results import (
    BenchError,
    BenchResult,
    Sample,
    request_seed,
    sample_from_response,
    summarize,
)
from tests.fake_tools import gpu_line

AGENT = [sys.executable, "-m", "agent"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args: str, home: Path, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def make_home(root: Path, engine: Engine, presets: str) -> Path:
    """A private home: the shared engine registered, ``presets`` as the user's presets.toml."""
    home = root / "home"
    proc = run("backend", "build", "--server-bin", str(engine.binary), home=home)
    assert proc.returncode == 0, proc.stderr
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "presets.toml").write_text(presets, "utf-8")
    return home


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of each body row of the rich table (the header row left out)."""
    rows = [[c.strip() for c in line.split("│")] for line in stdout.splitlines() if "│" in line]
    return [r for r in rows if r[0] != "prompt"]


def totals(result: BenchResult, profile: str) -> tuple[int, float]:
    picked = [s for s in result.samples if s.profile == profile]
    return sum(s.completion_tokens for s in picked), sum(s.decode_ms for s in picked)


def test_baseline_vs_ngram_end_to_end_json_table_and_chart(engine: Engine, smollm2: Path,
                                                          tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tiny]\nmodel = "{smollm2}"\nprofile = "ngram"\n'
                     "ctx_size = 2048\n")
    # The user's own managed server with the same preset and profile must survive the bench.
    assert run("backend", "up", "--preset", "tiny", home=home).returncode == 0
    out, png = tmp_path / "bench.json", tmp_path / "chart.png"
    try:
        before = json.loads(run("backend", "status", "--json", home=home).stdout)
        proc = run("backend", "bench", "--preset", "tiny", "--profiles", "baseline,ngram",
                   "--prompts", "edit", "--max-tokens", "16", "--json", str(out),
                   "--plot", str(png), home=home)
        after = json.loads(run("backend", "status", "--json", home=home).stdout)
        down = run("backend", "down", home=home)  # still finds the user's server as current
    finally:
        run("backend", "down", "--all", home=home)
    assert proc.returncode == 0, proc.stderr
    result = BenchResult.model_validate_json(out.read_text("utf-8"))
    assert result.schema_version == 1 and result.preset == "tiny"
    assert result.model.path == smollm2 and result.binary == engine.binary
    assert result.build_info and result.machine.ram_bytes > 0 and result.machine.cpu
    assert result.temperatures == [0.7, 0.0] and result.max_tokens == 16
    assert [p.name for p in result.prompts] == [p.name for p in EDIT_PROMPTS]
    assert len(result.samples) == 3 * 2 * 2
    assert all(s.cached_tokens == 0 and s.prompt_tokens > 0 for s in result.samples)
    # Profiles interleaved: every pair of consecutive requests covers both profiles.
    for i in range(0, len(result.samples), 2):
        assert {s.profile for s in result.samples[i:i + 2]} == {"baseline", "ngram"}
    assert {s.model_path for s in result.servers} == {str(smollm2)}
    assert len({tuple(s.argv) for s in result.servers}) == 2
    # The overall ratio is total tokens / total decode time per profile, from this run.
    base_tokens, base_ms = totals(result, "baseline")
    ngram_tokens, ngram_ms = totals(result, "ngram")
    expected = (ngram_tokens / ngram_ms) / (base_tokens / base_ms)
    assert result.overall_speedup("ngram") == pytest.approx(expected)
    assert result.overall_speedup("baseline") == pytest.approx(1.0)
    rows = table_rows(proc.stdout)
    overall = next(r for r in rows if r[:3] == ["all", "all", "ngram"])
    assert overall[-1] == f"{expected:.2f}"
    assert f"results: {out}" in proc.stdout
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 5000
    # The bench used servers of its own; the user's ran throughout and is the only one left.
    assert [(s["pid"], s["url"]) for s in after] == [(s["pid"], s["url"]) for s in before]
    bench_ports = {s.argv[s.argv.index("--port") + 1] for s in result.servers}
    assert before[0]["url"].rsplit(":", 1)[1] not in bench_ports
    assert f"stopped llama-server pid {before[0]['pid']}" in down.stdout


def _dflash_bench(home: Path, out: Path, *profiles: str) -> subprocess.CompletedProcess:
    prompts = out.parent / "prompts.txt"
    prompts.write_text("Count from one to twenty.\n---\nWrite a haiku about the sea.\n")
    return run("backend", "bench", "--preset", "tinyd", *profiles, "--prompts", str(prompts),
               "--max-tokens", "24", "--temperatures", "0", "--json", str(out), home=home)


def _assert_drafted(proc: subprocess.CompletedProcess, out: Path) -> None:
    # dflash-fixed always drafts: the tuned dflash profile would (rightly) turn the random
    # fixture's draft off (tests/test_speculation_real.py).
    assert proc.returncode == 0, proc.stderr
    result = BenchResult.model_validate_json(out.read_text("utf-8"))
    assert result.draft is not None and result.profiles == ["baseline", "dflash-fixed"]
    dflash = [s for s in result.samples if s.profile == "dflash-fixed"]
    assert dflash and all(s.draft_n > 0 for s in dflash)
    assert all(s.draft_n == 0 for s in result.samples if s.profile == "baseline")
    assert any("--spec-draft-model" in s.argv for s in result.servers
               if s.profile == "dflash-fixed")
    overall = next(r for r in table_rows(proc.stdout) if r[:3] == ["all", "all",
                                                                    "dflash-fixed"])
    assert int(overall[6]) == sum(s.draft_n for s in dflash) > 0  # the "draft" column


def test_dflash_fixture_drafts_in_the_bench_json_and_table(engine: Engine, tiny_dflash: dict,
                                                           tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tinyd]\nmodel = "{tiny_dflash["target"]}"\n'
                     f'draft = "{tiny_dflash["draft"]}"\nprofile = "dflash"\nctx_size = 1024\n')
    out = tmp_path / "dflash.json"
    _assert_drafted(_dflash_bench(home, out, "--profiles", "baseline,dflash-fixed"), out)


def test_old_format_draft_benches_after_convert_draft(engine: Engine, tiny_dflash: dict,
                                                      tmp_path: Path):
    converted = tmp_path / "converted.gguf"
    home = make_home(tmp_path, engine, f'[tinyd]\nmodel = "{tiny_dflash["target"]}"\n'
                     f'draft = "{converted}"\nprofile = "dflash-fixed"\nctx_size = 1024\n')
    conv = run("backend", "convert-draft", str(tiny_dflash["old"]), str(converted), home=home)
    assert conv.returncode == 0, conv.stderr
    out = tmp_path / "old.json"
    _assert_drafted(_dflash_bench(home, out), out)  # default profiles: baseline + preset's


def test_a_prompt_longer_than_the_context_is_a_clear_error_and_servers_stop(
        engine: Engine, tiny_dflash: dict, tmp_path: Path):
    home = make_home(tmp_path, engine, f'[tinyd]\nmodel = "{tiny_dflash["target"]}"\n'
                     "ctx_size = 256\n")
    proc = run("backend", "bench", "--preset", "tinyd", "--profiles", "baseline",
               "--prompts", "edit", "--max-tokens", "8", home=home)
    assert proc.returncode == 3
    assert "refused prompt 'rename-" in proc.stderr and "raise --ctx-size" in proc.stderr
    assert "internal error" not in proc.stderr
    assert json.loads(run("backend", "status", "--json", home=home).stdout) == []


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ('[{"name": "a", "text": "x"', ".json", "not valid JSON (line 1"),
    ('{"prompts": 3}', ".json", "expected a list of prompts"),
    ('[3]', ".json", "prompt 1 must be a string or an object"),
    ('[{"name": "a"}]', ".json", "prompt 1: text: Field required"),
    ('[{"name": "a", "text": "x"}, {"name": "a", "text": "y"}]', ".json", "must be unique"),
    ("\n---\n  \n", ".txt", "holds no prompt"),
])
def test_a_broken_prompts_file_is_a_clear_error(content: str, suffix: str, message: str,
                                                tmp_path: Path, agent_home: Path):
    path = tmp_path / f"prompts{suffix}"
    path.write_text(content, "utf-8")
    proc = run("backend", "bench", "--prompts", str(path), home=agent_home)
    assert proc.returncode == 3, proc.stderr
    assert message in proc.stderr.splitlines()[0] and str(path) in proc.stderr


def test_missing_and_non_utf8_prompts_files_are_clear_errors(tmp_path: Path, agent_home: Path):
    proc = run("backend", "bench", "--prompts", str(tmp_path / "nope.json"), home=agent_home)
    assert proc.returncode == 3 and "no such file (use seed, edit" in proc.stderr
    binary = tmp_path / "prompts.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    proc = run("backend", "bench", "--prompts", str(binary), home=agent_home)
    assert proc.returncode == 3 and "cannot read the prompts file" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--profiles", "baseline,fast"], "unknown profile 'fast'"),
    (["--profiles", "baseline,dflash"], "the dflash profile needs a draft model and preset "
                                        "'smollm2-135m' has none"),
    (["--profiles", "ngram,ngram"], "lists ngram more than once"),
    (["--profiles", ","], "--profiles is empty"),
    (["--temperatures", "hot"], "expected numbers like 0.7,0"),
    (["--temperatures", "3"], "values in 0..2"),
])
def test_bad_profiles_and_temperatures_are_usage_errors(args: list[str], message: str,
                                                        agent_home: Path):
    proc = run("backend", "bench", *args, home=agent_home)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "internal error" not in proc.stderr


def test_prompts_files_in_every_accepted_form(tmp_path: Path):
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps(["first", {"text": "second"}, {"name": "n", "text": "third"}]))
    assert [(p.name, p.text) for p in load_prompts(str(listed))[1]] == [
        ("listed-1", "first"), ("listed-2", "second"), ("n", "third")]
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"prompts": ["only"]}))
    assert [p.text for p in load_prompts(str(wrapped))[1]] == ["only"]
    text = tmp_path / "p.txt"
    text.write_text("one\nline two\n---\n\n---\nthree\n")
    label, prompts = load_prompts(str(text))
    assert label == str(text) and [p.text for p in prompts] == ["one\nline two", "three"]
    assert load_prompts("seed") == ("seed", list(SEED_PROMPTS))
    with pytest.raises(PromptsError, match="no such file"):
        load_prompts(str(tmp_path / "seed"))


def test_the_edit_set_grows_and_each_prompt_holds_its_file():
    sizes = [len(p.text) for p in EDIT_PROMPTS]
    assert sizes == sorted(sizes) and sizes[-1] > 3 * sizes[0]
    assert all("`item` to `entry`" in p.text and "def total_value" in p.text
               for p in EDIT_PROMPTS)
    assert all(p.text.endswith("Return only one complete Python file.") for p in SEED_PROMPTS)


def test_a_server_answer_without_usable_timings_is_a_clear_error():
    where = {"index": 0, "profile": "ngram", "prompt": "p", "temperature": 0.0, "repeat": 0}
    with pytest.raises(BenchError, match="without timings"):
        sample_from_response({"choices": []}, **where)
    with pytest.raises(BenchError, match="without timings"):
        sample_from_response(["not", "an", "object"], **where)
    with pytest.raises(BenchError, match="malformed timings .*predicted_ms"):
        sample_from_response({"timings": {"prompt_n": 3, "prompt_ms": 1.0, "predicted_n": 2,
                                          "predicted_ms": "soon"}}, **where)
    sample = sample_from_response({"timings": {"prompt_n": 3, "prompt_ms": 1.5,
                                               "predicted_n": 20, "predicted_ms": 400.0}},
                                  **where)
    assert (sample.draft_n, sample.draft_accepted, sample.cached_tokens) == (0, 0, 0)


def test_a_sample_keeps_its_seed_and_its_answers_hash_whatever_the_choices_look_like():
    where = {"index": 0, "profile": "ngram", "prompt": "p", "temperature": 0.7, "repeat": 1}
    timings = {"prompt_n": 3, "prompt_ms": 1.5, "predicted_n": 2, "predicted_ms": 4.0}
    sample = sample_from_response({"timings": timings, "choices": [
        {"message": {"content": "héllo"}, "finish_reason": "stop"}]}, seed=7, **where)
    assert sample.seed == 7 and sample.finish_reason == "stop"
    assert sample.answer_sha256 == hashlib.sha256("héllo".encode()).hexdigest()
    for choices in ([], [None], "text", [{"message": "x"}], [{"message": {"content": 3}}]):
        odd = sample_from_response({"timings": timings, "choices": choices}, **where)
        assert odd.answer_sha256 is None and odd.seed is None


def test_request_seeds_are_stable_and_differ_between_prompts_and_repeats():
    assert request_seed("rename-small", 0) == request_seed("rename-small", 0)
    seeds = {request_seed(p, r) for p in ("rename-small", "rename-large") for r in range(3)}
    assert len(seeds) == 6 and all(0 <= s < 2 ** 31 for s in seeds)


def test_answers_unlike_the_reference_are_named_with_their_lengths():
    def s(profile: str, repeat: int, sha: str | None, tokens: int, temp: float = 0.0) -> Sample:
        return Sample(index=0, profile=profile, prompt="rename-medium", temperature=temp,
                      repeat=repeat, prompt_tokens=1, cached_tokens=0, prompt_ms=1.0,
                      completion_tokens=tokens, decode_ms=1.0, draft_n=0, draft_accepted=0,
                      answer_sha256=sha)

    samples = [s("baseline", 0, "a", 1200), s("dflash", 0, "b", 210),
               s("baseline", 1, "a", 1200), s("dflash", 1, "b", 210),
               s("baseline", 0, "c", 50, 0.7), s("dflash", 0, "c", 50, 0.7),
               s("ngram", 0, None, 9, 0.7)]
    result = BenchResult.model_construct(samples=samples, reference_profile="baseline")
    assert different_answers(result) == [
        "dflash answered rename-medium at t=0 unlike baseline in 2 repeat(s) (210 vs 1200, "
        "210 vs 1200 tokens): its ratio there compares different texts"]


def test_speedups_are_ratios_of_totals_against_the_reference():
    def s(profile: str, prompt: str, tokens: int, ms: float, draft: int = 0,
          accepted: int = 0) -> Sample:
        return Sample(index=0, profile=profile, prompt=prompt, temperature=0.0, repeat=0,
                      prompt_tokens=10, cached_tokens=0, prompt_ms=100.0,
                      completion_tokens=tokens, decode_ms=ms, draft_n=draft,
                      draft_accepted=accepted)

    samples = [s("baseline", "a", 100, 2000.0), s("ngram", "a", 100, 1000.0, 80, 60),
               s("baseline", "b", 300, 3000.0), s("ngram", "b", 300, 3000.0, 10, 0)]
    per_prompt, overall = summarize(samples, ["baseline", "ngram"], ["a", "b"], [0.0],
                                    "baseline")
    assert [round(x.speedup, 3) for x in per_prompt] == [1.0, 2.0, 1.0, 1.0]
    everything = [x for x in overall if x.temperature is None]
    assert everything[1].decode_tok_s == pytest.approx(400 / 4.0)
    assert everything[1].speedup == pytest.approx((400 / 4.0) / (400 / 5.0))
    assert everything[1].acceptance == pytest.approx(60 / 90)
    assert everything[0].acceptance is None and everything[0].prefill_tok_s == 100.0


SAVED = Path(__file__).parent.parent / "benchmarks" / "runs" / "h200-2026-11-30"


def _render(result: BenchResult) -> str:
    """The table as the CLI prints it to a terminal of $COLUMNS columns (rich reads COLUMNS);
    checks that every line of the table itself fits: the title and the caption are one line
    each (soft wrap: the terminal folds them, nothing is cut)."""
    console = Console(file=io.StringIO(), highlight=False, soft_wrap=True, color_system=None)
    assert console.width == 80
    console.print(result_table(result))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    lines = text.splitlines()
    assert lines[0].startswith(result.preset) and lines[-1].startswith("tok tokens generated")
    assert "…" not in text and max(len(line) for line in lines[1:-1]) <= 80
    return text


@pytest.mark.parametrize("name", ["bench-smollm2-edit", "bench-smollm2-seed",
                                  "bench-dflash-fixture"])
def test_the_table_fits_80_columns_without_cutting_a_cell(name: str,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = BenchResult.model_validate_json((SAVED / f"{name}.json").read_text("utf-8"))
    text = _render(result)
    rows = table_rows(text)
    labels = prompt_labels(result)
    expected = [["all" if st.prompt is None else labels[st.prompt],
                 "all" if st.temperature is None else f"{st.temperature:g}", st.profile,
                 str(st.completion_tokens), str(round(st.decode_tok_s)),
                 str(round(st.prefill_tok_s)), str(st.draft_n), str(st.draft_accepted),
                 "-" if st.acceptance is None else f"{st.acceptance:.0%}", f"{st.speedup:.2f}"]
                for st in result.per_prompt + result.overall]
    assert rows == expected
    caption = " ".join(text.split())
    assert "dec/s and pre/s decode and prefill tokens/s" in caption
    assert f"×ref decode speed relative to {result.reference_profile}" in caption
    for prompt in result.prompts:
        assert f"{labels[prompt.name]} {prompt.name}" in caption


def test_the_table_fits_80_columns_with_five_digit_counts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = BenchResult.model_validate_json(
        (SAVED / "bench-smollm2-edit.json").read_text("utf-8"))
    big = {"completion_tokens": 99999, "draft_n": 99999, "draft_accepted": 99999,
           "decode_tok_s": 9999.4, "prefill_tok_s": 99999.4, "acceptance": 1.0,
           "speedup": 10.0, "temperature": 0.75}
    renamed = {p.name: f"a-prompt-with-a-long-name-{i}" for i, p in enumerate(result.prompts)}
    result = result.model_copy(update={
        "per_prompt": [s.model_copy(update={**big, "prompt": renamed[s.prompt]})
                       for s in result.per_prompt],
        "prompts": [p.model_copy(update={"name": renamed[p.name]}) for p in result.prompts]})
    text = _render(result)
    assert table_rows(text)[0] == ["p1", "0.75", "baseline", "99999", "9999", "99999", "99999",
                                       "99999", "100%", "10.00"]


def test_plot_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what Python does for "not found"
    with pytest.raises(BenchError, match=r"plot extra: pip install 'dflash-agent\[plot\]'"):
        require_matplotlib()


def test_temperatures_keep_their_order_without_repeats():
    assert parse_temperatures("0.7,0,0.7") == [0.7, 0.0]


def test_bench_help_lists_every_option(agent_home: Path):
    proc = run("backend", "bench", "--help", home=agent_home)
    assert proc.returncode == 0, proc.stderr
    for option in ("--preset", "--profiles", "--prompts", "--max-tokens", "--temperatures",
                   "--repeats", "--ctx-size", "--json", "--plot", "--force"):
        assert option in proc.stdout, option


def _fake_gpu(bin_dir: Path) -> Path:
    """An nvidia-smi that reports 2000 MiB free until a bench server runs, then 100 MiB: one
    SmolLM2 server fits, a second one beside it does not."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    # The servers' alias, not the bare name: other processes on a machine may carry it in a
    # path (a benchmark's ~/.cache/dflash-agent-bench) and made this GPU look full.
    script.write_text("#!/bin/sh\nif pgrep -f -- --alias.dflash-agent-bench- >/dev/null; then\n"
                      f"  echo '{gpu_line(100)}'\nelse\n  echo '{gpu_line(2000)}'\nfi\n")
    script.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("how", ["flag", "fallback"])
def test_one_server_at_a_time_alternates_the_order_between_rounds(
        engine: Engine, smollm2: Path, tmp_path: Path, how: str):
    home = make_home(tmp_path, engine, f'[tiny]\nmodel = "{smollm2}"\nprofile = "ngram"\n'
                     'ctx_size = 2048\n[tiny.server]\ngpu_layers = "all"\n')
    out = tmp_path / "result.json"
    args = ["backend", "bench", "--preset", "tiny", "--profiles", "baseline,ngram",
            "--prompts", "edit", "--max-tokens", "8", "--temperatures", "0", "--repeats", "2",
            "--json", str(out)]
    env_path = f"{_fake_gpu(tmp_path / 'bin')}:{os.environ['PATH']}"
    if how == "flag":
        args.append("--one-at-a-time")
    proc = subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=1500,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
                               "PATH": env_path})
    assert proc.returncode == 0, proc.stderr
    if how == "fallback":
        assert "does not fit beside the others: measuring one server at a time" in proc.stderr
    result = BenchResult.model_validate_json(out.read_text("utf-8"))
    assert result.one_at_a_time
    order = [s.profile for s in result.samples]
    n = len(EDIT_PROMPTS)
    assert order == ["baseline"] * n + ["ngram"] * n + ["ngram"] * n + ["baseline"] * n
    assert [s.profile for s in result.servers] == ["baseline", "ngram"]
    assert result.overall_speedup("ngram") is not None
    assert json.loads(run("backend", "status", "--json", home=home).stdout) == []


def test_a_temperature_whose_launch_would_start_without_the_draft_is_named(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One server serves every temperature of a bench. Where greedy requests draft per
    request and sampled ones are off with a draft that is not free to keep loaded, the sampled
    requests run on the drafting server (an H200 bench read 0.93x for them, 2026-12-03),
    which their own launch would not: the bench says so."""
    from types import SimpleNamespace

    from backend.measure import bench as bench_mod
    from backend.serve.profiles import LaunchPlan
    from backend.serve.speculation.costs import Tuning

    base = LaunchPlan(binary=tmp_path / "llama-server", model=tmp_path / "m.gguf",
                      profile="dflash", ctx_size=4096, draft=tmp_path / "d.gguf")
    chosen = {0.0: (base.model_copy(update={"draft_n_max": 15}),
                    Tuning(n_max=3, costs="calibrated", reason="r", per_request=True)),
              0.7: (base.model_copy(update={"draft_n_max": 0}),
                    Tuning(n_max=0, costs="calibrated", reason="r"))}
    monkeypatch.setattr(bench_mod.pipeline, "resolve", lambda *a, **k: SimpleNamespace(plan=base))
    monkeypatch.setattr(bench_mod, "tune", lambda plan, **k: chosen[k["temperature"]])
    notes: list[str] = []
    plan, _, caps = bench_mod._bench_plan(None, None, "dflash", None, None, 1.0,  # type: ignore[arg-type]
                                          notes.append, [0.0, 0.7])
    assert plan.draft_n_max == 15 and caps == {0.0: 3, 0.7: 0}
    assert notes == ["dflash: requests at t=0.7 run on a server with the draft loaded, where "
                     "their own launch would start without it; bench one temperature at a "
                     "time to measure each launch"]
    chosen[0.7] = chosen[0.0]  # both launches keep the draft: nothing to say
    notes.clear()
    bench_mod._bench_plan(None, None, "dflash", None, None, 1.0,  # type: ignore[arg-type]
                          notes.append, [0.0, 0.7])
    assert notes == []
