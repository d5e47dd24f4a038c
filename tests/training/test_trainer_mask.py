"""The loss mask comes from the trajectories, never from the attention mask (STARE_SPEC §5).

Tool-output tokens are real tokens (attention 1) but must stay out of the batch entropy that drives
the gate, out of STARE's candidate sets, and out of the loss. Each test below would fail if the
trainer rebuilt the mask from the attention mask.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator

import stare
from agents.trajectory import Trajectory
from training.batch import collate, micro_batches
from training.config import load_config
from training.gate import diagnostics, entropy_gate
from training.logprobs import forward_pass
from training.update import UpdateSettings, update_policy
from training.weights import batch_weights


def _trajectories(tokenizer) -> list[Trajectory]:
    """Two episodes of one group: sampled / tool / sampled segments (tool = mask 0)."""
    prompt = tokenizer.encode("<|im_start|>user\nUse 3 4 5 to make 17<|im_end|>\n<|im_start|>assistant\n")
    sampled_a = tokenizer.encode("<tool_call>print(3*4+5)</tool_call><|im_end|>")
    tool = tokenizer.encode("\n<|im_start|>user\n<tool_response>\n17 zz qq 17 17\n</tool_response>"
                            "<|im_end|>\n"
                            "<|im_start|>assistant\n")
    sampled_b = tokenizer.encode("\\boxed{3*4+5}<|im_end|>")
    out = []
    for reward, extra in ((1.0, []), (0.0, tokenizer.encode("9"))):
        response = sampled_a + tool + sampled_b + extra
        mask = [1] * len(sampled_a) + [0] * len(tool) + [1] * (len(sampled_b) + len(extra))
        turns = [0] * (len(sampled_a) + len(tool)) + [1] * (len(sampled_b) + len(extra))
        out.append(Trajectory(prompt_ids=prompt, response_ids=response, loss_mask=mask,
                              logprobs=[0.0] * len(response), turn_index=turns, reward=reward, group_id=0,
                              num_turns=2))
    return out


@pytest.fixture()
def sharp_model(tiny_model, tokenizer):
    """The tiny model with scaled-up (tied) embeddings: peaked, position-dependent distributions.

    The scale is the one (of a few) that best separates the entropy of tool tokens from that of
    sampled tokens, so the tests below can tell the two masks apart whatever the tokenizer.
    """
    weight = tiny_model.get_input_embeddings().weight
    base, trajs, best = weight.detach().clone(), _trajectories(tokenizer), (0.0, 1.0)
    for scale in (2.0, 5.0, 10.0, 20.0, 40.0):
        with torch.no_grad():
            weight.copy_(base * scale)
        h_mask, h_all, _ = _expected_entropies(tiny_model, trajs)
        best = max(best, (abs(h_mask - h_all), scale))
    with torch.no_grad():
        weight.copy_(base * best[1])
    return tiny_model


def _expected_entropies(model, trajs) -> tuple[float, float, list[float]]:
    """Token-mean entropy over loss-mask tokens and over all response tokens, computed one row at a time."""
    masked, everything, per_turn = [], [], {0: [], 1: []}
    with torch.no_grad():
        for t in trajs:
            ids = torch.tensor([t.prompt_ids + t.response_ids])
            logits = model(input_ids=ids).logits[0, len(t.prompt_ids) - 1:-1]        # (R, V)
            _, ent = stare.token_logprobs_and_entropy(logits, torch.tensor(t.response_ids))
            for h, m, k in zip(ent.tolist(), t.loss_mask, t.turn_index, strict=False):
                everything.append(h)
                if m:
                    masked.append(h)
                    per_turn[k].append(h)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return mean(masked), mean(everything), [mean(per_turn[0]), mean(per_turn[1])]


def _run(model, algo, target_entropy):
    cfg = load_config(None, ["train.micro_batch_tokens=64", "rollout.max_turns=2"])
    algo = algo.replace(stare=algo.stare.replace(target_entropy=target_entropy))
    return SimpleNamespace(cfg=cfg, algo=algo, accelerator=Accelerator(cpu=True), model=model, ref_model=None,
                           controller=stare.Controller(target_entropy, algo.stare.w, algo.stare.m))


def old_logprob_pass(run, batch):
    """The trainer's stages 3-5 (separate no-grad pass, entropy gate, batch weights) and diagnostics."""
    cfg = run.cfg
    forward = forward_pass(run.model, batch, cfg.rollout.temperature, device="cpu", by_length=False,
                           token_budget=cfg.train.micro_batch_tokens, fused=False)
    batch = batch.with_(old_log_probs=forward.log_probs, entropy=forward.entropy)
    h_bar = entropy_gate(run.controller, batch)
    batch, stats = batch_weights(batch, run.algo, run.controller, tis_cap=cfg.rollout.tis_cap)
    return batch, {**diagnostics(batch, run.algo, h_bar, max_turns=cfg.rollout.max_turns), **stats}


def test_batch_entropy_and_gate_use_the_loss_mask_only(sharp_model, tokenizer):
    trajs = _trajectories(tokenizer)
    h_mask, h_all, h_turns = _expected_entropies(sharp_model, trajs)
    assert abs(h_mask - h_all) > 1e-3, "test needs tool tokens whose entropy differs from the sampled ones"
    target = (h_mask + h_all) / 2           # the gate state differs depending on which mean is used
    run = _run(sharp_model, stare.get_preset("stare-o1"), target)
    batch = collate(trajs, torch.tensor([1.0, -1.0]), pad_id=tokenizer.pad_token_id)
    assert micro_batches(batch, range(2), 64) == [[0], [1]]  # several micro-batches in the old pass
    _, metrics = old_logprob_pass(run, batch)
    assert metrics["train/entropy"] == pytest.approx(h_mask, abs=1e-5)
    assert run.controller.entropy == pytest.approx(h_mask, abs=1e-5)
    assert run.controller.gate_on == (h_mask < target)
    assert metrics["train/entropy_turn0"] == pytest.approx(h_turns[0], abs=1e-5)
    assert metrics["train/entropy_turn1"] == pytest.approx(h_turns[1], abs=1e-5)


def test_collate_copies_the_trajectory_mask(tokenizer):
    trajs = _trajectories(tokenizer)
    batch = collate(trajs, torch.zeros(2), pad_id=tokenizer.pad_token_id)
    for row, t in enumerate(trajs):
        r = len(t.response_ids)
        assert batch.loss_mask[row, :r].tolist() == [float(m) for m in t.loss_mask]
        assert batch.loss_mask[row, r:].sum() == 0
        assert batch.attention_mask[row, batch.prompt_width:].sum() == r   # tool tokens are attended to
        assert batch.response_ids[row, :r].tolist() == t.response_ids


@pytest.mark.parametrize("scope", ["micro_batch", "global_batch"])
def test_stare_candidates_exclude_tool_tokens(sharp_model, tokenizer, scope):
    trajs = _trajectories(tokenizer)
    algo = stare.get_preset("stare-o1")
    algo = algo.replace(stare=algo.stare.replace(top_ratio=1.0, w=2.0, scope=scope))
    run = _run(sharp_model, algo, target_entropy=1e9)    # gate always on
    batch = collate(trajs, torch.tensor([1.0, -1.0]), pad_id=tokenizer.pad_token_id)
    batch, metrics = old_logprob_pass(run, batch)
    optimizer = torch.optim.SGD(sharp_model.parameters(), lr=0.0)
    out = update_policy(sharp_model, optimizer, batch, UpdateSettings(temperature=1.0, token_budget=10_000),
                        algo=run.algo, controller=run.controller, accelerator=run.accelerator)
    sampled_pos = sum(trajs[0].loss_mask)
    valid = sum(sum(t.loss_mask) for t in trajs)
    stats = out if scope == "micro_batch" else metrics     # global scope: computed once, in the old pass
    # top_ratio 1 selects every candidate: exactly the sampled tokens of the positive row
    assert stats["stare/positive_candidate_ratio"] == pytest.approx(sampled_pos / valid)
    assert stats["stare/positive_reweight_ratio"] == pytest.approx(sampled_pos / valid)
    assert stats["stare/mean_weight"] == pytest.approx((2.0 * sampled_pos + valid - sampled_pos) / valid,
                                                       rel=1e-6)
    if scope == "global_batch":
        assert torch.all(batch.weights[batch.loss_mask == 0] == 1.0)
        assert torch.all(batch.weights[0][batch.loss_mask[0] == 1] == 2.0)


def test_tool_tokens_get_no_gradient(sharp_model, tokenizer):
    """Changing a tool token's old log-prob changes nothing in the update (it is not in the loss)."""
    trajs = _trajectories(tokenizer)
    run = _run(sharp_model, stare.get_preset("dapo"), target_entropy=0.0)
    batch = collate(trajs, torch.tensor([1.0, -1.0]), pad_id=tokenizer.pad_token_id)
    batch, _ = old_logprob_pass(run, batch)
    grads = []
    for shift in (0.0, 5.0):
        old = batch.old_log_probs + shift * (batch.loss_mask == 0).float()
        sharp_model.zero_grad()
        logp, _ = stare.token_logprobs_and_entropy(
            sharp_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids).logits[:,
                                                               batch.prompt_width - 1:-1], batch.response_ids)
        loss, _ = stare.policy_loss(logp, old, batch.advantages, batch.loss_mask)
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in sharp_model.parameters()]))
    assert torch.equal(grads[0], grads[1])
