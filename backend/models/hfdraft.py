"""DFlash drafters published as Hugging Face safetensors folders (z-lab's), converted once into
the cache with the pinned llama.cpp's own converter (:mod:`backend.models.converter`).

A preset's ``draft`` names such a folder as ``hf://OWNER/REPO[@REVISION]`` (a repository, no
file) or a local directory; ``target_tokenizer`` names the target's tokenizer files the same way
(the target model's original repository: only ``config.json`` and the tokenizer files are
fetched, never its weights). The drafter's ``config.json`` is checked first, against the target
GGUF when it is known (no torch needed for that): architecture ``DFlashDraftModel`` or
``DFlash2DraftModel``, ``dflash_config.target_layer_ids`` and ``mask_token_id``, hidden size and
vocabulary size equal to the target's, every target layer inside the target. The converted GGUF
is checked again (:func:`check_converted`) and cached under ``<cache>/models/dflash-hf/`` with a
JSON record of how it was made (sources, input files, converter, package versions, checks);
a later call with the same inputs, or any call offline (``HF_HUB_OFFLINE=1``), reuses it.

A draft window (a preset's ``draft_train_ctx``) is written at conversion, as the converter's own
``dflash_config.use_swa`` + ``swa_window_size`` (:func:`windowed_config`): b11434 has no server
flag for one, and its DFlash graph then attends over the last ``window`` positions of the
target's injected context only (``src/models/dflash.cpp``: the loader reads
``dflash.attention.sliding_window``, the injected K/V go to the sliding cache). The window is
part of the cache key and of the record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from backend.engine.sources import LLAMA_CPP_VERSION, SDIST_DIST, SDIST_VERSION
from backend.home import home
from backend.models.converter import ensure_python, ensure_tree, installed_versions, run_converter
from backend.models.ggufinfo import GgufError, gguf_metadata, string_array_digest
from backend.models.sources import ModelError, fetch_hf, fetch_hf_optional, resolve_model

DRAFT_ARCHITECTURES = ("DFlashDraftModel", "DFlash2DraftModel")
"""What b11434's ``DFlashModel`` converts (``conversion/qwen.py``)."""
OUTTYPES = ("q8_0", "f16", "bf16")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "merges.txt", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "generation_config.json")
"""Optional tokenizer files fetched beside the target's ``config.json`` (no weights)."""
RECORD_VERSION = 1
Note = Callable[[str], None]
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SHARD_RE = re.compile(r"^[A-Za-z0-9_][\w.-]*$")
"""A shard name in a safetensors index: a plain file name (no folder, no revision)."""


class DraftSourceError(ModelError):
    """A safetensors drafter (or the target's tokenizer folder) is missing, malformed, not a
    DFlash drafter, or does not match the target; one line with the cause and the fix."""

    def __init__(self, message: str):
        super().__init__(message, plain=True)


def is_folder_source(source: str | None) -> bool:
    """True for ``hf://OWNER/REPO[@REV]`` (a whole repository) or an existing local directory."""
    if not source:
        return False
    if source.startswith("hf://"):
        return source.removeprefix("hf://").split("@", 1)[0].count("/") == 1
    if "://" in source and not source.startswith("file://"):
        return False
    return Path(source.removeprefix("file://")).expanduser().is_dir()


def _hf_repo(source: str) -> tuple[str, str | None]:
    repo, at, rev = source.removeprefix("hf://").partition("@")
    if not _REPO_RE.match(repo) or (at and not rev):
        raise DraftSourceError(f"bad folder source '{source}': expected hf://OWNER/REPO"
                               "[@REVISION] or a local folder")
    return repo, rev or None


def _hf_file(repo: str, rev: str | None, name: str) -> str:
    return f"hf://{repo}/{name}" + (f"@{rev}" if rev else "")


def fetch_folder(source: str, what: str, weights: bool, note: Note | None = None
                 ) -> dict[str, Path]:
    """The files of a drafter (``weights``: config, safetensors, index) or of a tokenizer folder
    (config and :data:`TOKENIZER_FILES`) named by ``source``: name → local path, fetched into the
    hub cache for ``hf://``. Raises :class:`DraftSourceError` (missing folder or
    ``config.json``, no weights) or :class:`ModelError` (the download failed, gated, offline)."""
    if source.startswith("hf://"):
        repo, rev = _hf_repo(source)
        files = {"config.json": fetch_hf(_hf_file(repo, rev, "config.json"), note)}
        optional = (("model.safetensors.index.json", "model.safetensors") if weights
                    else TOKENIZER_FILES)
        for name in optional:
            got = fetch_hf_optional(_hf_file(repo, rev, name), note)
            if got is not None:
                files[name] = got
        if weights:
            for shard in _shards(files, source):
                files[shard] = fetch_hf(_hf_file(repo, rev, shard), note)
        return files
    folder = Path(source.removeprefix("file://")).expanduser()
    if not folder.is_dir():
        raise DraftSourceError(f"{what} folder {folder} does not exist")
    files = {p.name: p for p in sorted(folder.iterdir()) if p.is_file()}
    if "config.json" not in files:
        raise DraftSourceError(f"{folder} has no config.json: not a Hugging Face model folder "
                               f"(the {what} needs one)")
    if weights:
        missing = _shards(files, source)
        if missing:
            raise DraftSourceError(f"{folder} lacks {missing[0]}, a shard named in its "
                                   "model.safetensors.index.json; copy the whole drafter")
    return files


def _shards(files: dict[str, Path], source: str) -> list[str]:
    """The safetensors shards a drafter needs that are not in ``files`` yet."""
    index = files.get("model.safetensors.index.json")
    if index is None:
        if "model.safetensors" not in files and not any(n.endswith(".safetensors")
                                                        for n in files):
            raise DraftSourceError(f"{source} has no model.safetensors (nor an index of "
                                   "shards): not a safetensors drafter")
        return []
    try:
        names = sorted(set(json.loads(index.read_text("utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DraftSourceError(f"{source}: model.safetensors.index.json is unreadable "
                               f"({exc}); fetch it again") from exc
    odd = [n for n in names if not _SHARD_RE.match(n)]
    if odd:
        # Shard names become paths in the converter's work folder and parts of hf:// sources.
        raise DraftSourceError(f"{source}: model.safetensors.index.json names {odd[0]!r}, not "
                               "a plain shard name beside config.json: not a drafter this "
                               "product converts")
    return [n for n in names if n not in files]


def read_config(path: Path, source: str) -> dict[str, Any]:
    """A drafter's ``config.json``, checked to be a DFlash drafter b11434 converts. Raises
    :class:`DraftSourceError` naming what is wrong."""
    try:
        config = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DraftSourceError(f"{source}: config.json is not valid JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise DraftSourceError(f"{source}: config.json is not a JSON object")
    archs = config.get("architectures")
    if not isinstance(archs, list) or not set(archs) & set(DRAFT_ARCHITECTURES):
        raise DraftSourceError(f"{source}: architectures {archs!r} is not a DFlash drafter "
                               f"({' or '.join(DRAFT_ARCHITECTURES)}); set the preset's draft "
                               "to a DFlash drafter (z-lab's *-DFlash repositories)")
    dflash = config.get("dflash_config")
    if not isinstance(dflash, dict):
        raise DraftSourceError(f"{source}: config.json has no dflash_config")
    layers = dflash.get("target_layer_ids")
    if not isinstance(layers, list) or not layers or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers):
        raise DraftSourceError(f"{source}: dflash_config.target_layer_ids must be a non-empty "
                               f"list of layer numbers, not {layers!r}")
    mask = dflash.get("mask_token_id")
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        raise DraftSourceError(f"{source}: dflash_config.mask_token_id must be a token id, "
                               f"not {mask!r}")
    for key in ("hidden_size", "vocab_size", "num_hidden_layers"):
        if not isinstance(config.get(key), int):
            raise DraftSourceError(f"{source}: config.json has no integer {key}")
    return config


REMOTE_CODE_FILES = ("tokenizer_config.json", "config.json")
"""The tokenizer folder's files whose ``auto_map`` makes ``transformers`` import the folder's
own Python code (the converter loads the tokenizer with ``trust_remote_code=True``)."""


def refuse_remote_code(files: dict[str, Path], source: str) -> None:
    """Refuse a target tokenizer folder that names its own Python code (an ``auto_map`` in
    :data:`REMOTE_CODE_FILES`). Raises :class:`DraftSourceError` naming the file.

    llama.cpp's converter loads the target tokenizer with ``trust_remote_code=True``: such a
    folder would run its ``.py`` files (from a download, or any local folder) as the user."""
    for name in REMOTE_CODE_FILES:
        path = files.get(name)
        if path is None:
            continue
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # not JSON: transformers fails on it before importing anything
        if isinstance(data, dict) and data.get("auto_map"):
            raise DraftSourceError(
                f"{source}: {name} names custom tokenizer code (auto_map), which the converter "
                "would run; refused: set target_tokenizer to a tokenizer folder without "
                "custom code")


def _target_facts(target: Path) -> dict[str, Any]:
    """n_embd, n_layer and vocabulary of the target GGUF (header only)."""
    try:
        meta = gguf_metadata(target)
        arch = meta["general.architecture"]
        return {"n_embd": int(meta[f"{arch}.embedding_length"]),
                "n_layer": int(meta[f"{arch}.block_count"]),
                "vocab": string_array_digest(target, "tokenizer.ggml.tokens")}
    except (GgufError, KeyError, TypeError, ValueError) as exc:
        raise DraftSourceError(f"the target {target} cannot be read to check the drafter "
                               f"against it ({exc})") from exc


def precheck(config: dict[str, Any], source: str, target: Path | None) -> None:
    """The drafter's shape against the target GGUF's, before any conversion: hidden size,
    vocabulary size, and every target layer (HF id + 1, the input of the next layer) inside
    the target. Raises :class:`DraftSourceError`."""
    if target is None:
        return
    facts = _target_facts(target)
    if config["hidden_size"] != facts["n_embd"]:
        raise DraftSourceError(f"{source} is a drafter for a {config['hidden_size']}-wide "
                               f"model, but the target {target.name} is {facts['n_embd']} "
                               "wide: pick the drafter made for this target")
    vocab = facts["vocab"][0] if facts["vocab"] else None
    if vocab is not None and config["vocab_size"] != vocab:
        raise DraftSourceError(f"{source} has a {config['vocab_size']}-token vocabulary, the "
                               f"target {target.name} {vocab}: pick the drafter made for this "
                               "target")
    ids = [i + 1 for i in config["dflash_config"]["target_layer_ids"]]
    if max(ids) >= facts["n_layer"]:
        raise DraftSourceError(f"{source} reads target layers {ids} but the target "
                               f"{target.name} has {facts['n_layer']} layers: pick the drafter "
                               "made for this target")


def check_converted(path: Path, target: Path | None, n_target_layers: int | None
                    ) -> dict[str, Any]:
    """Check a converted draft: architecture ``dflash``, ``dflash.block_size``,
    ``dflash.target_layers`` inside the target (below ``n_target_layers``), a mask token inside
    the vocabulary and, with the target GGUF, the same width and the same vocabulary, id for id.
    Returns the facts checked; raises :class:`DraftSourceError`."""
    try:
        meta = gguf_metadata(path)
        tokens = string_array_digest(path, "tokenizer.ggml.tokens")
    except GgufError as exc:
        raise DraftSourceError(f"the converted draft is unreadable ({exc})") from exc
    if meta.get("general.architecture") != "dflash":
        raise DraftSourceError(f"the converter wrote architecture "
                               f"'{meta.get('general.architecture')}', not 'dflash'")
    block = meta.get("dflash.block_size")
    if not isinstance(block, int) or block < 2:
        raise DraftSourceError(f"the converted draft has dflash.block_size {block!r}")
    layers = meta.get("dflash.target_layers")
    if not isinstance(layers, list) or not layers:
        raise DraftSourceError("the converted draft has no dflash.target_layers")
    if n_target_layers is not None and any(not 0 < i < n_target_layers for i in layers):
        raise DraftSourceError(f"the converted draft reads target layers {layers}, outside "
                               f"the target's 1..{n_target_layers - 1}")
    mask = meta.get("tokenizer.ggml.mask_token_id")
    if tokens is None or not isinstance(mask, int) or not 0 <= mask < tokens[0]:
        raise DraftSourceError(f"the converted draft's mask token {mask!r} is not inside its "
                               "vocabulary")
    facts: dict[str, Any] = {"architecture": "dflash", "block_size": block,
                             "target_layers": layers, "mask_token_id": mask,
                             "n_vocab": tokens[0], "vocab_sha256": tokens[1],
                             "sliding_window": meta.get("dflash.attention.sliding_window")}
    if target is not None:
        want = _target_facts(target)
        if meta.get("dflash.embedding_length") != want["n_embd"]:
            raise DraftSourceError(f"the converted draft is {meta.get('dflash.embedding_length')}"
                                   f" wide, the target {want['n_embd']}")
        if want["vocab"] != tokens:
            raise DraftSourceError(
                f"the converted draft's vocabulary ({tokens[0]} tokens) differs from the "
                f"target {target.name}'s ({want['vocab'][0] if want['vocab'] else 0} tokens): "
                "target_tokenizer must name the target model's own tokenizer")
        facts["target"] = str(target)
    return facts


def _slug(source: str) -> str:
    text = source.removeprefix("hf://").removeprefix("file://").rstrip("/")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.split("/")[-1] or "draft")[:60]


def cache_path(draft: str, tokenizer: str, outtype: str, window: int | None = None) -> Path:
    """Where the conversion of ``draft`` (with ``tokenizer``, to ``outtype``, with a draft
    ``window`` or none) is cached; its record is the same name with ``.json``."""
    parts = [draft, tokenizer, outtype, SDIST_VERSION]
    if window:
        # Only a windowed conversion adds to the key: unwindowed ones made before keep theirs.
        parts.append(f"window={window}")
    key = hashlib.sha256("\n".join(parts).encode())
    tail = f"-w{window}" if window else ""
    return home().cache / "models" / "dflash-hf" / \
        f"{_slug(draft)}-{outtype}{tail}-{key.hexdigest()[:10]}.gguf"


def cached_conversion(draft: str, tokenizer: str | None, outtype: str,
                      window: int | None = None) -> Path | None:
    """The cached conversion (with its record), or None; reads no network."""
    if not tokenizer:
        return None
    path = cache_path(draft, tokenizer, outtype, window)
    return path if path.is_file() and path.with_suffix(".json").is_file() else None


def _fingerprint(files: dict[str, Path]) -> dict[str, list[Any]]:
    """name → [resolved path, size, mtime_ns]: a changed input (a new hub commit resolves to
    new blobs; a local file rewritten) changes it without hashing gigabytes."""
    out = {}
    for name, path in sorted(files.items()):
        real = path.resolve()
        st = real.stat()
        out[name] = [str(real), st.st_size, st.st_mtime_ns]
    return out


def own_window(config: dict[str, Any]) -> int | None:
    """The sliding window the drafter was trained with, as b11434's converter reads it
    (``conversion/qwen.py``, ``DFlashModel.set_gguf_parameters``: ``use_sliding_window`` or
    ``dflash_config.use_swa``, with ``dflash_config.swa_window_size`` or ``sliding_window``);
    None when it has none."""
    dflash = config.get("dflash_config") or {}
    on = config.get("use_sliding_window") or dflash.get("use_swa")
    size = dflash.get("swa_window_size") or config.get("sliding_window")
    return int(size) if on and isinstance(size, int) and size > 0 else None


def windowed_config(config: dict[str, Any], window: int) -> dict[str, Any] | None:
    """``config`` with a draft window of ``window`` tokens on every layer, in the keys b11434's
    converter turns into ``dflash.attention.sliding_window`` (and an all-true layer pattern);
    None when the drafter already has a window of its own (trained with it: that one stays).
    Raises :class:`DraftSourceError` for a window no longer than the drafter's block.

    The engine then limits what the draft's noise block attends to, on every layer, to the
    target context within ``window`` positions of it: z-lab's draft window (SGLang's
    ``--speculative-dflash-draft-window-size``) for contexts past the drafter's training."""
    if own_window(config) is not None:
        return None
    dflash_config = config["dflash_config"]
    block = dflash_config.get("block_size", config.get("block_size", 16))
    if isinstance(block, int) and window <= block:
        # b11434 windows the noise block too (DFlash's non-causal type applies the window
        # inside the batch): one shorter than a block would hide the block from itself.
        raise DraftSourceError(f"a draft window of {window} tokens is not longer than the "
                               f"drafter's block ({block}); set draft_train_ctx to the context "
                               "the drafter was trained on")
    dflash = dict(dflash_config, use_swa=True, swa_window_size=int(window))
    return {**config, "dflash_config": dflash}


def _offline() -> bool:
    return (os.environ.get("HF_HUB_OFFLINE") or "").strip().lower() in {"1", "true", "yes", "on"}


def prepare_draft(draft: str, tokenizer: str | None, target: Path | None,
                  outtype: str = "q8_0", sdist: Path | None = None,
                  note: Note | None = None, window: int | None = None) -> Path:
    """The converted upstream ``dflash`` GGUF for the safetensors drafter ``draft``: fetched,
    checked, converted and recorded once (module docstring), then reused. ``window``: a draft
    window (tokens) written into the GGUF unless the drafter has its own
    (:func:`windowed_config`).

    Raises :class:`DraftSourceError` (no ``tokenizer``, a malformed or mismatched drafter, a
    failed check), :class:`ModelError` (a download: gated, missing, offline) or
    ``ConverterError``/``BuildError`` (the converter, its venv or its sdist).
    """
    if outtype not in OUTTYPES:
        raise DraftSourceError(f"draft type '{outtype}': use one of {', '.join(OUTTYPES)}")
    if not tokenizer:
        raise DraftSourceError(f"{draft} is a safetensors drafter: converting it needs the "
                               "target's tokenizer; set the preset's target_tokenizer to the "
                               "target model's repository (hf://OWNER/REPO) or folder")
    out = cache_path(draft, tokenizer, outtype, window)
    record_path = out.with_suffix(".json")
    if _offline() and out.is_file() and record_path.is_file():
        # The key names no target: the one given now is checked, as online.
        if target is not None:
            check_converted(out, target, _target_layers({}, target))
        return out
    draft_files = fetch_folder(draft, "drafter", weights=True, note=note)
    tok_files = fetch_folder(tokenizer, "target tokenizer", weights=False, note=note)
    refuse_remote_code(tok_files, tokenizer)
    config = read_config(draft_files["config.json"], draft)
    converted_config = windowed_config(config, window) if window else None
    inputs = {"draft": _fingerprint(draft_files), "tokenizer": _fingerprint(tok_files)}
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if out.is_file() and record_path.is_file() and _recorded_inputs(record_path) == inputs:
            # Made from these very files; a target (maybe another one) is checked again.
            if target is not None:
                check_converted(out, target, _target_layers(tok_files, target))
            return out
        precheck(config, draft, target)
        tree = ensure_tree(sdist, note)
        python = ensure_python(tree, note)
        if note:
            note(f"converting the DFlash drafter {draft} to GGUF ({outtype}) with llama.cpp "
                 f"b{LLAMA_CPP_VERSION}'s convert_hf_to_gguf.py -> {out}")
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            work = Path(tmp)
            for sub, files in (("draft", draft_files), ("tokenizer", tok_files)):
                (work / sub).mkdir()
                for name, path in files.items():
                    if name.endswith(".py"):
                        continue  # code is never converter input: nothing there to import
                    if sub == "draft" and name == "config.json" and converted_config:
                        # The converter reads the window from the drafter's config only.
                        (work / sub / name).write_text(json.dumps(converted_config, indent=2))
                        continue
                    (work / sub / name).symlink_to(path.resolve())
            part = work / "draft.gguf"
            log = out.with_suffix(".log")
            run_converter(python, tree, work / "draft", work / "tokenizer", part, outtype, log)
            facts = check_converted(part, target, _target_layers(tok_files, target))
            wanted = window if converted_config else own_window(config)
            if facts.get("sliding_window") != wanted:
                raise DraftSourceError(f"the converted draft has draft window "
                                       f"{facts.get('sliding_window')!r}, not {wanted!r}")
            record = {"version": RECORD_VERSION, "draft": draft, "target_tokenizer": tokenizer,
                      "outtype": outtype, "inputs": inputs, "checks": facts,
                      "converter": {"sdist": f"{SDIST_DIST}=={SDIST_VERSION}",
                                    "script": "convert_hf_to_gguf.py", "log": str(log),
                                    "packages": installed_versions(python)},
                      "architectures": config.get("architectures"),
                      "draft_window": _window_record(window, converted_config, config),
                      "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            os.replace(part, out)
            record_path.write_text(json.dumps(record, indent=2) + "\n")
    return out


def _window_record(window: int | None, converted: dict[str, Any] | None,
                   config: dict[str, Any]) -> dict[str, Any] | None:
    """How the converted draft got its window (the record's ``draft_window``): written by the
    product (``window`` asked for, the drafter had none), the drafter's own, or none."""
    if converted:
        return {"tokens": window, "from": "product",
                "how": "dflash_config.use_swa + swa_window_size added to the converter's copy "
                       "of config.json (every layer)"}
    if (own := own_window(config)) is not None:
        return {"tokens": own, "from": "drafter", "asked": window}
    return None


def _recorded_inputs(record: Path) -> object:
    """The ``inputs`` of a conversion record (None when unreadable)."""
    try:
        return json.loads(record.read_text("utf-8")).get("inputs")
    except (OSError, ValueError, AttributeError):
        return None


def _target_layers(tok_files: dict[str, Path], target: Path | None) -> int | None:
    """The target's layer count: from its GGUF, else from its ``config.json``."""
    if target is not None:
        return int(_target_facts(target)["n_layer"])
    try:
        cfg = json.loads(tok_files["config.json"].read_text("utf-8"))
        cfg = cfg.get("text_config", cfg)
        return int(cfg["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def convert_folder(src: Path, dst: Path, tokenizer: str, target: Path | None = None,
                   outtype: str = "q8_0", force: bool = False, sdist: Path | None = None,
                   note: Note | None = None, window: int | None = None) -> dict[str, Any]:
    """``agent backend convert-draft FOLDER OUT``: convert a local safetensors drafter to
    ``dst`` (through the cache, so a second call is a copy); returns the record.

    Raises :class:`DraftSourceError` when ``dst`` exists without ``force`` and as
    :func:`prepare_draft` does."""
    if dst.exists() and not force:
        raise DraftSourceError(f"{dst} exists; choose another output or pass --force")
    cached = prepare_draft(str(src.resolve()), tokenizer, target, outtype, sdist, note, window)
    tmp = dst.with_name(dst.name + ".part")
    try:
        shutil.copyfile(cached, tmp)
        os.replace(tmp, dst)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DraftSourceError(f"cannot write {dst}: {exc.strerror or exc}") from exc
    return json.loads(cached.with_suffix(".json").read_text("utf-8"))


def resolve_draft(draft: str, target: Path | None, tokenizer: str | None = None,
                  outtype: str = "q8_0", sdist: Path | None = None,
                  note: Note | None = None, window: int | None = None) -> Path:
    """A preset's draft as a local GGUF: a safetensors drafter converted (:func:`prepare_draft`,
    with the draft ``window`` if any), any other source resolved as a model
    (:func:`backend.models.sources.resolve_model`; a GGUF keeps whatever window it has)."""
    if is_folder_source(draft):
        return prepare_draft(draft, tokenizer, target, outtype, sdist, note, window)
    return resolve_model(draft, note)
