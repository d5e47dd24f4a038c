"""Settings of the CPU presets: model size, environment, demonstrations, SFT and the measurement.

A preset's settings (with `BUILD_VERSION`) are hashed into the cache key of its warm start, so a
change here rebuilds the model instead of silently reusing a stale one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

BUILD_VERSION = "2"
"""Bump when the warm-start code changes what it builds (part of the cache key)."""


@dataclass(frozen=True, kw_only=True)
class PresetSettings:
    """Everything that determines a preset's warm-started model."""

    name: str
    """Preset name, used as `preset:<name>`."""
    hidden_size: int = 64
    """Model width."""
    num_layers: int = 4
    """Decoder layers."""
    intermediate_size: int = 256
    """MLP width."""
    num_heads: int = 4
    """Attention heads."""
    vocab_size: int = 512
    """BPE vocabulary bound (the trained vocabulary is smaller: ~350 tokens)."""
    env_id: str = "stare/PythonTool-v0"
    """Environment of the demonstrations and of RL."""
    env_kwargs: dict[str, Any] = field(
        default_factory=lambda: {
            "dataset": "countdown-train",
            "system_prompt": None,
            "prompt_template": "plain",
            "max_tool_turns": 3,
        }
    )
    """`envs.make` kwargs: bare prompt `Use a b c to make T`, no system prompt, at most 3 tool turns."""
    max_turns: int = 4
    """Assistant turns per episode (3 tool calls and an answer)."""
    max_new_tokens: int = 24
    """New tokens per assistant turn (a check call is <= 15 tokens plus its end token, an answer ~9)."""
    max_response_tokens: int = 128
    """Sampled + injected tokens per episode (a check round trip is ~28, so 3 tries and the answer fit)."""
    max_tool_output_tokens: int = 16
    """Tokens of one tool output kept in the context."""
    demo_puzzles: int = 0
    """Training puzzles with demonstrations (0 = all 615 of countdown-train)."""
    demo_copies: int = 4
    """Scripted searches per training puzzle."""
    demo_max_tries: int = 3
    """The searcher tries at most this many candidates."""
    demo_aware: float = 0.5
    """Probability that one try of the searcher picks among the solving candidates (`scripted_turns`)."""
    demo_persist: float = 0.6
    """Probability that the searcher tries again after a miss (`scripted_turns`)."""
    demo_check: bool = True
    """Calls print `EXPR-TARGET` (0 on a hit) instead of `EXPR` (`scripted_turns`)."""
    sft_steps: int = 800
    """SFT optimizer steps."""
    sft_batch_size: int = 64
    """Demonstrations per SFT step."""
    sft_lr: float = 3e-3
    """Peak SFT learning rate (warmup then cosine)."""
    sft_warmup: int = 50
    """SFT warmup steps."""
    eval_tasks: str = "countdown-eval"
    """Held-out set of the post-SFT measurement (hard and easy interleaved)."""
    eval_problems: int = 128
    """Problems of `eval_tasks` measured (the first N: half hard, half easy)."""
    eval_k: int = 8
    """Samples per problem (pass@1 = avg@k, pass@k)."""
    seed: int = 0
    """Seed of the tokenizer corpus, model init, demonstrations, SFT order and measurement."""

    def key(self) -> str:
        """12-hex cache key: sha256 of the settings and `BUILD_VERSION`."""
        blob = json.dumps({"settings": dataclasses.asdict(self), "version": BUILD_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


PRESETS: dict[str, PresetSettings] = {
    "cpu-tiny": PresetSettings(name="cpu-tiny"),
    # A seconds-long build for tests and smoke runs: same model and format, far less training.
    "cpu-tiny-smoke": PresetSettings(
        name="cpu-tiny-smoke",
        demo_puzzles=64,
        demo_copies=1,
        sft_steps=20,
        sft_batch_size=16,
        sft_warmup=5,
        eval_problems=8,
        eval_k=2,
    ),
}
"""Registered presets, by name."""


def get_preset(name: str) -> PresetSettings:
    """The settings of preset `name`.

    Raises:
        ValueError: Unknown name; the message lists the registered presets.
    """
    if name not in PRESETS:
        raise ValueError(
            f"unknown model preset {name!r}; known presets: {sorted(PRESETS)} (use preset:<name>)"
        )
    return PRESETS[name]
