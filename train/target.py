"""The target model in torch: loaded by transformers from its GGUF, and the hidden-state
features a DFlash draft is conditioned on.

Features (shared/dflash/README.md): for each upstream id in ``target_layers`` the *input* of
that decoder layer (id 0 = the token embeddings; id L = the output of layer L − 1 = HF
``hidden_states[L]``), concatenated in ``target_layers`` order — what llama.cpp b11434 keeps
with ``llama_set_embeddings_layer_inp``. The forward pass stops after the deepest layer asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from train.config import target_architecture
from train.errors import InputError, TrainError


class _Stop(Exception):
    """Raised by the last hook: the layers above it are not needed."""


@dataclass
class Target:
    """A loaded target and the parts the draft shares with it (frozen)."""

    model: nn.Module
    embed: torch.Tensor
    """Token embeddings ``[n_vocab, n_embd]``."""
    head: torch.Tensor
    """Output head ``[n_vocab, n_embd]`` (the embeddings again for a tied model)."""
    eos_ids: tuple[int, ...]

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @torch.no_grad()
    def features(self, ids: torch.Tensor, lengths: torch.Tensor,
                 layers: tuple[int, ...]) -> torch.Tensor:
        """Features ``[B, L, len(layers) * n_embd]`` (float32) for right-padded ``ids``
        ``[B, L]`` with ``lengths`` ``[B]``; positions past a length are zero."""
        blocks = self.model.model.layers
        if any(not 0 <= i < len(blocks) for i in layers):
            raise TrainError(f"target layers {list(layers)} are outside the target's "
                             f"0..{len(blocks) - 1}")
        store: dict[int, torch.Tensor] = {}
        last = max(layers)

        def hook(index: int):
            def pre(_module: nn.Module, args: tuple, kwargs: dict) -> None:
                store[index] = (args[0] if args else kwargs["hidden_states"]).float()
                if index == last:
                    raise _Stop

            return pre

        handles = [blocks[i].register_forward_pre_hook(hook(i), with_kwargs=True)
                   for i in sorted(set(layers))]
        mask = (torch.arange(ids.shape[1], device=ids.device)[None] < lengths[:, None]).long()
        try:
            self.model.model(input_ids=ids, attention_mask=mask, use_cache=False)
        except _Stop:
            pass
        finally:
            for h in handles:
                h.remove()
        feats = torch.cat([store[i] for i in layers], dim=-1)
        return feats * mask[..., None].to(feats.dtype)


def load_target(path: Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> Target:
    """Load the GGUF at ``path`` into transformers (dequantised to float32, then cast to
    ``dtype``: bfloat16 halves a GPU's feature passes) on ``device``.

    Raises :class:`~train.errors.InputError` for a missing file, an unsupported
    architecture or a CUDA ``device`` on a machine without one (before loading anything),
    :class:`TrainError` when transformers cannot load it.
    """
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device}: torch sees no CUDA device here; pass "
                         "--device cpu")
    target_architecture(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     dtype=torch.float32)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise TrainError(f"transformers could not load {path}: {exc}") from exc
    model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    eos = model.generation_config.eos_token_id
    eos_ids = tuple(eos if isinstance(eos, list) else [eos]) if eos is not None else ()
    return Target(model=model, embed=model.get_input_embeddings().weight.detach(),
                  head=model.get_output_embeddings().weight.detach(), eos_ids=eos_ids)
