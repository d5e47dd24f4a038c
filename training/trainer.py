"""The STARE / DAPO / GRPO trainer: `train(cfg) -> summary`. The step reads top to bottom in `train_step`.

One training step, each stage a call into a module with one job:

    1. collect     prompts (seeded cursor) -> groups of n episodes -> rewards; DAPO dynamic sampling
                   refills rounds until enough groups have reward variance     (training.sampling)
    2. advantages  (+ DAPO overlong penalty) GRPO advantages, padded batch     (training.advantages)
    3. forward     π_old and token entropy of the whole batch: a no-grad pass, or, fused (on-policy,
                   one process), the update's own forward with grad            (training.logprobs)
    4. gate        H̄ = token mean of the entropy over loss-mask tokens -> controller.update(H̄)
                   (training.gate)
    5. weights     TIS weights and, at global scope, STARE ω over the batch   (training.weights)
    6. loss        per micro-batch: ω (micro scope) · w_TIS -> policy loss (+ KL, entropy terms)
    7. step        backward; clip and optimizer step per mini-batch           (training.update)

then metrics (JSONL, TensorBoard, progress), evaluation and checkpoints (`fit`).

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
from envs.sandbox import LazyLocalSandbox
from training import alarm, runtime
from training.advantages import make_batch
from training.async_rollout import RolloutPrefetcher, make_prefetcher
from training.batch import Batch
from training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from training.config import TrainConfig, dump_yaml
from training.distributed import rollout_model
from training.evaluate import evaluate
from training.gate import diagnostics, entropy_gate
from training.logprobs import batch_logprobs, forward_pass
from training.metrics import MetricsLogger, SilentLogger, step_record
from training.sampling import Collected, CollectSettings, PlayFn, TaskStream, collect, round_seed, share
from training.update import UpdateSettings, needs_entropy_grad, update_policy
from training.weights import batch_weights


@dataclass
class RunState:
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
    play_train: PlayFn
    play_eval: PlayFn
    eval_sets: dict[str, list[Any]]
    ref_model: Any
    pad_id: int
    run_dir: Path
    collect: CollectSettings
    """Rollout-stage settings (prompts, group size, dynamic sampling)."""
    update: UpdateSettings
    """Forward-pass and update settings (micro-/mini-batching, clipping, fused or not)."""
    start_step: int = 0
    elapsed_before: float = 0.0
    """Seconds of training done before this process (resume)."""
    started: float = 0.0
    prefetcher: RolloutPrefetcher | None = None
    """Plays the next step's first round during the update (`rollout.async_steps=1`)."""
    entropy_ctl: stare.EntropyCoefController | None = None
    """The adaptive entropy-bonus weight (algo.entropy_adaptive), fed the gate's H̄."""
    sandbox: LazyLocalSandbox | None = None
    """The run's own code sandbox, handed to every env; sized by each rollout call, closed by `fit`."""
    on_batch: Any = None
    """Optional `(run, step, collected, batch) -> metrics`, called before the update; its metrics join
    the step's record (the bench's all-episode entropy and counterfactual probes, `training.bench`)."""


def setup(cfg: TrainConfig, *, resume: bool = False) -> RunState:
    """Build model, optimizer, envs and data; restore the latest checkpoint when resuming."""
    accelerator = _start(cfg, resume=resume)
    model_dir = runtime.resolve_model_dir(cfg)
    algo = runtime.resolve_algo(cfg, model_dir)
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, model_dir)
    optimizer, scheduler = runtime.make_optimizer(cfg, model)
    ref = runtime.reference_model(model).to(accelerator.device) if algo.kl_coef > 0 else None
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    sandbox = LazyLocalSandbox()        # started by the first tool call, if any
    play_train, play_eval, prefetcher = _players(cfg, accelerator, model, tokenizer, model_dir, sandbox)
    stream = TaskStream(runtime.load_tasks(cfg.data.train_tasks, cfg.data.train_limit), seed=cfg.seed,
                        shuffle=cfg.data.shuffle, rank=accelerator.process_index,
                        world_size=accelerator.num_processes)
    eval_sets = {name: runtime.load_tasks(name, cfg.eval.limit) for name in cfg.eval.tasks}
    run = RunState(cfg=cfg, algo=algo, accelerator=accelerator, model=model, optimizer=optimizer,
                   scheduler=scheduler, tokenizer=tokenizer, controller=runtime.controller_for(algo),
                   stream=stream, play_train=play_train, play_eval=play_eval, eval_sets=eval_sets,
                   ref_model=ref, pad_id=runtime.pad_id(tokenizer), run_dir=cfg.run_path,
                   prefetcher=prefetcher,
                   collect=CollectSettings.from_config(cfg, algo),
                   update=UpdateSettings.from_config(cfg, accelerator.num_processes),
                   entropy_ctl=runtime.entropy_controller_for(algo), sandbox=sandbox)
    checkpoint = latest_checkpoint(run.run_dir) if resume else None
    if checkpoint is not None:
        _restore(run, load_checkpoint(checkpoint, accelerator))
    if accelerator.is_main_process:
        (run.run_dir / "config.yaml").write_text(dump_yaml(cfg))
    return run


def _start(cfg: TrainConfig, *, resume: bool) -> Any:
    """Checks, threads, the accelerator, the run directory and the seed; returns the accelerator."""
    runtime.check_config(cfg)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    accelerator = runtime.make_accelerator(cfg)
    _check_sharding(cfg, accelerator.num_processes)
    if accelerator.is_main_process:
        runtime.prepare_run_dir(cfg.run_path, resume=resume, overwrite=cfg.log.overwrite)
    accelerator.wait_for_everyone()
    from transformers import set_seed
    set_seed(cfg.seed)
    return accelerator


def _players(cfg: TrainConfig, accelerator: Any, model: Any, tokenizer: Any, model_dir: Path,
             sandbox: LazyLocalSandbox) -> tuple[PlayFn, PlayFn, RolloutPrefetcher | None]:
    """The training and evaluation players over the rollout policy, and the prefetcher (async_steps=1).

    Their envs get `sandbox` (`runtime.make_env_factory`) and each call sizes it (`runtime.make_player`).
    """
    policy = runtime.make_policy(rollout_model(cfg, accelerator, model), tokenizer, cfg, model_dir)
    make_env = runtime.make_env_factory(cfg, sandbox)
    r, e = cfg.rollout, cfg.eval

    def train_player(rollout_policy: Any) -> PlayFn:   # the training sampling, over any policy
        return runtime.make_player(cfg, rollout_policy, tokenizer, make_env, temperature=r.temperature,
                                   top_p=r.top_p, top_k=r.top_k, sandbox=sandbox)
    play_train = train_player(policy)
    play_eval = runtime.make_player(cfg, policy, tokenizer, make_env, temperature=e.temperature,
                                    top_p=e.top_p, sandbox=sandbox)
    prefetcher = None
    if r.async_steps:
        prefetcher = make_prefetcher(cfg, accelerator, accelerator.unwrap_model(model), tokenizer, policy,
                                     train_player)
    return play_train, play_eval, prefetcher


def _restore(run: RunState, state: dict[str, Any]) -> None:
    """Controllers, data cursor, step, elapsed time, prefetched round and lr schedule from a checkpoint."""
    run.controller.load_state_dict(state["controller"])
    if run.entropy_ctl is not None and "entropy_ctl" in state:
        run.entropy_ctl.load_state_dict(state["entropy_ctl"])
    run.stream.load_state_dict(state["stream"])
    run.start_step, run.elapsed_before = int(state["step"]), float(state["elapsed"])
    _restore_prefetched(run, state.get("prefetched"))
    runtime.sync_schedule(run.scheduler)


def _restore_prefetched(run: RunState, state: dict[str, Any] | None) -> None:
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


def train(cfg: TrainConfig, *, resume: bool = False) -> dict[str, Any]:
    """Train with `cfg`; with `resume`, continue from the run's latest checkpoint exactly.

    Returns:
        Summary: run_dir, steps, wall_s, `final` (the last step record) and `eval` (the last
        evaluation record, or {}).
    """
    existed = cfg.run_path.exists()
    try:
        run = setup(cfg, resume=resume)
    except BaseException:
        if not existed:   # a failed setup leaves no empty run directory behind
            shutil.rmtree(cfg.run_path, ignore_errors=True)
        raise
    return fit(run)


def fit(run: RunState) -> dict[str, Any]:
    """The training loop over a prepared `RunState` (steps, evaluation, checkpoints, final model)."""
    cfg = run.cfg
    logger: Any = SilentLogger()
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
        if run.sandbox is not None:
            run.sandbox.close()
    if cfg.log.save_model:
        state = run.accelerator.get_state_dict(run.model)   # collective under FSDP / ZeRO-3: all processes
        if run.accelerator.is_main_process:
            out = str(run.run_dir / "model")
            run.accelerator.unwrap_model(run.model).save_pretrained(out, state_dict=state)
            run.tokenizer.save_pretrained(out)
    return {"run_dir": str(run.run_dir), "steps": cfg.train.steps, "wall_s": _elapsed(run),
            "final": last, "eval": last_eval}


def train_step(run: RunState, step: int) -> dict[str, Any]:
    """One training step, stages 1-7 of the module docstring; returns its metrics record."""
    cfg, t_step = run.cfg, time.perf_counter()
    lr = float(run.scheduler.get_last_lr()[0])
    collected = rollout_stage(run, step)                                                     # 1. collect
    trains = collected.groups_kept > 0     # global: every process takes the same branch
    batch = make_batch(collected, run.algo, cfg, pad_id=run.pad_id, update=trains)          # 2. advantages
    observed = run.on_batch(run, step, collected, batch) if run.on_batch is not None else {}
    prefetch_next(run, step)             # rollout.async_steps=1: the next round plays during the update
    t_old = time.perf_counter()
    fused = trains and run.update.fused
    forward = forward_pass(run.model, batch, run.update.temperature, token_budget=run.update.token_budget,
                           device=run.accelerator.device, by_length=run.update.by_length, fused=fused,
                           entropy_grad=needs_entropy_grad(run.algo),
                           balance=run.update.balance)                                      # 3. forward
    batch = reference_pass(run, batch.with_(old_log_probs=forward.log_probs, entropy=forward.entropy))
    h_bar = entropy_gate(run.controller, batch, feed=trains, bonus=run.entropy_ctl)         # 4. gate
    batch, weight_stats = batch_weights(batch, run.algo, run.controller,
                                        tis_cap=cfg.rollout.tis_cap)                        # 5. weights
    seen = diagnostics(batch, run.algo, h_bar, max_turns=cfg.rollout.max_turns)
    t_update = time.perf_counter()
    learned = update_policy(run.model, run.optimizer, batch, run.update, algo=run.algo,   # 6-7. loss, step
                            controller=run.controller, accelerator=run.accelerator,
                            forward=forward, entropy_coef=_bonus(run)) if trains else {}
    with warnings.catch_warnings():   # a step without an update still advances the schedule
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        run.scheduler.step()
    now = time.perf_counter()
    seconds = {"old_logprob": 0.0 if fused else t_update - t_old,   # fused: the forward is the update's
               "update": now - (t_old if fused else t_update), "step": now - t_step, "time": _elapsed(run)}
    bonus = run.entropy_ctl.metrics() if run.entropy_ctl is not None else {}
    return step_record(step, collected, {**seen, **weight_stats, **learned, **run.controller.metrics(),
                                         **bonus, **observed, **alarm.check(run, step, collected)},
                       lr=lr, seconds=seconds)


def _bonus(run: RunState) -> float | None:
    """This step's entropy-bonus weight: the adaptive controller's, or None (algo.entropy_coef)."""
    return run.entropy_ctl.applied if run.entropy_ctl is not None else None


def rollout_stage(run: RunState, step: int) -> Collected:
    """Play this step's groups (DAPO dynamic sampling refills when the algorithm asks for it).

    With a prefetcher, round 0 was played ahead (during the previous update); `rollout_s` then
    counts the time spent waiting for it, and `prefetch_s` the time it took in the rollout thread.
    """
    t0 = time.perf_counter()
    first = run.prefetcher.take(step) if run.prefetcher is not None else None
    waited = time.perf_counter() - t0
    collected = collect(run.play_train, run.stream, run.collect, step=step, first_round=first)
    collected.rollout_s += waited
    collected.prefetch_s = first.seconds if first is not None else 0.0
    return collected


def prefetch_next(run: RunState, step: int) -> None:
    """Start round 0 of step + 1 in the rollout thread, with the weights as they are now.

    Takes the round's prompts from the data cursor now, which is where the synchronous loop
    would take them (after this step's refill rounds), and seeds it as `collect` would.
    """
    c = run.collect
    if run.prefetcher is None or step >= run.cfg.train.steps:
        return
    tasks = run.stream.take(c.round_size(run.stream.world_size))
    run.prefetcher.launch(step + 1, tasks, c.group_size, round_seed(c.seed, step + 1, 0, run.stream.rank))


def reference_pass(run: RunState, batch: Batch) -> Batch:
    """Reference-model log-probs for the KL term (a no-op without a reference model)."""
    if run.ref_model is None:
        return batch
    ref_logp, _ = batch_logprobs(run.ref_model, batch, run.cfg.rollout.temperature,
                                 token_budget=run.cfg.train.micro_batch_tokens, device=run.accelerator.device)
    return batch.with_(ref_log_probs=ref_logp)


def _evaluate(run: RunState, step: int, logger: MetricsLogger) -> dict[str, Any]:
    e = run.cfg.eval
    metrics = evaluate(lambda tasks, k, seed: run.play_eval(tasks, k, seed), run.model, run.eval_sets, k=e.k,
                       seed=e.seed, pad_id=run.pad_id, temperature=e.temperature,
                       token_budget=run.cfg.train.micro_batch_tokens, device=run.accelerator.device)
    record = {"step": step, "time": _elapsed(run), **metrics}
    logger.log(record, kind="eval")
    run.model.train()
    return record


def _save(run: RunState, step: int) -> None:
    state = {"controller": run.controller.state_dict(), "stream": run.stream.state_dict(),
             "elapsed": _elapsed(run)}
    if run.entropy_ctl is not None:
        state["entropy_ctl"] = run.entropy_ctl.state_dict()
    if run.prefetcher is not None:        # the next step's round, played ahead: part of the state
        state["prefetched"] = run.prefetcher.state_dict()
    save_checkpoint(run.run_dir, step, run.accelerator, state, keep=run.cfg.log.keep_checkpoints)


def _elapsed(run: RunState) -> float:
    return run.elapsed_before + (time.perf_counter() - run.started if run.started else 0.0)
