"""Training the draft: random anchors, the block loss, AdamW with warm-up and cosine decay,
checkpoints that resume exactly.

Loss (shared/dflash/README.md): cross-entropy of the draft's logits (through the target's
frozen head) at block positions ``k = 1 … block_size − 1``, weighted ``exp(−(k − 1)/gamma)``
so the first positions, which decide most of the acceptance, weigh most. Embeddings and head
are the target's, frozen; only the draft's own tensors train.

Data order: each pass over the training sequences is a fresh permutation (seeded by the pass
number) cut into batches of ``batch_seqs`` of similar lengths (:func:`batch_index`); the
anchors of step ``s`` come from a generator seeded by ``(seed, s)``. A checkpoint therefore
needs only the weights, the optimizer and the step to continue exactly where it stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from train.batches import IGNORE, make_batch, random_anchors
from train.config import DraftConfig
from train.draft import Draft
from train.errors import InputError
from train.export import save_weights
from train.features import FeatureStore
from train.head_loss import head_cross_entropy
from train.seqs import Sequences
from train.target import Target

CHECKPOINT = "checkpoint.pt"
WEIGHTS = "draft.npz"


@dataclass(frozen=True)
class FitSettings:
    """The knobs of one training run (logged with its results)."""

    steps: int = 2000
    batch_seqs: int = 32
    anchors: int = 32
    lr: float = 8e-4
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    gamma: float = 5.0
    clip: float = 1.0
    seed: int = 0
    ckpt_every: int = 500
    log_every: int = 50
    budget_s: float = float("inf")
    """Stop (with a checkpoint) after this many seconds of this call; the cosine then ends
    with the budget. Exact resume holds for runs bound by steps (``stop_at``)."""


@dataclass
class FitState:
    """Where a run stands."""

    step: int = 0
    stopped: str = ""
    """Why the last call ended: ``steps`` (done), ``budget`` or ``stop_at``."""
    loss_ema: float | None = None
    last_loss: float | None = None
    acc1: float | None = None
    seconds: float = 0.0


def lr_at(step: int, s: FitSettings, elapsed: float = 0.0) -> float:
    """Linear warm-up to ``lr``, then cosine down to ``min_lr_ratio · lr`` at ``steps`` — or,
    with a time budget, at whichever of the steps or the budget (``elapsed`` seconds of it
    spent) runs out first, as v1's trainer did."""
    warm = min(1.0, (step + 1) / max(1, s.warmup))
    progress = min(1.0, max(step / max(1, s.steps), elapsed / s.budget_s))
    cosine = s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return s.lr * warm * cosine


def position_weights(c: DraftConfig, gamma: float, device: torch.device) -> torch.Tensor:
    """``[block_size]``: 0 at the anchor, ``exp(−(k − 1)/gamma)`` at block position ``k``."""
    return torch.tensor([0.0] + [math.exp(-(k - 1) / gamma) for k in range(1, c.block_size)],
                        device=device)


BUCKET = 64
"""Batches whose sequences are sorted by length together (less padding: an 8 k-token agent
request would otherwise pad 31 short coding sequences to its length)."""


def batch_index(step: int, lengths: np.ndarray, s: FitSettings) -> list[int]:
    """The training positions (into the training index, whose sequence lengths are
    ``lengths``) that step ``step`` uses: pass ``p`` is a permutation seeded by ``(seed, p)``,
    cut into groups of :data:`BUCKET` batches, each group sorted by length and cut into
    batches, the batches of the pass then shuffled."""
    n = len(lengths)
    size = min(s.batch_seqs, n)
    per_pass = max(1, n // size)
    epoch, j = divmod(step, per_pass)
    rng = np.random.default_rng((s.seed, epoch))
    perm = rng.permutation(n)[: per_pass * size]
    group = BUCKET * size
    ordered = np.concatenate([sorted(perm[k:k + group], key=lambda i: lengths[i])
                              for k in range(0, len(perm), group)])
    batches = ordered.reshape(per_pass, size)[rng.permutation(per_pass)]
    return batches[j].tolist()


def block_loss(draft: Draft, target: Target, seqs: Sequences, index: list[int],
               anchors: np.ndarray, weights: torch.Tensor,
               features: FeatureStore | None = None,
               timer: PhaseTimer | None = None) -> tuple[torch.Tensor, float]:
    """(weighted block loss, accuracy at block position 1) for one batch; ``features`` from
    a store when given, else computed by the target now."""
    c = draft.config
    timer = timer or PhaseTimer(None)
    batch = make_batch(seqs, index, anchors, target, c,
                       features=features.gather(index) if features is not None else None)
    timer.mark("batch")
    cuda = target.device.type == "cuda"
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
        hidden = draft(batch.ctx, batch.ctx_pos, batch.blk, batch.blk_pos, batch.mask)
    timer.mark("forward")
    head = target.head.to(hidden.dtype)
    labels = batch.labels
    ce = head_cross_entropy(hidden.flatten(0, 1), head, labels.flatten()).view(labels.shape)
    w = weights.repeat(anchors.shape[1])[None].expand_as(labels) * (labels != IGNORE)
    loss = (ce * w).sum() / w.sum().clamp_min(1e-6)
    with torch.no_grad():
        first = labels.view(len(index), -1, c.block_size)[:, :, 1]
        at1 = hidden.view(len(index), -1, c.block_size, hidden.shape[-1])[:, :, 1]
        guess = (at1 @ head.T).argmax(-1)
        valid = first != IGNORE
        acc1 = float(((guess == first) & valid).sum() / valid.sum().clamp_min(1))
    timer.mark("loss")
    return loss, acc1


class PhaseTimer:
    """Milliseconds spent in each phase of a training step, summed over the steps it is
    given (``device`` None: off). On CUDA each mark synchronises, so it only runs for the
    steps ``--profile-steps`` asks for: it slows them."""

    def __init__(self, device: torch.device | None):
        self.device = device
        self.totals: dict[str, float] = {}
        self.steps = 0
        self._last = time.perf_counter()

    def start(self) -> None:
        if self.device is not None:
            self._sync()
            self._last = time.perf_counter()

    def _sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def mark(self, phase: str) -> None:
        if self.device is None:
            return
        self._sync()
        now = time.perf_counter()
        self.totals[phase] = self.totals.get(phase, 0.0) + (now - self._last) * 1000
        self._last = now

    def line(self) -> str:
        """``[fit] ms a step over N steps: batch … forward … (total)``."""
        per = {k: v / max(1, self.steps) for k, v in self.totals.items()}
        return (f"[fit] ms a step over {self.steps} profiled steps: "
                + ", ".join(f"{k} {v:.1f}" for k, v in per.items())
                + f" (total {sum(per.values()):.1f})")


def save_checkpoint(out: Path, draft: Draft, opt: torch.optim.Optimizer, state: FitState,
                    settings: FitSettings) -> None:
    """``checkpoint.pt`` (weights, optimizer, step) and ``draft.npz`` (weights for export)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (CHECKPOINT + ".tmp")
    torch.save({"config": draft.config.to_json(), "draft": draft.state_dict(),
                "optimizer": opt.state_dict(), "state": asdict(state),
                "settings": asdict(settings)}, tmp)
    tmp.replace(out / CHECKPOINT)
    save_weights(draft.weights(), draft.config, out / WEIGHTS)


def load_checkpoint(out: Path, draft: Draft, opt: torch.optim.Optimizer) -> FitState:
    """Restore ``draft`` and ``opt`` from ``out/checkpoint.pt``; the state it was saved in.
    Raises :class:`InputError` when the checkpoint is for another draft shape."""
    data = torch.load(out / CHECKPOINT, map_location=draft.fc.weight.device, weights_only=True)
    if DraftConfig.from_json(data["config"]) != draft.config:
        raise InputError(f"{out / CHECKPOINT} is for another draft configuration; use a new "
                         "--out folder or the same settings")
    draft.load_state_dict(data["draft"])
    opt.load_state_dict(data["optimizer"])
    return FitState(**data["state"])


def fit(draft: Draft, target: Target, seqs: Sequences, train_index: list[int], out: Path,
        settings: FitSettings, *, resume: bool = False, stop_at: int | None = None,
        log: Callable[[str], None] = print, features: FeatureStore | None = None,
        profile_steps: int = 0) -> FitState:
    """Train ``draft`` on the sequences at ``train_index`` to ``settings.steps`` (or the time
    budget, or step ``stop_at`` for a run staged over several calls), checkpointing into
    ``out``; returns the final state. ``features`` holds the training sequences' target
    features (else computed per batch); ``profile_steps`` > 0 times the phases of that many
    steps after the first (one line logged)."""
    if not train_index:
        raise InputError("no training sequences (every sequence is held out?)")
    opt = torch.optim.AdamW(draft.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                            weight_decay=settings.weight_decay)
    state = FitState()
    if resume and (out / CHECKPOINT).is_file():
        state = load_checkpoint(out, draft, opt)
        log(f"[fit] resumed at step {state.step} from {out / CHECKPOINT}")
    weights = position_weights(draft.config, settings.gamma, target.device)
    lengths = seqs.lengths()[np.asarray(train_index)]
    draft.train()
    run_started = time.monotonic()
    before = state.seconds
    first_step = state.step
    profiler = PhaseTimer(target.device)
    state.stopped = "steps"
    while state.step < settings.steps:
        if stop_at is not None and state.step >= stop_at:
            state.stopped = "stop_at"
            break
        elapsed = time.monotonic() - run_started
        if elapsed > settings.budget_s:
            state.stopped = "budget"
            log(f"[fit] time budget reached at step {state.step}")
            break
        lr = lr_at(state.step, settings, elapsed)
        for group in opt.param_groups:
            group["lr"] = lr
        index = [train_index[i] for i in batch_index(state.step, lengths, settings)]
        anchors = random_anchors(seqs, index, settings.anchors,
                                 np.random.default_rng((settings.seed, state.step)))
        profiling = 0 < state.step - first_step <= profile_steps
        timer = profiler if profiling else None
        if timer:
            timer.start()
        loss, acc1 = block_loss(draft, target, seqs, index, anchors, weights, features, timer)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if timer:
            timer.mark("backward")
        torch.nn.utils.clip_grad_norm_(draft.parameters(), settings.clip)
        opt.step()
        if timer:
            timer.mark("optimizer")
            timer.steps += 1
            if timer.steps == profile_steps:
                log(timer.line())
        state.step += 1
        state.last_loss, state.acc1 = loss.item(), acc1
        state.loss_ema = (state.last_loss if state.loss_ema is None
                          else 0.95 * state.loss_ema + 0.05 * state.last_loss)
        state.seconds = before + time.monotonic() - run_started
        if state.step == 1 or state.step % settings.log_every == 0:
            log(f"[fit] step {state.step} loss {state.last_loss:.3f} ema {state.loss_ema:.3f} "
                f"acc@1 {acc1:.3f} lr {lr:.2e} {state.seconds:.0f}s")
        if settings.ckpt_every and state.step % settings.ckpt_every == 0:
            save_checkpoint(out, draft, opt, state, settings)
    save_checkpoint(out, draft, opt, state, settings)
    ran, seconds = state.step - first_step, time.monotonic() - run_started
    if ran:
        positions = settings.batch_seqs * settings.anchors * (draft.config.block_size - 1)
        log(f"[fit] {ran} steps in {seconds:.1f} s: {ran / seconds:.2f} steps/s, "
            f"{ran * positions / seconds:.0f} block positions/s")
    return state
