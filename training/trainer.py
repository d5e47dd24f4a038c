"""The STARE / DAPO / GRPO trainer: `train(cfg) -> summary`. Reads top to bottom.

One training step (DESIGN.md §3):

    prompts (seeded cursor) -> rollout_batch (group size n) -> rewards (+ DAPO overlong penalty)
    -> DAPO dynamic sampling (refill rounds) -> GRPO advantages -> padded batch
    -> old-log-prob pass (no grad) with token entropy
    -> H̄ = token mean of the entropy over loss-mask tokens only -> controller.update(H̄)
    -> per micro-batch: log-probs -> STARE ω -> policy loss -> backward -> optimizer step(s)
    -> metrics (JSONL, TensorBoard, progress), evaluation, checkpoint

Under `torchrun` / `accelerate launch` (W processes) each process plays its share of every round's
prompts as whole groups (`training.sampling.collect`), computes advantages over its own groups
(exact: a group never spans processes), and the step's global quantities come from collectives
(`training.distributed`): H̄ from all-reduced Σ H·mask and Σ mask, the `global_batch` STARE
selection over the gathered candidates, the token-mean denominator from the global token count.
Process 0 writes metrics, evaluations and the final model; checkpoints are collective.
"""

from __future__ import annotations

import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import stare
from training import distributed, runtime
from training.async_rollout import RolloutPrefetcher, make_prefetcher
from training.batch import Batch, collate, placeholder_rows
from training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from training.config import TrainConfig, dump_yaml
from training.evaluate import evaluate
from training.logprobs import batch_logprobs, per_turn_means
from training.metrics import MetricsLogger, episode_metrics
from training.rollout_engine import logprob_mismatch, tis_weights
from training.sampling import Collected, TaskStream, collect, round_seed, round_size, share
from training.update import fused_on_policy_update, global_stare_weights, update_policy


@dataclass
class Run:
    """Everything live during a run (built once by `setup`)."""

    cfg: TrainConfig
    algo: stare.AlgoConfig
    accelerator: Any
    model: Any
    optimizer: Any
    scheduler: Any
    tokenizer: Any
    controller: stare.Controller
    stream: TaskStream
    play_train: Any
    play_eval: Any
    eval_sets: dict[str, list[Any]]
    ref_model: Any
    pad_id: int
    run_dir: Path
    start_step: int = 0
    elapsed_before: float = 0.0
    """Seconds of training done before this process (resume)."""
    started: float = 0.0
    prefetcher: RolloutPrefetcher | None = None
    """Plays the next step's first round during the update (`rollout.async_steps=1`)."""
    on_batch: Any = None
    """Optional `(run, step, collected, batch) -> metrics`, called before the update; its metrics join
    the step's record (the bench's all-episode entropy and counterfactual probes, `training.bench`)."""


def setup(cfg: TrainConfig, *, resume: bool = False) -> Run:
    """Build model, optimizer, envs and data; restore the latest checkpoint when resuming."""
    runtime.check_config(cfg)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    run_dir = cfg.run_path
    accelerator = runtime.make_accelerator(cfg)
    _check_sharding(cfg, accelerator.num_processes)
    if accelerator.is_main_process:
        _prepare_run_dir(run_dir, resume=resume, overwrite=cfg.log.overwrite)
    accelerator.wait_for_everyone()
    from transformers import set_seed
    set_seed(cfg.seed)
    model_dir = runtime.resolve_model_dir(cfg)
    algo = runtime.resolve_algo(cfg, model_dir)
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, model_dir)
    optimizer, scheduler = runtime.make_optimizer(cfg, model)
    ref = runtime.reference_model(model).to(accelerator.device) if algo.kl_coef > 0 else None
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    policy = runtime.make_policy(rollout_model(cfg, accelerator, model), tokenizer, cfg, model_dir)
    make_env = runtime.make_env_factory(cfg)
    r, e = cfg.rollout, cfg.eval

    def train_player(rollout_policy: Any) -> Any:   # the training sampling, over any policy
        return runtime.make_player(cfg, rollout_policy, tokenizer, make_env, temperature=r.temperature,
                                   top_p=r.top_p, top_k=r.top_k)
    play_train = train_player(policy)
    play_eval = runtime.make_player(cfg, policy, tokenizer, make_env, temperature=e.temperature,
                                    top_p=e.top_p)
    prefetcher = None
    if r.async_steps:
        prefetcher = make_prefetcher(cfg, accelerator, accelerator.unwrap_model(model), tokenizer, policy,
                                     train_player)
    stream = TaskStream(runtime.load_tasks(cfg.data.train_tasks, cfg.data.train_limit), seed=cfg.seed,
                        shuffle=cfg.data.shuffle, rank=accelerator.process_index,
                        world_size=accelerator.num_processes)
    eval_sets = {name: runtime.load_tasks(name, e.limit) for name in e.tasks}
    run = Run(cfg=cfg, algo=algo, accelerator=accelerator, model=model, optimizer=optimizer,
              scheduler=scheduler, tokenizer=tokenizer, controller=runtime.controller_for(algo),
              stream=stream, play_train=play_train, play_eval=play_eval, eval_sets=eval_sets, ref_model=ref,
              pad_id=runtime.pad_id(tokenizer), run_dir=run_dir, prefetcher=prefetcher)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, accelerator)
        run.controller.load_state_dict(state["controller"])
        run.stream.load_state_dict(state["stream"])
        run.start_step, run.elapsed_before = int(state["step"]), float(state["elapsed"])
        _restore_prefetched(run, state.get("prefetched"))
        runtime.sync_schedule(scheduler)
    if accelerator.is_main_process:
        (run_dir / "config.yaml").write_text(dump_yaml(cfg))
    return run


def rollout_model(cfg: TrainConfig, accelerator: Any, model: Any) -> Any:
    """The module the rollout policy reads its weights from.

    `engine=hf` generates with the unwrapped model itself, so it needs every weight on every process
    (one process, DDP, ZeRO-1/2): under FSDP or ZeRO-3 it is refused. `engine=vllm` copies the weights
    into its engine, gathering shards (`training.distributed.iter_full_state`): it gets the unwrapped
    model, or under FSDP1 the prepared root (gathering from inside the root breaks FSDP1).
    """
    kind = distributed.sharding_kind(model)
    if cfg.rollout.engine == "hf" and kind != "full":
        raise ValueError(f"rollout.engine=hf generates with the training model itself, whose weights "
                         f"{kind} shards over processes; use rollout.engine=vllm (its weight push "
                         "gathers the shards) or data parallelism without sharding "
                         "(configs/accelerate/ddp.yaml)")
    return model if kind == "fsdp1" else accelerator.unwrap_model(model)


def _restore_prefetched(run: Run, state: dict[str, Any] | None) -> None:
    if state is not None and run.prefetcher is None:
        raise ValueError("this checkpoint holds a prefetched rollout round (it was saved with "
                         "rollout.async_steps=1); resume with rollout.async_steps=1")
    if run.prefetcher is not None:
        run.prefetcher.load_state_dict(state)


def _check_sharding(cfg: TrainConfig, world: int) -> None:
    """Fail at start-up, not mid-run, when the prompts cannot be shared by whole groups."""
    r = cfg.rollout
    share(r.prompts_per_step, world)
    share(r.prompts_per_round or r.prompts_per_step, world)


def _prepare_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    has_checkpoints = (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir())
    if has_checkpoints and not resume and not overwrite:
        raise FileExistsError(f"{run_dir} already holds checkpoints. Pass --resume to continue that run, "
                              "log.overwrite=true to start it again, or another log.name")
    if not resume:
        for name in ("checkpoints", "tb", "model"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        for name in ("metrics.jsonl", "eval.jsonl"):
            (run_dir / name).unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)


def train(cfg: TrainConfig, *, resume: bool = False) -> dict[str, Any]:
    """Train with `cfg`; with `resume`, continue from the run's latest checkpoint exactly.

    Returns:
        Summary: run_dir, steps, wall_s, `final` (the last step record) and `eval` (the last
        evaluation record, or {}).
    """
    return fit(setup(cfg, resume=resume))


def fit(run: Run) -> dict[str, Any]:
    """The training loop over a prepared `Run` (steps, evaluation, checkpoints, final model)."""
    cfg = run.cfg
    logger: Any = _SilentLogger()
    if run.accelerator.is_main_process:
        logger = MetricsLogger(run.run_dir, total_steps=cfg.train.steps, tensorboard=cfg.log.tensorboard,
                               progress=cfg.log.progress, start_step=run.start_step)
    run.started = time.perf_counter()
    last, last_eval = {}, {}
    try:
        if cfg.eval.at_start and run.start_step == 0:
            last_eval = _evaluate(run, 0, logger)
        for step in range(run.start_step + 1, cfg.train.steps + 1):
            last = train_step(run, step)
            logger.log(last)
            final = step == cfg.train.steps
            if (cfg.eval.every and step % cfg.eval.every == 0) or (final and cfg.eval.at_end):
                if run.prefetcher is not None:
                    run.prefetcher.wait()     # no sampling in two threads at once (one RNG)
                last_eval = _evaluate(run, step, logger)
            if (cfg.log.save_every and step % cfg.log.save_every == 0) or final:
                _save(run, step)
    finally:
        logger.close()
        if run.prefetcher is not None:
            run.prefetcher.close()
    if cfg.log.save_model:
        state = run.accelerator.get_state_dict(run.model)   # collective under FSDP / ZeRO-3: all processes
        if run.accelerator.is_main_process:
            out = str(run.run_dir / "model")
            run.accelerator.unwrap_model(run.model).save_pretrained(out, state_dict=state)
            run.tokenizer.save_pretrained(out)
    return {"run_dir": str(run.run_dir), "steps": cfg.train.steps, "wall_s": _elapsed(run),
            "final": last, "eval": last_eval}


def train_step(run: Run, step: int) -> dict[str, Any]:
    """One training step; returns its metrics record."""
    cfg, t_step = run.cfg, time.perf_counter()
    lr = float(run.scheduler.get_last_lr()[0])
    # ---- rollouts and DAPO dynamic sampling ----------------------------------------------------------
    collected = rollout_stage(run, step)
    # ---- advantages, batch, old-log-prob pass, entropy gate, policy update ---------------------------
    update = collected.groups_kept > 0     # global: every process takes the same branch
    batch = make_batch(collected, run.algo, cfg, pad_id=run.pad_id, update=update)
    observed = run.on_batch(run, step, collected, batch) if run.on_batch is not None else {}
    prefetch_next(run, step)             # rollout.async_steps=1: the next round plays during the update
    learned, t_old, t_update = learn(run, batch, update=update)
    with warnings.catch_warnings():   # a step without an update still advances the schedule
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        run.scheduler.step()
    # ---- metrics -------------------------------------------------------------------------------------
    step_s = time.perf_counter() - t_step
    sampled = int(distributed.all_sum(torch.tensor(sum(sum(t.loss_mask) for t in collected.all))))
    return {"step": step, **global_episode_metrics(collected.all), **learned, **run.controller.metrics(),
            "train/groups_kept": collected.groups_kept, "train/gen_rounds": collected.rounds,
            "train/dropped_failed": collected.dropped_failed, "actor/lr": lr,
            "time/rollout_s": collected.rollout_s, "time/generation_s": collected.generation_s,
            "time/tools_s": collected.tool_s, "time/render_s": collected.render_s,
            "time/reset_s": collected.reset_s, "time/prefetch_s": collected.prefetch_s,
            "time/old_logprob_s": t_old, "time/update_s": t_update,
            "time/step_s": step_s, "perf/tokens_per_s": sampled / step_s if step_s > 0 else 0.0,
            "time": _elapsed(run), **observed}


def global_episode_metrics(trajs: list[Any]) -> dict[str, float]:
    """`episode_metrics` over every process's episodes: Σ_r n_r · mean_r / Σ_r n_r per key."""
    parts = distributed.gather_objects((len(trajs), episode_metrics(trajs)))
    total = sum(n for n, _ in parts)
    keys = dict.fromkeys(key for _, means in parts for key in means)
    return {key: sum(n * means.get(key, 0.0) for n, means in parts) / total for key in keys} if total else {}


def rollout_stage(run: Run, step: int) -> Collected:
    """Play this step's groups (DAPO dynamic sampling refills when the algorithm asks for it).

    With a prefetcher, round 0 was played ahead (during the previous update); `rollout_s` then
    counts the time spent waiting for it, and `prefetch_s` the time it took in the rollout thread.
    """
    r, algo = run.cfg.rollout, run.algo
    t0 = time.perf_counter()
    first = run.prefetcher.take(step) if run.prefetcher is not None else None
    waited = time.perf_counter() - t0
    collected = collect(lambda tasks, seed: run.play_train(tasks, r.group_size, seed), run.stream, step=step,
                        seed=run.cfg.seed, prompts=r.prompts_per_step,
                        per_round=r.prompts_per_round or r.prompts_per_step, group_size=r.group_size,
                        dynamic_sampling=algo.dynamic_sampling, max_rounds=algo.max_gen_rounds,
                        drop_failed=r.drop_failed, first_round=first)
    collected.rollout_s += waited
    collected.prefetch_s = first.seconds if first is not None else 0.0
    return collected


def prefetch_next(run: Run, step: int) -> None:
    """Start round 0 of step + 1 in the rollout thread, with the weights as they are now.

    Takes the round's prompts from the data cursor now, which is where the synchronous loop
    would take them (after this step's refill rounds), and seeds it as `collect` would.
    """
    cfg, r = run.cfg, run.cfg.rollout
    if run.prefetcher is None or step >= cfg.train.steps:
        return
    world, rank = run.stream.world_size, run.stream.rank
    tasks = run.stream.take(round_size(r.prompts_per_step, r.prompts_per_round or r.prompts_per_step,
                                       run.algo.dynamic_sampling, world))
    run.prefetcher.launch(step + 1, tasks, r.group_size, round_seed(cfg.seed, step + 1, 0, rank))


def learn(run: Run, batch: Batch, *, update: bool) -> tuple[dict[str, float], float, float]:
    """Old-log-prob pass, entropy gate and (when `update`) the policy update.

    Without an update (dynamic sampling kept no group) the entropy still comes from this step's
    episodes, so the gate and the curves follow the policy.

    Returns:
        (metrics, seconds of the old-log-prob pass, seconds of the update).
    """
    cfg, t0 = run.cfg, time.perf_counter()
    kwargs = {"algo": run.algo, "controller": run.controller, "accelerator": run.accelerator,
              "temperature": cfg.rollout.temperature, "token_budget": cfg.train.micro_batch_tokens,
              "grad_clip": cfg.optim.grad_clip, "by_length": cfg.train.sort_micro_batches}
    if update and fused(cfg, run.accelerator.num_processes):
        entropy_metrics: dict[str, float] = {}

        def before_loss(full: Batch) -> Batch:
            updated, metrics = entropy_stage(run, full)
            entropy_metrics.update(metrics)
            return updated
        _, metrics = fused_on_policy_update(run.model, run.optimizer, reference_pass(run, batch),
                                            before_loss=before_loss, **kwargs)
        return {**entropy_metrics, **metrics}, 0.0, time.perf_counter() - t0
    batch, entropy_metrics = old_logprob_pass(run, batch)
    t_old, t0 = time.perf_counter() - t0, time.perf_counter()
    metrics = update_policy(run.model, run.optimizer, batch, mini_batch_count=cfg.train.mini_batches,
                            epochs=cfg.train.epochs, **kwargs) if update else {}
    return {**entropy_metrics, **metrics}, t_old, time.perf_counter() - t0


def make_batch(collected: Collected, algo: stare.AlgoConfig, cfg: TrainConfig, *, pad_id: int,
               update: bool = True) -> Batch:
    """Rewards (+ overlong penalty), GRPO advantages, padding, DAPO truncation masking.

    The kept trajectories, or, when no process kept any (`update` false), every trajectory of the
    step with zero advantages (used only for the entropy; no update follows). A process that kept
    no group while others did gets placeholder rows (loss mask 0), so it joins the collectives and
    the gradient all-reduce without adding a token. With several processes every process holds at
    least `train.mini_batches` rows, so all run the same number of optimizer steps.
    """
    if not update:
        return collate(collected.all, torch.zeros(len(collected.all)), pad_id=pad_id)
    if not collected.kept:
        blank = collate(collected.all[:1], torch.zeros(1), pad_id=pad_id)
        blank = blank.with_(loss_mask=torch.zeros_like(blank.loss_mask))
        return placeholder_rows(blank, cfg.train.mini_batches)
    trajs = collected.kept
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    if algo.overlong_buffer > 0:
        lengths = torch.tensor([len(t.response_ids) for t in trajs])
        rewards = rewards + stare.overlong_penalty(lengths, cfg.rollout.max_response_tokens,
                                                   algo.overlong_buffer,
                                                   algo.overlong_penalty)
    group_ids = torch.tensor([t.group_id for t in trajs])
    advantages = stare.grpo_advantages(rewards, group_ids, norm_std=algo.norm_adv_by_std)
    batch = collate(trajs, advantages, pad_id=pad_id)
    if algo.mask_truncated:
        truncated = torch.tensor([t.finish_reason == "length" for t in trajs])
        batch = batch.with_(loss_mask=stare.truncated_mask(batch.loss_mask, truncated))
    if distributed.world_size() > 1 and batch.size < cfg.train.mini_batches:
        batch = placeholder_rows(batch, cfg.train.mini_batches)
    return batch


def fused(cfg: TrainConfig, processes: int = 1) -> bool:
    """Whether the update's own forward pass serves as the old-log-prob pass (on-policy, one process).

    With several processes the separate no-grad pass is used: the fused path runs every forward
    before any backward, which DDP's gradient reducer does not allow.
    """
    return (cfg.train.fuse_on_policy and cfg.train.mini_batches == 1 and cfg.train.epochs == 1
            and processes == 1)


def old_logprob_pass(run: Run, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """Pre-update log-probs and entropy (no grad, micro-batched), then `entropy_stage`."""
    cfg, acc = run.cfg, run.accelerator
    run.model.eval()
    old_logp, entropy = batch_logprobs(run.model, batch, cfg.rollout.temperature,
                                       token_budget=cfg.train.micro_batch_tokens, device=acc.device,
                                       by_length=cfg.train.sort_micro_batches)
    return entropy_stage(run, reference_pass(run, batch.with_(old_log_probs=old_logp, entropy=entropy)))


def reference_pass(run: Run, batch: Batch) -> Batch:
    """Reference-model log-probs for the KL term (a no-op without a reference model)."""
    if run.ref_model is None:
        return batch
    ref_logp, _ = batch_logprobs(run.ref_model, batch, run.cfg.rollout.temperature,
                                 token_budget=run.cfg.train.micro_batch_tokens, device=run.accelerator.device)
    return batch.with_(ref_log_probs=ref_logp)


def entropy_stage(run: Run, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """H̄ over loss-mask tokens, controller update, global-scope ω, per-turn entropy, quadrants.

    H̄ = Σ H_t·mask_t / Σ mask_t over the whole batch (all processes), mask = the trajectories'
    loss mask (tool output and glue excluded), the gate's input exactly as the reference defines it.
    `batch` carries the pre-update `old_log_probs` and `entropy`.
    """
    cfg, algo = run.cfg, run.algo
    old_logp, entropy, mask = batch.old_log_probs, batch.entropy, batch.loss_mask
    totals = distributed.all_sum(torch.stack([(entropy * mask).sum(), mask.sum()]).double())
    h_bar = float(totals[0] / totals[1]) if float(totals[1]) > 0 else float("nan")
    run.controller.update(h_bar)
    out: dict[str, float] = {"train/entropy": h_bar}
    if batch.rollout_log_probs is not None:   # rollout engine vs trainer, loss-mask tokens (docs/vllm.md)
        out.update(logprob_mismatch(old_logp, batch.rollout_log_probs, mask, reduce=distributed.all_sum))
        if cfg.rollout.tis_cap > 0:
            tis = tis_weights(old_logp, batch.rollout_log_probs, cfg.rollout.tis_cap)
            batch = batch.with_(tis_weights=tis)
    for turn, value in per_turn_means(entropy, mask, batch.turn_index,
                                      max_turns=cfg.rollout.max_turns).items():
        out[f"train/entropy_turn{turn}"] = value
    weights = None
    if algo.stare.scope == "global_batch":
        weights, stats = global_stare_weights(old_logp, batch, algo, run.controller)
        batch = batch.with_(weights=weights)
        out.update({key: float(value) for key, value in stats.items()})
    quadrants = stare.quadrant_metrics(old_logp, batch.advantages, mask, entropy,
                                       top_ratio=algo.stare.top_ratio or 0.1, weights=weights)
    out.update({key: float(value) for key, value in quadrants.items()})
    out["train/trained_tokens"] = float(mask.sum()) / max(1, batch.size)
    return batch, out


class _SilentLogger:
    """The metrics sink of processes other than 0 (they compute, process 0 writes)."""

    def log(self, record: dict[str, Any], *, kind: str = "metrics") -> None:
        """Drop the record."""

    def close(self) -> None:
        """Nothing to close."""


def _evaluate(run: Run, step: int, logger: MetricsLogger) -> dict[str, Any]:
    e = run.cfg.eval
    metrics = evaluate(lambda tasks, k, seed: run.play_eval(tasks, k, seed), run.model, run.eval_sets, k=e.k,
                       seed=e.seed, pad_id=run.pad_id, temperature=e.temperature,
                       token_budget=run.cfg.train.micro_batch_tokens, device=run.accelerator.device)
    record = {"step": step, "time": _elapsed(run), **metrics}
    logger.log(record, kind="eval")
    run.model.train()
    return record


def _save(run: Run, step: int) -> None:
    state = {"controller": run.controller.state_dict(), "stream": run.stream.state_dict(),
             "elapsed": _elapsed(run)}
    if run.prefetcher is not None:        # the next step's round, played ahead: part of the state
        state["prefetched"] = run.prefetcher.state_dict()
    save_checkpoint(run.run_dir, step, run.accelerator, state, keep=run.cfg.log.keep_checkpoints)


def _elapsed(run: Run) -> float:
    return run.elapsed_before + (time.perf_counter() - run.started if run.started else 0.0)
