"""The vLLM weight push under sharded training: the engine gets the whole weights on every process.

Run as a script under `torchrun --nproc_per_node 2` (gloo, CPU) the worker shards the tiny Qwen2
model and pushes through `SyncedVLLMPolicy` into a fake engine (anything with `load_weights`):

* **FSDP2**: `fully_shard` per decoder layer and at the root, on a CPU device mesh;
* **FSDP1**: `FullyShardedDataParallel(device_id=cpu)` wrapping each decoder layer, the root given;
* **ZeRO-3** (slow; needs deepspeed): `deepspeed.initialize` on DeepSpeed's CPU accelerator, the
  unwrapped module given, as the trainer does.

For each it records, per process, whether the parameters really are sharded, the largest
difference between the pushed tensors and the unsharded reference (the same checkpoint loaded
without sharding) before any step, and after one SGD step, the largest difference from a
single-process model that took the same step on the same data (every process feeds the same
batch, so the data-parallel gradient average is the single-process gradient). The first push
comes before the first training forward, which is where gathering from the wrong module breaks
FSDP1 (its inner units would take the root's role).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from training.distributed import full_state_dict, iter_full_state, sharding_kind
from training.rollout_engine import SyncedVLLMPolicy

# ---------------------------------------------------------------------------------------------- worker


class RecordingEngine:
    """A fake engine: keeps a copy of every pushed state dict."""

    def __init__(self) -> None:
        self.pushed: list[dict[str, torch.Tensor]] = []

    def load_weights(self, state) -> None:   # a state dict, or (name, tensor) pairs streamed as gathered
        pairs = state.items() if hasattr(state, "items") else state
        self.pushed.append({k: v.detach().clone() for k, v in pairs})

    def generate(self, prompts, sampling):
        return []


def _load(model_dir: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def _loss(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.arange(3, 19).reshape(2, 8)                    # (2, 8): the same batch on every process
    return model(input_ids=ids).logits.float().log_softmax(-1)[..., 5].mean()


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    _loss(model).backward()
    optimizer.step()
    optimizer.zero_grad()


def _worst(pushed: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    if pushed.keys() != expected.keys():
        return float("inf")
    if any(pushed[k].shape != expected[k].shape for k in expected):
        return float("inf")
    return max(float((pushed[k] - expected[k]).abs().max()) for k in expected)


ZERO3 = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
         "zero_allow_untested_optimizer": True, "gradient_clipping": 0.0}
"""DeepSpeed ZeRO-3 (CPU accelerator, gloo), with the same torch optimizer as the reference."""


def _optimizer(params) -> torch.optim.Optimizer:
    """Plain SGD: the update is lr · grad, so two processes and one agree to float rounding
    (Adam's first step, lr · g / (|g| + eps), turns rounding in near-zero gradients into lr-sized steps)."""
    return torch.optim.SGD(params, lr=1.0)


def _shard(model: torch.nn.Module, kind: str) -> tuple[torch.nn.Module, torch.nn.Module, Callable[[], None]]:
    """(the module to push from, the wrapper, one training step) for a layout."""
    import torch.distributed as dist
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer
    if kind == "zero3":
        import deepspeed
        engine, *_ = deepspeed.initialize(model=model, optimizer=_optimizer(model.parameters()), config=ZERO3)

        def step() -> None:
            engine.backward(_loss(engine))
            engine.step()
        return engine.module, engine, step              # the trainer hands over the unwrapped module
    if kind == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        wrapped = fully_shard(model, mesh=mesh)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        wrapped = FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=True,
                                           auto_wrap_policy=ModuleWrapPolicy({Qwen2DecoderLayer}))
    optimizer = _optimizer(wrapped.parameters())
    return wrapped, wrapped, lambda: _train_step(wrapped, optimizer)


def _local_numel(param: torch.nn.Parameter) -> int:
    if hasattr(param, "ds_tensor"):                       # ZeRO-3: this process's partition
        return param.ds_tensor.numel()
    return param.to_local().numel() if hasattr(param, "to_local") else param.numel()


def _case(model_dir: str, kind: str) -> dict:
    """One layout: push before and after a step, compared with the unsharded model."""
    reference = _load(model_dir)
    reference_state = {k: v.clone() for k, v in reference.state_dict().items()}
    model, wrapped, step = _shard(_load(model_dir), kind)
    out: dict = {"kind": sharding_kind(model),
                 "sharded": sum(_local_numel(p) for p in wrapped.parameters())
                 < sum(p.numel() for p in reference.parameters())}
    if kind == "fsdp1":
        try:
            sharding_kind(model.module)
            out["inner_refused"] = False
        except ValueError:
            out["inner_refused"] = True
    engine = RecordingEngine()
    policy = SyncedVLLMPolicy(engine, model)
    policy.generate([[1]], None)                                 # first push, before any forward
    out["before"] = _worst(engine.pushed[0], reference_state)
    step()
    _train_step(reference, _optimizer(reference.parameters()))
    policy.generate([[1]], None)
    policy.generate([[1]], None)                                 # no step since: no push
    out["pushes"] = policy.pushes
    out["after"] = _worst(engine.pushed[1], reference.state_dict())
    out["moved"] = _worst(engine.pushed[1], reference_state)
    policy.close()
    return out


def worker(model_dir: str, out_dir: str, kinds: str) -> None:
    """The comma-separated layouts under the process group torchrun set up; writes rank<r>.json."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    results = {kind: _case(model_dir, kind) for kind in kinds.split(",")}
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------- tests


def _launch(tmp_path: Path, model_dir: Path, kinds: list[str]) -> list[dict]:
    """Run the worker under `torchrun --standalone --nproc_per_node 2`; every process's results."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).resolve()), str(model_dir), str(tmp_path), ",".join(kinds)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]


def _check(results: dict) -> None:
    for kind, res in results.items():
        assert res["kind"] == kind and res["sharded"], res
        assert res["before"] == 0.0, res                     # a gather is exact
        assert res["pushes"] == 2, res                       # at the first generation, after the step
        assert res["moved"] > 1e-3, res                      # the step changed the weights ...
        assert res["after"] < 1e-5, res                      # ... as in one process


def test_fsdp_processes_push_the_whole_weights(tmp_path, tiny_model_dir):
    for results in _launch(tmp_path, tiny_model_dir, ["fsdp2", "fsdp1"]):
        _check(results)
        assert results["fsdp1"]["inner_refused"]


@pytest.mark.slow
def test_zero3_processes_push_the_whole_weights(tmp_path, tiny_model_dir):
    """DeepSpeed ZeRO-3 on its CPU accelerator (about 30 s more: DeepSpeed's import and set-up)."""
    pytest.importorskip("deepspeed")
    for results in _launch(tmp_path, tiny_model_dir, ["zero3"]):
        _check(results)


def test_unsharded_models_are_pushed_without_a_copy():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    assert sharding_kind(model) == "full"
    state = full_state_dict(model)
    assert list(state) == list(model.state_dict())
    assert state["0.weight"].data_ptr() == model[0].weight.data_ptr()        # the live tensor
    assert not state["0.weight"].requires_grad
    assert [name for name, _ in iter_full_state(model)] == list(state)


def test_ddp_is_unwrapped_to_the_module_names():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    if dist.is_initialized():
        pytest.skip("needs a private process group")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = torch.nn.Linear(3, 2)
        wrapped = DistributedDataParallel(model)
        assert sharding_kind(wrapped) == "full"
        assert list(full_state_dict(wrapped)) == ["weight", "bias"]          # no "module." prefix
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    worker(*sys.argv[1:4])
