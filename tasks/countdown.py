"""Countdown with a tool: make a target from 3 small numbers with + - * and brackets.

The CPU benchmark task (docs/bench.md). A puzzle is `numbers` (3 digits 1..9, repeats allowed)
and a `target` 10 <= T <= 99 that some expression using all three numbers reaches. Its difficulty is
the number of candidate expression strings (`countdown_candidates`) that evaluate to T: "hard" if at
most 4 (usually one real solution in its commutative variants), "easy" otherwise.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections import Counter
from collections.abc import Sequence

from tasks.extract import answer_region, last_boxed
from tasks.task import Grade, Task

OPS = ("+", "-", "*")
TARGET_RANGE = (10, 99)
"""Inclusive range of puzzle targets."""
EVAL_PER_CLASS = 128
"""`countdown-eval` holds this many hard and this many easy puzzles; `countdown-eval-hard` this many hard
puzzles."""
HARD_MAX_SOLUTIONS = 4
"""A puzzle with at most this many solving candidate strings is "hard"."""
TRAIN_HARD_SHARE = 0.25
"""Share of hard puzzles in `countdown-train` (the rest are easy: many solutions, a stochastic optimum)."""
MAX_EXPRESSION_CHARS = 200
"""Longer boxed expressions are rejected unparsed (bounds the work on adversarial output)."""
_LATEX_OPS = {"\\times": "*", "\\cdot": "*", "×": "*", "·": "*", "−": "-",
              "$": "", "\\left": "", "\\right": ""}
_TOKENS = re.compile(r"\s*(?:(\d+)|([-+*()]))")


def _apply(op: str, x: int, y: int) -> int:
    return x + y if op == "+" else x - y if op == "-" else x * y


def _candidates_with_values(numbers: Sequence[int]) -> dict[str, int]:
    """Every candidate string with its value, in a fixed order, duplicates (from repeats) removed."""
    found: dict[str, int] = {}
    for i, j in itertools.permutations(range(len(numbers)), 2):
        x, y = numbers[i], numbers[j]
        for op in OPS:
            found.setdefault(f"{x}{op}{y}", _apply(op, x, y))
    for i, j, k in itertools.permutations(range(len(numbers)), 3):
        x, y, z = numbers[i], numbers[j], numbers[k]
        for a, b in itertools.product(OPS, OPS):
            # `x a y b z` binds `*` first: x a (y*z) when only b is `*`, else left to right
            flat = _apply(a, x, y * z) if (b == "*" and a != "*") else _apply(b, _apply(a, x, y), z)
            found.setdefault(f"{x}{a}{y}{b}{z}", flat)
            found.setdefault(f"({x}{a}{y}){b}{z}", _apply(b, _apply(a, x, y), z))
            found.setdefault(f"{x}{a}({y}{b}{z})", _apply(a, x, _apply(b, y, z)))
    return found


def countdown_candidates(numbers: Sequence[int]) -> list[str]:
    """All candidate expressions over 2 or 3 of `numbers`, each used at most once.

    Forms `x o y`, `x o y o z`, `(x o y) o z` and `x o (y o z)` with o in + - *, written without
    spaces, e.g. "3*(5+7)". At most 18 + 162 = 180 strings for 3 distinct numbers; fewer with repeats.
    """
    return list(_candidates_with_values(numbers))


def countdown_solutions(numbers: Sequence[int], target: int) -> list[str]:
    """The candidates (see `countdown_candidates`) that evaluate to `target`."""
    return [expr for expr, value in _candidates_with_values(numbers).items() if value == target]


def full_expression_values(numbers: Sequence[int]) -> set[int]:
    """Values of the candidates that use all of `numbers` (the targets a puzzle may have)."""
    found = _candidates_with_values(numbers).items()
    return {value for expr, value in found if len(re.findall(r"\d+", expr)) == len(numbers)}


class _Parser:
    """Recursive-descent parser for integer expressions; never `eval`.

    Grammar: `expr := term (('+'|'-') term)*`, `term := factor ('*' factor)*`,
    `factor := INT | '(' expr ')'`. No unary minus and no other operators.
    """

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        for match in _TOKENS.finditer(text):
            if match.start() != pos:
                break
            self.tokens.append(match.group(1) or match.group(2))
            pos = match.end()
        if text[pos:].strip():
            raise ValueError(f"unexpected character {text[pos:].strip()[0]!r}")
        self.at = 0
        self.literals: list[str] = []

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise ValueError("expression ends too early")
        self.at += 1
        return token

    def parse(self) -> int:
        value = self._expr(depth=0)
        if self._peek() is not None:
            raise ValueError(f"unexpected {self._peek()!r}")
        return value

    def _expr(self, depth: int) -> int:
        value = self._term(depth)
        while self._peek() in ("+", "-"):
            op = self._take()
            value = _apply(op, value, self._term(depth))
        return value

    def _term(self, depth: int) -> int:
        value = self._factor(depth)
        while self._peek() == "*":
            self._take()
            value *= self._factor(depth)
        return value

    def _factor(self, depth: int) -> int:
        token = self._take()
        if token == "(":
            if depth >= 20:
                raise ValueError("brackets nested too deeply")
            value = self._expr(depth + 1)
            if self._take() != ")":
                raise ValueError("missing ')'")
            return value
        if not token.isdigit():
            raise ValueError(f"expected a number, got {token!r}")
        self.literals.append(token)
        return int(token)


def evaluate_expression(text: str) -> tuple[int, list[int]]:
    r"""Value of an integer expression over + - * ( ), and the integer literals it uses.

    LaTeX `\times`/`\cdot` and `$` are accepted. A literal with a leading zero ("03") is rejected.

    Raises:
        ValueError: the text is not such an expression (the message says why).
    """
    for latex, plain in _LATEX_OPS.items():
        text = text.replace(latex, plain)
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    parser = _Parser(text)
    value = parser.parse()
    if any(len(lit) > 1 and lit.startswith("0") for lit in parser.literals):
        raise ValueError("a number with a leading zero")
    return value, [int(lit) for lit in parser.literals]


def uses_only(literals: Sequence[int], numbers: Sequence[int]) -> bool:
    """True if `literals` is a sub-multiset of `numbers` (each given number used at most once)."""
    return not (Counter(literals) - Counter(numbers))


def grade_countdown(text: str, numbers: Sequence[int], target: int) -> Grade:
    """Grade a Countdown response: the last boxed expression must use only `numbers` and equal `target`.

    Concatenating digits (35 from 3 and 5) is not allowed: 35 is not among the numbers.
    """
    boxed = last_boxed(answer_region(text))
    if boxed is None or not boxed.strip():
        return Grade(False, None, "no_answer")
    prediction = boxed.strip()
    try:
        value, literals = evaluate_expression(prediction)
    except (ValueError, RecursionError):
        return Grade(False, prediction, "wrong")
    correct = value == target and uses_only(literals, numbers)
    return Grade(correct, prediction, "correct" if correct else "wrong")


def grade_countdown_task(text: str, task: Task) -> Grade:
    """`grade_countdown` with the numbers and target from `task.meta`."""
    return grade_countdown(text, task.meta["numbers"], int(task.meta["target"]))


def _universe() -> list[tuple[tuple[int, int, int], int, int]]:
    """Every puzzle `(sorted numbers, target, n_solutions)`, in a fixed order (1,319 in all)."""
    low, high = TARGET_RANGE
    puzzles = []
    for numbers in itertools.combinations_with_replacement(range(1, 10), 3):
        values = _candidates_with_values(numbers)
        for target in sorted(full_expression_values(numbers)):
            if low <= target <= high:
                puzzles.append((numbers, target, sum(v == target for v in values.values())))
    return puzzles


@functools.lru_cache(maxsize=4)
def countdown_splits(seed: int = 0) -> dict[str, tuple[Task, ...]]:
    """The shipped splits: `train`, `eval` and `eval-hard`, disjoint by (numbers as a multiset, target).

    The universe of puzzles is shuffled with `seed`; `eval` takes 128 hard and 128 easy (alternating),
    `eval-hard` the next 128 hard, `train` every remaining easy puzzle (474) plus hard ones for a
    `TRAIN_HARD_SHARE` of 25% (158), one hard after every three easy. Each puzzle shows its numbers
    in a seeded random order. Puzzles are uniform within a class (not weighted by how many
    expressions reach the target).
    """
    rng = random.Random(seed)
    puzzles = _universe()
    rng.shuffle(puzzles)
    hard = [p for p in puzzles if p[2] <= HARD_MAX_SOLUTIONS]
    easy = [p for p in puzzles if p[2] > HARD_MAX_SOLUTIONS]
    n = EVAL_PER_CLASS
    train_easy = easy[n:]
    n_hard = round(len(train_easy) * TRAIN_HARD_SHARE / (1 - TRAIN_HARD_SHARE))
    parts = {
        "eval": _interleave(hard[:n], easy[:n]),
        "eval-hard": hard[n:2 * n],
        "train": _mix(train_easy, hard[2 * n:2 * n + n_hard]),
    }
    return {split: tuple(_make_task(split, i, puzzle, rng) for i, puzzle in enumerate(rows))
            for split, rows in parts.items()}


def _interleave(first: list, second: list) -> list:
    return [p for pair in zip(first, second, strict=True) for p in pair]


def _mix(easy: list, hard: list) -> list:
    """All of `easy` and `hard`, spread evenly: hard j sits after (j + 1)·len(easy)/len(hard) easy ones."""
    every = len(easy) / max(1, len(hard))
    keyed = [(float(i), 0, p) for i, p in enumerate(easy)]
    keyed += [((j + 1) * every - 0.5, 1, p) for j, p in enumerate(hard)]
    return [p for _, _, p in sorted(keyed, key=lambda row: row[:2])]


Puzzle = tuple[tuple[int, int, int], int, int]
"""(sorted numbers, target, n_solutions)."""


def _make_task(split: str, index: int, puzzle: Puzzle, rng: random.Random) -> Task:
    numbers, target, n_solutions = puzzle
    shown = list(numbers)
    rng.shuffle(shown)
    return Task(
        id=f"countdown-{split}-{index:05d}",
        prompt=f"Use {' '.join(map(str, shown))} to make {target}",
        answer=countdown_solutions(shown, target)[0],
        family="tool",
        meta={"numbers": tuple(shown), "target": target, "n_solutions": n_solutions, "grader": "countdown",
              "difficulty": "hard" if n_solutions <= HARD_MAX_SOLUTIONS else "easy", "source": "countdown"},
    )
