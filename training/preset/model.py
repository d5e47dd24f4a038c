"""The tiny Qwen2-architecture policy of the CPU preset, built from a config (random init, no download)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, Qwen2ForCausalLM


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden_size: int = 64,
    num_layers: int = 4,
    intermediate_size: int = 256,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    max_positions: int = 512,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """Build a randomly initialised Qwen2ForCausalLM sized for CPU RL.

    The defaults give the CPU preset's model: hidden 64, 4 layers, FFN 256, 4 heads, tied
    embeddings; with a ~350-token vocabulary that is about 0.22M parameters.

    Args:
        tokenizer: Supplies the vocabulary size and the pad / eos ids.
        hidden_size: Model width d.
        num_layers: Decoder layers.
        intermediate_size: MLP width.
        num_heads: Attention heads (d must be divisible by it).
        num_kv_heads: Key/value heads (grouped-query attention); `num_heads` when None.
        max_positions: Maximum sequence length (rotary embeddings, no learned positions).
        seed: Seed of the initialisation (the global torch RNG is left untouched).
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM  # lazy: `stare --help` need not load transformers

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        intermediate_size=intermediate_size,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


@dataclass(frozen=True, kw_only=True)
class TinySpec:
    """Size of a from-scratch model (the CPU preset's defaults: ~0.3M parameters)."""

    hidden_size: int = 64
    num_layers: int = 4
    intermediate_size: int = 256
    num_heads: int = 4
    vocab_size: int = 512
    """Upper bound of the learned BPE vocabulary."""
    seed: int = 0

    @classmethod
    def of(cls, settings: Any) -> TinySpec:
        """The spec's fields read from an object that has them all (e.g. a preset's settings)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


def build_from_spec(
    tokenizer: PreTrainedTokenizerBase, spec: TinySpec, *, max_positions: int = 512
) -> Qwen2ForCausalLM:
    """`build_tiny_model` sized by `spec` (its `vocab_size` is the tokenizer's business, not used here)."""
    return build_tiny_model(
        tokenizer,
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        intermediate_size=spec.intermediate_size,
        num_heads=spec.num_heads,
        max_positions=max_positions,
        seed=spec.seed,
    )
