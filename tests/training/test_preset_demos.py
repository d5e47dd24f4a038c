import random

import pytest
import torch

from agents.trajectory import Segment
from tasks.countdown import countdown_splits
from tests.training.scripted_demos import make_demos
from training.preset import build_tiny_model, build_tokenizer, get_preset
from training.preset.demos import scripted_turns
from training.preset.warmstart import make_env_factory, rollout_limits
from training.sft.loop import SFTConfig, lr_at, sft_loss, train_sft

SETTINGS = get_preset("cpu-tiny")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _initial_prompt(tok, make_env):
    env = make_env()

    def prompt(task):
        messages, _ = env.reset(options={"task": task})
        return list(
            tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )

    return prompt


def _play_demos(tok, tasks, make_env, **kwargs):
    """`make_demos` of `tasks`, one copy each, seed 0, with the preset's limits and prompt."""
    return make_demos(tasks, copies=1, make_env=make_env, tokenizer=tok,
                      initial_prompt=_initial_prompt(tok, make_env), limits=rollout_limits(SETTINGS),
                      seed=0, **kwargs)


@pytest.fixture(scope="module")
def demos(tok):
    tasks = list(countdown_splits()["train"][:24])
    played, stats = _play_demos(tok, tasks, make_env_factory(SETTINGS), chunk=16)
    return tasks, played, stats


def test_demos_replay_the_script_through_the_env_with_exact_masks(tok, demos):
    tasks, played, stats = demos
    rng = random.Random(0)  # the same draws make_demos made, task by task
    for task, traj in zip(tasks, played, strict=False):
        turns, hit = scripted_turns(task, rng)
        assert (traj.reward > 0) == hit
        sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=False) if m]
        expected = []
        for turn in turns:
            expected += tok(turn, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert sampled == expected  # exactly the scripted turns, nothing else
        injected = tok.decode([i for i, m in zip(traj.response_ids, traj.loss_mask, strict=False) if not m])
        assert injected.count("<tool_response>") == len(turns) - 1 == traj.metrics["tool_calls"]
        assert all(s != Segment.SAMPLED for s, m in zip(traj.segment, traj.loss_mask, strict=False) if not m)
        prompt = tok.decode(traj.prompt_ids)
        assert prompt == f"<|im_start|>user\n{task.prompt}<|im_end|>\n<|im_start|>assistant\n"
    assert 0 <= stats["demo_success"] <= 0.5 and 1 <= stats["demo_tool_calls"] <= 4


def test_stateless_sandbox_gives_the_same_tokens_as_sessions(tok, demos):
    tasks, played, _ = demos
    again, _ = _play_demos(tok, tasks[:4], make_env_factory(SETTINGS, stateless=False))
    for a, b in zip(played[:4], again, strict=False):
        assert (a.prompt_ids, a.response_ids, a.loss_mask) == (b.prompt_ids, b.response_ids, b.loss_mask)


def test_sft_loss_counts_only_sampled_tokens(tok, demos):
    _, played, _ = demos
    model = build_tiny_model(tok)
    traj = played[0]
    loss = sft_loss(model, [traj], pad_id=tok.pad_token_id)
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    logp = model(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    mask = torch.tensor([0] * (len(traj.prompt_ids) - 1) + traj.loss_mask, dtype=torch.float32)
    assert loss.item() == pytest.approx(-(logp * mask).sum().item() / mask.sum().item(), rel=1e-5)


def test_a_short_sft_run_lowers_the_loss(tok, demos):
    _, played, _ = demos
    model = build_tiny_model(tok)
    before = sft_loss(model, played, pad_id=tok.pad_token_id).item()
    losses = train_sft(
        model, played, SFTConfig(steps=30, batch_size=8, lr=3e-3, warmup_steps=5), pad_id=tok.pad_token_id
    )
    after = sft_loss(model, played, pad_id=tok.pad_token_id).item()
    assert len(losses) == 30 and not model.training
    assert after < 0.6 * before, (before, after)  # ln(287) = 5.7 at init; the format is learnt fast


def test_lr_schedule_warms_up_then_decays_to_zero():
    cfg = SFTConfig(steps=100, lr=1.0, warmup_steps=10)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(55, cfg) == pytest.approx(0.5) and lr_at(100, cfg) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        SFTConfig(steps=10, warmup_steps=10)


def test_check_mode_calls_answer_zero_exactly_on_a_hit():
    """`check=True` prints EXPR-TARGET: through the real env the tool says 0 on the hit and only there."""
    from training.sft.demos import play_script

    tasks = list(countdown_splits()["train"][:12])
    rng, make_env, hits = random.Random(3), make_env_factory(SETTINGS), 0
    for task in tasks:
        turns, hit = scripted_turns(task, rng, aware=0.5, persist=0.85, check=True)
        target = task.meta["target"]
        assert all(t.endswith(f'-{target})"}}}}</tool_call>') for t in turns[:-1])
        demo = play_script(make_env, task, turns, max_turns=SETTINGS.max_turns)
        outputs = [m["content"].strip() for m in demo.messages if m["role"] == "tool"]
        assert outputs[:-1] == [o for o in outputs[:-1] if o != "0"]  # every try before the last missed
        assert (outputs[-1] == "0") == hit == (demo.reward > 0)
        hits += hit
    assert 0 < hits < len(tasks)


def test_warm_start_checks_env_and_searcher_agree():
    """`check_agreement` passes on real played demos and names a tampered tool output or reward."""
    import dataclasses
    import functools

    from training.preset.demos import check_agreement
    from training.preset.solver import countdown_solver
    from training.sft.demos import play_solver

    tasks = list(countdown_splits()["train"][:8])
    solver = functools.partial(countdown_solver, aware=0.5, persist=0.6, check=True)
    demos = play_solver(make_env_factory(SETTINGS), tasks, solver, seed=0, max_turns=SETTINGS.max_turns)
    check_agreement(demos, tasks)
    flipped = dataclasses.replace(demos[0], reward=1.0 - demos[0].reward)
    with pytest.raises(RuntimeError, match=f"{tasks[0].id}: the env's reward"):
        check_agreement([flipped], tasks)
    messages = [dict(m) for m in demos[0].messages]
    tool = next(m for m in messages if m["role"] == "tool")
    tool["content"] = "12345"
    with pytest.raises(RuntimeError, match="the tool printed '12345'"):
        check_agreement([dataclasses.replace(demos[0], messages=messages)], tasks)
