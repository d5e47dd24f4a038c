"""End to end on the tiny model (every algorithm preset), plus the pieces of a step."""

from __future__ import annotations

import json

import pytest
import torch
from accelerate import Accelerator

import stare
from agents.trajectory import Trajectory
from training.batch import collate, micro_batches, mini_batches
from training.sampling import CollectSettings, TaskStream, collect
from training.update import UpdateSettings, update_policy

STEP_KEYS = [
    "step", "time", "train/reward", "train/acc", "train/entropy", "train/entropy_turn0", "stare/gate_on",
    "stare/target_entropy", "stare/reweight_w", "stare/reweight_m", "train/response_length", "train/turns",
    "train/tool_calls", "train/tool_errors", "train/reflection_words", "train/groups_kept",
    "train/gen_rounds",
    "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "actor/grad_norm", "actor/lr",
    "time/generation_s", "time/tools_s", "time/old_logprob_s", "time/update_s", "time/step_s",
    "perf/tokens_per_s", "quadrant/pos_high/token_share", "quadrant/neg_low/entropy",
]


@pytest.mark.parametrize("algo", list(stare.PRESETS))
def test_every_preset_trains_end_to_end(algo, make_cfg, run_training):
    cfg = make_cfg(f"algo={algo}", "algo.stare.target_entropy=100", "eval.at_end=true",
                   "log.tensorboard=true")
    summary = run_training(cfg)
    run_dir = cfg.run_path
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for key in STEP_KEYS:
        assert key in records[-1], key
    assert any(r["train/groups_kept"] > 0 for r in records)
    if stare.PRESETS[algo].stare.enabled:
        assert "stare/positive_candidate_ratio" in records[-1] and records[-1]["stare/gate_on"] == 1.0
    ev = json.loads((run_dir / "eval.jsonl").read_text().splitlines()[-1])
    assert {"eval/countdown-eval/avg@2", "eval/countdown-eval/pass@2",
            "eval/countdown-eval/entropy"} <= set(ev)
    assert summary["eval"] == ev and (run_dir / "config.yaml").is_file() and list((run_dir / "tb").iterdir())


def test_parameters_change_and_a_fresh_run_refuses_to_clobber(make_cfg, run_training):
    cfg = make_cfg("algo=dapo", "log.save_model=true")
    run_training(cfg)
    from transformers import AutoModelForCausalLM
    trained = AutoModelForCausalLM.from_pretrained(str(cfg.run_path / "model"))
    initial = AutoModelForCausalLM.from_pretrained(cfg.model.path)
    pairs = zip(trained.parameters(), initial.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)
    with pytest.raises(FileExistsError, match="--resume"):
        run_training(cfg)


def _fake(rewards_by_round):
    """A rollout that returns groups with the given rewards, round after round."""
    rounds = iter(rewards_by_round)

    def play(tasks, group_size, seed):
        rewards = next(rounds)
        return [Trajectory(prompt_ids=[1], response_ids=[2], loss_mask=[1], reward=r, task_id=str(task),
                           group_id=g)
                for g, (task, group) in enumerate(zip(tasks, rewards, strict=True)) for r in group]
    return play


def test_dynamic_sampling_refills_until_full_and_cuts_the_surplus():
    stream = TaskStream(list(range(100)), seed=0, shuffle=False)
    play = _fake([[[1, 1], [0, 1]], [[0, 0], [1, 0]], [[0, 1], [1, 0]]])
    settings = CollectSettings(seed=0, prompts=2, per_round=2, group_size=2, dynamic_sampling=True,
                               max_rounds=10, drop_failed=True)
    got = collect(play, stream, settings, step=1)
    assert got.rounds == 2 and got.groups_kept == 2 and len(got.all) == 8
    assert [t.task_id for t in got.kept] == ["1", "1", "3", "3"]
    assert [t.group_id for t in got.kept] == [0, 0, 1, 1]


def test_dynamic_sampling_stops_at_the_round_limit_and_without_it_keeps_everything():
    stream = TaskStream(list(range(100)), seed=0, shuffle=False)
    settings = CollectSettings(seed=0, prompts=2, per_round=2, group_size=2, dynamic_sampling=True,
                               max_rounds=3, drop_failed=True)
    got = collect(_fake([[[1, 1], [0, 0]]] * 3), stream, settings, step=1)
    assert got.rounds == 3 and got.groups_kept == 0 and got.kept == []
    settings = CollectSettings(seed=0, prompts=2, per_round=2, group_size=2, dynamic_sampling=False,
                               max_rounds=3, drop_failed=True)
    got = collect(_fake([[[1, 1], [0, 0]]]), stream, settings, step=2)
    assert got.rounds == 1 and got.groups_kept == 2


def test_failed_and_verifier_failures_are_dropped_from_the_loss():
    stream = TaskStream(list(range(10)), seed=0, shuffle=False)
    play = _fake([[[1, 0, 0]]])

    def spoil(tasks, group_size, seed):
        trajs = play(tasks, group_size, seed)
        trajs[1].failed, trajs[2].grade_status = "SandboxTimeout", "verifier_timeout"
        return trajs
    settings = CollectSettings(seed=0, prompts=1, per_round=1, group_size=3, dynamic_sampling=False,
                               max_rounds=1, drop_failed=True)
    got = collect(spoil, stream, settings, step=1)
    assert len(got.kept) == 1 and got.dropped_failed == 2 and len(got.all) == 3


def test_task_stream_is_seeded_resumable_and_covers_each_epoch():
    a = TaskStream(list(range(10)), seed=5)
    first = a.take(7)
    state = a.state_dict()
    rest = a.take(8)
    b = TaskStream(list(range(10)), seed=5)
    b.load_state_dict(state)
    assert b.take(8) == rest
    assert sorted(first + rest[:3]) == list(range(10))      # epoch 0 is a permutation
    assert TaskStream(list(range(10)), seed=6).take(10) != TaskStream(list(range(10)), seed=5).take(10)
    two = [TaskStream(list(range(10)), seed=5, rank=r, world_size=2).take(3) for r in (0, 1)]
    assert sorted(two[0] + two[1]) == sorted(TaskStream(list(range(10)), seed=5).take(6))


def test_micro_and_mini_batches():
    trajs = [Trajectory(prompt_ids=[1] * p, response_ids=[2] * r, loss_mask=[1] * r) for p, r in
             [(2, 3), (3, 1), (1, 6), (2, 2)]]
    batch = collate(trajs, torch.zeros(4), pad_id=0)
    assert micro_batches(batch, range(4), token_budget=10) == [[0, 1], [2], [3]]
    assert micro_batches(batch, range(4), token_budget=1) == [[0], [1], [2], [3]]
    assert mini_batches(5, 2) == [[0, 1], [2, 3, 4]] and mini_batches(2, 4) == [[0], [1]]
    sub = batch.select([1, 3])
    assert sub.input_ids.shape == (2, 3 + 2) and sub.prompt_width == 3  # trimmed to these rows' widths


def test_gradients_do_not_depend_on_the_micro_batch_split(tiny_model, tokenizer):
    """token-mean over the mini-batch: micro-batch losses add up to the full-batch loss."""
    g, vocab = torch.Generator().manual_seed(0), len(tokenizer)
    trajs = [Trajectory(prompt_ids=torch.randint(10, vocab, (p,), generator=g).tolist(),
                        response_ids=torch.randint(10, vocab, (r,), generator=g).tolist(),
                        loss_mask=[1, 0] * (r // 2) + [1] * (r % 2), reward=float(i % 2), group_id=i // 2)
             for i, (p, r) in enumerate([(4, 6), (6, 3), (5, 8), (3, 5)])]
    adv = stare.grpo_advantages(torch.tensor([t.reward for t in trajs]),
                                torch.tensor([t.group_id for t in trajs]))
    batch = collate(trajs, adv, pad_id=tokenizer.pad_token_id)
    logits = tiny_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                        position_ids=batch.position_ids).logits[:, batch.prompt_width - 1:-1].detach()
    old, _ = stare.token_logprobs_and_entropy(logits, batch.response_ids)
    batch = batch.with_(old_log_probs=old + 0.05)          # ratio != 1 so clipping paths are live
    algo = stare.get_preset("dapo")
    grads = []
    for budget in (10_000, 12):
        params = {k: v.clone() for k, v in tiny_model.state_dict().items()}
        opt = torch.optim.SGD(tiny_model.parameters(), lr=1.0)
        settings = UpdateSettings(temperature=1.0, token_budget=budget, grad_clip=0.0)
        update_policy(tiny_model, opt, batch, settings, algo=algo, controller=stare.Controller(0.0),
                      accelerator=Accelerator(cpu=True))
        grads.append({k: params[k] - v for k, v in tiny_model.state_dict().items()})
        tiny_model.load_state_dict(params)
    assert len(micro_batches(batch, range(4), 12)) == 4
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], atol=1e-6, rtol=1e-4)


def test_fused_on_policy_update_matches_the_separate_old_logprob_pass(make_cfg, run_training):
    """The fused path (update forward = old pass) gives the same entropy, gate and parameters."""
    results = {}
    for fuse in ("true", "false"):
        cfg = make_cfg("algo=stare-o1", f"train.fuse_on_policy={fuse}", f"log.name=fuse-{fuse}",
                       "log.save_model=true", "train.micro_batch_tokens=64", "algo.stare.target_entropy=100")
        run_training(cfg)
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(str(cfg.run_path / "model"))
        records = [json.loads(x) for x in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
        results[fuse] = (list(model.parameters()), records)
    (p_fused, r_fused), (p_sep, r_sep) = results["true"], results["false"]
    assert r_fused[0]["time/old_logprob_s"] == 0.0 and r_sep[0]["time/old_logprob_s"] > 0.0
    for a, b in zip(r_fused, r_sep, strict=False):
        assert a["train/reward"] == b["train/reward"]
        for key in ("train/entropy", "stare/positive_reweight_ratio", "actor/ppo_kl", "actor/grad_norm"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
    for a, b in zip(p_fused, p_sep, strict=False):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_length_sorted_micro_batches_cut_padding_and_keep_the_gradient(tiny_model, tokenizer):
    g, vocab = torch.Generator().manual_seed(1), len(tokenizer)
    lengths = [3, 30, 4, 28, 5, 31, 2, 29]
    trajs = [Trajectory(prompt_ids=[5, 6, 7], loss_mask=[1] * r, reward=float(i % 2), group_id=i // 2,
                        response_ids=torch.randint(10, vocab, (r,), generator=g).tolist())
             for i, r in enumerate(lengths)]
    rewards, groups = torch.tensor([t.reward for t in trajs]), torch.tensor([t.group_id for t in trajs])
    adv = stare.grpo_advantages(rewards, groups)
    batch = collate(trajs, adv, pad_id=tokenizer.pad_token_id)
    plain = micro_batches(batch, range(8), 80)
    grouped = micro_batches(batch, range(8), 80, by_length=True)
    assert grouped == [[6, 0, 2, 4], [3, 7], [1, 5]]      # shortest first: lengths 5-8, 31-32, 33-34
    def padded(split):
        return sum(len(rows) * int(batch.attention_mask[rows].sum(-1).max()) for rows in split)
    assert padded(grouped) < padded(plain)
    batch = batch.with_(old_log_probs=torch.zeros_like(batch.loss_mask) - 5.0)
    algo, grads = stare.get_preset("dapo"), []
    for by_length in (False, True):
        params = {k: v.clone() for k, v in tiny_model.state_dict().items()}
        update_policy(tiny_model, torch.optim.SGD(tiny_model.parameters(), lr=1.0), batch,
                      UpdateSettings(temperature=1.0, token_budget=80, grad_clip=0.0, by_length=by_length),
                      algo=algo, controller=stare.Controller(0.0), accelerator=Accelerator(cpu=True))
        grads.append({k: params[k] - v for k, v in tiny_model.state_dict().items()})
        tiny_model.load_state_dict(params)
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], atol=1e-6, rtol=1e-4)


def test_max_live_episodes_plays_in_chunks_with_the_same_env_seeds(make_cfg, monkeypatch):
    import agents
    from training import runtime
    calls = []

    def fake_rollout_batch(make_env, policy, tokenizer, tasks, *, group_size, seed, **kwargs):
        calls.append((list(tasks), seed))
        batch = agents.RolloutBatch(Trajectory(prompt_ids=[1], task_id=str(t))
                                    for t in tasks for _ in range(group_size))
        batch.stats = agents.RolloutStats(episodes=len(batch), generation_s=1.0)
        return batch
    monkeypatch.setattr(agents, "rollout_batch", fake_rollout_batch)
    cfg = make_cfg("rollout.max_live_episodes=6")
    play = runtime.make_player(cfg, None, None, None, temperature=1.0, top_p=1.0)
    out = play(["a", "b", "c", "d", "e"], 3, 100)
    assert calls == [(["a", "b"], 100), (["c", "d"], 106), (["e"], 112)]
    assert [t.task_id for t in out] == [x for x in "abcde" for _ in range(3)]
    assert out.stats.generation_s == 3.0 and out.stats.episodes == 15


def test_the_hf_engine_refuses_sharded_weights_and_vllm_gets_the_unwrapped_model(make_cfg, tiny_model):
    """engine=hf generates with the training model: ZeRO-3 / FSDP shards are refused by name."""
    from training.trainer import rollout_model

    class Unwrapping:
        def unwrap_model(self, model):
            return model

    assert rollout_model(make_cfg(), Unwrapping(), tiny_model) is tiny_model
    next(tiny_model.parameters()).ds_id = 0          # how DeepSpeed ZeRO-3 marks a partitioned parameter
    with pytest.raises(ValueError, match="zero3 shards over processes; use rollout.engine=vllm"):
        rollout_model(make_cfg(), Unwrapping(), tiny_model)
    assert rollout_model(make_cfg("rollout.engine=vllm"), Unwrapping(), tiny_model) is tiny_model
