"""One-step off-policy rollouts (`rollout.async_steps=1`): lag, prompt order, determinism, exact resume."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
import torch
from safetensors.torch import load_file

from training.async_rollout import HFSnapshot, RolloutPrefetcher, make_prefetcher
from training.checkpoint import latest_checkpoint


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------ the parts

def test_snapshot_keeps_the_weights_of_launch_time_while_the_source_changes(tiny_model):
    """The round plays with the weights of `launch`, whatever the update does meanwhile."""
    snapshot = HFSnapshot(tiny_model)
    started, release = threading.Event(), threading.Event()
    seen = []

    def play(tasks, group_size, seed):
        started.set()
        release.wait(5)          # the "update" below runs now
        seen.append(snapshot.model.model.embed_tokens.weight.detach().clone())
        return [f"episode {t}" for t in tasks for _ in range(group_size)]

    prefetcher = RolloutPrefetcher(play, lambda: snapshot.sync(tiny_model))
    before = tiny_model.model.embed_tokens.weight.detach().clone()
    prefetcher.launch(2, ["a", "b"], 3, seed=7)
    assert started.wait(5)
    with torch.no_grad():
        tiny_model.model.embed_tokens.weight.add_(1.0)       # an optimizer step in the main thread
    release.set()
    round_ = prefetcher.take(2)
    assert round_.step == 2 and round_.num_tasks == 2 and len(round_.trajectories) == 6
    assert torch.equal(seen[0], before)                      # not the updated weights
    prefetcher.launch(3, ["c"], 1, seed=8)                   # the next launch takes the new weights
    release.set()
    prefetcher.take(3)
    assert torch.equal(seen[1], tiny_model.model.embed_tokens.weight)
    assert snapshot.pushes == 2
    prefetcher.close()


def test_prefetcher_surfaces_the_rollout_threads_error_and_the_wrong_step():
    def boom(tasks, group_size, seed):
        raise RuntimeError("sandbox down")

    prefetcher = RolloutPrefetcher(boom, lambda: None)
    prefetcher.launch(5, ["a"], 2, seed=0)
    with pytest.raises(RuntimeError, match="sandbox down"):
        prefetcher.take(5)
    ok = RolloutPrefetcher(lambda tasks, n, seed: [], lambda: None)
    ok.launch(5, [], 2, seed=0)
    with pytest.raises(RuntimeError, match="belongs to step 5, not 6"):
        ok.take(6)
    with pytest.raises(RuntimeError, match="still pending"):
        ok.launch(7, [], 2, seed=0)
    ok.close()


def test_hf_snapshot_refuses_sharded_training(make_cfg, tiny_model, tokenizer):
    class Sharded:
        distributed_type = "DistributedType.FSDP"

    cfg = make_cfg("rollout.async_steps=1")
    with pytest.raises(ValueError, match="rollout.engine=vllm"):
        make_prefetcher(cfg, Sharded(), tiny_model, tokenizer, None, lambda policy: None)


def test_async_steps_accepts_only_zero_or_one(make_cfg):
    with pytest.raises(ValueError, match="rollout.async_steps must be 0"):
        make_cfg("rollout.async_steps=2")


# ------------------------------------------------------------------------------------------ the trainer

def test_async_run_plays_the_same_prompts_with_a_one_step_lag(make_cfg, run_training, tmp_path):
    """Same prompts and seeds as the synchronous run; from step 2 on the episodes lag the weights."""
    common = ["algo=stare-o1", "algo.stare.target_entropy=100", "train.steps=4", "optim.lr=3e-2",
              "algo.dynamic_sampling=true", "rollout.prompts_per_round=2"]
    sync = run_training(make_cfg(*common, "log.name=sync"))
    lagged = run_training(make_cfg(*common, "log.name=lagged", "rollout.async_steps=1"))
    rs, ra = _records(tmp_path / "runs" / "sync"), _records(tmp_path / "runs" / "lagged")
    assert [r["step"] for r in ra] == [1, 2, 3, 4]
    # step 1 has nothing to prefetch: identical to the synchronous run
    for key in ("train/reward", "train/entropy", "train/response_length"):
        assert rs[0][key] == ra[0][key], key
    assert ra[0]["time/prefetch_s"] == 0.0 and all(r["time/prefetch_s"] > 0 for r in ra[1:])
    # from step 2 the behaviour policy is one optimizer step behind: the measured mismatch shows it
    assert rs[1]["rollout/kl"] < 1e-6
    assert all(r["rollout/kl"] > 1e-4 for r in ra[1:])
    assert lagged["final"]["step"] == sync["final"]["step"] == 4


def test_async_prompt_order_equals_the_synchronous_order(make_cfg, tmp_path):
    """Every round takes the same prompts from the cursor as the synchronous loop (refills included)."""
    from tests.training.conftest import parity_rewards
    from training.trainer import fit, setup

    def task_log(cfg):
        run = setup(cfg)
        seen: list[tuple[int, tuple[str, ...]]] = []

        def recording(play):
            def wrapped(tasks, group_size, seed):
                seen.append((seed, tuple(t.id for t in tasks)))
                return play(tasks, group_size, seed)
            return parity_rewards(wrapped)
        run.play_train = recording(run.play_train)
        if run.prefetcher is not None:
            run.prefetcher.play = recording(run.prefetcher.play)
        fit(run)
        return sorted(seen)

    common = ["train.steps=4", "algo.dynamic_sampling=true", "rollout.prompts_per_round=1",
              "algo.max_gen_rounds=3"]
    assert task_log(make_cfg(*common, "log.name=a")) == task_log(make_cfg(*common, "log.name=b",
                                                                          "rollout.async_steps=1"))


def _crash_after(run_dir, dest, step):
    """A copy of a finished run as it was when it stopped right after the checkpoint of `step`."""
    shutil.copytree(run_dir, dest)
    for path in (dest / "checkpoints").iterdir():
        if path.name != f"step_{step:06d}":
            shutil.rmtree(path)
    for name in ("metrics.jsonl", "eval.jsonl"):
        lines = (dest / name).read_text().splitlines()
        (dest / name).write_text("".join(line + "\n" for line in lines if json.loads(line)["step"] <= step))


def test_async_run_is_deterministic_and_resumes_exactly(make_cfg, run_training, tmp_path):
    """Straight 4 steps == stopped after step 2 + resumed (the prefetched round is in the checkpoint)."""
    common = ["algo=stare-o1", "algo.stare.target_entropy=100", "rollout.async_steps=1", "eval.every=2",
              "optim.lr=3e-2", "train.steps=4", "log.save_every=2", "log.keep_checkpoints=2"]
    runs = tmp_path / "runs"
    run_training(make_cfg(*common, "log.name=straight"))
    run_training(make_cfg(*common, "log.name=again"))
    _crash_after(runs / "straight", runs / "resumed", 2)
    state = json.loads((latest_checkpoint(runs / "resumed") / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["prefetched"]["step"] == 3 and state["prefetched"]["trajectories"]
    run_training(make_cfg(*common, "log.name=resumed"), resume=True)
    records = {name: _records(runs / name) for name in ("straight", "again", "resumed")}
    assert [r["step"] for r in records["resumed"]] == [1, 2, 3, 4]
    for x, y, z in zip(records["straight"], records["again"], records["resumed"], strict=True):
        for key in ("train/reward", "train/entropy", "rollout/kl", "actor/grad_norm"):
            assert x[key] == y[key] == z[key], (x["step"], key)
    a = load_file(str(latest_checkpoint(runs / "straight") / "model.safetensors"))
    b = load_file(str(latest_checkpoint(runs / "resumed") / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_prefetched_checkpoint_needs_async_to_resume(make_cfg, run_training, tmp_path):
    common = ["train.steps=4", "log.save_every=2", "log.keep_checkpoints=2"]
    run_training(make_cfg(*common, "rollout.async_steps=1", "log.name=done"))
    _crash_after(tmp_path / "runs" / "done", tmp_path / "runs" / "r", 2)
    with pytest.raises(ValueError, match="resume with rollout.async_steps=1"):
        run_training(make_cfg(*common, "log.name=r"), resume=True)


def test_vllm_snapshot_pushes_at_launch_and_never_while_the_round_plays(tiny_model):
    """With engine=vllm the round plays on the weights pushed at launch; the push resumes afterwards."""
    from training.async_rollout import VLLMSnapshot
    from training.rollout_engine import SyncedVLLMPolicy

    class Engine:
        def __init__(self):
            self.loads = []

        def load_weights(self, state):
            self.loads.append(state["model.embed_tokens.weight"].clone())

        def generate(self, prompts, sampling):
            return []

    engine = Engine()
    policy = SyncedVLLMPolicy(engine, tiny_model)
    optimizer = torch.optim.SGD(tiny_model.parameters(), lr=1.0)
    snapshot = VLLMSnapshot(policy)

    def step():
        tiny_model.model.embed_tokens.weight.grad = torch.ones_like(tiny_model.model.embed_tokens.weight)
        optimizer.step()

    snapshot.hold()                       # launch: push the current weights, then freeze
    assert len(engine.loads) == 1
    step()                                # the update runs while the round plays ...
    policy.generate([[1]], None)          # ... and the round's later turns push nothing
    assert len(engine.loads) == 1
    snapshot.release()                    # the round is done: the main thread's next generate pushes
    policy.generate([[1]], None)
    assert len(engine.loads) == 2
    assert torch.equal(engine.loads[1], tiny_model.model.embed_tokens.weight)
    policy.close()
