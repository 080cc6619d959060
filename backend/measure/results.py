"""What ``agent backend bench`` produces: each sample, per-profile statistics with speedups
against the reference profile, the servers and the machine, as one JSON-able result.

Numbers come from llama-server's ``timings`` (docs/design/backend-facts.md, "Responses"):
``prompt_n``, ``prompt_ms``, ``predicted_n``, ``predicted_ms``, and ``draft_n``/``draft_n_accepted``
when drafts were made. Aggregates are ratios of sums (total tokens / total time), so long answers
weigh more than short ones, as they do for a user waiting on them.
"""

from __future__ import annotations

import hashlib
import platform
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from backend import machine
from backend.errors import StatedError
from backend.measure.prompts import BenchPrompt

SCHEMA_VERSION = 1
REFERENCE_PROFILE = "baseline"


class BenchError(StatedError, RuntimeError):
    """The benchmark could not run or a server answered badly; the message says why."""


class Sample(BaseModel):
    """One request's measurements, in the order the requests were sent."""

    index: int = Field(description="0-based position in the run's request order.")
    profile: str
    prompt: str
    temperature: float
    repeat: int = Field(description="0-based repeat number.")
    prompt_tokens: int = Field(description="Tokens prefilled (timings.prompt_n).")
    cached_tokens: int = Field(description="Prompt tokens reused from cache (timings.cache_n).")
    prompt_ms: float = Field(description="Prefill time in ms (timings.prompt_ms).")
    completion_tokens: int = Field(description="Tokens generated (timings.predicted_n).")
    decode_ms: float = Field(description="Generation time in ms (timings.predicted_ms).")
    draft_n: int = Field(description="Draft tokens proposed (timings.draft_n, 0 when absent).")
    draft_accepted: int = Field(description="Draft tokens accepted (timings.draft_n_accepted).")
    finish_reason: str | None = None
    seed: int | None = Field(None, description="Sampling seed the request carried (the same "
                             "for every profile at one prompt and repeat).")
    answer_sha256: str | None = Field(None, description="SHA-256 of the answer's text (UTF-8); "
                                      "None when the answer had no text.")


class Stats(BaseModel):
    """Totals for one profile over a group of samples: one prompt at one temperature, or
    every prompt (``prompt`` None) at one temperature or at all (``temperature`` None)."""

    profile: str
    prompt: str | None
    temperature: float | None
    requests: int
    completion_tokens: int
    decode_ms: float
    prompt_tokens: int
    prompt_ms: float
    decode_tok_s: float | None = Field(description="completion_tokens / decode time (s).")
    prefill_tok_s: float | None = Field(description="prompt_tokens / prefill time (s).")
    draft_n: int
    draft_accepted: int
    acceptance: float | None = Field(description="draft_accepted / draft_n; None without "
                                     "drafts.")
    speedup: float | None = Field(description="decode_tok_s / the reference profile's "
                                  "decode_tok_s over the same group, from the same run.")


class ServerInfo(BaseModel):
    """A server the run started, as it described itself."""

    profile: str
    argv: list[str]
    build_info: str | None = Field(description="/props build_info.")
    model_path: str | None = Field(description="/props model_path.")
    n_ctx: int | None = Field(description="/props default_generation_settings.n_ctx.")
    speculation: str | None = Field(None, description="A tuned profile's choice of draft "
                                    "length and why (backend.serve.tuning).")


class MachineInfo(BaseModel):
    """Where the run happened."""

    platform: str
    cpu: str
    cpu_threads: int | None
    ram_bytes: int
    gpus: list[str] = Field(description="nvidia-smi name and memory per GPU; empty without.")


class ModelFile(BaseModel):
    """A GGUF the servers loaded."""

    path: Path
    size_bytes: int


class BenchResult(BaseModel):
    """Everything one ``agent backend bench`` run measured (the ``--json`` file)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    date: datetime = Field(description="When the run started (UTC).")
    machine: MachineInfo
    engine: str = Field(description="Engine key.")
    engine_version: str
    binary: Path
    flavour: str
    build_info: str | None
    preset: str
    model: ModelFile
    draft: ModelFile | None
    prompt_set: str = Field(description="seed, edit or the prompts file's path.")
    prompts: list[BenchPrompt]
    profiles: list[str]
    reference_profile: str
    max_tokens: int
    temperatures: list[float]
    repeats: int
    ctx_size: int
    request_extra: dict[str, float | int | bool] = Field(
        description="Fields sent with every request besides messages, max_tokens and "
        "temperature.")
    servers: list[ServerInfo]
    samples: list[Sample]
    per_prompt: list[Stats]
    overall: list[Stats] = Field(description="Per profile: each temperature, then all.")
    one_at_a_time: bool = Field(False, description="True when the servers ran one at a time "
                                "(rounds alternating the profile order), not side by side.")
    synth_accept: float | None = Field(None, description="Synthetic per-token acceptance "
                                       "given to every drafting server (--synth-accept); "
                                       "None: the draft's own.")

    def overall_speedup(self, profile: str) -> float | None:
        """``profile``'s speedup over every prompt and temperature."""
        return next((s.speedup for s in self.overall
                     if s.profile == profile and s.temperature is None), None)


class _Timings(BaseModel):
    """The part of llama-server's ``timings`` the benchmark reads."""

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    cache_n: int = 0
    draft_n: int = 0
    draft_n_accepted: int = 0


def machine_info() -> MachineInfo:
    """OS, CPU model and threads, RAM and GPUs of this machine."""
    return MachineInfo(platform=platform.platform(), cpu=machine.cpu_name(),
                       cpu_threads=machine.cpu_threads(), ram_bytes=machine.memory().total,
                       gpus=machine.gpu_names())


def sample_from_response(body: object, *, index: int, profile: str, prompt: str,
                         temperature: float, repeat: int, seed: int | None = None) -> Sample:
    """A :class:`Sample` from a ``/v1/chat/completions`` response body.

    Raises :class:`BenchError` when the body has no usable ``timings`` (not a llama-server,
    or a malformed answer).
    """
    timings = body.get("timings") if isinstance(body, dict) else None
    if not isinstance(timings, dict):
        raise BenchError(f"the {profile} server answered prompt '{prompt}' without timings; "
                         "bench needs llama-server's timings fields")
    try:
        t = _Timings.model_validate(timings)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BenchError(f"the {profile} server sent malformed timings for prompt '{prompt}' "
                         f"({'.'.join(str(p) for p in first['loc'])}: {first['msg']})") from exc
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    return Sample(index=index, profile=profile, prompt=prompt, temperature=temperature,
                  repeat=repeat, prompt_tokens=t.prompt_n, cached_tokens=t.cache_n,
                  prompt_ms=t.prompt_ms, completion_tokens=t.predicted_n,
                  decode_ms=t.predicted_ms, draft_n=t.draft_n,
                  draft_accepted=t.draft_n_accepted, finish_reason=choice.get("finish_reason"),
                  seed=seed, answer_sha256=hashlib.sha256(text.encode()).hexdigest()
                  if isinstance(text, str) else None)


def request_seed(prompt: str, repeat: int) -> int:
    """The sampling seed of ``prompt``'s ``repeat``-th request (any profile): stable across
    runs and machines, different between prompts and repeats, in [0, 2^31)."""
    digest = hashlib.sha256(f"{prompt}\0{repeat}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def tokens_per_second(tokens: int, ms: float) -> float | None:
    """``tokens`` decoded in ``ms`` milliseconds as tokens a second; None for no time."""
    return tokens / (ms / 1000.0) if ms > 0 else None


def _stats(profile: str, prompt: str | None, temperature: float | None,
           samples: list[Sample]) -> Stats:
    tokens = sum(s.completion_tokens for s in samples)
    decode_ms = sum(s.decode_ms for s in samples)
    prompt_tokens = sum(s.prompt_tokens for s in samples)
    prompt_ms = sum(s.prompt_ms for s in samples)
    draft = sum(s.draft_n for s in samples)
    accepted = sum(s.draft_accepted for s in samples)
    return Stats(profile=profile, prompt=prompt, temperature=temperature,
                 requests=len(samples), completion_tokens=tokens, decode_ms=decode_ms,
                 prompt_tokens=prompt_tokens, prompt_ms=prompt_ms,
                 decode_tok_s=tokens_per_second(tokens, decode_ms),
                 prefill_tok_s=tokens_per_second(prompt_tokens, prompt_ms),
                 draft_n=draft, draft_accepted=accepted,
                 acceptance=accepted / draft if draft else None, speedup=None)


def _with_speedups(group: list[Stats], reference: str) -> list[Stats]:
    base = next((s.decode_tok_s for s in group if s.profile == reference), None)
    return [s.model_copy(update={"speedup": s.decode_tok_s / base
                                 if base and s.decode_tok_s is not None else None})
            for s in group]


def summarize(samples: list[Sample], profiles: list[str], prompts: list[str],
              temperatures: list[float], reference: str) -> tuple[list[Stats], list[Stats]]:
    """(per prompt and temperature, overall) stats per profile, speedups vs ``reference``.

    Overall rows are per temperature, then over every temperature.
    """
    def pick(profile: str, prompt: str | None, temp: float | None) -> list[Sample]:
        return [s for s in samples if s.profile == profile
                and (prompt is None or s.prompt == prompt)
                and (temp is None or s.temperature == temp)]

    per_prompt: list[Stats] = []
    for prompt in prompts:
        for temp in temperatures:
            per_prompt += _with_speedups(
                [_stats(p, prompt, temp, pick(p, prompt, temp)) for p in profiles], reference)
    overall: list[Stats] = []
    for temp in [*temperatures, None]:
        overall += _with_speedups([_stats(p, None, temp, pick(p, None, temp))
                                   for p in profiles], reference)
    return per_prompt, overall
