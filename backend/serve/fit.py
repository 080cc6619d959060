"""Fit check: will a launch plan's models, KV caches and buffers fit this machine's memory?

The sizes of each part are :mod:`backend.serve.sizes`.

Layers on the GPU (``gpu_layers``; ``all``/``auto``/unset means all when a GPU answers
``nvidia-smi``) count against the summed free VRAM, the rest against available RAM (psutil).
With RPC workers (``--rpc``) the workers' devices are offload devices too: llama.cpp splits the
offloaded layers over the local GPUs and the workers' devices, by default in proportion to their
free memory, so the offloaded part counts against their summed free memory, each worker's as it
answered the probe (:mod:`backend.serve.rpc`); a worker that did not say counts as nothing, and
the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from backend import machine
from backend.errors import StatedError
from backend.models.ggufinfo import GgufInfo, read_gguf_info
from backend.models.presets import ServerOptions
from backend.serve.profiles import LaunchPlan
from backend.serve.records import config_hash
from backend.serve.rpc import WorkerInfo, check_workers, engine_protocol, probe_all
from backend.serve.server import running
from backend.serve.sizes import (
    CTX_PAD,
    DEFAULT_CHECKPOINTS,
    DEFAULT_UBATCH,
    DRAFT_OUTPUTS,
    MIB,
    KvShape,
    checkpoint_bytes,
    compute_bytes,
    head_blocker,
    is_turbo,
    kv_bytes,
)

GPU_RUNTIME_MIB = 512
"""CUDA context, cuBLAS workspace and graph memory per process: an assumption, not measured."""

Where = Literal["gpu", "host"]


class FitError(StatedError, RuntimeError):
    """The plan does not fit; ``report`` holds the numbers, the message says what to do."""

    plain = True

    def __init__(self, report: FitReport):
        self.report = report
        super().__init__(report.message())


@dataclass(frozen=True)
class Component:
    """One consumer of memory."""

    name: str
    mib: float
    where: Where


@dataclass(frozen=True)
class GpuMemory:
    """What ``nvidia-smi`` reports, summed over the GPUs, in MiB."""

    free_mib: float
    total_mib: float
    count: int


@dataclass
class FitReport:
    """The estimate for one context size against this machine."""

    ctx_size: int
    components: list[Component]
    gpu: GpuMemory | None
    ram_available_mib: float
    suggested_ctx: int | None = None
    notes: list[str] = field(default_factory=list)
    blocker: str | None = None
    """Why the plan cannot run at any size (e.g. a TurboQuant KV cache in host memory)."""
    workers: tuple[WorkerInfo, ...] = ()
    """The RPC workers the offloaded layers are spread over besides the local GPUs."""
    slots: int = 1
    """Parallel slots (``--parallel``) the estimate sizes the KV cache for."""
    one_slot_fits: bool = False
    """With several slots and no context that fits: whether one slot at the smallest context
    would, so the advice names ``--parallel`` rather than the weights."""

    def need(self, where: Where) -> float:
        """MiB the plan needs on ``where``."""
        return sum(c.mib for c in self.components if c.where == where)

    @property
    def offload_free_mib(self) -> float:
        """Free MiB of the offload devices: the local GPUs and the RPC workers' devices."""
        return (self.gpu.free_mib if self.gpu else 0.0) + sum(w.free_mib for w in self.workers)

    @property
    def gpu_shortfall(self) -> float:
        """MiB missing on the offload devices (0 when it fits or nothing goes there)."""
        return max(0.0, self.need("gpu") - self.offload_free_mib)

    @property
    def host_shortfall(self) -> float:
        """MiB of RAM missing (0 when it fits)."""
        return max(0.0, self.need("host") - self.ram_available_mib)

    @property
    def fits(self) -> bool:
        """True when nothing is short and nothing blocks the plan."""
        return self.blocker is None and self.gpu_shortfall == 0 and self.host_shortfall == 0

    def table(self) -> str:
        """One line per component, then need vs available per memory."""
        lines = [f"  {c.name:<46} {c.mib:>8.0f} MiB  ({'GPU' if c.where == 'gpu' else 'RAM'})"
                 for c in self.components if c.mib > 0]
        if self.need("gpu") > 0 or self.gpu is not None or self.workers:
            free = f"{self.gpu.free_mib:.0f} MiB free of {self.gpu.total_mib:.0f} on " \
                   f"{self.gpu.count} GPU(s)" if self.gpu else "no GPU"
            for w in self.workers:
                said = f"{w.free_mib:.0f} MiB free of {w.total_mib:.0f}" if w.devices else \
                    "memory unknown, counted as 0"
                free += f" + worker {w.address}: {said}"
            lines.append(f"  {'GPU' if not self.workers else 'GPU + RPC workers'}: needs "
                         f"{self.need('gpu'):.0f} MiB, {free}"
                         + (f", short by {self.gpu_shortfall:.0f} MiB"
                            if self.gpu_shortfall else ""))
        lines.append(f"  RAM: needs {self.need('host'):.0f} MiB, {self.ram_available_mib:.0f} "
                     "MiB available" + (f", short by {self.host_shortfall:.0f} MiB"
                                        if self.host_shortfall else ""))
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def message(self) -> str:
        """The refusal (or summary) text with every number and the next step."""
        verdict = "fits" if self.fits else "does not fit"
        head = f"the model at --ctx-size {self.ctx_size} {verdict} this machine (estimate):"
        if self.fits:
            return f"{head}\n{self.table()}"
        if self.blocker:
            return f"the plan cannot run on this machine: {self.blocker}\n{self.table()}"
        if self.suggested_ctx:
            advice = (f"try --ctx-size {self.suggested_ctx} (the largest context that fits), "
                      "or --force to launch anyway")
        elif self.one_slot_fits:
            # A field trial: --parallel 20000 was told its 92 MiB of weights were too big.
            advice = (f"no context size fits with --parallel {self.slots}: each slot gets a "
                      "KV cache of its own; give fewer slots, or --force to launch anyway")
        else:
            advice = ("no context size fits: the weights alone are too big; choose a smaller "
                      "quantization or model, fewer GPU layers, or --force to launch anyway")
        return f"{head}\n{self.table()}\n{advice}"


def gpu_memory() -> GpuMemory | None:
    """Free and total memory of the NVIDIA GPUs, asked afresh (:func:`backend.machine.gpus`);
    None without nvidia-smi. Raises :class:`~backend.machine.GpuQueryError` when it fails."""
    found = machine.gpus(fresh=True)
    if found is None:
        return None
    return GpuMemory(free_mib=float(sum(g.free_mib for g in found)),
                     total_mib=float(sum(g.total_mib for g in found)), count=len(found))


def _gpu_fraction(layers: str | None, info: GgufInfo, offload: bool) -> float:
    """Share of a model on the offload devices (``offload``: a GPU or an RPC worker is there):
    ``-ngl N`` counts the layers plus the output layer."""
    if not offload or layers == "0":
        return 0.0
    if layers is None or layers in ("all", "auto"):
        return 1.0
    return min(1.0, int(layers) / (info.n_layer + 1))


@dataclass(frozen=True)
class FitInputs:
    """Everything the estimate depends on besides the context size."""

    target: GgufInfo
    draft: GgufInfo | None
    options: ServerOptions
    slots: int
    gpu: GpuMemory | None
    ram_available_mib: float
    workers: tuple[WorkerInfo, ...] = ()


def _shape(inputs: FitInputs, ctx: int, type_k: str, type_v: str) -> KvShape:
    opts = inputs.options
    return KvShape(ctx=ctx, slots=inputs.slots, unified=opts.kv_unified, swa_full=opts.swa_full,
                   ubatch=opts.ubatch_size or DEFAULT_UBATCH, flash_attn=opts.flash_attn != "off",
                   type_k=type_k, type_v=type_v)


def estimate(inputs: FitInputs, ctx: int) -> FitReport:
    """The memory report for ``ctx`` tokens of context."""
    opts, target, gpu = inputs.options, inputs.target, inputs.gpu
    comps: list[Component] = []

    def split(name: str, n_bytes: float, frac: float) -> None:
        if frac > 0:
            comps.append(Component(name, n_bytes * frac / MIB, "gpu"))
        if frac < 1:
            comps.append(Component(name, n_bytes * (1 - frac) / MIB, "host"))

    offload = gpu is not None or bool(inputs.workers)
    t_frac = _gpu_fraction(opts.gpu_layers, target, offload)
    shape = _shape(inputs, ctx, opts.cache_type_k or "f16", opts.cache_type_v or "f16")
    full, swa = kv_bytes(target, shape)
    split("target weights", target.tensor_bytes, t_frac)
    split(f"target KV cache ({shape.type_k}/{shape.type_v})", full, t_frac)
    if target.n_swa:
        label = "full size, --swa-full" if shape.swa_full else f"window {target.n_swa}"
        split(f"target sliding-window KV ({label})", swa, t_frac)
    ckpt = checkpoint_bytes(target, shape, opts.ctx_checkpoints
                            if opts.ctx_checkpoints is not None else DEFAULT_CHECKPOINTS)
    if ckpt:
        comps.append(Component("context checkpoints (upper bound)", ckpt / MIB, "host"))
    split("target compute buffers", compute_bytes(target, shape, inputs.slots, target.n_vocab),
          1.0 if t_frac > 0 else 0.0)
    d_frac = 0.0
    if inputs.draft is not None:
        draft = inputs.draft
        d_frac = _gpu_fraction(opts.draft_gpu_layers or opts.gpu_layers, draft, offload)
        d_shape = _shape(inputs, ctx, "f16", "f16")
        d_full, d_swa = kv_bytes(draft, d_shape)
        split("draft weights", draft.tensor_bytes, d_frac)
        split("draft KV cache (f16)", d_full + d_swa, d_frac)
        split("draft compute buffers", compute_bytes(draft, d_shape, DRAFT_OUTPUTS * inputs.slots,
                                                     target.n_vocab),
              1.0 if d_frac > 0 else 0.0)
    if gpu is not None and (t_frac > 0 or d_frac > 0):
        comps.append(Component("GPU runtime (CUDA context, assumed)", GPU_RUNTIME_MIB, "gpu"))
    turbo = [t for t in (shape.type_k, shape.type_v) if is_turbo(t)]
    blocker = head_blocker(target, shape.type_k, shape.type_v, opts.flash_attn)
    if blocker is None and turbo and t_frac < 1:
        where = "no GPU answered nvidia-smi" if gpu is None else \
            f"gpu_layers = {opts.gpu_layers} keeps part of it in host memory"
        blocker = (f"the TurboQuant KV cache ({'/'.join(dict.fromkeys(turbo))}) must be "
                   f"entirely on a GPU (BeeLlama refuses a KV layer in host memory), and {where}; "
                   "choose another KV cache type (cache_type_k/v in presets.toml) or put every "
                   "layer on a GPU")
    return FitReport(ctx_size=ctx, components=comps, gpu=gpu,
                     ram_available_mib=inputs.ram_available_mib, blocker=blocker,
                     workers=inputs.workers)


def largest_fitting_ctx(inputs: FitInputs, upper: int) -> int | None:
    """The largest multiple of 256 up to ``upper`` that fits, or None when even 256 does not."""
    lo, hi = 1, upper // CTX_PAD
    if hi < 1 or not estimate(inputs, CTX_PAD).fits:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(inputs, mid * CTX_PAD).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo * CTX_PAD


def gather(target: Path, draft: Path | None, options: ServerOptions, slots: int = 1,
           workers: tuple[str, ...] = (), protocol: str | None = None
           ) -> tuple[FitInputs, list[str]]:
    """Read the GGUF headers, this machine's free memory and each RPC worker's (``workers``,
    ``host:port``, asked over the network); returns the inputs and notes (a failing
    ``nvidia-smi``, an incomplete model file, what a worker did not say). Raises ``GgufError``,
    and ``RpcError`` for a worker that is unreachable or speaks another RPC protocol than
    ``protocol`` (the server engine's)."""
    notes: list[str] = []
    infos = probe_all(workers)
    notes += [f"{n}; its memory is counted as 0" for n in check_workers(infos, protocol)]
    target_info = read_gguf_info(target)
    draft_info = read_gguf_info(draft) if draft is not None else None
    for info in filter(None, (target_info, draft_info)):
        if not info.complete:
            notes.append(f"{info.path.name} holds {info.file_size / MIB:.1f} of "
                         f"{info.data_end / MIB:.0f} MiB (incomplete download?); sizes come "
                         "from its header")
    try:
        gpu = gpu_memory()
    except machine.GpuQueryError as exc:
        gpu = None
        notes.append(f"{exc}; counting everything against RAM")
    if gpu is None and not workers and options.gpu_layers not in (None, "0", "auto"):
        notes.append(f"gpu_layers = {options.gpu_layers} but no GPU answered nvidia-smi")
    ram = machine.memory().available / MIB
    return FitInputs(target=target_info, draft=draft_info, options=options, slots=slots,
                     gpu=gpu, ram_available_mib=ram, workers=tuple(infos)), notes


def preset_fit(model: Path, draft: Path | None, options: ServerOptions, ctx_size: int,
               slots: int = 1, workers: tuple[str, ...] = (),
               protocol: str | None = None) -> FitReport:
    """The estimate for ``model`` (and ``draft``) at ``ctx_size`` tokens with ``options`` on
    this machine and its RPC ``workers``, with a suggested context when it does not fit.
    Raises ``GgufError`` when a model's header cannot be read, ``RpcError`` as :func:`gather`."""
    inputs, notes = gather(model, draft, options, slots, workers, protocol)
    report = estimate(inputs, ctx_size)
    report.notes = notes
    if not report.fits:
        report.suggested_ctx = largest_fitting_ctx(inputs, ctx_size - 1)
        if report.suggested_ctx is None and slots > 1:
            report.slots = slots
            report.one_slot_fits = estimate(replace(inputs, slots=1), CTX_PAD).fits
    if options.swa_full and inputs.target.n_swa:
        shape = _shape(inputs, ctx_size, options.cache_type_k or "f16",
                       options.cache_type_v or "f16")
        _, full_size = kv_bytes(inputs.target, shape)
        _, window = kv_bytes(inputs.target, replace(shape, swa_full=False))
        report.notes.append(f"--swa-full sizes the sliding-window KV at {full_size / MIB:.0f} "
                            f"MiB instead of {window / MIB:.0f} MiB (the window alone) so the "
                            "prompt cache stays reusable")
    return report


def fit_report(plan: LaunchPlan) -> FitReport:
    """:func:`preset_fit` for a launch plan (its models, context, slots and options)."""
    # Drafting off (a tuned length of 0) loads no draft model: nothing of it to fit.
    draft = None if plan.draft_n_max == 0 else plan.draft
    return preset_fit(plan.model, draft, plan.options, plan.ctx_size, plan.parallel, plan.rpc,
                      engine_protocol(plan.binary) if plan.rpc else None)


def check_fit(plan: LaunchPlan, force: bool = False,
              note: Callable[[str], None] | None = None) -> FitReport | None:
    """Refuse a plan that does not fit: raises :class:`FitError` with the numbers and a
    suggested ``--ctx-size``. With ``force`` the refusal becomes a note. A plan whose server of
    ours already runs is not checked (its memory is already in use by that server): returns
    None. Raises ``GgufError`` for an unreadable model header, ``RpcError`` for a worker the
    launch cannot use (not reachable, another RPC protocol)."""
    digest = config_hash(plan)
    if any(s.config_hash == digest for s in running()):
        return None
    report = fit_report(plan)
    if not report.fits:
        if not force:
            raise FitError(report)
        if note:
            note(f"--force: launching although {report.message()}")
    return report


def ctx_limit_note(report: FitReport) -> str:
    """One-line summary for listings: ``fits``, or the shortfall."""
    if report.fits:
        return "fits"
    short = max(report.gpu_shortfall, report.host_shortfall)
    where = "GPU" if report.gpu_shortfall else "RAM"
    ctx = f", fits at ctx {report.suggested_ctx}" if report.suggested_ctx else ""
    return f"short {math.ceil(short)} MiB {where}{ctx}"
