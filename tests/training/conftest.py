"""Shared fixtures: a tiny random Qwen2 policy and the preset's ChatML tokenizer, built locally."""

from __future__ import annotations

import pytest
import torch

from training.preset import build_tiny_model, build_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A saved HF model dir (random 2-layer Qwen2, hidden 32) with the tokenizer next to it."""
    path = tmp_path_factory.mktemp("tiny-model")
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                             seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture()
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)


FAST = ["log.progress=false", "log.tensorboard=false", "log.save_model=false", "train.steps=2",
        "rollout.prompts_per_step=2", "rollout.group_size=3", "rollout.max_new_tokens=6",
        "rollout.max_response_tokens=40", "rollout.max_turns=2", "rollout.max_workers=2",
        "eval.limit=2", "eval.k=2", "eval.at_end=false", "algo.overlong_buffer=0", "algo.max_gen_rounds=2",
        "optim.lr=3e-3", "train.micro_batch_tokens=256", "data.train_limit=64", "train.num_threads=1"]
"""Overrides that make a run take about a second on the tiny model."""


@pytest.fixture()
def make_cfg(tiny_model_dir, tmp_path):
    """make_cfg(*overrides) -> TrainConfig of a fast run on the tiny model, writing under tmp_path."""
    from training.config import load_config

    def make(*overrides: str):
        return load_config(None, [f"model.path={tiny_model_dir}", f"log.run_dir={tmp_path / 'runs'}", *FAST,
                                  *overrides])
    return make


def parity_rewards(play):
    """Wrap a player: reward = 1 when the sum of sampled ids is even (a random policy gets both signs).

    Deterministic in the tokens, so resumed and straight runs see the same rewards; it gives the
    random tiny model non-trivial groups without any training.
    """
    def wrapped(tasks, group_size, seed):
        trajs = play(tasks, group_size, seed)
        for t in trajs:
            sampled = sum(i for i, m in zip(t.response_ids, t.loss_mask, strict=False) if m)
            t.reward = float(sampled % 2 == 0)
            t.grade_status = "correct" if t.reward else "wrong"
        return trajs
    return wrapped


@pytest.fixture()
def run_training():
    """run_training(cfg, resume=False) -> summary, with parity rewards on the training episodes."""
    from training.trainer import fit, setup

    def run(cfg, resume: bool = False):
        prepared = setup(cfg, resume=resume)
        prepared.play_train = parity_rewards(prepared.play_train)
        if prepared.prefetcher is not None:   # rollout.async_steps=1: the rounds played ahead too
            prepared.prefetcher.play = parity_rewards(prepared.prefetcher.play)
        return fit(prepared)
    return run
