"""A served env vs the same env in-process: env steps per second, side by side in one run (BENCHMARKS.md).

Arms, on the same scripted episodes (reset, one tool-call turn, one answer turn):
  in-process  `envs.make(ID)`
  served      `envs.make("openenv/<url>")` against `stare envs serve ID` in its own process (WebSocket,
              one `call_tool` per tool call, the answer graded server-side)

Envs: `stare/Lookup-v0` (a pure-Python tool: the protocol's overhead alone) and `stare/PythonTool-v0`
(the local sandbox: overhead next to real tool work). The arms alternate in rounds so machine load hits
both alike; steps/s = env.step calls / summed time (reset excluded), latencies pooled.

Usage:
  .venv/bin/python benchmarks/bench_openenv.py [--episodes 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

import envs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {
    "stare/Lookup-v0": ('<tool_call>{"name": "lookup", "arguments": {"name": "Ada Park"}}</tool_call>',
                        "\\boxed{B214}"),
    "stare/PythonTool-v0": ('<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(6*7)"}}'
                            "</tool_call>", "\\boxed{42}"),
}


def serve(env_id: str) -> tuple[subprocess.Popen, str]:
    """Start `stare envs serve env_id` on a free loopback port; returns the process and its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-c", "from training.cli import main; main()", "envs", "serve", env_id,
               "--port", str(port)]
    process = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):  # at most 120 s
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise TimeoutError(f"stare envs serve {env_id} did not start")


def episodes(env, script: tuple[str, str], n: int) -> tuple[float, list[float]]:
    """Play `n` scripted episodes; (seconds spent in step, per-step latencies)."""
    latencies = []
    for i in range(n):
        env.reset(seed=i)
        for action in script:
            start = time.perf_counter()
            env.step(action)
            latencies.append(time.perf_counter() - start)
    return sum(latencies), latencies


def bench(env_id: str, n: int, rounds: int) -> dict[str, dict[str, float]]:
    """Both arms on one env, alternating rounds of n/rounds episodes."""
    process, url = serve(env_id)
    arms = {"in-process": envs.make(env_id), "served": envs.make(f"openenv/{url}", timeout=30)}
    totals = {name: [0.0, []] for name in arms}
    try:
        for env in arms.values():  # warm-up: imports, sandbox pool, connection
            episodes(env, SCRIPTS[env_id], 2)
        for _ in range(rounds):
            for name, env in arms.items():
                seconds, latencies = episodes(env, SCRIPTS[env_id], max(1, n // rounds))
                totals[name][0] += seconds
                totals[name][1] += latencies
    finally:
        for env in arms.values():
            env.close()
        process.terminate()
        process.wait(timeout=30)
    return {name: {"steps_per_s": len(lat) / sec, "p50_ms": 1e3 * statistics.median(lat),
                   "p99_ms": 1e3 * sorted(lat)[int(0.99 * (len(lat) - 1))]}
            for name, (sec, lat) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    results = {env_id: bench(env_id, args.episodes, args.rounds) for env_id in SCRIPTS}
    load = os.getloadavg()[0]
    print(f"cpu cores: {os.cpu_count()}; load avg: {load:.1f}; episodes per arm: {args.episodes}\n")
    print("| env | arm | steps/s | vs in-process | p50 ms | p99 ms |")
    print("|---|---|---:|---:|---:|---:|")
    for env_id, arms in results.items():
        base = arms["in-process"]["steps_per_s"]
        for name, r in arms.items():
            print(f"| {env_id} | {name} | {r['steps_per_s']:.0f} | {r['steps_per_s'] / base:.2f}x | "
                  f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
