"""Which DFlash draft format a build can load, checked before launch.

Upstream llama.cpp and BeeLlama ≥0.4 load only upstream ``dflash`` drafts (BeeLlama CHANGELOG
v0.4.0). BeeLlama ≤0.3 (bee-old) loads its own ``dflash-draft`` format, and a ``dflash`` file
only with an *earlier* upstream key set (``dflash.target_layer_ids``, ``hidden_norm``), not
b11434's (docs/design/beellama.md, from v0.3.1's ``src/models/dflash_draft.cpp``). So a draft
in the other format is converted once (:func:`backend.models.convert.convert_draft`, either way)
into the model cache; a file that is no DFlash draft, or one that cannot be converted, is refused
with the cause and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from backend.engine.flavour import Flavour
from backend.errors import StatedError
from backend.home import home
from backend.models.convert import NEW_ARCH, OLD_ARCH, ConvertError, convert_draft
from backend.models.ggufinfo import GgufError, gguf_metadata, read_gguf_info
from backend.models.sources import version_key


class DraftError(StatedError, ValueError):
    """The draft model cannot run on this build; the message gives the cause and the fix."""


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of the GGUF at ``path`` ('' when absent).

    Raises :class:`DraftError` when the file is not a readable GGUF.
    """
    try:
        arch = gguf_metadata(path).get("general.architecture")
    except GgufError as exc:
        raise DraftError(f"{path} is not a readable GGUF file: {exc}") from exc
    return arch if isinstance(arch, str) else ""


def converted_path(draft: Path, to: str = NEW_ARCH) -> Path:
    """Where the ``to``-format conversion of ``draft`` is (or will be) kept in the cache."""
    suffix = "" if to == NEW_ARCH else f"-{to}"
    return home().cache / "models" / "converted" / f"{draft.stem}-{version_key(draft)}{suffix}.gguf"


def draft_for(draft: Path, flavour: Flavour,
              note: Callable[[str], None] | None = None) -> Path:
    """The draft file a ``flavour`` build can load: ``draft`` itself, or its conversion to the
    format that build loads (written once under the model cache).

    Raises :class:`DraftError` when ``draft`` is not a DFlash draft, or cannot be converted.
    """
    arch = gguf_architecture(draft)
    if arch not in (OLD_ARCH, NEW_ARCH):
        raise DraftError(f"{draft} has architecture '{arch or 'none'}', not a DFlash draft "
                         f"('{NEW_ARCH}' or '{OLD_ARCH}'); set the preset's `draft` to a DFlash "
                         "draft GGUF made for the target model")
    wanted = OLD_ARCH if flavour == "bee-old" else NEW_ARCH
    if arch == wanted:
        return draft
    target = converted_path(draft, wanted)
    if not target.is_file():
        if note:
            note(f"{draft.name} is a '{arch}' draft, which {flavour} builds do not load; "
                 f"converting it once to '{wanted}' -> {target}")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            convert_draft(draft, target, force=True, to=wanted)  # type: ignore[arg-type]
        except ConvertError as exc:
            fix = ("use a BeeLlama v0.3.x engine (`agent backend build --engine beellama "
                   "--ref v0.3.2`)" if wanted == NEW_ARCH else
                   "use an upstream or BeeLlama >=0.4 engine")
            raise DraftError(
                f"{draft} is a '{arch}' draft, which this {flavour} build cannot load, and it "
                f"cannot be converted ({exc}). Fix: {fix}, or a '{wanted}' draft") from exc
    return target


FULL_PRECISION = frozenset({"F32", "F16", "BF16", "Q8_0"})
"""Weight types that keep a sliding-window draft's acceptance (Q8_0 kept F16's in the field
reports of issue 24)."""


def draft_window(draft: Path) -> int | None:
    """The draft attention window a DFlash GGUF carries (``dflash.attention.sliding_window``,
    which b11434's loader reads: ``src/models/dflash.cpp``), or None (none, or unreadable)."""
    try:
        value = gguf_metadata(draft).get("dflash.attention.sliding_window")
    except GgufError:
        return None
    return value if isinstance(value, int) and value > 0 else None


def swa_quant_warning(draft: Path) -> str | None:
    """A one-line warning when ``draft`` has sliding-window attention layers and its weight
    matrices are quantised below Q8_0 (field reports, Qwen3.6-27B's DFlash draft on an RTX 3090:
    about 15 points of acceptance lost at Q4_K_M, none at Q8_0); None otherwise, or when the
    file cannot be read (the launch reports that itself)."""
    try:
        info = read_gguf_info(draft)
    except GgufError:
        return None
    if not (info.n_swa and any(info.swa_layers)):
        return None
    low = sorted({t.ggml_type for t in info.tensors if t.name.startswith("blk.")
                  and t.name.endswith(".weight") and len(t.shape) == 2} - FULL_PRECISION)
    if not low:
        return None
    return (f"the draft {draft.name} has sliding-window layers and {'/'.join(low)} weights: "
            "such drafts lost about 15 points of acceptance below Q8_0 in field reports "
            "(Qwen3.6-27B's, Q4_K_M vs Q8_0); use a Q8_0 or F16 draft (a safetensors drafter: "
            "draft_type = \"q8_0\")")
