"""The trainer's torch-free parts without a server: token-id files, coding prompts and their
bench holdout, the agent's own requests rendered through ReplayAgent, and the command line's
errors (train/README.md)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from agent.prompts import system_prompt
from backend.measure.prompts import BUILT_IN
from benchmarks import agent_turns as at
from tools.registry import default_registry
from tools.workspace import Workspace
from train.agent_requests import session_requests
from train.errors import InputError
from train.requests import is_bench_prompt, load_coding_prompts
from train.seqs import build, heldout_by_hash, load, load_many, save, save_shards

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "dflash"


def _seqs(n: int = 5, big: bool = False):
    rng = np.random.default_rng(0)
    top = 70_000 if big else 49_152
    ids = [rng.integers(0, top, size=10 + 3 * i) for i in range(n)]
    return build(ids, [4 + i for i in range(n)], ["coding:a", "agent-text:s"] * (n // 2)
                 + ["coding:a"] * (n % 2), [i == 1 for i in range(n)],
                 [None, '{"type": "object"}'] * (n // 2) + [None] * (n % 2))


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, stdin=subprocess.DEVNULL)


# --- token-id files ---------------------------------------------------------------------------


def test_sequences_round_trip_through_npz_with_uint16_ids(tmp_path: Path):
    seqs = _seqs()
    path = save(seqs, tmp_path / "s.npz")
    with np.load(path) as z:
        assert z["tokens"].dtype == np.uint16
    back = load(path)
    assert len(back) == 5
    for i in range(5):
        assert back.ids(i).tolist() == seqs.ids(i).tolist()
        assert back.source(i) == seqs.source(i) and back.schema(i) == seqs.schema(i)
    assert back.plens.tolist() == seqs.plens.tolist()
    assert back.heldout.tolist() == [False, True, False, False, False]
    assert back.response_tokens() == seqs.response_tokens()


def test_ids_above_uint16_are_kept_as_int32(tmp_path: Path):
    seqs = _seqs(big=True)
    with np.load(save(seqs, tmp_path / "s.npz")) as z:
        assert z["tokens"].dtype == np.int32
    assert load(tmp_path / "s.npz").tokens.tolist() == seqs.tokens.tolist()


def test_shards_split_between_sequences_and_load_back_in_order(tmp_path: Path):
    seqs = _seqs(7)
    paths = save_shards(seqs, tmp_path / "gen", max_tokens=40)
    assert len(paths) > 2 and [p.name for p in paths][0] == "gen-000.npz"
    assert all(int(load(p).lengths().sum()) <= 40 for p in paths)
    merged = load_many([tmp_path])
    assert merged.tokens.tolist() == seqs.tokens.tolist()
    assert [merged.source(i) for i in range(7)] == [seqs.source(i) for i in range(7)]


def test_the_v1_training_data_loads_with_a_stable_hash_holdout():
    path = SHARED / "smollm2-greedy-seqs-v1.npz"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    seqs = load(path)
    assert len(seqs) == 1659 and int(seqs.lengths().sum()) == 1031941
    assert seqs.src_names == ("unknown",)
    share = seqs.heldout.mean()
    assert 0.02 < share < 0.09
    assert seqs.heldout.tolist() == [heldout_by_hash(seqs.prompt(i)) for i in range(len(seqs))]


@pytest.mark.parametrize("damage", ["not-npz", "no-offs", "offs-short", "plen-too-long",
                                    "empty-sequence", "bad-src"])
def test_a_broken_sequences_file_is_an_input_error_naming_it(tmp_path: Path, damage: str):
    path = tmp_path / "bad.npz"
    good = {"tokens": np.arange(20, dtype=np.int32), "offs": np.array([0, 8, 20]),
            "plens": np.array([3, 4], dtype=np.int32)}
    if damage == "not-npz":
        path.write_text("hello")
    else:
        arrays = dict(good)
        if damage == "no-offs":
            del arrays["offs"]
        elif damage == "offs-short":
            arrays["offs"] = np.array([0, 8, 19])
        elif damage == "plen-too-long":
            arrays["plens"] = np.array([3, 13], dtype=np.int32)
        elif damage == "empty-sequence":
            arrays["offs"] = np.array([0, 0, 20])
        elif damage == "bad-src":
            arrays |= {"src": np.array([0, 5], dtype=np.int16), "src_names": np.array(["a"])}
        np.savez(path, **arrays)
    with pytest.raises(InputError, match="bad.npz"):
        load(path)


# --- coding prompts ---------------------------------------------------------------------------


def test_every_bench_prompt_is_held_out_of_training(tmp_path: Path):
    bench = [p.text for prompts in BUILT_IN.values() for p in prompts]
    assert all(is_bench_prompt(t) for t in bench)
    path = tmp_path / "p.jsonl"
    other = "Write a complete Python parking lot module. Include a ParkingLot class."
    path.write_text("\n".join(json.dumps({"src": "x", "text": t}) for t in [*bench, other]))
    requests, dropped = load_coding_prompts(path)
    assert dropped == len(bench)
    assert [r.messages for r in requests] == [[{"role": "user", "content": other}]]
    assert requests[0].source == "coding:x" and not requests[0].heldout


def test_the_shared_training_prompts_load_without_bench_prompts():
    path = SHARED / "train-prompts.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    requests, dropped = load_coding_prompts(path)
    assert len(requests) + dropped == 1664
    assert {r.source for r in requests} == {"coding:humaneval", "coding:stdlib-func",
                                            "coding:stdlib-edit", "coding:module"}


@pytest.mark.parametrize(("text", "match"), [("{not json", "line 2 is not JSON"),
                                             ('{"src": "a"}', 'line 2 needs a non-empty'),
                                             ('["text"]', "line 2 needs")])
def test_a_broken_prompts_line_is_an_input_error_with_its_number(tmp_path: Path, text: str,
                                                                 match: str):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"text": "Write a function."}) + "\n" + text + "\n")
    with pytest.raises(InputError, match=match):
        load_coding_prompts(path)


# --- the agent's own requests -----------------------------------------------------------------


def test_agent_requests_are_the_replay_agents_own_one_per_turn_with_a_session_held_out(
        tmp_path: Path):
    registry = default_registry(Workspace(tmp_path))
    try:
        sessions = at.load_sessions(at.resolve_sessions(None), registry)
        tools = registry.openai_tools()
    finally:
        registry.close()
    requests = session_requests(("text", "json", "native"), holdout=("textstats-errors",))
    assert len(requests) == 3 * sum(len(s.turns) for s in sessions)
    for session in sessions:
        for protocol in ("text", "json", "native"):
            mine = [r for r in requests if r.source == f"agent-{protocol}:{session.name}"]
            assert len(mine) == len(session.turns)
            assert all(r.heldout == (session.name == "textstats-errors") for r in mine)
            first = mine[0].messages
            listed = at.tools_with_final(tools) if protocol == "json" else tools
            assert first[0] == {"role": "system", "content": system_prompt(protocol, listed)}
            assert first[1] == {"role": "user", "content": session.task}
            # Append-only, as the agent sends them; the fixture's calls are the replies.
            for a, b in zip(mine, mine[1:], strict=False):
                assert b.messages[: len(a.messages)] == a.messages
            assert (mine[0].schema is not None) == (protocol == "json")
            assert (mine[0].tools is not None) == (protocol == "native")
    text = [r for r in requests if r.source == "agent-text:inventory-report"]
    assert text[1].messages[2]["content"].startswith("<view>")
    assert text[1].messages[3]["content"].startswith("[result of tool view]")
    # Rendering twice gives the same bytes (stable call ids).
    again = session_requests(("native",), holdout=())
    assert [r.messages for r in again] == [r.messages for r in requests
                                           if r.source.startswith("agent-native:")]


def test_an_unknown_held_out_session_or_protocol_is_an_input_error():
    with pytest.raises(InputError, match="not among the sessions"):
        session_requests(("text",), holdout=("no-such-session",))
    with pytest.raises(InputError, match="protocols must be among"):
        session_requests(("yaml",))


# --- the command line's errors ----------------------------------------------------------------


def test_info_prints_what_a_file_holds(tmp_path: Path):
    save(_seqs(), tmp_path / "s.npz")
    proc = _run("info", str(tmp_path / "s.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "5 sequences" in proc.stdout and "1 held out" in proc.stdout
    assert "agent-text:s: 2 sequences" in proc.stdout


def test_info_on_many_sources_stops_quietly_when_its_reader_goes_away(tmp_path: Path):
    """``info ... | head -1``: the closed pipe ends it with no traceback, and each source's
    count is right (one pass over the sources, not one per source)."""
    n = 4000
    ids = [np.arange(6) + i for i in range(n)]
    names = [f"coding:prompt-{i:05d}" for i in range(n)]
    save(build(ids, [3] * n, names, [i % 3 == 0 for i in range(n)]), tmp_path / "s.npz")
    whole = _run("info", str(tmp_path / "s.npz"))
    assert whole.returncode == 0, whole.stderr
    lines = whole.stdout.splitlines()
    assert lines[1] == "  coding:prompt-00000: 1 sequences, 1 held out"
    assert lines[2] == "  coding:prompt-00001: 1 sequences, 0 held out"
    assert len(lines) == n + 1
    with subprocess.Popen([sys.executable, "-m", "train", "info", str(tmp_path / "s.npz")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                          stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert b"sequences" in proc.stdout.readline()
        proc.stdout.close()  # more than a pipe's buffer is still to come
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def _generated(prompts, pick: list[int], seed: int = 1):
    """Sequences as ``generate`` writes them: prompts of ``prompts`` at ``pick``, each with a
    response of its own (ids past uint16 in one, as a larger vocabulary would have)."""
    rng = np.random.default_rng(seed)
    ids = [np.concatenate([prompts.prompt(i), rng.integers(0, 49_152, size=3 + i)])
           for i in pick]
    return build(ids, [int(prompts.plens[i]) for i in pick], [prompts.source(i) for i in pick],
                 [bool(prompts.heldout[i]) for i in pick])


def test_pack_keeps_the_responses_and_unpack_joins_them_to_their_prompts(tmp_path: Path):
    """A session brings back its responses alone; joined with the prompt set again they are
    the generated sequences, and ``generate --done`` on them skips their prompts."""
    prompt_ids = [np.random.default_rng(i).integers(0, 49_152, size=20 + i) for i in range(6)]
    prompt_ids[5] = prompt_ids[2]  # one prompt under two sources, as prompts-v4 has 201
    prompts = build(prompt_ids, [len(x) for x in prompt_ids],
                    ["coding:a", "agent-text:s", "coding:b", "coding:a", "agent-synth-text:x",
                     "coding:c"], [False, True, False, False, False, True])
    save(prompts, tmp_path / "p.npz")
    made = _generated(prompts, [4, 1, 2, 5])
    save_shards(made, tmp_path / "gen" / "torch", 60)
    save(made.select([1]), tmp_path / "again.npz")  # a shard given twice: one response kept
    proc = _run("pack", "--data", str(tmp_path / "gen"), str(tmp_path / "again.npz"),
                "--prompts", str(tmp_path / "p.npz"), "--out", str(tmp_path / "r.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "packed 4 responses (1 repeated prompts left out)" in proc.stdout
    with np.load(tmp_path / "r.npz") as z:
        assert z["index"].tolist() == [4, 1, 2, 5] and len(z["tokens"]) == made.response_tokens()
    proc = _run("unpack", "--responses", str(tmp_path / "r.npz"), str(tmp_path / "r.npz"),
                "--prompts", str(tmp_path / "p.npz"), "--out", str(tmp_path / "back.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "4 prompts answered twice kept once" in proc.stdout
    back = load(tmp_path / "back.npz")
    assert [back.ids(i).tolist() for i in range(4)] == [made.ids(i).tolist() for i in range(4)]
    assert back.plens.tolist() == made.plens.tolist() and back.heldout.tolist() == [0, 1, 0, 1]
    assert [back.source(i) for i in range(4)] == ["agent-synth-text:x", "agent-text:s",
                                                  "coding:b", "coding:c"]
    assert not list(tmp_path.glob("*.partial"))


def test_unpack_refuses_responses_of_another_prompt_set_or_a_broken_file(tmp_path: Path):
    from train.responses import read_responses, write_responses

    prompts = _seqs(6)
    assert write_responses(_generated(prompts, [0, 3]), prompts, tmp_path / "r.npz") == (2, 0)
    other = _seqs(7)
    with pytest.raises(InputError, match="r.npz: made from another prompt set"):
        read_responses([tmp_path / "r.npz"], other)
    with pytest.raises(InputError, match="prompt is not in the prompt set"):
        write_responses(_generated(other, [6]), prompts, tmp_path / "x.npz")
    # the command line names the files it read
    save(prompts, tmp_path / "p.npz")
    save(_generated(other, [6]), tmp_path / "gen.npz")
    proc = _run("pack", "--data", str(tmp_path / "gen.npz"), "--prompts", str(tmp_path / "p.npz"),
                "--out", str(tmp_path / "x.npz"))
    assert proc.returncode == 2 and not (tmp_path / "x.npz").exists()
    assert re.fullmatch(r"error: \S*gen\.npz against \S*p\.npz: sequence 0's prompt is not in the "
                        r"prompt set \(\d+ tokens, source coding:a\)\n", proc.stderr), proc.stderr
    with np.load(tmp_path / "r.npz") as z:
        good = {k: z[k] for k in z.files}
    for name, change, words in [
        ("offs.npz", {"offs": good["offs"][:-1]}, "offsets do not fit 2 responses"),
        ("index.npz", {"index": np.asarray([0, 6], np.int32)}, "outside the 6 prompts"),
        ("keys.npz", {"index": None}, "not a responses file (no index)"),
        ("float.npz", {"index": np.asarray([0.0, 3.0])}, "whole numbers >= 0"),
        ("negative.npz", {"tokens": good["tokens"].astype(np.int32) - 70_000},
         "whole numbers >= 0"),
    ]:
        arrays = {k: v for k, v in {**good, **change}.items() if v is not None}
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(InputError, match=re.escape(words)):
            read_responses([tmp_path / name], prompts)
    # a member's compressed data damaged inside a sound zip: zlib's own error, once a traceback
    _damage(tmp_path / "r.npz", "tokens.npy", tmp_path / "zlib.npz")
    with pytest.raises(InputError, match="zlib.npz: not a readable npz file"):
        read_responses([tmp_path / "zlib.npz"], prompts)
    (tmp_path / "pickled.npz").write_bytes(b"\x80\x04junk")  # numpy's words suggest unpickling
    with pytest.raises(InputError, match=re.escape("not a readable npz file (not an .npz of")):
        read_responses([tmp_path / "pickled.npz"], prompts)


def _damage(path: Path, member: str, out: Path) -> Path:
    """``path`` with the first bytes of ``member``'s compressed data overwritten: the zip is
    sound, and reading that member raises ``zlib.error`` (not an OSError or a ValueError)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        at = archive.getinfo(member).header_offset
    name, extra = struct.unpack("<HH", data[at + 26:at + 30])  # the local header's lengths
    data[at + 30 + name + extra:at + 38 + name + extra] = b"\xff" * 8
    out.write_bytes(bytes(data))
    return out


def test_bad_inputs_exit_2_with_one_error_line(tmp_path: Path):
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not really")
    save(_seqs(), tmp_path / "s.npz")
    _damage(tmp_path / "s.npz", "tokens.npy", tmp_path / "zlib.npz")
    (tmp_path / "p.jsonl").write_text("{oops\n")
    (tmp_path / "notgguf.gguf").write_text("text")
    cases = [
        (["info", str(tmp_path / "broken.npz")], "broken.npz"),
        (["info", str(tmp_path / "zlib.npz")], "zlib.npz: not a readable npz file"),
        (["unpack", "--responses", str(tmp_path / "broken.npz"), "--prompts",
          str(tmp_path / "broken.npz"), "--out", str(tmp_path / "o.npz")], "broken.npz"),
        (["pack", "--data", str(tmp_path / "none.npz"), "--prompts",
          str(tmp_path / "broken.npz"), "--out", str(tmp_path / "o.npz")], "broken.npz"),
        (["export", "--weights", str(tmp_path / "none.npz"), "--target",
          str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "o.gguf")], "missing.gguf"),
        (["prompts", "--target", str(tmp_path / "notgguf.gguf"), "--coding",
          str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "o.npz")], "not a GGUF"),
    ]
    v1 = SHARED / "smollm2-135m-dflash-v1.gguf"
    if v1.is_file():  # a GGUF whose architecture is not llama
        cases.append((["export", "--weights", str(tmp_path / "none.npz"), "--target", str(v1),
                       "--out", str(tmp_path / "o.gguf")], "architecture is 'dflash'"))
    for args, words in cases:
        proc = _run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert words in lines[0]
        assert "Traceback" not in proc.stderr


def test_a_torch_stage_without_torch_says_how_to_install_it(tmp_path: Path):
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here; the message is for installs without it")
    save(_seqs(), tmp_path / "s.npz")
    proc = _run("fit", "--target", "t.gguf", "--data", str(tmp_path / "s.npz"),
                "--out", str(tmp_path / "run"))
    assert proc.returncode == 3
    assert proc.stderr.strip().startswith("error: this stage needs torch")
    assert proc.stderr.strip().endswith("not installed; run: pip install -e '.[train]'")


DEVICE_SAFE = ("hf_gen", "fast_decode", "gen_profile", "fit", "features", "head_loss", "accept",
               "target", "draft", "batches", "export", "config", "seqs", "gen_stats", "errors",
               "runlog")
"""The modules the torch stages run on: the device image has torch, transformers and numpy,
and a gguf wheel travels; the product's own dependencies (pydantic, httpx2, psutil…) do not."""


def test_the_torch_stages_need_only_torch_transformers_numpy_and_gguf():
    import ast

    allowed = {"torch", "transformers", "numpy", "gguf", "backend.models.ggufinfo", "backend",
               *sys.stdlib_module_names}
    found = []
    for name in DEVICE_SAFE:
        tree = ast.parse((ROOT / "train" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for mod in names:
                inside = mod.startswith("train.") and mod.split(".")[1] in DEVICE_SAFE
                if not inside and mod not in allowed and mod.split(".")[0] not in allowed - {
                        "backend"}:
                    found.append(f"train.{name} imports {mod}")
    assert found == []
    cli = ast.parse((ROOT / "train" / "cli.py").read_text())
    top = {n.module for n in cli.body if isinstance(n, ast.ImportFrom)}
    assert top <= {"__future__", "collections", "collections.abc", "pathlib", "typing",
                   "train", "train.errors"}, top


@pytest.mark.parametrize(("args", "words"), [
    (["--batches", "5,x"], "argument --batches: comma-separated numbers, not '5,x'"),
    (["--batches", "0"], "argument --batches: batches count from 1, not '0'"),
    (["--steps", "0"], "argument --steps: at least 1, not '0'"),
    (["--rows", "-1"], "argument --rows: at least 0, not '-1'"),
    (["--kernels", "x"], "argument --kernels: a whole number, not 'x'"),
])
def test_the_generator_profile_refuses_bad_batches_before_loading_anything(args, words):
    proc = _run("gen-profile", "--target", "t.gguf", *args)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_generate_refuses_a_limit_below_one(limit: str):
    """``--limit 0`` read as no limit and started every prompt of the set."""
    proc = _run("generate", "--prompts", "p.npz", "--target", "t.gguf", "--out", "o",
                "--limit", limit)
    assert proc.returncode == 2 and f"argument --limit: at least 1, not '{limit}'" in proc.stderr


@pytest.mark.parametrize("engine", ["hf", "server"])
def test_generate_refuses_a_decode_attention_its_engine_would_ignore(engine: str):
    """``--attention`` is the torch engine's: with another engine it was silently dropped."""
    proc = _run("generate", "--prompts", "p.npz", "--target", "t.gguf", "--out", "o",
                "--engine", engine, "--attention", "bmm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--attention is the torch engine's (--engine torch); the {engine} engine" \
        in proc.stderr


def test_generate_help_says_which_engine_reads_each_option_and_its_default():
    help_text = " ".join(_run("generate", "--help").stdout.split())
    assert "--batch BATCH hf and torch engines: prompts a batch (default: 192)" in help_text
    assert "--device DEVICE hf and torch engines: the torch device (default: cuda)" in help_text
    assert "torch engine only: how a decode step attends" in help_text
    # a default of None is the help's to explain, not "(default: None)"
    assert "(default: None)" not in help_text and help_text.count("(default:") >= 5


def test_the_generator_profile_without_torch_says_how_to_install_it():
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here; the message is for installs without it")
    proc = _run("gen-profile", "--target", "t.gguf")
    assert proc.returncode == 3
    assert proc.stderr.strip().startswith("error: this stage needs torch")
