"""Which DFlash draft format a build can load, checked before launch.

BeeLlama ≤0.3 (bee-old) loads both the old ``dflash-draft`` format and upstream ``dflash``
(``src/llama-arch.cpp`` of that line; backend/facts/beellama-v0.3.2.json); upstream llama.cpp
and BeeLlama ≥0.4 load only ``dflash`` (BeeLlama CHANGELOG v0.4.0). An old-format draft is
converted once (:func:`backend.convert.convert_draft`) into the model cache for the builds that
need it; a file that is no DFlash draft, or one that cannot be converted, is refused with the
cause and the fix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import gguf

from backend.convert import NEW_ARCH, OLD_ARCH, ConvertError, convert_draft
from backend.flavour import Flavour
from backend.ggufinfo import GgufError, gguf_metadata
from backend.home import home


class DraftError(ValueError):
    """The draft model cannot run on this build; the message gives the cause and the fix."""


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of the GGUF at ``path`` ('' when absent).

    Raises :class:`DraftError` when the file is not a readable GGUF.
    """
    try:
        arch = gguf_metadata(path).get(gguf.Keys.General.ARCHITECTURE)
    except GgufError as exc:
        raise DraftError(f"{path} is not a readable GGUF file: {exc}") from exc
    return arch if isinstance(arch, str) else ""


def converted_path(draft: Path) -> Path:
    """Where the upstream-format conversion of ``draft`` is (or will be) kept in the cache."""
    stat = draft.stat()
    key = hashlib.sha256(f"{draft.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return home().cache / "models" / "converted" / f"{draft.stem}-{key.hexdigest()[:10]}.gguf"


def draft_for(draft: Path, flavour: Flavour,
              note: Callable[[str], None] | None = None) -> Path:
    """The draft file a ``flavour`` build can load: ``draft`` itself, or its upstream-format
    conversion (written once under the model cache).

    Raises :class:`DraftError` when ``draft`` is not a DFlash draft, or is an old-format draft
    the conversion cannot map.
    """
    arch = gguf_architecture(draft)
    if arch == OLD_ARCH:
        if flavour == "bee-old":
            return draft
        target = converted_path(draft)
        if not target.is_file():
            if note:
                note(f"{draft.name} is in BeeLlama's old '{OLD_ARCH}' format, which {flavour} "
                     f"builds do not load; converting it once to '{NEW_ARCH}' -> {target}")
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                convert_draft(draft, target, force=True)
            except ConvertError as exc:
                raise DraftError(
                    f"{draft} is an old-format '{OLD_ARCH}' draft, which this {flavour} build "
                    f"cannot load, and it cannot be converted ({exc}). Fix: use a BeeLlama "
                    "v0.3.x engine (`agent backend build --engine beellama --ref v0.3.2`) or "
                    f"an upstream-format '{NEW_ARCH}' draft") from exc
        return target
    if arch == NEW_ARCH:
        return draft
    raise DraftError(f"{draft} has architecture '{arch or 'none'}', not a DFlash draft "
                     f"('{NEW_ARCH}' or '{OLD_ARCH}'); set the preset's `draft` to a DFlash "
                     "draft GGUF made for the target model")
