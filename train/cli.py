"""``python -m train STAGE ...``: the trainer's command line (train/README.md).

Stages, each a separate command so GPU runs can be staged and resumed:

- ``coding-prompts`` — coding prompts (.jsonl) built from Python source on this machine;
- ``agent-sessions`` — synthetic agent sessions (fixture-format .json) over that source,
  recorded with the agent's real tools;
- ``prompts``  — coding prompts (.jsonl) + agent sessions (the fixtures, synthetic ones) → a
  prompt set (.npz), rendered by a real llama-server's chat template (torch-free);
- ``generate`` — a prompt set → target-greedy sequences (.npz shards), on llama-server with
  many slots (``--engine server``), the target's own weights with a static cache and CUDA
  graphs (``--engine torch``, the GPU engine) or transformers batches (``--engine hf``);
  prints response tokens a second and a minute;
- ``fit``      — sequences → a trained draft (checkpoint, weights .npz, GGUF), held-out
  acceptance; ``--resume`` continues a stopped run;
- ``accept``   — torch-side acceptance of a draft (.npz or .gguf) on held-out sequences;
- ``export``   — draft weights (.npz) → upstream ``dflash`` GGUF (numpy + gguf only);
- ``info``     — what a sequences or prompt file holds;
- ``pack`` / ``unpack`` — generated sequences ↔ their responses alone, by prompt index into
  the prompt set (what a GPU session brings back, train/responses.py);
- ``gen-profile`` — where the ``torch`` generator's time goes on chosen batches.

Exit codes: 0 done; 2 bad usage or input (a missing or broken file, a non-llama target);
3 an error with a stated cause (a server that did not start, torch not installed); 130
interrupted. Every failure is one ``error:`` line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from train import runlog
from train.errors import InputError, TrainError, need_torch

ATTENTION_CHOICES = ("auto", "bmm", "split", "sdpa")
"""``generate --attention``: ``train.fast_decode.ATTENTION`` and ``auto``, spelled out here
because this module loads without torch."""


def _say(text: str) -> None:
    print(text, flush=True)


def _layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer ids: {text}") from exc


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def group_of(source: str) -> str:
    """``coding:stdlib-func`` → ``coding``; ``agent-text:todo`` → ``agent-text``;
    ``agent-synth-text:synth-shlex-3`` → ``agent-synth-text``."""
    return source.split(":", 1)[0]


def repeated(group: str) -> bool:
    """Whether ``fit --repeat-agent`` repeats a group: the fixture sessions' requests
    (``agent-text``, ``agent-json``…: a few dozen), not the synthetic ``agent-synth-*`` ones
    (thousands, already plentiful)."""
    return group.startswith("agent-") and not group.startswith("agent-synth-")


# --- prompts ---------------------------------------------------------------------------------


def cmd_coding_prompts(a: argparse.Namespace) -> int:
    import json

    from train.coding_prompts import build_prompts, stdlib_root

    roots = a.source or [stdlib_root()]
    missing = [str(r) for r in roots if not Path(r).is_dir()]
    if missing:
        raise InputError(f"no such source folder: {', '.join(missing)}")
    prompts = build_prompts(roots, seed=a.seed, modules=a.modules, limit=a.limit)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", encoding="utf-8") as fh:
        for p in prompts:
            fh.write(json.dumps(p, ensure_ascii=False) + "\n")
    kinds = Counter(p["src"] for p in prompts)
    _say(f"wrote {a.out}: {len(prompts)} prompts ("
         + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
    return 0


def cmd_agent_sessions(a: argparse.Namespace) -> int:
    from train.agent_sessions import build_sessions, check_out, write_sessions
    from train.coding_prompts import stdlib_root

    roots = a.source or [stdlib_root()]
    missing = [str(r) for r in roots if not Path(r).is_dir()]
    if missing:
        raise InputError(f"no such source folder: {', '.join(missing)}")
    if a.count < 1:
        raise InputError(f"--count must be at least 1 (got {a.count})")
    if a.max_lines < 20:
        raise InputError(f"--max-lines must be at least 20 (got {a.max_lines})")
    check_out(a.out)  # refuses a folder that already holds sessions, before the work
    sessions, stats = build_sessions(roots, a.count, seed=a.seed, max_lines=a.max_lines,
                                     jobs=a.jobs, progress=None if a.quiet else _say)
    write_sessions(sessions, a.out)
    turns = Counter(t["kind"] for s in sessions for t in s["turns"])
    _say(f"wrote {len(sessions)} sessions to {a.out}: {sum(turns.values())} turns ("
         + ", ".join(f"{k} {v}" for k, v in sorted(turns.items())) + "); "
         + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    return 0


def cmd_prompts(a: argparse.Namespace) -> int:
    from train import llama
    from train.config import target_architecture
    from train.render import render
    from train.requests import load_coding_prompts
    from train.seqs import save

    target_architecture(a.target)
    requests, dropped = [], 0
    for path in a.coding or []:
        found, bench = load_coding_prompts(path, a.limit)
        requests += found
        dropped += bench
        _say(f"{len(found)} coding prompts from {path} ({bench} bench prompts held out)")
    if a.protocols:
        from train.agent_requests import session_requests

        agent = session_requests(a.protocols, a.holdout_sessions, a.sessions or None,
                                 a.holdout_fraction)
        groups = Counter(group_of(r.source) for r in agent)
        held = Counter(group_of(r.source) for r in agent if r.heldout)
        _say(f"{len(agent)} agent requests ({', '.join(a.protocols)}; held-out sessions: "
             f"{', '.join(a.holdout_sessions) or 'none'}"
             + (f", synthetic ones at {a.holdout_fraction:g}" if a.holdout_fraction else "")
             + "): " + ", ".join(f"{g} {n} ({held[g]} held out)"
                                 for g, n in sorted(groups.items())))
        requests += agent
    if not requests:
        raise InputError("no prompts: give --coding FILE and/or --protocols")
    if a.server_url:
        prompts, _ = render(a.server_url, requests, max_prompt=a.max_prompt, progress=_say)
    else:
        with llama.serve(_server_bin(a), a.target, parallel=1, ctx_per_slot=2048) as url:
            prompts, _ = render(url, requests, max_prompt=a.max_prompt, progress=_say)
    save(prompts, a.out)
    _say(f"wrote {a.out}: {_summary(prompts)}")
    runlog.append(a.runs, "prompts", {"out": str(a.out),
                                      "coding": [str(p) for p in a.coding or []],
                                      "bench_prompts_dropped": dropped,
                                      "protocols": list(a.protocols),
                                      "sessions": list(a.sessions),
                                      "heldout_sessions": list(a.holdout_sessions),
                                      "heldout_fraction": a.holdout_fraction,
                                      "max_prompt": a.max_prompt,
                                      "data": _data_record(prompts)})
    return 0


def _server_bin(a: argparse.Namespace) -> Path:
    if a.server_bin:
        return a.server_bin
    from backend.engine.registry import list_engines

    engines = [e for e in list_engines() if e.engine == "llama.cpp" and e.binary.is_file()]
    if not engines:
        raise TrainError("no llama-server: build one (agent backend build), or pass "
                         "--server-bin PATH or --server-url URL")
    return engines[0].binary


# --- generate --------------------------------------------------------------------------------


def cmd_generate(a: argparse.Namespace) -> int:
    from train.seqs import load_many, save_shards

    if a.attention and a.engine != "torch":
        raise InputError(f"--attention is the torch engine's (--engine torch); the "
                         f"{a.engine} engine attends its own way")
    attention = a.attention or "auto"
    prompts = load_many(a.prompts)
    if a.done:
        done = load_many(a.done)
        seen = {done.prompt(i).tobytes() for i in range(len(done))}
        left = [i for i in range(len(prompts)) if prompts.prompt(i).tobytes() not in seen]
        _say(f"{len(prompts) - len(left)} prompts already generated in {len(done)} sequences: "
             "skipped")
        prompts = prompts.select(left)
    if a.limit:
        prompts = prompts.select(range(min(a.limit, len(prompts))))
    if a.engine == "server":
        from train import llama, server_gen

        width = int(prompts.lengths().max()) + a.max_new + 16
        if a.server_url:
            seqs, stats = server_gen.generate(a.server_url, prompts, max_new=a.max_new,
                                              parallel=a.parallel, budget_s=a.budget_s,
                                              progress=_say)
        else:
            with llama.serve(_server_bin(a), a.target, parallel=a.parallel,
                             ctx_per_slot=width, gpu_layers=a.gpu_layers) as url:
                seqs, stats = server_gen.generate(url, prompts, max_new=a.max_new,
                                                  parallel=a.parallel, budget_s=a.budget_s,
                                                  progress=_say)
        skipped = 0
    else:
        need_torch()
        from train import hf_gen
        from train.target import load_target

        target = load_target(a.target, a.device)
        seqs, stats, skipped = hf_gen.generate(target, prompts, max_new=a.max_new,
                                               batch=a.batch, batch_tokens=a.batch_tokens,
                                               budget_s=a.budget_s, progress=_say,
                                               engine=a.engine, attention=attention)
        if skipped:
            _say(f"{skipped} json-protocol prompts skipped: their grammar needs the server "
                 "engine")
    paths = save_shards(seqs, a.out, a.shard_tokens)
    _say(stats.line())
    _say(f"wrote {', '.join(map(str, paths))}: {_summary(seqs)}")
    runlog.append(a.runs, "generate", {"prompts": [str(p) for p in a.prompts],
                                       "out": [str(p) for p in paths], "max_new": a.max_new,
                                       "engine": a.engine, "device": a.device,
                                       "attention": attention if a.engine == "torch" else None,
                                       "stats": stats.as_dict(), "skipped_json": skipped,
                                       "data": _data_record(seqs)})
    return 0


# --- fit / accept ----------------------------------------------------------------------------


def _split(seqs: Any, repeat_agent: int, eval_limit: int | None) -> tuple[list[int], list[int]]:
    train = [i for i in range(len(seqs)) if not seqs.heldout[i]]
    train += [i for i in train if repeated(group_of(seqs.source(i)))] * (repeat_agent - 1)
    held = [i for i in range(len(seqs)) if seqs.heldout[i]]
    return train, held[:eval_limit] if eval_limit else held


def _evaluate(draft: Any, target: Any, seqs: Any, held: list[int],
              max_blocks: int | None) -> dict[str, Any]:
    from train.accept import acceptance

    groups: dict[str, list[int]] = {}
    for i in held:
        groups.setdefault(group_of(seqs.source(i)), []).append(i)
    out = {}
    for name, index in sorted(groups.items()):
        result = acceptance(draft, target, seqs, index, max_blocks=max_blocks)
        _say(f"[accept] {name} ({len(index)} held-out sequences): {result.line()}")
        out[name] = result.as_dict() | {"sequences": len(index)}
    return out


def _load_draft(path: Path, target_gguf: Path, device: str) -> Any:
    from train.config import draft_config
    from train.draft import Draft
    from train.export import load_weights, weights_from_gguf

    if path.suffix == ".gguf":
        try:
            weights, keys = weights_from_gguf(path)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: not a readable draft GGUF ({exc})") from exc
        if "dflash.target_layers" not in keys:
            raise InputError(f"{path}: not an upstream dflash draft (no dflash.target_layers)")
        config = draft_config(target_gguf, n_layer=int(keys["dflash.block_count"]),
                              target_layers=tuple(keys["dflash.target_layers"]),
                              block_size=int(keys["dflash.block_size"]),
                              mask_id=int(keys["tokenizer.ggml.mask_token_id"]),
                              rope_base=float(keys["dflash.rope.freq_base"]))
    else:
        weights, config = load_weights(path)
    draft = Draft(config)
    try:
        draft.load_weights(weights)
    except RuntimeError as exc:
        raise InputError(f"{path}: its tensors do not fit the draft for this target ({exc})") \
            from exc
    return draft.to(device)


def _target_dtype(device: str) -> Any:
    """bfloat16 on a GPU (the features' precision under autocast anyway), float32 on CPU."""
    import torch

    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def _feature_store(mode: str, target: Any, seqs: Any, index: list[int],
                   layers: tuple[int, ...]) -> tuple[Any, list[int]]:
    """(the training sequences' features computed once, or None for features computed per
    batch; the training index to use). ``store`` stores them all, ``online`` none, ``auto``
    all when they fit, else those of the sequences that fit (:func:`train.features.
    fitting_subset`), and training keeps to those. Says which and why."""
    import time

    import torch

    from train.features import (
        STORE_SHARE,
        FeatureStore,
        fitting_subset,
        free_bytes,
        store_bytes,
        store_fits,
    )

    if mode == "online":
        return None, index
    dtype = torch.bfloat16 if target.device.type == "cuda" else torch.float32
    n_features = len(layers) * int(target.embed.shape[1])
    fits, words = store_fits(store_bytes(seqs, index, n_features, dtype), target.device)
    if mode == "auto" and not fits:
        kept = set(fitting_subset(seqs, index, n_features, dtype,
                                  int(STORE_SHARE * free_bytes(target.device))))
        lengths = seqs.lengths()
        _say(f"[fit] {words}: training on the {len(kept)} of {len(set(index))} sequences "
             f"({sum(int(lengths[i]) for i in kept)} of "
             f"{sum(int(lengths[i]) for i in set(index))} tokens) whose features fit")
        index = [i for i in index if i in kept]
        if not index:
            raise InputError(f"no training sequence's features fit ({words}): "
                             "use --features online")
    started = time.monotonic()
    store = FeatureStore(target, seqs, index, layers, dtype=dtype, progress=_say)
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - started
    _say(f"[fit] features stored once ({words}): {store.flat.shape[0]} tokens in "
         f"{seconds:.1f} s = {store.flat.shape[0] / max(seconds, 1e-9):.0f} tokens/s")
    return store, index


def cmd_fit(a: argparse.Namespace) -> int:
    need_torch()
    import torch

    from train.config import draft_config
    from train.draft import Draft
    from train.export import export_gguf
    from train.fit import WEIGHTS, FitSettings, fit
    from train.seqs import load_many
    from train.target import load_target

    seqs = load_many(a.data)
    config = draft_config(a.target, n_layer=a.draft_layers, target_layers=a.layers or None)
    torch.manual_seed(a.seed)
    target = load_target(a.target, a.device, _target_dtype(a.device))
    draft = (_load_draft(a.init, a.target, a.device) if a.init
             else Draft(config).to(a.device))
    if draft.config != config:
        raise InputError(f"--init {a.init} has another shape than --draft-layers/--layers ask")
    train, held = _split(seqs, a.repeat_agent, a.eval_seqs)
    settings = FitSettings(steps=a.steps, batch_seqs=a.batch_seqs, anchors=a.anchors, lr=a.lr,
                           warmup=a.warmup, gamma=a.gamma, seed=a.seed,
                           ckpt_every=a.ckpt_every, log_every=a.log_every,
                           budget_s=a.budget_s, weight_decay=a.weight_decay)
    train_tokens = int(sum(seqs.lengths()[i] for i in set(train)))
    _say(f"[fit] {len(set(train))} training sequences ({train_tokens} tokens), {len(held)} "
         f"held out; draft {sum(p.numel() for p in draft.parameters()) / 1e6:.2f} M params, "
         f"{config.n_layer} layer(s), target layers {list(config.target_layers)}")
    features, train = _feature_store(a.features, target, seqs, train, config.target_layers)
    train_tokens = int(sum(seqs.lengths()[i] for i in set(train)))
    state = fit(draft, target, seqs, train, a.out, settings, resume=a.resume,
                stop_at=a.stop_at, log=_say, features=features,
                profile_steps=a.profile_steps)
    passes = state.step * settings.batch_seqs / max(1, len(train))
    finished = state.stopped != "stop_at"
    if not finished:
        _say(f"[fit] stopped at step {state.step} of {settings.steps}; held-out acceptance "
             "is measured when the run finishes (--resume)")
    results = _evaluate(draft, target, seqs, held, a.eval_blocks) if held and finished else {}
    gguf_path = export_gguf(draft.weights(), config, a.target, a.out / "draft.gguf",
                            name=a.name)
    _say(f"[fit] wrote {a.out / WEIGHTS} and {gguf_path}")
    device = (torch.cuda.get_device_name() if a.device.startswith("cuda") else a.device)
    runlog.append(a.runs, "fit", {
        "out": str(a.out), "data": [str(p) for p in a.data], "target": str(a.target),
        "device": device, "config": config.to_json(), "settings": vars(settings),
        "resumed": bool(a.resume), "init": str(a.init or ""), "repeat_agent": a.repeat_agent,
        "train_sequences": len(set(train)), "train_tokens": train_tokens,
        "heldout_sequences": len(held), "passes": round(passes, 3), "steps": state.step,
        "finished": finished, "stopped": state.stopped,
        "seconds": round(state.seconds, 1), "loss_ema": state.loss_ema, "acc1": state.acc1,
        "eval_blocks": a.eval_blocks, "heldout": results})
    return 0


def cmd_accept(a: argparse.Namespace) -> int:
    need_torch()
    from train.seqs import load_many
    from train.target import load_target

    seqs = load_many(a.data)
    target = load_target(a.target, a.device, _target_dtype(a.device))
    draft = _load_draft(a.draft, a.target, a.device)
    index = ([i for i in range(len(seqs)) if seqs.heldout[i]] if not a.all_sequences
             else list(range(len(seqs))))
    index = index[: a.eval_seqs] if a.eval_seqs else index
    if not index:
        raise InputError("no held-out sequences in the data (use --all-sequences)")
    results = _evaluate(draft, target, seqs, index, a.eval_blocks)
    runlog.append(a.runs, "accept", {"draft": str(a.draft), "data": [str(p) for p in a.data],
                                     "all_sequences": a.all_sequences,
                                     "eval_blocks": a.eval_blocks, "heldout": results})
    return 0


# --- export / info ---------------------------------------------------------------------------


def cmd_export(a: argparse.Namespace) -> int:
    from train.config import target_architecture
    from train.export import export_gguf, load_weights

    target_architecture(a.target)
    weights, config = load_weights(a.weights)
    out = export_gguf(weights, config, a.target, a.out, name=a.name)
    _say(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB, {config.n_layer} layer(s), "
         f"target layers {list(config.target_layers)})")
    return 0


def _data_record(seqs: Any) -> dict[str, Any]:
    lengths = seqs.lengths()
    by_group: Counter[str] = Counter()
    for i in range(len(seqs)):
        by_group[group_of(seqs.source(i))] += int(lengths[i] - seqs.plens[i])
    return {"sequences": len(seqs), "tokens": int(lengths.sum()),
            "response_tokens": seqs.response_tokens(), "heldout": int(seqs.heldout.sum()),
            "response_tokens_by_group": dict(sorted(by_group.items()))}


def _summary(seqs: Any) -> str:
    r = _data_record(seqs)
    groups = ", ".join(f"{k} {v}" for k, v in r["response_tokens_by_group"].items())
    return (f"{r['sequences']} sequences, {r['tokens']} tokens ({r['response_tokens']} after "
            f"the prompts: {groups or 'none'}), {r['heldout']} held out")


def cmd_info(a: argparse.Namespace) -> int:
    import numpy as np

    from train.seqs import load_many

    seqs = load_many(a.data)
    _say(_summary(seqs))
    # one pass over the source indices (a loop per source was quadratic: minutes on 400 k)
    counts = np.bincount(seqs.src, minlength=len(seqs.src_names))
    held = np.bincount(seqs.src, weights=seqs.heldout, minlength=len(seqs.src_names))
    for k in sorted(np.flatnonzero(counts), key=lambda k: seqs.src_names[k]):
        _say(f"  {seqs.src_names[k]}: {counts[k]} sequences, {int(held[k])} held out")
    return 0


def cmd_pack(a: argparse.Namespace) -> int:
    from train.responses import prompt_set_id, write_responses
    from train.seqs import load, load_many

    prompts = load(a.prompts)
    seqs = load_many(a.data)
    try:
        n, repeats = write_responses(seqs, prompts, a.out)
    except InputError as exc:  # its sequence index runs over all the --data files
        raise InputError(f"{', '.join(map(str, a.data))} against {a.prompts}: {exc}") from exc
    left_out = f" ({repeats} repeated prompts left out)" if repeats else ""
    _say(f"packed {n} responses{left_out} into {a.out} ({a.out.stat().st_size:,} bytes; "
         f"prompts: {a.prompts}, set {prompt_set_id(prompts)})")
    return 0


def cmd_unpack(a: argparse.Namespace) -> int:
    from train.responses import read_responses
    from train.seqs import load, save

    prompts = load(a.prompts)
    seqs, repeats = read_responses(a.responses, prompts)
    save(seqs, a.out)
    _say(f"wrote {a.out}: {_summary(seqs)}"
         f"{f'; {repeats} prompts answered twice kept once' if repeats else ''}")
    return 0


def cmd_gen_profile(a: argparse.Namespace) -> int:
    need_torch()
    import json
    from dataclasses import asdict

    from train.gen_profile import chosen_batches, profile
    from train.seqs import load
    from train.target import load_target

    prompts = load(a.prompts)
    chosen = chosen_batches(prompts, a.batches, batch=a.batch, batch_tokens=a.batch_tokens,
                            max_new=a.max_new)
    target = load_target(a.target, a.device)
    timings, kernels = profile(target, prompts, chosen, steps=a.steps, rows=a.rows,
                               kernels=a.kernels, say=_say)
    record = {"target": str(a.target), "prompts": str(a.prompts), "device": a.device,
              "batches": [asdict(t) for t in timings]}
    if a.json:
        a.json.write_text(json.dumps({**record, "kernels": kernels}, indent=1) + "\n", "utf-8")
    runlog.append(a.runs, "gen-profile", record)
    return 0


def _numbers(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"comma-separated numbers, not {text!r}") from exc
    if min(out) < 1:
        raise argparse.ArgumentTypeError(f"batches count from 1, not {text!r}")
    return out


def _at_least(low: int) -> Any:
    """An argparse type: a whole number of at least ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from exc
        if value < low:
            raise argparse.ArgumentTypeError(f"at least {low}, not {text!r}")
        return value
    return parse


# --- parser ----------------------------------------------------------------------------------


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, where it has one: for a default of None the help
    says what happens ("(default: None)" read as wrong beside "default: the llama.cpp engine
    built in the dflash-agent home")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="stage", required=True)

    def stage(name: str, help_text: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=_DefaultsHelp)
        s.add_argument("--runs", type=Path, default=None,
                       help=f"run log to append to (default {runlog.DEFAULT})")
        return s

    def server(s: argparse.ArgumentParser) -> None:
        s.add_argument("--server-bin", type=Path, help="llama-server to start (default: the "
                       "llama.cpp engine built in the dflash-agent home)")
        s.add_argument("--server-url", help="use this running llama-server instead")

    s = stage("coding-prompts", "coding prompts (.jsonl) from Python source trees")
    s.add_argument("--source", type=Path, action="append",
                   help="a folder of Python source (repeatable; default: the stdlib)")
    s.add_argument("--modules", type=int, default=1000, help="seed-like module prompts")
    s.add_argument("--limit", type=int, help="at most N prompts")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    s.set_defaults(run=cmd_coding_prompts)

    s = stage("agent-sessions", "synthetic agent sessions (.json, the fixtures' format) over "
              "Python source, recorded with the agent's real tools")
    s.add_argument("--source", type=Path, action="append",
                   help="a folder of Python source (repeatable; default: the stdlib)")
    s.add_argument("--count", type=int, default=100, help="sessions to write (default 100)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-lines", type=int, default=150,
                   help="longest workspace module (lines; default 150)")
    s.add_argument("--jobs", type=int, default=2, help="sessions recorded at once (default 2)")
    s.add_argument("--out", type=Path, required=True,
                   help="folder for the session files (new or without *.json)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    s.set_defaults(run=cmd_agent_sessions)

    s = stage("prompts", "coding prompts and agent sessions -> a prompt set (.npz)")
    s.add_argument("--target", type=Path, required=True, help="target GGUF")
    s.add_argument("--coding", type=Path, action="append",
                   help="coding prompts (.jsonl: {src, text} a line; repeatable)")
    s.add_argument("--limit", type=int, help="at most this many coding prompts")
    s.add_argument("--protocols", type=_names, default=("text",),
                   help="agent sessions rendered in these protocols (text,json,native; "
                   "'' for none; default text)")
    s.add_argument("--sessions", nargs="*", default=[], help="session files, fixture names "
                   "or folders of session files (default: every benchmarks/agent_sessions "
                   "fixture)")
    s.add_argument("--holdout-sessions", type=_names, default=("textstats-errors",),
                   help="sessions held out whole (default textstats-errors)")
    s.add_argument("--holdout-fraction", type=float, default=0.0,
                   help="synthetic sessions (synth-*) held out whole at this fraction, by a "
                   "stable hash of the name; their group is agent-synth-<protocol> "
                   "(default 0)")
    s.add_argument("--max-prompt", type=int, default=8192, help="drop longer prompts (tokens)")
    s.add_argument("--out", type=Path, required=True)
    server(s)
    s.set_defaults(run=cmd_prompts)

    s = stage("generate", "a prompt set -> target-greedy sequences (.npz shards)")
    s.add_argument("--prompts", type=Path, nargs="+", required=True)
    s.add_argument("--target", type=Path, required=True, help="target GGUF")
    s.add_argument("--engine", choices=("server", "hf", "torch"), default="server",
                   help="server: llama-server slots; hf: transformers generate; torch: the "
                   "target's weights with a static cache and a CUDA graph")
    s.add_argument("--out", type=Path, required=True, help="stem: STEM-000.npz, ...")
    s.add_argument("--max-new", type=int, default=512, help="tokens per continuation")
    s.add_argument("--limit", type=_at_least(1),
                   help="the first N prompts only (after --done's are left out)")
    s.add_argument("--done", type=Path, nargs="+",
                   help="sequence files/folders already generated: their prompts are skipped")
    s.add_argument("--budget-s", type=float, default=float("inf"),
                   help="start nothing new after this many seconds")
    s.add_argument("--shard-tokens", type=int, default=6_000_000,
                   help="tokens per output file (uint16 ids: ~6 M tokens < 16 MiB)")
    s.add_argument("--parallel", type=int, default=8, help="server engine: slots (-np)")
    s.add_argument("--gpu-layers", help="server engine: -ngl (e.g. all)")
    s.add_argument("--batch", type=int, default=192, help="hf and torch engines: prompts a batch")
    s.add_argument("--batch-tokens", type=int, default=1_000_000,
                   help="hf and torch engines: a batch's tokens, (prompt + max-new) x rows: "
                   "bounds the KV cache (SmolLM2: 46 KB a token in float32, 23 in bf16)")
    s.add_argument("--device", default="cuda", help="hf and torch engines: the torch device")
    s.add_argument("--attention", choices=ATTENTION_CHOICES,
                   help="torch engine only: how a decode step attends over the cache; auto "
                   "(its default) times each on every batch and keeps the fastest (python -m "
                   "train gen-profile compares them side by side)")
    server(s)
    s.set_defaults(run=cmd_generate)

    s = stage("fit", "sequences -> a trained draft (checkpoint, .npz, .gguf)")
    s.add_argument("--target", type=Path, required=True, help="target GGUF")
    s.add_argument("--data", type=Path, nargs="+", required=True, help="sequence files/folders")
    s.add_argument("--out", type=Path, required=True, help="run folder")
    s.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    s.add_argument("--init", type=Path, help="start from these draft weights (.npz/.gguf)")
    s.add_argument("--layers", type=_layers, help="upstream target_layers, e.g. 2,15,28")
    s.add_argument("--draft-layers", type=int, default=1)
    s.add_argument("--steps", type=int, default=2000)
    s.add_argument("--batch-seqs", type=int, default=32)
    s.add_argument("--anchors", type=int, default=32, help="blocks per sequence per step")
    s.add_argument("--lr", type=float, default=8e-4)
    s.add_argument("--warmup", type=int, default=100)
    s.add_argument("--weight-decay", type=float, default=0.01)
    s.add_argument("--gamma", type=float, default=5.0, help="block position weight decay")
    s.add_argument("--repeat-agent", type=int, default=1,
                   help="each fixture agent-request sequence (agent-text, agent-json…; not "
                   "the synthetic agent-synth-*) counts this many times per pass")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--ckpt-every", type=int, default=500)
    s.add_argument("--log-every", type=int, default=50)
    s.add_argument("--budget-s", type=float, default=float("inf"),
                   help="stop after this many seconds (checkpointed; --resume continues)")
    s.add_argument("--stop-at", type=int, help="stop after this step (checkpointed; "
                   "--resume continues; the schedule still runs to --steps)")
    s.add_argument("--eval-seqs", type=int, help="at most N held-out sequences")
    s.add_argument("--eval-blocks", type=int, help="at most N blocks per held-out sequence")
    s.add_argument("--device", default="cuda")
    s.add_argument("--name", default="dflash-draft", help="general.name of the GGUF")
    s.add_argument("--features", choices=("auto", "store", "online"), default="auto",
                   help="target features computed once and kept (store; auto: when they "
                   "fit in memory) or per batch (online)")
    s.add_argument("--profile-steps", type=int, default=0,
                   help="time each phase of this many steps (synchronising) and print it")
    s.set_defaults(run=cmd_fit)

    s = stage("accept", "torch-side acceptance of a draft on held-out sequences")
    s.add_argument("--target", type=Path, required=True)
    s.add_argument("--draft", type=Path, required=True, help="draft.npz or a dflash .gguf")
    s.add_argument("--data", type=Path, nargs="+", required=True)
    s.add_argument("--all-sequences", action="store_true", help="not only the held-out ones")
    s.add_argument("--eval-seqs", type=int)
    s.add_argument("--eval-blocks", type=int)
    s.add_argument("--device", default="cuda")
    s.set_defaults(run=cmd_accept)

    s = stage("export", "draft weights (.npz) -> upstream dflash GGUF (no torch needed)")
    s.add_argument("--weights", type=Path, required=True)
    s.add_argument("--target", type=Path, required=True, help="target GGUF (tokenizer)")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--name", default="dflash-draft")
    s.set_defaults(run=cmd_export)

    s = stage("info", "what a sequences or prompt file holds")
    s.add_argument("data", type=Path, nargs="+")
    s.set_defaults(run=cmd_info)

    s = stage("pack", "generated sequences -> their responses alone, with their prompts' "
              "indices in the prompt set (what a GPU session brings back)")
    s.add_argument("--data", type=Path, nargs="+", required=True,
                   help="sequence files/folders (generate's shards)")
    s.add_argument("--prompts", type=Path, required=True,
                   help="the prompt set they were generated from")
    s.add_argument("--out", type=Path, required=True, help="responses file (.npz)")
    s.set_defaults(run=cmd_pack)

    s = stage("unpack", "responses files + their prompt set -> a sequences file")
    s.add_argument("--responses", type=Path, nargs="+", required=True,
                   help="files written by pack")
    s.add_argument("--prompts", type=Path, required=True, help="the prompt set they name")
    s.add_argument("--out", type=Path, required=True, help="sequences file (.npz)")
    s.set_defaults(run=cmd_unpack)

    s = stage("gen-profile", "where the torch generator's time goes: prefill and decode "
              "seconds of chosen batches under each decode attention, and the kernels of a "
              "few eager steps")
    s.add_argument("--target", type=Path, required=True, help="target GGUF")
    s.add_argument("--prompts", type=Path, default=Path("train/data/prompts-v4.npz"))
    s.add_argument("--batches", type=_numbers, default=[5, 10, 13],
                   help="batch numbers (from 1) in the generator's order, comma-separated")
    s.add_argument("--steps", type=_at_least(1), default=64, help="decode steps timed a batch")
    s.add_argument("--batch", type=_at_least(1), default=1024, help="as generate's --batch")
    s.add_argument("--batch-tokens", type=_at_least(1), default=1_500_000,
                   help="as generate's --batch-tokens")
    s.add_argument("--max-new", type=_at_least(1), default=512, help="as generate's --max-new")
    s.add_argument("--rows", type=_at_least(0), default=0,
                   help="the first N rows of each batch only (0: all; a CPU check)")
    s.add_argument("--kernels", type=_at_least(0), default=8,
                   help="eager decode steps of the last batch under the profiler (0: none)")
    s.add_argument("--device", default="cuda")
    s.add_argument("--json", type=Path, help="write the timings here")
    s.set_defaults(run=cmd_gen_profile)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except TrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`info ... | head`): stop quietly, and keep Python's flush at
        # exit from raising again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
