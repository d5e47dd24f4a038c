"""Sandbox throughput and latency, side by side in one run (results go to BENCHMARKS.md).

Backends, each running the same tiny snippet at concurrency 1, 2 and 8 (threads):
  subprocess   plain `subprocess.run([python, "-c", code])`, no isolation (the baseline)
  local-cold   LocalSandbox(warm=False): a fresh bubblewrap sandbox + interpreter per run
  local-warm   LocalSandbox(): warm bubblewrap workers that fork per run
  http         `stare sandbox serve` in its own process, called with the `sandbox-fusion` client

The backends alternate in short batches (``--rounds``) so that load from other processes on the
machine affects all of them alike; throughput = runs / summed batch time, latencies pooled.

Usage:
  .venv/bin/python benchmarks/bench_sandbox.py [--runs 200] [--concurrency 1,2,8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SNIPPET = "print(sum(range(100)))"
PYTHON = "/usr/bin/python3"  # the interpreter the sandbox gives user code, so the baseline is fair


def measure(call, runs: int, concurrency: int) -> tuple[float, list[float]]:
    """Run ``call`` ``runs`` times on ``concurrency`` threads; (elapsed seconds, latencies)."""
    latencies: list[float] = []

    def one(_: int) -> None:
        start = time.perf_counter()
        out = call()
        latencies.append(time.perf_counter() - start)
        assert out.strip() == "4950", out

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(runs)))
    return time.perf_counter() - start, latencies


def interleaved(backends: dict, concurrency: int, rounds: int) -> dict[str, dict]:
    """Alternate the backends in ``rounds`` short batches, so load from other processes hits all alike."""
    totals = {name: [0.0, []] for name in backends}
    for call, _ in backends.values():
        call()  # warm-up (first connection, first fork)
    for _ in range(rounds):
        for name, (call, runs) in backends.items():
            elapsed, lat = measure(call, max(concurrency, runs // rounds), concurrency)
            totals[name][0] += elapsed
            totals[name][1] += lat
    out = {}
    for name, (elapsed, lat) in totals.items():
        lat.sort()
        out[name] = {"runs_per_s": len(lat) / elapsed, "p50_ms": 1e3 * statistics.median(lat),
                     "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]}
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(max_concurrency: int) -> tuple[subprocess.Popen, str]:
    """`stare sandbox serve` in its own process; returns it and its URL once it answers ping."""
    import httpx

    port = _free_port()
    cli = [sys.executable, "-c", "from training.cli import main; main()"]
    proc = subprocess.Popen([*cli, "sandbox", "serve", "--port", str(port),
                             "--max-concurrency", str(max_concurrency), "--workers", str(max_concurrency)],
                            stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/ping", timeout=1).json() == "pong":
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the sandbox server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs per cell (cold and baseline get half)")
    parser.add_argument("--concurrency", default="1,2,8")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved batches per backend")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    top = max(levels)

    from sandbox_fusion import RunCodeRequest, run_code

    from envs.sandbox import LocalSandbox

    warm = LocalSandbox(max_concurrency=top, workers=top)
    cold = LocalSandbox(max_concurrency=top, warm=False)
    server, url = start_server(top)
    backends = {
        "subprocess": (lambda: subprocess.run([PYTHON, "-c", SNIPPET], capture_output=True, text=True).stdout,
                       args.runs // 2),
        "local-cold": (lambda: cold.run(SNIPPET).stdout, args.runs // 2),
        "local-warm": (lambda: warm.run(SNIPPET).stdout, args.runs),
        "http": (lambda: run_code(RunCodeRequest(code=SNIPPET, language="python"), endpoint=url,
                                  max_attempts=1).run_result.stdout, args.runs),
    }
    rows = []
    try:
        for level in levels:
            for name, metrics in interleaved(backends, level, args.rounds).items():
                rows.append((name, level, metrics))
        cleaned = [w for w in warm._pool._idle if w.runs]   # per-run cleanup measured inside the supervisors
    finally:
        server.terminate()
        server.wait(timeout=10)
        warm.close()
        cold.close()
    base = {level: m["runs_per_s"] for name, level, m in rows if name == "subprocess"}
    print(f"cpu cores: {os.cpu_count()}; snippet: `{SNIPPET}`; isolation: {warm.isolation}; "
          f"user-code python: {PYTHON}\n")
    print("| backend | concurrency | runs/s | vs subprocess | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, level, m in rows:
        print(f"| {name} | {level} | {m['runs_per_s']:.0f} | {m['runs_per_s'] / base[level]:.2f}x | "
              f"{m['p50_ms']:.1f} | {m['p99_ms']:.1f} |")
    if cleaned:
        per_run = sum(w.cleanup_s for w in cleaned) / sum(w.runs for w in cleaned)
        print(f"\nlocal-warm cleanup after each run (kill leftovers; empty /tmp, /dev/shm, /dev/mqueue, "
              f"SysV IPC, key rings), timed in the supervisor: {1e3 * per_run:.2f} ms per run "
              f"over {sum(w.runs for w in cleaned)} runs")


if __name__ == "__main__":
    main()
