"""The token ledger of one episode: what the policy sampled and what the environment injected."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from tasks.task import VERIFIER_FAILURES


class Segment(IntEnum):
    """Who produced a response token."""

    SAMPLED = 1
    """Sampled by the policy: trained (loss mask 1)."""
    TOOL = 2
    """Tool or environment message content injected by the env: never trained."""
    GLUE = 3
    """Chat-template glue around injected messages (role headers, end-of-turn tokens): never trained."""


@dataclass
class Trajectory:
    """One episode as token ids. All per-token lists have the length of `response_ids`.

    `prompt_ids` is the rendered initial prompt as fed to the policy (its last
    `RolloutLimits.max_prompt_tokens` ids when that cut it). `response_ids` is everything after it: sampled
    turns (loss mask 1) interleaved with injected tool messages and template glue (mask 0).
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    """1 = sampled by the policy (trained), 0 = injected by the environment."""
    logprobs: list[float] = field(default_factory=list)
    """Rollout log-probs of the sampled ids; exactly 0.0 at injected positions."""
    turn_index: list[int] = field(default_factory=list)
    """Assistant turn (0-based) each token belongs to; injected tokens carry the turn they follow."""
    segment: list[int] = field(default_factory=list)
    """`Segment` value of each token."""
    reward: float = 0.0
    num_turns: int = 0
    finish_reason: str = "stop"
    """`stop` (answered), `length` (token budget), `max_turns` (turn budget) or `error`."""
    group_id: int = 0
    """Index of the prompt group (GRPO advantages are computed within a group)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The chat transcript (for logs and debugging; training uses the ids)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Per-episode numbers: tool_calls, tool_errors, response_tokens, ..."""
    task_id: str = ""
    grade_status: str = ""
    """`tasks.Grade.status` of the final answer ("" when the episode never answered)."""
    failed: str | None = None
    """Reason when a world failure (sandbox down, ...) spoiled the episode; excluded from the loss."""
    samples: list[Trajectory] = field(default_factory=list)
    """Per-turn samples, one per assistant turn, when the chat template rewrote history (empty for an
    append-only episode). Sample k: `prompt_ids` = the ids the policy was prompted with at turn k (the
    template's rendering of the history then), `response_ids` = exactly the ids it sampled, loss mask
    all 1; it carries the episode's reward, group, task and grade. The episode's own token fields then
    hold its last sample (the whole final history and the last turn)."""

    def __post_init__(self) -> None:
        self.samples = [s if isinstance(s, Trajectory) else Trajectory(**s) for s in self.samples]

    @property
    def per_turn(self) -> bool:
        """True when the episode is trained as per-turn samples (`samples` non-empty)."""
        return bool(self.samples)

    def rows(self) -> list[Trajectory]:
        """The sequences training consumes: the per-turn samples, or the episode itself when append-only."""
        return list(self.samples) or [self]

    @property
    def response_length(self) -> int:
        """Tokens the episode grew past its first prompt (sampled + injected; the response budget spent).

        Append-only: `len(response_ids)`. Per-turn: the last sample's prompt + response minus the first
        sample's prompt, i.e. the final history's length past the initial prompt.
        """
        if not self.samples:
            return len(self.response_ids)
        first, last = self.samples[0], self.samples[-1]
        return len(last.prompt_ids) + len(last.response_ids) - len(first.prompt_ids)

    @property
    def sampled_tokens(self) -> int:
        """Tokens the policy sampled in the whole episode (each counted once, over all rows)."""
        return sum(sum(row.loss_mask) for row in self.rows())

    @property
    def is_correct(self) -> bool:
        """Graded correct, or (for an env that reports no grade) a positive reward."""
        return self.grade_status == "correct" or (not self.grade_status and self.reward > 0)

    @property
    def is_verifier_failure(self) -> bool:
        """The verifier timed out or crashed (`tasks.VERIFIER_FAILURES`): not the model's fault."""
        return self.grade_status in VERIFIER_FAILURES
