"""`train.target_entropy: auto` for any model: measure the starting policy's entropy on the RL task.

A preset build records its post-warm-start entropy in `warmstart.json`; any other model directory
(an SFT run's `model/`, SmolLM2, a user's checkpoint) is measured here, before training, exactly as
the first RL step will see it:

    play step 1's first round exactly as the trainer will (the same prompts from the seeded task
    stream, the same round seed, the training sampling and budgets), then
    H_0 = Σ_{i,t} H_it m_it / Σ_{i,t} m_it      (m: loss mask, sampled tokens only)

and H_tgt = train.target_entropy_factor × H_0. The global torch RNG is restored afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from training import runtime
from training.batch import collate
from training.logprobs import batch_logprobs
from training.sampling import TaskStream, round_seed


def measure_start_entropy(cfg: Any, model_dir: Path) -> float:
    """H_0 of the model in `model_dir` on the run's training tasks (see the module docstring).

    Raises:
        ValueError: The episodes sampled no token to measure; the message says what to set instead.
    """
    r = cfg.rollout
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, model_dir)
    model.eval()
    play = runtime.make_player(cfg, runtime.make_policy(model, tokenizer), tokenizer,
                               runtime.make_env_factory(cfg), temperature=r.temperature, top_p=r.top_p,
                               top_k=r.top_k)
    stream = TaskStream(runtime.load_tasks(cfg.data.train_tasks, cfg.data.train_limit), seed=cfg.seed,
                        shuffle=cfg.data.shuffle)
    tasks = stream.take(r.prompts_per_round if cfg.algo.dynamic_sampling and r.prompts_per_round
                        else r.prompts_per_step)
    seed = round_seed(cfg.seed, 1, 0, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        trajs = list(play(tasks, r.group_size, seed))
        batch = collate(trajs, torch.zeros(len(trajs)), pad_id=runtime.pad_id(tokenizer))
        _, entropy = batch_logprobs(model, batch, r.temperature, token_budget=cfg.train.micro_batch_tokens)
    tokens = float(batch.loss_mask.sum())
    if tokens == 0:
        raise ValueError(f"train.target_entropy=auto: {model_dir} sampled no token on "
                         f"{cfg.data.train_tasks}; set a number instead, e.g. train.target_entropy=0.3")
    return float((entropy * batch.loss_mask).sum()) / tokens
