"""Two data-parallel processes (torchrun, gloo, `Accelerator(cpu=True)`) train like one process.

The worker (this file run as a script) plays *deterministic* episodes: each completion's tokens,
loss mask and reward are a function of (task, completion index) only, never of the rank or the
sampling seed, so one process and two processes see exactly the same data. It trains two steps
with STARE-O1 at `global_batch` scope, the gate forced on, and writes every step record and the
final parameters. The test compares the 2-process run with the 1-process run:

* H̄ (`train/entropy`), the gate and the STARE selection statistics: equal to 1e-6;
* `train/groups_kept` (the global dynamic-sampling cut);
* the parameters after two optimizer steps: equal within float tolerance (global token mean,
  gradient averaging compensated).

The `async` scenario plays each next step's first round in the rollout thread during the update
(`rollout.async_steps=1`); the episodes do not depend on the weights, so it must match too.

The `rank-balanced` scenario moves rows between the processes by real tokens before the update
(`train.balance_micro_batches`); with the global token mean and global-scope STARE the result must
not depend on where a row lands.

The `lopsided` scenario gives every prompt that process 0 would play zero reward variance, so
dynamic sampling drops all of rank 0's groups and refills: rank 0 trains on placeholder rows
while rank 1 holds the whole batch, and the result must still match one process.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

STEPS = 2
KEYS = ("train/entropy", "stare/gate_on", "stare/batch_entropy", "train/groups_kept", "train/acc",
        "train/response_length",
        "stare/positive_candidate_ratio", "stare/mean_weight", "stare/positive_reweight_ratio")


# ---------------------------------------------------------------------------------------------- worker

def _fake_player(tasks_in_order: list, *, lopsided: bool, vocab: int):
    """(tasks, group_size, seed) -> deterministic trajectories (see the module docstring)."""
    import random

    from agents.trajectory import Trajectory
    position = {t.id: i for i, t in enumerate(tasks_in_order)}

    def play(tasks, group_size, seed):
        out = []
        for task in tasks:
            digest = int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16)
            prompt = [3 + (digest >> k) % (vocab - 3) for k in range(4 + digest % 5)]
            flat = lopsided and position[task.id] % 2 == 0     # what rank 0 of 2 plays
            for j in range(group_size):
                rng = random.Random(f"{task.id}/{j}")
                n = rng.randint(3, 12)
                ids = [rng.randrange(3, vocab) for _ in range(n)]
                mask = [0 if 2 <= i < 4 else 1 for i in range(n)]       # two "tool" tokens
                reward = 0.0 if flat else float(sum(ids) % 2 == 0 if j else 1.0)
                out.append(Trajectory(prompt_ids=prompt, response_ids=ids, loss_mask=mask,
                                      turn_index=[0 if i < 2 else 1 for i in range(n)], reward=reward,
                                      num_turns=2, task_id=task.id,
                                      grade_status="correct" if reward else "wrong"))
        return out
    return play


def worker(model_dir: str, run_dir: str, out: str, scenario: str) -> None:
    """Train STEPS steps; process 0 writes {records, params} to `out` (a torch file)."""
    import torch

    from training.config import load_config
    from training.trainer import setup, train_step
    overrides = [f"model.path={model_dir}", f"log.run_dir={run_dir}", "log.progress=false",
                 "log.tensorboard=false", "log.save_model=false", "eval.at_end=false", "train.num_threads=1",
                 "data.train_limit=64", "data.shuffle=false", "rollout.group_size=4",
                 "rollout.prompts_per_step=4", "rollout.max_turns=2", "rollout.max_response_tokens=40",
                 "algo=stare-o1", "algo.stare.scope=global_batch", "algo.stare.top_ratio=0.2",
                 "algo.max_gen_rounds=4", "algo.overlong_buffer=0", "train.target_entropy=100",
                 "optim.lr=1e-2", "train.micro_batch_tokens=96", f"train.steps={STEPS}"]
    if scenario == "lopsided":
        overrides += ["train.fuse_on_policy=false"]
    if scenario == "async":      # the next step's round 0 plays in a thread during the update
        overrides += ["rollout.async_steps=1"]
    if scenario == "rank-balanced":   # rows move between processes by real tokens (training.rank_balance)
        overrides += ["train.balance_micro_batches=true", "train.sort_micro_batches=false"]
    run = setup(load_config(None, overrides))
    run.play_train = _fake_player(run.stream.tasks, lopsided=scenario == "lopsided",
                                  vocab=run.accelerator.unwrap_model(run.model).config.vocab_size)
    if run.prefetcher is not None:
        run.prefetcher.play = run.play_train
    records = [train_step(run, step) for step in range(1, STEPS + 1)]
    if run.accelerator.is_main_process:
        model = run.accelerator.unwrap_model(run.model)
        params = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.save({"records": records, "params": params,
                    "world": run.accelerator.num_processes}, out)
    run.accelerator.wait_for_everyone()


# ----------------------------------------------------------------------------------------------- tests

def _launch(tmp_path: Path, model_dir: Path, scenario: str, nproc: int) -> dict:
    import torch
    out = tmp_path / f"{scenario}-{nproc}.pt"
    script = [str(Path(__file__).resolve()), str(model_dir), str(tmp_path / f"runs-{nproc}"), str(out),
              scenario]
    if nproc == 1:
        cmd = [sys.executable, *script]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--standalone", *script]
    env = {**os.environ, "FORCE_CPU": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result = torch.load(out, weights_only=False)
    assert result["world"] == nproc
    return result


@pytest.mark.parametrize("scenario", ["balanced", pytest.param("lopsided", marks=pytest.mark.slow),
                                      pytest.param("async", marks=pytest.mark.slow),
                                      pytest.param("rank-balanced", marks=pytest.mark.slow)])
def test_two_processes_match_one(tmp_path, tiny_model_dir, scenario):
    import torch
    one = _launch(tmp_path, tiny_model_dir, scenario, 1)
    two = _launch(tmp_path, tiny_model_dir, scenario, 2)
    for a, b in zip(one["records"], two["records"], strict=True):
        assert a["stare/gate_on"] == 1.0                     # target 100 nats: the gate is on
        assert a["stare/positive_reweight_ratio"] > 0               # ω is active, so the parameters test it
        for key in KEYS:
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-7), (scenario, a["step"], key)
    if scenario == "lopsided":
        assert one["records"][0]["train/gen_rounds"] >= 2    # dynamic sampling refilled
    worst = max(float((one["params"][k] - two["params"][k]).abs().max()) for k in one["params"])
    moved = max(float((one["params"][k] - _initial(tiny_model_dir)[k]).abs().max()) for k in one["params"])
    assert moved > 1e-3                                      # the steps did change the model
    assert worst < 1e-4, f"parameters differ by {worst} after {STEPS} steps"
    torch.testing.assert_close(one["params"], two["params"], rtol=1e-4, atol=1e-4)


def _initial(model_dir: Path) -> dict:
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(model_dir)).state_dict()


def test_two_processes_need_whole_prompts(make_cfg):
    from training.sampling import share
    assert share(64, 8) == 8
    with pytest.raises(ValueError, match="multiples of the process count"):
        share(6, 4)


def test_placeholder_rows_add_no_tokens():
    import torch

    from agents.trajectory import Trajectory
    from training.batch import collate, placeholder_rows
    batch = collate([Trajectory(prompt_ids=[5, 6], response_ids=[7, 8, 9], loss_mask=[1, 0, 1])],
                    torch.tensor([0.5]), pad_id=0)
    grown = placeholder_rows(batch, 3)
    assert grown.size == 3 and placeholder_rows(batch, 1) is batch
    assert grown.loss_mask.tolist() == [[1, 0, 1], [0, 0, 0], [0, 0, 0]]
    assert grown.advantages.tolist() == [0.5, 0.0, 0.0]
    assert torch.equal(grown.input_ids[2], batch.input_ids[0])
    assert torch.equal(grown.response_ids, grown.input_ids[:, batch.prompt_width:])


if __name__ == "__main__":
    worker(*sys.argv[1:5])
