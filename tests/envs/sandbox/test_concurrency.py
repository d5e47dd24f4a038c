"""Many threads at once: correct results, bounded concurrency (queueing, not failure)."""

import threading
from concurrent.futures import ThreadPoolExecutor

from envs.sandbox import LocalSandbox, RunStatus


def test_many_threads_get_their_own_results(box):
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: box.run(f"print({i} * {i})", stdin=""), range(48)))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(48)]
    assert all(r.status is RunStatus.Finished for r in results)


def test_concurrency_is_bounded_and_excess_callers_queue():
    with LocalSandbox(isolation="bwrap", max_concurrency=2, workers=2) as box:
        # runs are isolated from each other, so count the workers in use from the host side
        active, peak, lock = 0, 0, threading.Lock()
        real_run = box._pool.acquire

        def counting_acquire():
            nonlocal active, peak
            worker = real_run()
            with lock:
                active += 1
                peak = max(peak, active)
            return worker

        real_release = box._pool.release

        def counting_release(worker):
            nonlocal active
            with lock:
                active -= 1
            real_release(worker)

        box._pool.acquire, box._pool.release = counting_acquire, counting_release
        with ThreadPoolExecutor(8) as pool:
            code = "import time; time.sleep(0.05); print('ok')"
            results = list(pool.map(lambda i: box.run(code), range(16)))
        assert all(r.stdout == "ok\n" for r in results)
        assert peak == 2


def test_a_worker_outlives_the_short_lived_thread_that_needed_it():
    # bwrap's --die-with-parent fires when the *thread* that forked it exits, so workers must be forked on
    # the sandbox's own long-lived thread, not on the caller's
    with LocalSandbox(isolation="bwrap", max_concurrency=1, workers=0) as box:
        out = []
        t = threading.Thread(target=lambda: out.append(box.run("print(1)")))
        t.start()
        t.join()
        (worker,) = box._pool._idle
        assert out[0].stdout == "1\n" and worker.alive
        assert box.run("print(2)").stdout == "2\n" and worker.runs == 2


def test_cold_mode_starts_a_fresh_sandbox_per_run():
    with LocalSandbox(isolation="bwrap", warm=False, max_concurrency=2) as box:
        assert box.run("print(5)").stdout == "5\n"
        assert box._pool._idle == []
