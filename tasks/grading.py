"""Grading: response text + reference answer -> `Grade(correct, prediction, status)`.

Extraction and cheap exact checks run in the caller; anything else goes to math-verify in the
worker pool (`tasks.verifier`), which enforces a wall-clock deadline from any thread. A verifier
timeout or crash is its own status, never "wrong", so the trainer can drop it from the loss.

Two math modes: "default" (math-verify) and "authors" (the STARE authors' reward: math-verify OR
math-verify on the bare boxed content OR mathruler's `grade_answer`, all inside the same deadline).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal, Protocol, get_args

from tasks.countdown import grade_countdown_task
from tasks.extract import Extraction, extract_answer
from tasks.task import Grade, Task
from tasks.verifier import Job, Result, shared_pool

DEFAULT_TIMEOUT = 5.0
"""Seconds of wall time per math-verify call (the reference uses 5 s for parse and for verify)."""

_NUMBER = re.compile(r"-?(?:\d+|\d{1,3}(?:,\d{3})+)(?:\.\d+)?")
_INTEGER = re.compile(r"-?(?:\d+|\d{1,3}(?:,\d{3})+)")
_FRACTION = re.compile(r"(?P<neg>-)?(?:\\frac\{(?P<num>\d+)\}\{(?P<den>\d+)\}|(?P<num2>\d+)/(?P<den2>\d+))")
MathMode = Literal["default", "authors"]
"""How math answers are judged: "default" (math-verify) or "authors" (adds mathruler; needs it installed)."""
MATH_MODES: tuple[str, ...] = get_args(MathMode)
_NOISE = re.compile(r"\s+|\\[,!;: ]|\\left|\\right")


class Verifier(Protocol):
    """What `grade_many` needs from a pool: `verify(jobs, timeout=...)`, one result per job."""

    def verify(self, jobs: Sequence[Job], *, timeout: float) -> list[Result]:
        """Run `(gold, candidate[, boxed])` jobs; see `tasks.verifier.VerifierPool.verify`."""
        ...


def _normalize(text: str) -> str:
    text = _NOISE.sub("", text.strip().strip("$"))
    return text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _as_fraction(text: str) -> Fraction | None:
    r"""Value of a plain number ("1,000", "-2.5") or integer fraction ("\frac{3}{4}", "3/4"), else None."""
    try:
        if _NUMBER.fullmatch(text):
            return Fraction(text.replace(",", ""))
        match = _FRACTION.fullmatch(text)
        if not match:
            return None
        num, den = int(match["num"] or match["num2"]), int(match["den"] or match["den2"])
    except ValueError:   # more digits than int() converts (sys.get_int_max_str_digits): not a plain value
        return None
    return Fraction(-num if match["neg"] else num, den) if den else None


def fast_verdict(prediction: str, answer: str) -> str | None:
    r"""Decide the easy cases without math-verify, or return None (math-verify decides).

    "correct" when the normalized strings match, or both are plain numbers or integer fractions of
    equal value ("1,000" = "1000.0", "\dfrac{1}{2}" = "0.5"); "wrong" only when both are plain
    integers of different value.
    """
    pred, gold = _normalize(prediction), _normalize(answer)
    if pred == gold:
        return "correct"
    pred_value, gold_value = _as_fraction(pred), _as_fraction(gold)
    if pred_value is not None and pred_value == gold_value:
        return "correct"
    if _INTEGER.fullmatch(pred) and _INTEGER.fullmatch(gold):
        return "wrong"
    return None


def check_math_mode(mode: str) -> None:
    """Raise for an unknown mode, or for "authors" without mathruler installed."""
    if mode not in MATH_MODES:
        raise ValueError(f"math grading mode {mode!r}: use one of {MATH_MODES}")
    if mode == "authors" and importlib.util.find_spec("mathruler") is None:
        raise ImportError("math grading mode 'authors' needs mathruler: "
                          "pip install mathruler==0.1.0 pylatexenc (or the `authors-grading` extra)")


def _job(answer: str, found: Extraction, mode: str) -> Job:
    """The verifier job: the authors' mode adds the boxed content (their checks 2 and 3 need a box)."""
    if mode == "authors" and found.boxed:
        return (answer.strip(), found.candidate, found.prediction)  # type: ignore[return-value]
    return (answer.strip(), found.candidate)  # type: ignore[return-value]


def grade_many(texts: Sequence[str], answers: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
               pool: Verifier | None = None, mode: MathMode = "default") -> list[Grade]:
    """Grade a batch of responses against their reference answers (math tasks).

    Identical `(answer, extracted candidate)` pairs are verified once. Safe from any thread.

    Args:
        texts: Model responses, decoded without special tokens.
        answers: Reference answers, one per response.
        timeout: Wall-clock seconds allowed per math-verify call.
        pool: Verifier to use (default: the process-wide `tasks.verifier.shared_pool()`).
        mode: "default" or "authors" (`MathMode`); the fast exact check runs in both.

    Returns:
        One `Grade` per response, in order.
    """
    if len(texts) != len(answers):
        raise ValueError(f"grade_many: {len(texts)} texts but {len(answers)} answers; "
                         "pass one answer per text")
    check_math_mode(mode)
    grades: list[Grade | None] = [None] * len(texts)
    waiting: dict[Job, list[tuple[int, str | None]]] = {}
    for i, (text, answer) in enumerate(zip(texts, answers, strict=True)):
        found = extract_answer(text)
        verdict = fast_verdict(found.prediction, answer) if found.prediction is not None else None
        if found.candidate is None:
            grades[i] = Grade(False, None, "no_answer")
        elif verdict is not None:
            grades[i] = Grade(verdict == "correct", found.prediction, verdict)  # type: ignore[arg-type]
        else:
            waiting.setdefault(_job(answer, found, mode), []).append((i, found.prediction))
    if waiting:
        results = (pool or shared_pool()).verify(list(waiting), timeout=timeout)
        for owners, result in zip(waiting.values(), results, strict=True):
            for i, explicit in owners:
                grades[i] = _to_grade(result, explicit)
    return grades  # type: ignore[return-value]


def _to_grade(result: Result, explicit: str | None) -> Grade:
    status, found = result
    if status == "no_answer" and explicit is not None:
        status = "wrong"  # the model did answer; math-verify just cannot read it
    prediction = explicit if explicit is not None else (found if status in ("correct", "wrong") else None)
    return Grade(status == "correct", prediction, status)  # type: ignore[arg-type]


def grade(text: str, answer: str, *, timeout: float = DEFAULT_TIMEOUT, mode: MathMode = "default") -> Grade:
    """Grade one response against a reference math answer (see `grade_many`)."""
    return grade_many([text], [answer], timeout=timeout, mode=mode)[0]


GRADERS: dict[str, Callable[[str, Task], Grade]] = {
    "math": lambda text, task: grade(text, task.answer),
    "countdown": grade_countdown_task,
}
"""Graders by `task.meta["grader"]`; "math" is the default (its mode is `grade_task`'s `math_mode`)."""


def _grader_name(task: Task) -> str:
    name = task.meta.get("grader", "math")
    if name not in GRADERS:
        raise ValueError(f"task {task.id!r}: meta['grader'] is {name!r}; known graders are {sorted(GRADERS)}")
    return name


def grade_task(text: str, task: Task, *, math_mode: MathMode = "default") -> Grade:
    """Grade a response to `task` with the grader its `meta["grader"]` names ("math" by default)."""
    name = _grader_name(task)
    return grade(text, task.answer, mode=math_mode) if name == "math" else GRADERS[name](text, task)


def task_grader(math_mode: MathMode = "default") -> Callable[[str, Task], Grade]:
    """`grade_task` with math answers judged in `math_mode`; checks the mode now, not at the first answer."""
    check_math_mode(math_mode)
    return functools.partial(grade_task, math_mode=math_mode)


def grade_tasks(texts: Sequence[str], tasks: Sequence[Task], *,
                timeout: float = DEFAULT_TIMEOUT, math_mode: MathMode = "default") -> list[Grade]:
    """Batch `grade_task`: math tasks go to the pool together, other graders run in the caller."""
    if len(texts) != len(tasks):
        raise ValueError(f"grade_tasks: {len(texts)} texts but {len(tasks)} tasks; "
                         "pass one task per text")
    names = [_grader_name(task) for task in tasks]
    math_idx = [i for i, name in enumerate(names) if name == "math"]
    grades: list[Grade | None] = [None] * len(texts)
    math_grades = grade_many([texts[i] for i in math_idx], [tasks[i].answer for i in math_idx],
                             timeout=timeout, mode=math_mode)
    for i, g in zip(math_idx, math_grades, strict=True):
        grades[i] = g
    for i, name in enumerate(names):
        if name != "math":
            grades[i] = GRADERS[name](texts[i], tasks[i])
    return grades  # type: ignore[return-value]
