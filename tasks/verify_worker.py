"""The verifier worker: a child process that runs math-verify for `tasks.verifier.VerifierPool`.

Run as a script (`python verify_worker.py READ_FD WRITE_FD`), never imported by the parent's grading
path, so the child does not re-import the user's `__main__` (the trap of multiprocessing's spawn).
It imports only the standard library, math-verify and, when installed, mathruler (the authors'
grading mode). math-verify's own SIGALRM timeouts are off: they silently turn a slow parse into
"no answer"; the parent kills this process instead.

Protocol (pickled tuples over two pipes): the worker sends `("ready",)` once math-verify is
imported, then answers each job `(gold, candidate)` or `(gold, candidate, boxed)` of every received
list with one `(status, prediction)` message, in order. EOF on the input pipe ends the worker.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
import threading
import time
from typing import Any

MEMORY_ENV = "STARE_VERIFY_MEMORY_MB"
"""Address-space limit of a worker in MiB (default 4096; 0 = none): `10^{10^{10}}` fails, not the machine."""
TEST_HOOKS_ENV = "STARE_VERIFY_TEST_HOOKS"
"""Set to "1" in a worker's environment to honour the test candidates below (tests only)."""
HANG_CANDIDATE = "\\stare@hang"
"""Test hook: the worker sleeps forever on this candidate (simulates a hung verification)."""
CRASH_CANDIDATE = "\\stare@crash"
"""Test hook: the worker exits at once on this candidate (simulates a crashed verification)."""
ALLOC_CANDIDATE = "\\stare@alloc"
"""Test hook: the worker allocates 8 GiB on this candidate (checks the memory limit)."""


@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> list[Any]:
    from math_verify import parse

    return parse(text, parsing_timeout=None)


def verify_job(gold: str, candidate: str) -> tuple[str, str | None]:
    r"""Verify one candidate against a gold answer with math-verify; no timeout of its own.

    Args:
        gold: The reference answer as LaTeX, e.g. "\frac{1}{2}" (it is parsed as `\boxed{gold}`).
        candidate: Text to parse for the prediction, e.g. "\boxed{0.5}" or the tail of a response.

    Returns:
        `(status, prediction)`: status "correct", "wrong" or "no_answer" (nothing parseable), and the
        matched prediction string (None when nothing was parsed).
    """
    from math_verify import verify

    predicted = _parse(candidate)
    if not predicted:
        return "no_answer", None
    prediction = str(predicted[-1]) if len(predicted) > 1 else str(predicted[0])
    ok = verify(_parse("\\boxed{" + gold + "}"), predicted, timeout_seconds=None)
    return ("correct" if ok else "wrong"), prediction


def authors_job(gold: str, candidate: str, boxed: str) -> tuple[str, str | None]:
    r"""The authors' math check: math-verify on the candidate, OR on the bare boxed content, OR mathruler.

    STARE's reward (`math_stare.compute_score_answer`) accepts an answer if any of three checks
    passes: math-verify on the answer text (`verify_job(gold, candidate)`), the same on the content of
    the last box (`verify_job(gold, boxed)`: "10 dollars" parses as 10 without its box), and
    `mathruler.grader.grade_answer(boxed, gold)` (mathd and sympy normalization: "1.5e3" = 1500).

    Args:
        gold: The reference answer as LaTeX.
        candidate: Text math-verify searches, e.g. "\boxed{0.5}".
        boxed: Content of the last box, e.g. "0.5".

    Returns:
        `(status, prediction)` as `verify_job`; "correct" when any check passes.
    """
    from mathruler.grader import grade_answer

    status, prediction = verify_job(gold, candidate)
    if status == "correct":
        return status, prediction
    if verify_job(gold, boxed)[0] == "correct" or grade_answer(boxed, gold):
        return "correct", boxed
    return status, prediction


def _run_job(job: tuple[str, ...], hooks: bool) -> tuple[str, str | None]:
    gold, candidate = job[0], job[1]
    if hooks and candidate == HANG_CANDIDATE:
        time.sleep(1e6)
    if hooks and candidate == CRASH_CANDIDATE:
        os._exit(3)
    try:
        if hooks and candidate == ALLOC_CANDIDATE:
            bytearray(8 << 30)
        return authors_job(gold, candidate, job[2]) if len(job) > 2 else verify_job(gold, candidate)
    except Exception as err:  # noqa: BLE001 - any verifier bug becomes a reported status
        return "verifier_error", f"{type(err).__name__}: {err}"[:500]


def _limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        import resource

        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _exit_when_orphaned(parent: int) -> None:
    """A hung job never reads EOF; this thread ends the process once the parent is gone."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def main(argv: list[str]) -> None:
    """Serve jobs until the parent closes the pipe."""
    from multiprocessing.connection import Connection

    inbox = Connection(int(argv[1]), writable=False)
    outbox = Connection(int(argv[2]), readable=False)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    logging.disable(logging.WARNING)  # math-verify warns on every call with timeouts off
    _limit_memory(int(os.environ.get(MEMORY_ENV, "4096")))
    import math_verify  # noqa: F401 - import before "ready", so job deadlines exclude it
    if importlib.util.find_spec("mathruler") is not None:
        import mathruler.grader  # noqa: F401 - likewise, for the authors' grading mode

    hooks = os.environ.get(TEST_HOOKS_ENV) == "1"
    outbox.send(("ready",))
    while True:
        try:
            jobs = inbox.recv()
        except (EOFError, OSError):
            return
        for job in jobs:
            outbox.send(_run_job(job, hooks))


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)  # our folder must not shadow installed modules
    main(sys.argv)
