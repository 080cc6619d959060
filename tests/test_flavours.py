"""Flavour-aware argv: the seed's presets translated for bee-old, bee-new and upstream, each
checked against that build's facts (BeeLlama: stored from its arg.cpp; upstream: the real
binary's --help), removed-flag notes included."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from backend.engine.flavour import binary_facts, flavour_from_help
from backend.engine.helpfacts import HelpFacts, check_argv, parse_help, stored_facts
from backend.engine.registry import Engine
from backend.models.presets import NgramLengths, ServerOptions, get_preset
from backend.serve.profiles import LaunchPlan, server_argv

M, D = Path("/models/gemma-4-31B-it-Q4_K_S.gguf"), Path("/models/draft.gguf")
# The seed's two commands (docs/design/seed.md, server lines), flags only, for BeeLlama <= 0.3.
SEED_BASELINE = ("./llama-server -m m.gguf --host 0.0.0.0 --port 8910 -np 1 -ngl all -b 2048 "
                 "-ub 512 --ctx-size 32768 --cache-type-k q5_0 --cache-type-v q4_1 "
                 "--flash-attn on --jinja --metrics --log-timestamps --log-prefix --reasoning off "
                 "--temp 0.7 --top-k 64 --top-p 0.95 --min-p 0.0")
SEED_DFLASH = ("./llama-server -m m.gguf --spec-draft-model d.gguf --spec-type dflash "
               "--spec-dflash-cross-ctx 1024 --host 0.0.0.0 --port 8910 -np 1 --kv-unified "
               "-ngl all --spec-draft-ngl all -b 2048 -ub 512 --ctx-size 32768 --flash-attn on "
               "--cache-ram 0 --jinja --no-mmap --mlock --no-host --metrics --log-timestamps "
               "--log-prefix --reasoning off --temp 0.7 --top-k 64 --top-p 0.95 --min-p 0.0")


@pytest.fixture(scope="module")
def facts(engine: Engine) -> dict[str, HelpFacts]:
    return {"bee-old": stored_facts("beellama-v0.3.2"),
            "bee-new": stored_facts("beellama-v0.4.5"),
            "upstream": binary_facts(engine.binary)}


def plan(profile: str, parallel: int = 1) -> LaunchPlan:
    preset = get_preset("gemma4-31b-dflash")
    return LaunchPlan(binary=Path("/bin/llama-server"), model=M, draft=D, profile=profile,
                      ctx_size=preset.ctx_size, options=preset.server, parallel=parallel)


@pytest.mark.parametrize("flavour", ["bee-old", "bee-new", "upstream"])
@pytest.mark.parametrize("profile", ["baseline", "ngram", "ngram-fixed", "dflash"])
def test_the_gemma_preset_translates_to_flags_each_flavour_accepts(
        facts: dict[str, HelpFacts], flavour: str, profile: str):
    argv = server_argv(plan(profile), "127.0.0.1", 8910, flavour)  # type: ignore[arg-type]
    assert check_argv(argv, facts[flavour]) == []


def test_where_the_flavours_differ(facts: dict[str, HelpFacts]):
    old = server_argv(plan("dflash"), "h", 1, "bee-old")
    new = server_argv(plan("dflash"), "h", 1, "bee-new")
    up = server_argv(plan("dflash"), "h", 1, "upstream")
    joined = {k: " ".join(v) for k, v in {"old": old, "new": new, "up": up}.items()}
    assert "--spec-type dflash --spec-dflash-cross-ctx 1024" in joined["old"]
    assert "--no-mmap --mlock" in joined["old"] and "--load-mode" not in joined["old"]
    for key in ("new", "up"):
        assert "--spec-type draft-dflash --spec-draft-n-max 15" in joined[key]
        assert "--load-mode mlock" in joined[key] and "--spec-dflash-cross-ctx" not in joined[key]
    assert "--fit off" in joined["up"] and "--fit" not in joined["old"] + joined["new"]
    for argv in (old, new, up):  # draft KV kept f16; the seed's KV types for the target
        assert "--spec-draft-type-k f16 --spec-draft-type-v f16" in " ".join(argv)
        assert "-ctk q5_0 -ctv q4_1" in " ".join(argv) and "-ctxcp 8" in " ".join(argv)
    # Each flavour's translation is rejected by the others where they really differ.
    assert any("--spec-dflash-cross-ctx" in p for p in check_argv(old, facts["bee-new"]))
    assert any("--spec-type dflash" in p for p in check_argv(old, facts["upstream"]))
    assert any("--load-mode" in p for p in check_argv(new, facts["bee-old"]))



@pytest.mark.parametrize("profile", ["dflash", "dflash-fixed"])
def test_a_length_the_product_chose_is_drafted_as_chosen_on_bee_old(
        facts: dict[str, HelpFacts], profile: str):
    # Untuned (no length in the plan): v0.3.1's own 16 under its adaptive controller, the
    # reference. Chosen by tuning or calibration: that length, the controller off (it ran at
    # 0.41-0.45x of plain with the v1 draft on an H200 without turning drafting off).
    untuned = server_argv(plan(profile), "h", 1, "bee-old")
    assert "--spec-draft-n-max" not in untuned and "--no-spec-dm-adaptive" not in untuned
    chosen = server_argv(plan(profile).model_copy(update={"draft_n_max": 5}), "h", 1, "bee-old")
    assert "--spec-type dflash --spec-dflash-cross-ctx 1024 --spec-draft-n-max 5 " \
        "--no-spec-dm-adaptive" in " ".join(chosen)
    assert check_argv(chosen, facts["bee-old"]) == []
    # Off: no draft model, no DFlash flags at all (a plain server).
    off = server_argv(plan(profile).model_copy(update={"draft_n_max": 0}), "h", 1, "bee-old")
    assert not any(a.startswith("--spec") for a in off)
    assert check_argv(off, facts["bee-old"]) == []

def _lengths(argv: list[str]) -> tuple[int, ...] | None:
    flags = ("--spec-ngram-mod-n-match", "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max")
    if not any(f in argv for f in flags):
        return None
    return tuple(int(argv[argv.index(f) + 1]) for f in flags)


def test_ngram_lengths_are_the_plans_own_and_never_the_references():
    # What a plan carries (a preset's own, or the GPU's: tuning.with_ngram_lengths) reaches
    # ngram and dflash+ngram on every flavour; ngram-fixed stays llama.cpp's.
    own = ServerOptions(ngram=NgramLengths(n_match=9, n_min=3, n_max=40))
    for profile in ("ngram", "dflash+ngram"):
        assert _lengths(server_argv(plan(profile), "h", 1, "upstream")) is None
        mine = plan(profile).model_copy(update={"options": own})
        assert _lengths(server_argv(mine, "h", 1, "upstream")) == (9, 3, 40)
    off = plan("dflash+ngram").model_copy(update={"draft_n_max": 0, "options": own})
    argv = server_argv(off, "h", 1, "upstream")  # the draft model off: n-gram lookup stays
    assert argv[argv.index("--spec-type") + 1] == "ngram-mod" and _lengths(argv) == (9, 3, 40)
    for profile in ("ngram-fixed", "baseline", "dflash"):
        mine = plan(profile).model_copy(update={"options": own})
        assert _lengths(server_argv(mine, "h", 1, "upstream")) is None
    mine = plan("ngram").model_copy(update={"options": own})
    for flavour in ("bee-old", "bee-new"):  # the same flags on every flavour
        assert _lengths(server_argv(mine, "h", 1, flavour)) == (9, 3, 40)  # type: ignore[arg-type]


def test_dflash_refuses_more_than_one_slot():
    with pytest.raises(ValueError, match=r"one slot \(-np 1\)"):
        server_argv(plan("dflash", parallel=2), "h", 1, "upstream")
    assert "-np 2" in " ".join(server_argv(plan("ngram", parallel=2), "h", 1, "upstream"))


def test_the_seeds_commands_run_on_bee_old_and_what_breaks_on_newer_builds(
        facts: dict[str, HelpFacts]):
    for command in (SEED_BASELINE, SEED_DFLASH):
        assert check_argv(shlex.split(command), facts["bee-old"]) == []
    broken = " ".join(check_argv(shlex.split(SEED_DFLASH), facts["upstream"]))
    assert "--spec-dflash-cross-ctx: not an option" in broken
    assert "--spec-type dflash" in broken
    assert "--no-mmap: not an option" in broken or "--no-mmap: the argument" in broken
    assert check_argv(shlex.split(SEED_BASELINE), facts["upstream"]) == []


def test_removed_flags_count_as_absent(facts: dict[str, HelpFacts]):
    problems = check_argv(["llama-server", "--draft-max", "16"], facts["bee-new"])
    assert problems and "has been removed" in problems[0]
    assert not facts["upstream"].has("--draft-max") and facts["upstream"].has("--spec-type")


def test_help_parsing_and_flavour_detection_on_real_shapes(engine: Engine):
    help_text = "\n".join([
        "-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers",
        "--spec-type none,draft-dflash,ngram-mod  speculative type",
        "-ctk,  --cache-type-k TYPE              KV cache data type for K",
        "                                        allowed values: f16, q8_0, turbo4",
        "--draft-max N                           the argument has been removed. use X",
        "-fitt, --fit-target MiB0,MiB1",
        "                                        the argument has been removed. use Y",
    ])
    facts = parse_help(help_text)
    assert {"-ngl", "--gpu-layers", "--n-gpu-layers", "--spec-type"} <= facts.flags
    assert facts.spec_types == {"none", "draft-dflash", "ngram-mod"}
    assert facts.cache_types == {"f16", "q8_0", "turbo4"}
    assert set(facts.removed) == {"--draft-max", "-fitt", "--fit-target"}
    assert flavour_from_help(help_text) == "bee-old"  # turbo4 is BeeLlama <= 0.3 only


def test_server_options_reject_malformed_values():
    with pytest.raises(ValueError):
        ServerOptions(gpu_layers="everything")
    with pytest.raises(ValueError):
        ServerOptions(flash_attn="maybe")  # type: ignore[arg-type]
