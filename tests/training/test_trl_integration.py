"""StareGRPOTrainer: STARE inside TRL's GRPOTrainer, on a tiny random Qwen2 and a local tokenizer (CPU)."""

from __future__ import annotations

import copy
import importlib
import sys

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import stare  # noqa: E402
from training.integrations.trl import StareGRPOTrainer  # noqa: E402
from training.preset import build_tiny_model  # noqa: E402

GROUP = 4


def alternating_reward(completions, **kwargs):
    """1, 0, 1, 0, ...: every group of 4 has both signs, whatever the random model writes."""
    return [float(i % 2 == 0) for i in range(len(completions))]


@pytest.fixture()
def model(tokenizer):
    torch.manual_seed(0)
    return build_tiny_model(tokenizer, hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                            seed=0)


@pytest.fixture()
def dataset():
    rows = [{"prompt": [{"role": "user", "content": f"Use {a} {a + 1} {a + 2} to make {3 * a}"}]}
            for a in range(1, 9)]
    return Dataset.from_list(rows)


def make_args(tmp_path, **overrides):
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=GROUP, num_generations=GROUP,
                max_completion_length=12, max_steps=3, logging_steps=1, report_to="none", use_cpu=True,
                save_strategy="no", learning_rate=1e-3, seed=0, loss_type="dapo", beta=0.0, epsilon=0.2,
                epsilon_high=0.28, disable_tqdm=True)
    base.update(overrides)
    return GRPOConfig(**base)


def make(cls, model, tokenizer, dataset, args, **kwargs):
    return cls(model=model, reward_funcs=alternating_reward, args=args, train_dataset=dataset,
               processing_class=tokenizer, **kwargs)


class TargetSchedule(TrainerCallback):
    """Set the controller's target before each optimizer step (the step's rollout comes after)."""

    def __init__(self, trainer, targets):
        self.trainer, self.targets = trainer, targets

    def on_step_begin(self, args, state, control, **kwargs):
        self.trainer.stare_controller.target_entropy = self.targets[state.global_step]


def test_gate_follows_the_controller_and_reweights_the_loss(model, tokenizer, dataset, tmp_path):
    trainer = make(StareGRPOTrainer, model, tokenizer, dataset, make_args(tmp_path), stare="stare-o1")
    targets = [100.0, 0.0, 100.0]          # the random model's entropy is ~ln(287) = 5.7: on, off, on
    trainer.add_callback(TargetSchedule(trainer, targets))
    trainer.train()
    logs = [r for r in trainer.state.log_history if "stare/gate_on" in r]
    assert len(logs) == 3
    for log, target in zip(logs, targets, strict=True):
        expected_gate = float(log["stare/batch_entropy"] < target)
        assert log["stare/target_entropy"] == target
        assert log["stare/gate_on"] == expected_gate           # the controller's decision ...
        assert log["actor/stare/gate_on"] == expected_gate     # ... is the gate the loss used
        # Old-policy pass over completion tokens == TRL's own on-policy current-pass entropy (GA = 1).
        assert log["stare/batch_entropy"] == pytest.approx(log["entropy"], rel=1e-5)
        assert log["actor/stare/positive_candidate_ratio"] > 0
        if expected_gate:   # O1: W = 1.1 on the selected positive tokens, 1 elsewhere
            k_share = log["actor/stare/positive_reweight_ratio"]
            assert log["actor/stare/mean_weight"] == pytest.approx(1 + 0.1 * k_share, rel=1e-6)
            assert log["actor/stare/mean_weight"] > 1
        else:
            assert log["actor/stare/mean_weight"] == 1.0
    assert [log["stare/gate_on"] for log in logs] == [1.0, 0.0, 1.0]


def test_controller_updates_once_per_optimizer_step(model, tokenizer, dataset, tmp_path):
    """Gradient accumulation 2: one entropy pass and controller update per step, ω per micro-batch."""
    args = make_args(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=2)
    trainer = make(StareGRPOTrainer, model, tokenizer, dataset, args)
    calls = {"update": 0, "weights": 0}
    update, weights = trainer.stare_controller.update, trainer.get_off_policy_mask

    def counted_update(entropy):
        calls["update"] += 1
        update(entropy)

    def counted_weights(*a, **k):
        calls["weights"] += 1
        return weights(*a, **k)

    trainer.stare_controller.update = counted_update
    trainer.get_off_policy_mask = counted_weights
    trainer.train()
    assert calls == {"update": 2, "weights": 4}


def _batch_and_trainers(model, tokenizer, dataset, tmp_path, target_entropy):
    args = make_args(tmp_path)
    stock = make(GRPOTrainer, model, tokenizer, dataset, args)
    stare_cfg = stare.get_preset("stare-o1").stare.replace(target_entropy=target_entropy)
    ours = make(StareGRPOTrainer, model, tokenizer, dataset, args, stare=stare_cfg)
    for trainer in (stock, ours):
        trainer.current_gradient_accumulation_steps = 1   # set by Trainer.train() otherwise
    model.train()
    rows = [dataset[i] for i in range(2) for _ in range(GROUP)]      # 2 prompts × 4, as TRL's sampler
    torch.manual_seed(0)
    batch = ours._generate_and_score_completions(rows)                # also updates the controller
    return stock, ours, batch


def _loss_and_grads(trainer, model, batch):
    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_gate_off_is_exactly_trls_loss(model, tokenizer, dataset, tmp_path):
    stock, ours, batch = _batch_and_trainers(model, tokenizer, dataset, tmp_path, target_entropy=0.0)
    assert ours.stare_controller.gate_on is False               # H̄ ≥ 0 = target: off
    loss_stock, grads_stock = _loss_and_grads(stock, model, batch)
    loss_ours, grads_ours = _loss_and_grads(ours, model, batch)
    assert torch.equal(loss_ours, loss_stock)
    assert all(torch.equal(a, b) for a, b in zip(grads_ours, grads_stock, strict=True))


def test_gate_on_weights_reach_the_loss(model, tokenizer, dataset, tmp_path):
    stock, ours, batch = _batch_and_trainers(model, tokenizer, dataset, tmp_path, target_entropy=100.0)
    assert ours.stare_controller.gate_on is True
    loss_stock, grads_stock = _loss_and_grads(stock, model, batch)
    loss_ours, grads_ours = _loss_and_grads(ours, model, batch)
    # Expected: on-policy the ratio is 1, so TRL's clipped per-token loss is -A; dapo divides by the tokens.
    prompt_ids, completion_ids = batch["prompt_ids"], batch["completion_ids"]
    with torch.no_grad():
        logp, _, _ = stock._get_per_token_logps_and_entropies(
            model, torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1), completion_ids.size(1))
    mask, adv = batch["completion_mask"].float(), batch["advantages"]
    omega = stare.token_weights(logp, adv, mask, variant="O1", top_ratio=0.1, w=1.1)
    assert (omega > 1).sum() > 0
    expected = (-adv[:, None] * omega * mask).sum() / batch["num_items_in_batch"]
    assert loss_ours.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    assert not torch.equal(loss_ours, loss_stock)
    assert any(not torch.allclose(a, b) for a, b in zip(grads_ours, grads_stock, strict=True))


def test_rejects_what_it_does_not_support(model, tokenizer, dataset, tmp_path):
    with pytest.raises(ValueError, match="loss_type"):
        make(StareGRPOTrainer, copy.deepcopy(model), tokenizer, dataset,
             make_args(tmp_path, loss_type="sapo"))
    global_scope = stare.get_preset("stare-o1").stare.replace(scope="global_batch")
    with pytest.raises(ValueError, match="micro_batch"):
        make(StareGRPOTrainer, model, tokenizer, dataset, make_args(tmp_path), stare=global_scope)


def test_tool_output_is_outside_the_entropy_and_the_weights(model, tokenizer, dataset, tmp_path):
    """With TRL's tool_mask (0 on tool-result tokens), neither H̄ nor ω looks at those tokens."""
    _, ours, batch = _batch_and_trainers(model, tokenizer, dataset, tmp_path, target_entropy=100.0)
    completion_ids = batch["completion_ids"]
    tool_mask = torch.ones_like(batch["completion_mask"])
    tool_mask[:, 2:6] = 0                                            # pretend tokens 2..5 came from a tool
    batch = {**batch, "tool_mask": tool_mask}
    with torch.no_grad():
        _, entropy, _ = ours._get_per_token_logps_and_entropies(
            model, torch.cat([batch["prompt_ids"], completion_ids], 1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1), completion_ids.size(1),
            compute_entropy=True)
    mask = (batch["completion_mask"] * tool_mask).float()
    expected = ((entropy * mask).sum() / mask.sum()).item()
    without_tools = ((entropy * batch["completion_mask"]).sum() / batch["completion_mask"].sum()).item()
    assert ours.stare_batch_entropy(batch) == pytest.approx(expected, rel=1e-6)
    assert expected != pytest.approx(without_tools, rel=1e-9)
    seen = []
    hook = ours.get_off_policy_mask
    ours.get_off_policy_mask = lambda *a, **k: seen.append(hook(*a, **k)) or seen[-1]
    ours.compute_loss(model, batch)
    (omega,) = seen
    assert torch.all(omega[:, 2:6] == 1) and (omega > 1).any()


def test_without_trl_the_import_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)                      # makes `import trl` fail
    monkeypatch.delitem(sys.modules, "training.integrations.trl")
    with pytest.raises(ImportError, match=r"pip install 'stare-gym\[trl\]'"):
        importlib.import_module("training.integrations.trl")


def test_trl_dapo_with_delta_is_our_dual_clip_loss(model, tokenizer, dataset, tmp_path):
    """docs/trl.md's claim: loss_type="dapo", ε 0.2/0.28 and delta=c give stare.policy_loss exactly."""
    args = make_args(tmp_path, delta=10.0)
    trainer = make(StareGRPOTrainer, model, tokenizer, dataset, args, stare="grpo-ds")   # ω ≡ 1
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions([dataset[i] for i in range(2) for _ in range(GROUP)])
    completion_ids = batch["completion_ids"]
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            model, torch.cat([batch["prompt_ids"], completion_ids], 1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1), completion_ids.size(1))
    old = logp + 1.5 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(1))   # off-policy
    batch = {**batch, "old_per_token_logps": old}
    mask = batch["completion_mask"].float()
    expected, metrics = stare.policy_loss(logp, old, batch["advantages"], mask, clip_low=0.2,
                                          clip_high=0.28, clip_c=10.0, agg="token-mean",
                                          num_tokens=batch["num_items_in_batch"])
    assert metrics["actor/pg_clipfrac"] > 0 and metrics["actor/pg_clipfrac_lower"] > 0   # both clips bind
    assert trainer.compute_loss(model, batch).item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
