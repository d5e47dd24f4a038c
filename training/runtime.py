"""Build what a run needs from its config: model, tokenizer, accelerator, optimizer, schedule, envs, tasks.

Nothing here trains; `training.trainer` calls these once at start-up.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import agents
import envs
import stare
import tasks
from envs.sandbox import LazyLocalSandbox
from training import preset
from training.checkpoint import prepare_resume
from training.config import TrainConfig
from training.rollout_engine import make_vllm_policy
from training.sampling import PlayFn

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_dir(cfg: TrainConfig) -> Path:
    """`model.path` as a local directory; `preset:<name>` is built or found in the cache (training.preset)."""
    spec = cfg.model.path
    if spec.startswith("preset:"):
        return Path(preset.resolve_model_path(spec, Path(cfg.model.cache_dir).expanduser()))
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"model.path={spec!r} is not a directory. Give a local HF model directory "
                                "(nothing is downloaded at run time) or a preset such as preset:cpu-tiny")
    return path


def resolve_algo(cfg: TrainConfig, model_dir: Path) -> stare.AlgoConfig:
    """cfg.algo with `train.target_entropy` applied (a number, or `auto` from the warm start)."""
    value = cfg.train.target_entropy
    if value is None:
        return cfg.algo
    if value == "auto":
        target = float(preset.resolve_target_entropy(model_dir, cfg.train.target_entropy_factor))
    else:
        target = float(value)
    return cfg.algo.replace(stare=cfg.algo.stare.replace(target_entropy=target))


def load_model_and_tokenizer(cfg: TrainConfig, model_dir: Path) -> tuple[Any, Any]:
    """The policy (train mode) and its tokenizer, from local files only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(Path(cfg.model.tokenizer or model_dir).expanduser()))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=_DTYPES[cfg.model.dtype])
    if cfg.model.gradient_checkpointing:   # renamed activation checkpointing in transformers 5
        enable = (getattr(model, "activation_checkpointing_enable", None)
                  or model.gradient_checkpointing_enable)
        enable()
    model.train()
    return model, tokenizer


def pad_id(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its eos id."""
    value = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if value is None:
        raise ValueError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
    return int(value)


def make_accelerator(cfg: TrainConfig) -> Any:
    """An `accelerate.Accelerator`: CPU unless train.cpu=false; DDP/FSDP/DeepSpeed via `accelerate launch`."""
    from accelerate import Accelerator
    return Accelerator(cpu=cfg.train.cpu)


def make_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW and a LambdaLR schedule: linear warmup, then constant / cosine / linear to min_lr_ratio."""
    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))


def lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    """lr(step)/peak: step/warmup during warmup, then the schedule over the remaining steps."""
    o, total = cfg.optim, cfg.train.steps

    def factor(step: int) -> float:
        if o.warmup_steps and step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        if o.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - o.warmup_steps) / max(1, total - o.warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if o.schedule == "cosine" else 1.0 - progress
        return o.min_lr_ratio + (1 - o.min_lr_ratio) * shape
    return factor


def sync_schedule(scheduler: Any) -> None:
    """Set the optimizer's lr from the *current* schedule at the restored step.

    A checkpoint stores the lr its own run computed; when the resumed run has another length
    (`train.steps=3`, then `train.steps=6`), the cosine/linear schedule differs, and the next step must
    use the new one, exactly as a straight run of that length would.
    """
    inner = getattr(scheduler, "scheduler", scheduler)      # accelerate wraps the torch scheduler
    groups = inner.optimizer.param_groups
    for group, base, fn in zip(groups, inner.base_lrs, inner.lr_lambdas, strict=False):
        group["lr"] = base * fn(inner.last_epoch)
    inner._last_lr = [group["lr"] for group in groups]


def make_env_factory(cfg: TrainConfig, sandbox: LazyLocalSandbox | None = None) -> Callable[[], Any]:
    """A zero-argument env constructor for `agents.rollout_batch` (one env per episode).

    Every env gets `sandbox=sandbox` (the run's own, passed in by the caller) when its constructor
    takes a `sandbox` argument whose value would be "local" (the process-wide shared sandbox); an
    explicit URL or sandbox object in `data.env_kwargs` is kept.
    """
    env_id, kwargs = cfg.data.env, dict(cfg.data.env_kwargs)
    probe = envs.make(env_id, **kwargs)   # fail now, with the registry's message, on a bad id or kwargs
    try:
        if sandbox is not None and _plays_local_sandbox(probe, kwargs):
            kwargs["sandbox"] = sandbox
    finally:
        probe.close()
    return lambda: envs.make(env_id, **kwargs)


def _plays_local_sandbox(env: Any, kwargs: dict[str, Any]) -> bool:
    """Whether `env` was built with sandbox="local": from `kwargs`, the registered ones, or the default."""
    spec = getattr(env, "spec", None)
    given = {**(spec.kwargs if spec is not None else {}), **kwargs}
    param = inspect.signature(type(env.unwrapped)).parameters.get("sandbox")
    value = given.get("sandbox", param.default if param is not None else None)
    return isinstance(value, str) and value == "local"


def load_tasks(name: str, limit: int = 0) -> list[Any]:
    """`tasks.load(name)`, cut to the first `limit` (0 = all)."""
    return list(tasks.load(name, limit=limit or None))


def make_player(cfg: TrainConfig, policy: Any, tokenizer: Any, make_env: Callable[[], Any], *,
                temperature: float, top_p: float, top_k: int = -1,
                sandbox: LazyLocalSandbox | None = None) -> PlayFn:
    """(tasks, group_size, seed) -> trajectories via `agents.rollout_batch` with fixed sampling and limits.

    Limits come from `cfg.rollout`: max_turns, max_response_tokens, max_tool_tokens and the initial
    prompt's max_prompt_tokens / prompt_truncation (0 = no limit); `rollout.history` picks append-only
    or per-turn samples (`agents.rollout_batch`). Each call first makes room in `sandbox`
    (the run's own, which `make_env_factory` hands to the envs; not started if no code runs) for the
    episodes it plays at once: len(tasks) × group_size, or whole groups of at most
    rollout.max_live_episodes episodes when that is set.
    """
    r = cfg.rollout
    sampling = agents.SamplingParams(max_tokens=r.max_new_tokens, temperature=temperature, top_p=top_p,
                                     top_k=top_k)
    limits = agents.RolloutLimits(max_turns=r.max_turns, max_response_tokens=r.max_response_tokens,
                                  max_tool_output_tokens=r.max_tool_tokens,
                                  max_prompt_tokens=r.max_prompt_tokens or None,
                                  prompt_truncation=r.prompt_truncation)

    def play(task_list: list[Any], group_size: int, seed: int) -> list[Any]:
        per_call = max(1, len(task_list))
        if r.max_live_episodes:
            per_call = max(1, r.max_live_episodes // group_size)
        if sandbox is not None:
            sandbox.reserve_sessions(min(per_call, len(task_list)) * group_size)
        chunks = [agents.rollout_batch(make_env, policy, tokenizer, task_list[lo:lo + per_call],
                                       group_size=group_size, sampling=sampling, limits=limits,
                                       seed=seed + lo * group_size, max_workers=r.max_workers,
                                       history=r.history)
                  for lo in range(0, len(task_list), per_call)]   # episode i keeps env seed `seed + i`
        return chunks[0] if len(chunks) == 1 else _concat(chunks)
    return play


def _concat(chunks: list[Any]) -> Any:
    """One `agents.RolloutBatch` from several, with their time statistics summed."""
    out = agents.RolloutBatch(t for chunk in chunks for t in chunk)
    stats = agents.RolloutStats()
    for chunk in chunks:
        for f in dataclasses.fields(stats):
            setattr(stats, f.name, getattr(stats, f.name) + getattr(chunk.stats, f.name))
    out.stats = stats
    return out


def make_policy(model: Any, tokenizer: Any, cfg: TrainConfig | None = None,
                model_dir: Path | None = None) -> Any:
    """The rollout policy: rollouts always use the current weights.

    `rollout.engine=hf` (or no `cfg`): an `agents.HFPolicy` over the live model (no copy).
    `rollout.engine=vllm`: a `training.rollout_engine.SyncedVLLMPolicy`, a vLLM engine built from
    `model_dir` into which the weights are pushed after every optimizer step (docs/vllm.md).
    """
    eos = tokenizer.eos_token_id
    if cfg is not None and cfg.rollout.engine == "vllm":
        if model_dir is None:
            raise ValueError("rollout.engine=vllm: make_policy needs model_dir (the engine loads it)")
        return make_vllm_policy(cfg, model, model_dir, eos_token_ids=[eos])
    return agents.HFPolicy(model, eos_token_ids=[eos], pad_token_id=pad_id(tokenizer))


def check_config(cfg: TrainConfig) -> None:
    """Cross-section checks that no single section can make."""
    a, r = cfg.algo, cfg.rollout
    if a.overlong_buffer > r.max_response_tokens:
        raise ValueError(f"algo.overlong_buffer={a.overlong_buffer} exceeds rollout.max_response_tokens="
                         f"{r.max_response_tokens}; set algo.overlong_buffer to at most "
                         f"{r.max_response_tokens} "
                         "(DAPO uses 1/5 of the budget) or 0 to disable the overlong penalty")
    t = cfg.train
    if a.stare.enabled and a.stare.scope == "global_batch" and (t.mini_batches > 1 or t.epochs > 1):
        raise ValueError(f"algo.stare.scope=global_batch computes ω once from the pre-update log-probs, "
                         f"which go stale after the first optimizer step (train.mini_batches="
                         f"{t.mini_batches}, train.epochs={t.epochs}); use algo.stare.scope=micro_batch "
                         "(ω from the current log-probs), or one mini-batch and one epoch")
    if t.balance_micro_batches and t.sort_micro_batches:
        raise ValueError("train.balance_micro_batches and train.sort_micro_batches are two ways to form "
                         "micro-batches; set one of them to false")


def controller_for(algo: stare.AlgoConfig) -> stare.Controller:
    """The STARE controller from algo.stare (built for every algorithm, so gate/W/M are always logged)."""
    s = algo.stare
    return stare.Controller(s.target_entropy, s.w, s.m, adaptive=s.adaptive, alpha=s.alpha, w_max=s.w_max,
                            m_min=s.m_min)


def entropy_controller_for(algo: stare.AlgoConfig) -> stare.EntropyCoefController | None:
    """The adaptive entropy-bonus controller (Skywork-OR1) when algo.entropy_adaptive, else None."""
    if not algo.entropy_adaptive:
        return None
    return stare.EntropyCoefController(algo.entropy_coef, algo.entropy_target, delta=algo.entropy_coef_delta,
                                       coef_min=algo.entropy_coef_min, coef_max=algo.entropy_coef_max)


def reference_model(model: Any) -> Any:
    """A frozen copy of the initial policy for the KL term (only built when algo.kl_coef > 0)."""
    import copy
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def prepare_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Make the run directory; a fresh run clears an old one's outputs (refused if it holds checkpoints).

    A resumed run is first made safe to resume (`training.checkpoint.prepare_resume`: stale
    temporaries, torn log lines, damaged newer checkpoints repaired or moved aside, never lost).
    """
    if resume:
        prepare_resume(run_dir)
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
