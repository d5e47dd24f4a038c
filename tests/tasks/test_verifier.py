import threading
import time

import pytest

from tasks import grade_many
from tasks.verifier import VerifierPool
from tasks.verify_worker import CRASH_CANDIDATE, HANG_CANDIDATE, verify_job

HANGING_LATEX = r"\boxed{9^{9^{9}}}"
"""A real input on which math-verify 0.9 runs for minutes (sympy evaluates a 370-million-digit power)."""


def test_verify_job_in_process():
    assert verify_job(r"\frac{1}{2}", r"\boxed{0.5}")[0] == "correct"
    assert verify_job("2", "so it is 2") == ("correct", "2")
    assert verify_job("2", r"\boxed{3}")[0] == "wrong"
    assert verify_job("2", "nothing to see")[0] == "no_answer"


def test_hung_verification_is_killed_and_reported_as_timeout(hook_pool):
    restarts = hook_pool.restarts
    start = time.monotonic()
    results = hook_pool.verify([("1", r"\boxed{1}"), ("1", HANG_CANDIDATE), ("2", r"\boxed{2}")], timeout=1.0)
    assert results == [("correct", "1"), ("verifier_timeout", None), ("correct", "2")]
    assert hook_pool.restarts == restarts + 1
    assert time.monotonic() - start < 30      # one deadline plus a worker restart, not a hang


def test_crashed_worker_is_replaced_and_the_batch_finishes(hook_pool):
    results = hook_pool.verify([("1", CRASH_CANDIDATE), ("3", r"\boxed{3}")], timeout=5.0)
    assert results[0][0] == "verifier_error" and "died" in results[0][1]
    assert results[1] == ("correct", "3")


def test_real_parser_hang_becomes_verifier_timeout_from_a_thread(hook_pool):
    out = []
    thread = threading.Thread(target=lambda: out.extend(
        grade_many([HANGING_LATEX, r"\boxed{5}"], ["5", "5"], timeout=1.0, pool=hook_pool)))
    thread.start()
    thread.join(timeout=60)
    assert [g.status for g in out] == ["verifier_timeout", "correct"]
    assert out[0].is_verifier_failure and not out[0].correct and out[0].prediction == "9^{9^{9}}"


def test_concurrent_callers_share_one_worker_safely(hook_pool):
    results = {}

    def work(i):
        jobs = [(str(i), rf"\boxed{{{i}}}"), (str(i), rf"\boxed{{{i + 1}}}")]
        results[i] = hook_pool.verify(jobs, timeout=10.0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert {i: [s for s, _ in r] for i, r in results.items()} == {i: ["correct", "wrong"] for i in range(4)}


def test_pool_validates_arguments_and_closes():
    with pytest.raises(ValueError, match="at least 1"):
        VerifierPool(0)
    pool = VerifierPool(1)
    assert pool.verify([], timeout=1.0) == []
    with pytest.raises(ValueError, match="must be > 0"):
        pool.verify([("1", "1")], timeout=0)
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.verify([("1", "1")], timeout=1.0)


def test_a_worker_that_cannot_start_is_a_clear_error():
    pool = VerifierPool(1, env={"PYTHONHOME": "/nonexistent"})       # the interpreter cannot start
    with pytest.raises(RuntimeError, match="before it was ready"):
        pool.verify([("1", r"\boxed{1}")], timeout=5.0)
    pool.close()


def test_large_payloads_and_many_jobs_balance_over_workers():
    pool = VerifierPool(2, chunk_size=4)
    try:
        padded = r"\boxed{7}" + " " * 8000                          # about 8 KB per job
        jobs = [("7", padded)] * 6 + [(str(i), rf"\boxed{{{i}}}") for i in range(40)]
        results = pool.verify(jobs, timeout=30.0)
        assert [r[0] for r in results] == ["correct"] * 46
    finally:
        pool.close()


def test_shared_pool_is_per_process_and_a_forked_child_gets_its_own():
    import multiprocessing
    import os

    from tasks.verifier import shared_pool

    parent = shared_pool()
    assert shared_pool() is parent
    grade_many([r"\boxed{0.5}"], [r"\frac12"])                 # start the parent's workers
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=lambda: queue.put(
        (grade_many([r"\boxed{0.5}"], [r"\frac12"])[0].status, shared_pool() is not parent, os.getpid())))
    child.start()
    status, fresh, pid = queue.get(timeout=60)
    child.join(timeout=30)
    assert (status, fresh) == ("correct", True) and pid != os.getpid()


def test_memory_limit_turns_a_runaway_allocation_into_verifier_error():
    from tasks.verify_worker import ALLOC_CANDIDATE, MEMORY_ENV, TEST_HOOKS_ENV

    pool = VerifierPool(1, env={TEST_HOOKS_ENV: "1", MEMORY_ENV: "2048"})
    try:
        results = pool.verify([("1", ALLOC_CANDIDATE), ("1", r"\boxed{1}")], timeout=10.0)
        assert results[0] == ("verifier_error", "MemoryError: ") and results[1] == ("correct", "1")
        assert pool.restarts == 0                          # the worker survives its MemoryError
    finally:
        pool.close()
