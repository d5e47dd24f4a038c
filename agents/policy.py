"""The policy protocol: token ids in, sampled token ids and their log-probs out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one assistant turn."""

    max_tokens: int = 256
    """New tokens at most for this turn."""
    temperature: float = 1.0
    """Softmax temperature; the returned log-probs are under the tempered distribution."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off). Validation in the reference uses 0.7."""
    top_k: int = -1
    """Keep the k most likely tokens (-1 = off)."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation ends after any of these ids (it is kept in `Completion.ids`)."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature <= 0:
            raise ValueError(f"SamplingParams.temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class Completion:
    """One sampled continuation, exactly as the engine produced it."""

    ids: list[int]
    """Sampled token ids, including the stop token when one ended the turn."""
    logprobs: list[float]
    """Log-prob of each sampled id under the sampling distribution; same length as `ids`."""
    finish_reason: FinishReason
    """`stop` (a stop token was sampled) or `length` (max_tokens reached)."""


@runtime_checkable
class Policy(Protocol):
    """Anything that samples continuations for a batch of token-id prompts."""

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        """Sample one completion per prompt, batched."""
        ...
