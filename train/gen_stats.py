"""What a generation run yields, measured: the number the device run compares the two
generators by (tokens per GPU minute), printed by the tool, never assumed."""

from __future__ import annotations

from dataclasses import asdict, dataclass

MIN_RESPONSE = 4
"""Shorter continuations carry too few block positions to train on: dropped."""


@dataclass
class GenStats:
    """One generation run."""

    engine: str
    """``server`` (llama-server, many slots) or ``hf`` (transformers, batched)."""
    sequences: int
    prompt_tokens: int
    response_tokens: int
    seconds: float
    """Wall time of the generation itself (model load and server start excluded)."""
    setting: str = ""
    """The knob that sizes the run: slots or batch size."""

    @property
    def response_tokens_per_s(self) -> float:
        return self.response_tokens / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The one line the tool prints."""
        return (f"generated [{self.engine} {self.setting}]: {self.sequences} sequences, "
                f"{self.response_tokens} response tokens (+{self.prompt_tokens} prompt) in "
                f"{self.seconds:.1f} s = {self.response_tokens_per_s:.0f} tokens/s = "
                f"{self.response_tokens_per_s * 60:.0f} response tokens a minute")

    def as_dict(self) -> dict:
        return asdict(self) | {"response_tokens_per_s": round(self.response_tokens_per_s, 1)}
