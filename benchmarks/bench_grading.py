"""Gradings per second: the worker pool (deadline per verification) vs math-verify in-process.

    .venv/bin/python benchmarks/bench_grading.py [--n 2000] [--workers 2]

Each mode grades its own freshly drawn mixed batch (same composition, different seed, so no cache
carries over): plain integers, equivalent LaTeX forms, 5 KB chains of thought, answers without a
box, tuples and intervals, wrong answers and no answer at all. Modes:

- pool: `tasks.grade_many` as the trainer calls it (fast paths + worker pool with deadlines);
- pool, math-verify only: every response through the pool (no fast path);
- in-process: the same extraction and fast paths, math-verify in the calling thread with its own
  SIGALRM timeouts (main thread only; a hang blocks the caller; what the reference does);
- in-process, math-verify only.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from tasks import grade_many
from tasks.extract import extract_answer
from tasks.verifier import VerifierPool

FILLER = "Let us check the computation once more. " * 128  # about 5 KB of reasoning


def mixed_batch(n: int, seed: int) -> tuple[list[str], list[str]]:
    """`n` (response, answer) pairs of several kinds, drawn with `seed`."""
    rng = random.Random(seed)
    texts, answers = [], []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        kind = i % 20
        if kind < 8:          # 40%: plain integers, right or wrong (fast path)
            text, answer = rf"So the total is \boxed{{{a * b + (kind % 2)}}}.", str(a * b)
        elif kind < 11:       # 15%: equivalent forms (math-verify)
            f = Fraction(a, b)
            text, answer = rf"Hence \boxed{{{float(f):.15g}}}", rf"\frac{{{f.numerator}}}{{{f.denominator}}}"
        elif kind < 13:       # 10%: a 5 KB chain of thought ending in a \dfrac
            text, answer = FILLER + rf"\boxed{{\dfrac{{{a}}}{{{b}}}}}", rf"{a}/{b}"
        elif kind < 15:       # 10%: no box, the verifier searches the tail
            text, answer = f"After simplifying we get {a} + {b} = {a + b}", str(a + b)
        elif kind < 17:       # 10%: tuples and intervals
            low, high = sorted((a, b + 1000))
            text, answer = rf"\boxed{{({low}, {high}]}}", rf"({low},{high}]"
        elif kind < 18:       # 5%: wrong LaTeX answer
            text, answer = rf"\boxed{{\sqrt{{{a}}}}}", rf"\sqrt{{{a + 1}}}"
        else:                 # 10%: no answer at all
            text, answer = "I am not sure how to continue." + " " * (kind - 18), str(a)
        texts.append(text)
        answers.append(answer)
    return texts, answers


class InProcessVerifier:
    """math-verify in the calling thread with its own SIGALRM timeouts (the naive way)."""

    def verify(self, jobs: Sequence[tuple[str, str]], *, timeout: float) -> list[tuple[str, str | None]]:
        from math_verify import parse, verify

        out: list[tuple[str, str | None]] = []
        seconds = max(1, int(timeout))
        for gold, candidate in jobs:
            predicted = parse(candidate, parsing_timeout=seconds)
            if not predicted:
                out.append(("no_answer", None))
                continue
            gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=seconds)
            ok = verify(gold_parsed, predicted, timeout_seconds=seconds)
            out.append(("correct" if ok else "wrong", str(predicted[-1])))
        return out


def math_verify_only(texts: list[str], answers: list[str], verifier) -> list[tuple[str, str | None]]:
    """Every response through the verifier, skipping the fast paths."""
    jobs = []
    for text, answer in zip(texts, answers, strict=True):
        candidate = extract_answer(text).candidate
        jobs.append((answer, candidate if candidate is not None else ""))
    return verifier.verify(jobs, timeout=5.0)


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="responses per mode")
    parser.add_argument("--workers", type=int, default=2, help="pool worker processes")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    pool = VerifierPool(args.workers)
    cold, _ = timed(lambda: grade_many([r"\boxed{0.5}"], [r"\frac12"], pool=pool))
    grade_many(*mixed_batch(200, seed=99), pool=pool)          # warm both workers
    in_process = InProcessVerifier()
    in_process.verify([("1", r"\boxed{1}")], timeout=5.0)       # import math-verify

    modes = {
        "pool (fast paths + math-verify workers, 5 s deadline each)":
            lambda t, a: grade_many(t, a, pool=pool),
        "pool, math-verify only": lambda t, a: math_verify_only(t, a, pool),
        "in-process (fast paths + math-verify, SIGALRM timeouts)":
            lambda t, a: grade_many(t, a, pool=in_process),
        "in-process, math-verify only": lambda t, a: math_verify_only(t, a, in_process),
    }
    print(f"cores: {os.cpu_count()}, workers: {args.workers}, responses per mode: {args.n}")
    print(f"pool cold start (spawn workers, import math-verify, first grade): {cold:.2f} s")
    rates = {}
    for seed, (name, fn) in enumerate(modes.items()):
        texts, answers = mixed_batch(args.n, seed=seed)
        seconds, result = timed(lambda fn=fn, texts=texts, answers=answers: fn(texts, answers))
        statuses = Counter(r.status if hasattr(r, "status") else r[0] for r in result)
        rates[name] = args.n / seconds
        print(f"{name:<62} {rates[name]:8.0f} gradings/s  {dict(sorted(statuses.items()))}")
    names = list(modes)
    print(f"pool / in-process (end to end): {rates[names[0]] / rates[names[2]]:.2f}x; "
          f"math-verify only: {rates[names[1]] / rates[names[3]]:.2f}x; restarts: {pool.restarts}")
    pool.close()


if __name__ == "__main__":
    main()
