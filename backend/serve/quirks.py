"""Known bugs of particular builds, and what the product does about them.

**BeeLlama ≤0.3 DFlash on a build without offload devices (a CPU build).** v0.3.1 places a DFlash
draft on "a single device by default" unless ``--spec-draft-device`` is given
(``tools/server/server-context.cpp``, ``load_model``): split mode none with ``main_gpu = 0``,
which on a build with no GPU device fails with ``invalid value for main_gpu: 0 (available
devices: 0)`` and the draft never loads. :func:`launch_flags` adds ``--spec-draft-device none``
(keep the draft in host memory) when ``--list-devices`` names no device.

**BeeLlama ≤0.3 DFlash with a target whose graph has no reduced verify output.** BeeLlama v0.3.1
verifies greedy (and top-k ≤ 64) DFlash drafts through a "reduced verify" path that reads an
argmax output only the ``qwen35``, ``qwen35moe`` and ``gemma4`` graphs build
(``src/models/{qwen35,qwen35moe,gemma4}.cpp``). With any other target (``llama``: SmolLM2,
Llama, …) the first verify of a request without a grammar aborts the server:
``common/sampling.cpp:154 GGML_ASSERT(logits != nullptr)`` (measured on an H200 and on CPU:
docs/design/beellama.md, tests/test_beellama_real.py). The path is chosen per request by
``dflash_select_reduced_verify_plan`` (``tools/server/server-context.cpp``), which turns it off
when the request has any ``logit_bias`` entry (``has_logit_bias()`` only checks that the list is
non-empty). A bias of **0** on token 0 therefore selects the ordinary verify path while leaving
every logit unchanged: outputs are those of the same request without it. Server flags cannot do
this (the server clears the command line's ``--logit-bias`` for each request), so each request
carries it: :func:`request_extra` says what to add, the managed server records it in its state
(``ServerState.request_extra``) and the agent's client and ``agent backend bench`` send it. The
server's log says so on its first lines.
"""

from __future__ import annotations

from typing import Any

from backend.engine.flavour import Flavour
from backend.serve.profiles import LaunchPlan

REDUCED_VERIFY_ARCHS = frozenset({"qwen35", "qwen35moe", "gemma4"})
"""Target architectures whose BeeLlama v0.3.1 graph builds the reduced verify output."""
NEUTRAL_LOGIT_BIAS: dict[str, Any] = {"logit_bias": {"0": 0}}
"""A request field that changes no logit yet turns BeeLlama ≤0.3's reduced verify off."""


def request_extra(flavour: Flavour, profile: str, target_arch: str) -> tuple[dict[str, Any],
                                                                            str | None]:
    """Fields every request to this server must carry, and the note that says why (None when
    nothing is needed): the workaround for bee-old DFlash with a target outside
    :data:`REDUCED_VERIFY_ARCHS` (module docstring)."""
    if flavour != "bee-old" or profile not in ("dflash", "dflash-fixed") \
            or target_arch in REDUCED_VERIFY_ARCHS:
        return {}, None
    note = (f"BeeLlama <=0.3 DFlash aborts on its reduced-verify path with a "
            f"'{target_arch or 'unknown'}' target (GGML_ASSERT(logits != nullptr) in "
            "common/sampling.cpp; only qwen35, qwen35moe and gemma4 graphs build that output); "
            "every request carries logit_bias {\"0\": 0}, which changes no logit but selects "
            "the ordinary verify path")
    return dict(NEUTRAL_LOGIT_BIAS), note


DRAFT_DEVICE_FLAGS = ("--spec-draft-device", "-devd", "--device-draft")


def launch_flags(plan: LaunchPlan, flavour: Flavour, devices: list[str]) -> tuple[list[str],
                                                                                 str | None]:
    """Flags to add to ``plan``'s command for this build (``devices``: what ``--list-devices``
    names), and the note that says why (None when nothing is added): ``--spec-draft-device
    none`` for bee-old DFlash on a build with no offload device (module docstring), unless the
    preset's ``extra_flags`` already choose the draft's device."""
    if flavour != "bee-old" or plan.profile not in ("dflash", "dflash-fixed") or devices \
            or any(f in DRAFT_DEVICE_FLAGS for f in plan.extra_flags):
        return [], None
    return ["--spec-draft-device", "none"], (
        "BeeLlama <=0.3 puts a DFlash draft on GPU 0 unless told otherwise, and this build has "
        "no GPU device (the draft would fail to load: 'invalid value for main_gpu'); the "
        "command carries --spec-draft-device none")


def kv_kernel_note(plan: LaunchPlan, configure_flags: list[str]) -> str | None:
    """A warning when ``plan``'s KV cache types need CUDA flash-attention kernels that the engine
    (its CMake ``configure_flags``) was built without (``--no-fa-all-quants``), else None."""
    from backend.engine.cmake import needs_fa_all_quants

    o = plan.options
    if "-DGGML_CUDA=ON" not in configure_flags or "-DGGML_CUDA_FA_ALL_QUANTS=OFF" not in \
            configure_flags or o.gpu_layers == "0" or o.flash_attn == "off" \
            or not needs_fa_all_quants(o.cache_type_k, o.cache_type_v):
        return None
    return (f"this engine was built with --no-fa-all-quants, so K/V caches "
            f"{o.cache_type_k or 'f16'}/{o.cache_type_v or 'f16'} have no GPU flash-attention "
            "kernel (the seed's q5_0/q4_1 decoded at a third of the speed that way); rebuild "
            "with `agent backend build ... --fa-all-quants` or use same-type f16/q8_0/q4_0 "
            "caches")
