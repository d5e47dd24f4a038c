"""Task and grade records: the data every other package passes around."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

Family = Literal["short_cot", "long_cot", "tool"]
"""Task families of the paper: short chain of thought, long chain of thought, multi-turn tool use."""

FAMILIES: tuple[str, ...] = get_args(Family)

GradeStatus = Literal["correct", "wrong", "no_answer", "verifier_timeout", "verifier_error"]

VERIFIER_FAILURES: tuple[GradeStatus, ...] = ("verifier_timeout", "verifier_error")
"""Grade statuses that are the verifier's failure (timeout, crash), not the model's."""
"""Outcome of grading one response. Only `correct` earns reward; the last two are not the model's fault."""


@dataclass(frozen=True)
class Task:
    """One problem: what the model is asked and the reference answer.

    `meta` carries loader- or family-specific data, e.g. `meta["grader"]` ("math" by default,
    "countdown" for target puzzles) and `meta["numbers"]` for Countdown.
    """

    id: str
    """Stable identifier, unique within a dataset (e.g. "countdown-train-00017")."""
    prompt: str
    """The problem statement shown to the model (without the instruction suffix)."""
    answer: str
    """Ground truth, as a string (e.g. "42", "\\frac{1}{2}")."""
    family: Family = "short_cot"
    """Which task family this belongs to."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Extra data (source, difficulty, grader, ...); read-only."""

    def __post_init__(self) -> None:
        where = f"task {self.id!r}" if self.id else "a task with an empty id"
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"{where}: field 'id' must be a non-empty string")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"{where}: field 'prompt' is empty; every task needs the problem text")
        if not isinstance(self.answer, str) or not self.answer.strip():
            raise ValueError(f"{where}: field 'answer' is empty; every task needs a reference answer")
        if self.family not in FAMILIES:
            raise ValueError(f"{where}: field 'family' is {self.family!r}; valid values are {list(FAMILIES)}")
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle support (e.g. for a rollout worker process): `meta`'s read-only view is rebuilt."""
        return (Task, (self.id, self.prompt, self.answer, self.family, dict(self.meta)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the JSONL format of `tasks.load`)."""
        return {"id": self.id, "prompt": self.prompt, "answer": self.answer,
                "family": self.family, "meta": dict(self.meta)}


@dataclass(frozen=True)
class Grade:
    """Result of grading one response against a reference answer."""

    correct: bool
    """True only when the status is `correct`."""
    prediction: str | None
    """The extracted final answer, or None when none was found."""
    status: GradeStatus
    """Why: correct, wrong, no_answer, verifier_timeout or verifier_error."""

    @property
    def reward(self) -> float:
        """Accuracy reward in {0, 1}, as STARE uses (`acc`, never the ±1 `score`)."""
        return 1.0 if self.correct else 0.0

    @property
    def is_verifier_failure(self) -> bool:
        """A timeout or crash of the verifier: not the model's fault, droppable from the loss."""
        return self.status in VERIFIER_FAILURES
