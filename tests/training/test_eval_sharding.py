"""Evaluation sharded across data-parallel processes gives the one-process metrics.

The worker (this file run as a script) evaluates the tiny model on two sets with a *deterministic*
player: each episode's tokens and grade are a function of (problem, sample index) only. Set "five"
has 5 problems (blocks of 2 and 3 under two processes), set "one" a single problem (process 1 has
no block: it plays a placeholder group, discarded, and forwards a placeholder row). The test checks
that 2 processes (torchrun, gloo) report the same avg@k, pass@k, entropy, lengths and tool calls as
1 process, that every problem of "five" was played exactly once, with the one-process env seeds,
and that every process played every set (so a policy with a collective in `generate` stays in step).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

K = 3
SETS = {"five": [f"p{i}" for i in range(5)], "one": ["solo"]}


def _fake_player(vocab: int, log: list, rank: int):
    """(tasks, k, seed) -> deterministic trajectories; logs (problem, sample, env seed) per episode."""
    import random

    from agents.trajectory import Trajectory

    def play(tasks, k, seed):
        out = []
        for t, task in enumerate(tasks):
            digest = int(hashlib.sha256(task.encode()).hexdigest()[:8], 16)
            prompt = [3 + (digest >> s) % (vocab - 3) for s in range(3 + digest % 4)]
            for j in range(k):
                log.append((rank, task, j, seed + t * k + j))
                rng = random.Random(f"{task}/{j}")
                n = rng.randint(2, 9)
                ids = [rng.randrange(3, vocab) for _ in range(n)]
                mask = [0 if i == 1 else 1 for i in range(n)]           # one injected token
                correct = rng.random() < 0.4
                out.append(Trajectory(prompt_ids=prompt, response_ids=ids, loss_mask=mask,
                                      logprobs=[0.0] * n, turn_index=[0] * n, segment=[1] * n,
                                      grade_status="correct" if correct else "wrong",
                                      metrics={"tool_calls": float(j % 2)}))
        return out
    return play


def worker(model_dir: str, out: str) -> None:
    """Evaluate SETS; process 0 writes {metrics, episodes played by every process} as JSON."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from training import distributed
    from training.evaluate import evaluate

    torch.set_num_threads(1)
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    log: list = []
    play = _fake_player(model.config.vocab_size, log, distributed.rank())
    metrics = evaluate(play, model, SETS, k=K, seed=11, pad_id=0, temperature=1.0, token_budget=40)
    played = [row for part in distributed.gather_objects(log) for row in part]
    if distributed.rank() == 0:
        Path(out).write_text(json.dumps({"metrics": metrics, "played": played,
                                         "world": distributed.world_size()}))
    if dist.is_initialized():
        dist.destroy_process_group()


def _launch(tmp_path: Path, model_dir: Path, nproc: int) -> dict:
    out = tmp_path / f"eval-{nproc}.json"
    script = [str(Path(__file__).resolve()), str(model_dir), str(out)]
    if nproc == 1:
        cmd = [sys.executable, *script]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--standalone", *script]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result = json.loads(out.read_text())
    assert result["world"] == nproc
    return result


def test_two_process_evaluation_matches_one(tmp_path, tiny_model_dir):
    one = _launch(tmp_path, tiny_model_dir, 1)
    two = _launch(tmp_path, tiny_model_dir, 2)
    assert set(one["metrics"]) == set(two["metrics"])
    for key, value in one["metrics"].items():
        assert two["metrics"][key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert one["metrics"]["eval/five/num_problems"] == 5.0
    assert 0 < one["metrics"]["eval/five/entropy"] < 10
    # each problem of "five" played once across processes, each episode with the one-process env seed
    five = sorted(tuple(row[1:]) for row in two["played"] if row[1].startswith("p"))
    assert five == sorted(tuple(row[1:]) for row in one["played"] if row[1].startswith("p"))
    assert len(five) == K * 5
    # every process played a group of "one" (rank 1's is a discarded placeholder)
    solo = {(row[0], row[1]) for row in two["played"] if row[1] == "solo"}
    assert sorted(solo) == [(0, "solo"), (1, "solo")]


def test_shard_bounds_cover_every_problem_once():
    from training.evaluate import shard_bounds
    for n in range(0, 9):
        for world in range(1, 5):
            blocks = [shard_bounds(n, r, world) for r in range(world)]
            assert [i for lo, hi in blocks for i in range(lo, hi)] == list(range(n))
            assert max(hi - lo for lo, hi in blocks) - min(hi - lo for lo, hi in blocks) <= 1
    assert shard_bounds(5, 1, 2) == (2, 5)
    with pytest.raises(ValueError, match="rank"):
        shard_bounds(5, 2, 2)


def test_metrics_by_hand_in_one_process(tiny_model):
    """avg@k / pass@k / lengths from the summed form, checked against hand-computed numbers."""
    from agents.trajectory import Trajectory
    from training.evaluate import evaluate_set

    grades = [1, 0, 0] + [0, 0, 0]            # problem a: 1 of 3, problem b: 0 of 3

    def play(tasks, k, seed):
        return [Trajectory(prompt_ids=[5, 6], response_ids=[7, 8, 9], loss_mask=[1, 0, 1],
                           grade_status="correct" if g else "wrong", metrics={"tool_calls": 2.0})
                for g in grades]
    out = evaluate_set(play, tiny_model, ["a", "b"], k=3, seed=0, pad_id=0, temperature=1.0, token_budget=64)
    assert out["avg@3"] == pytest.approx(1 / 6) and out["pass@3"] == pytest.approx(1 / 2)
    assert out["response_length"] == 2.0 and out["tool_calls"] == 2.0 and out["num_problems"] == 2.0


if __name__ == "__main__":
    worker(*sys.argv[1:3])
