"""`rollout.max_prompt_tokens` in a training step: cut prompts train, and the log-prob pass sees them."""

from __future__ import annotations

import math

import pytest


def test_a_step_trains_on_left_truncated_prompts(make_cfg):
    from training.trainer import setup, train_step
    run = setup(make_cfg("rollout.max_prompt_tokens=32", "train.steps=1"))
    seen = []

    def recording(tasks, group_size, seed, play=run.play_train):
        trajs = play(tasks, group_size, seed)
        seen.extend(trajs)
        return trajs
    run.play_train = recording
    record = train_step(run, 1)
    assert seen and all(len(t.prompt_ids) == 32 for t in seen)        # every preset prompt is longer
    assert all(t.metrics["prompt_truncated"] == 1.0 and t.metrics["prompt_tokens_cut"] > 0 for t in seen)
    # the trainer's log-prob pass conditions on exactly the ids the policy sampled from
    assert record["rollout/logprob_abs_diff"] < 1e-4
    assert math.isfinite(record["train/entropy"]) and record["train/response_length"] > 0


def test_error_mode_stops_the_run_with_the_key_to_change(make_cfg):
    from agents import PromptTooLongError
    from training.trainer import setup, train_step
    run = setup(make_cfg("rollout.max_prompt_tokens=32", "rollout.prompt_truncation=error"))
    with pytest.raises(PromptTooLongError, match="rollout.max_prompt_tokens"):
        train_step(run, 1)


def test_the_limit_is_validated_by_the_config(make_cfg):
    from training.config_parse import ConfigError
    for bad in ("rollout.max_prompt_tokens=-1", "rollout.prompt_truncation=right"):
        with pytest.raises((ConfigError, ValueError)):
            make_cfg(bad)
