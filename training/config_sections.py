"""The sections of the training config: frozen keyword-only dataclasses, one docstring per field.

Each section checks its own values when built and refuses absurd ones (a count below 1, a group of a
billion completions, lr <= 0), naming the dotted key and the allowed range. `training.config`
assembles them into `TrainConfig` and loads YAML and overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

MAX_PROMPTS = 1 << 16
"""Upper bound on prompts per step / round."""
MAX_GROUP = 1024
"""Upper bound on completions per prompt (rollout.group_size, eval.k)."""
MAX_TOKENS = 1 << 20
"""Upper bound on any per-episode token budget."""
MAX_BATCH_TOKENS = 1 << 24
"""Upper bound on the tokens of one micro-batch."""
MAX_TURNS = 1024
"""Upper bound on turns per episode and epochs per step."""
MAX_WORKERS = 1024
"""Upper bound on threads, workers and engine GPUs."""
MAX_STEPS = 100_000_000
"""Upper bound on training and warmup steps."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The policy model."""

    path: str = "preset:cpu-tiny"
    """Local HF model directory, or `preset:<name>` for a model built and cached locally (preset:cpu-tiny)."""
    tokenizer: str = ""
    """Tokenizer directory; empty = the model directory."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for training and rollouts."""
    cache_dir: str = ".cache/stare"
    """Where `preset:` models (and their warm starts) are built and cached (relative to the working dir)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory (large models)."""


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where prompts come from and which environment plays them."""

    env: str = "stare/PythonTool-v0"
    """Gymnasium id of the environment (registered by `import envs` or a `stare.envs` entry point)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for `envs.make(env, **env_kwargs)`, e.g. {prompt_template: plain}."""
    train_tasks: str = "countdown-train"
    """Task set name or path for `tasks.load`."""
    train_limit: int = 0
    """Use only the first N training tasks (0 = all)."""
    shuffle: bool = True
    """Reshuffle the training tasks every epoch (seeded by `seed` and the epoch)."""

    def __post_init__(self) -> None:
        if self.train_limit < 0:
            raise ValueError(f"data.train_limit must be >= 0 (0 = all), got {self.train_limit}")


@dataclass(frozen=True, kw_only=True)
class VLLMConfig:
    """The vLLM rollout engine (section `rollout.vllm`; used with `rollout.engine=vllm`)."""

    gpu_memory_utilization: float = 0.5
    """Fraction of the GPU memory the engine may take (colocated with the trainer: leave it room)."""
    enforce_eager: bool = True
    """No CUDA graphs / torch.compile (fast start; false = faster generation after a long warm-up)."""
    tensor_parallel_size: int = 1
    """GPUs the engine shards the model over."""
    dtype: str = ""
    """Engine dtype (empty = model.dtype)."""
    max_model_len: int = 0
    """Max prompt + response tokens per sequence (0 = the model's own limit)."""
    device_ids: tuple[int, ...] = ()
    """Physical GPU ids for the engine, e.g. [1] beside a trainer on GPU 0 (empty = colocated)."""

    def __post_init__(self) -> None:
        _positive("rollout.vllm", self, "tensor_parallel_size")
        _at_most("rollout.vllm", self, tensor_parallel_size=MAX_WORKERS, max_model_len=MAX_TOKENS)
        _need("rollout.vllm", self, 0 < self.gpu_memory_utilization <= 1 and self.max_model_len >= 0,
              "gpu_memory_utilization in (0, 1] and max_model_len >= 0",
              "gpu_memory_utilization", "max_model_len")


@dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """How training episodes are sampled."""

    prompts_per_step: int = 16
    """Prompt groups per training step (the train batch, in prompts)."""
    group_size: int = 8
    """Completions per prompt (n); GRPO advantages are computed within each group."""
    prompts_per_round: int = 0
    """Prompts drawn per generation round when dynamic sampling refills (0 = prompts_per_step)."""
    temperature: float = 1.0
    """Sampling temperature (log-probs and entropy are computed under it)."""
    top_p: float = 1.0
    """Nucleus mass for training rollouts (the reference trains with 1.0)."""
    top_k: int = -1
    """Top-k for training rollouts (-1 = off)."""
    max_new_tokens: int = 64
    """New tokens per assistant turn."""
    max_turns: int = 4
    """Assistant turns per episode."""
    max_response_tokens: int = 256
    """Total response tokens per episode (sampled + injected); beyond it the episode is truncated."""
    max_tool_tokens: int = 64
    """Tokens of one tool response kept in the context."""
    max_prompt_tokens: int = 0
    """Initial prompt tokens at most (verl's `data.max_prompt_length`; 0 = no limit). Only the rendered
    first prompt is limited; later context growth is bounded by max_response_tokens."""
    prompt_truncation: Literal["left", "error"] = "left"
    """Longer prompts: `left` keeps the last max_prompt_tokens ids (verl's truncation); `error` raises."""
    history: Literal["auto", "append", "per_turn"] = "auto"
    """`auto`: one token sequence per episode while the chat template only appends, one sample per turn once
    it rewrites history; `append`: raise on a rewrite; `per_turn`: always per-turn samples."""
    max_workers: int = 4
    """Threads running tool calls concurrently."""
    max_live_episodes: int = 0
    """Episodes played at once per rollout call (0 = all); bounds a round's memory (KV cache, sessions)."""
    drop_failed: bool = True
    """Drop episodes with a world failure (`failed`) or a verifier failure from the loss."""
    async_steps: int = 0
    """Policy lag of prefetched rounds: 0 = synchronous; 1 = step s+1's first round plays while step s
    trains (one-step off-policy, docs/training.md)."""
    engine: Literal["hf", "vllm"] = "hf"
    """Rollout engine: `hf` (the live model) or `vllm` (weights pushed in after each optimizer step)."""
    tis_cap: float = 0.0
    """Truncated importance sampling cap C: loss × min(π_old/π_rollout, C) per token (0 = off)."""
    vllm: VLLMConfig = field(default_factory=lambda: VLLMConfig())
    """The vLLM engine (`engine=vllm` only)."""

    def __post_init__(self) -> None:
        _positive("rollout", self, "prompts_per_step", "group_size", "max_new_tokens", "max_turns",
                  "max_response_tokens", "max_tool_tokens", "max_workers")
        _at_most("rollout", self, prompts_per_step=MAX_PROMPTS, prompts_per_round=MAX_PROMPTS,
                 group_size=MAX_GROUP, max_new_tokens=MAX_TOKENS, max_turns=MAX_TURNS,
                 max_response_tokens=MAX_TOKENS, max_tool_tokens=MAX_TOKENS, max_prompt_tokens=MAX_TOKENS,
                 max_workers=MAX_WORKERS, max_live_episodes=MAX_PROMPTS * MAX_GROUP)
        if self.tis_cap < 0:
            raise ValueError(f"rollout.tis_cap must be >= 0 (0 = off), got {self.tis_cap}")
        if self.async_steps not in (0, 1):
            raise ValueError(f"rollout.async_steps must be 0 (synchronous) or 1 (one-step off-policy), "
                             f"got {self.async_steps}")
        if self.max_prompt_tokens < 0 or self.prompt_truncation not in ("left", "error"):
            raise ValueError("rollout: need max_prompt_tokens >= 0 (0 = no limit) and prompt_truncation in "
                             f"('left', 'error'); got {self.max_prompt_tokens}, {self.prompt_truncation!r}")
        if self.history not in ("auto", "append", "per_turn"):
            raise ValueError(f"rollout.history must be auto, append or per_turn, got {self.history!r}")
        if self.max_live_episodes < 0 or self.prompts_per_round < 0:
            raise ValueError(f"rollout.max_live_episodes and rollout.prompts_per_round must be >= 0 "
                             f"(0 = all), got {self.max_live_episodes}, {self.prompts_per_round}")
        if self.group_size < 2:
            raise ValueError("rollout.group_size must be >= 2 for group-relative advantages, "
                             f"got {self.group_size}")
        if not 0 < self.top_p <= 1 or self.temperature <= 0:
            raise ValueError("rollout.top_p must be in (0, 1] and rollout.temperature > 0, "
                             f"got top_p={self.top_p}, temperature={self.temperature}")


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """AdamW and the learning-rate schedule."""

    lr: float = 1e-6
    """Peak learning rate (the reference: 1e-6 for 7B models)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    eps: float = 1e-8
    """AdamW epsilon."""
    grad_clip: float = 1.0
    """Max global gradient norm (0 = no clipping)."""
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate schedule after warmup, over `train.steps` training steps."""
    warmup_steps: int = 0
    """Linear warmup from 0, in training steps."""
    min_lr_ratio: float = 0.0
    """Final lr / peak lr for cosine and linear schedules."""

    def __post_init__(self) -> None:
        if not 0 < self.lr <= 1:
            raise ValueError(f"optim.lr must be in (0, 1] (e.g. 1e-6 for a 7B model), got {self.lr}")
        _need("optim", self, self.weight_decay >= 0 and self.eps > 0 and all(0 <= b < 1 for b in self.betas),
              "weight_decay >= 0, eps > 0 and betas in [0, 1)", "weight_decay", "eps", "betas")
        _at_most("optim", self, warmup_steps=MAX_STEPS)
        _need("optim", self, self.grad_clip >= 0 and self.warmup_steps >= 0 and 0 <= self.min_lr_ratio <= 1,
              "grad_clip >= 0, warmup_steps >= 0, min_lr_ratio in [0, 1]",
              "grad_clip", "warmup_steps", "min_lr_ratio")


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """The training loop (section `train`)."""

    steps: int = 100
    """Training steps (one rollout batch each)."""
    mini_batches: int = 1
    """Optimizer steps per training step (1 = on-policy, ratio ≡ 1, as the reference scripts)."""
    epochs: int = 1
    """Passes over the batch per training step."""
    micro_batch_tokens: int = 8192
    """Token budget (prompt + response, padded) of one forward/backward micro-batch."""
    target_entropy: float | Literal["auto"] | None = None
    """STARE's H_tgt for this run: a number, `auto` (factor × the warm-start entropy), or null (the
    algorithm preset's algo.stare.target_entropy)."""
    target_entropy_factor: float = 0.6
    """With target_entropy=auto: H_tgt = factor × the measured post-warm-start entropy."""
    sort_micro_batches: bool = False
    """Group rows of similar length into micro-batches: less padding (changes STARE micro-batch members)."""
    balance_micro_batches: bool = False
    """Balance rows over processes and micro-batches by real tokens, as the authors do (changes STARE's
    micro-batch populations)."""
    fuse_on_policy: bool = True
    """On-policy (1 mini-batch, 1 epoch): the update's forward pass doubles as the old-log-prob pass."""
    num_threads: int = 0
    """torch.set_num_threads for this process (0 = leave torch's default)."""
    cpu: bool = True
    """Force CPU even when a GPU is visible (the embedded default)."""

    def __post_init__(self) -> None:
        _positive("train", self, "steps", "mini_batches", "epochs", "micro_batch_tokens")
        _at_most("train", self, steps=MAX_STEPS, mini_batches=MAX_PROMPTS * MAX_GROUP, epochs=MAX_TURNS,
                 micro_batch_tokens=MAX_BATCH_TOKENS, num_threads=MAX_WORKERS)
        if self.num_threads < 0:
            raise ValueError(f"train.num_threads must be >= 0, got {self.num_threads}")
        if not 0 < self.target_entropy_factor <= 10:
            raise ValueError(f"train.target_entropy_factor must be in (0, 10], "
                             f"got {self.target_entropy_factor}")


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Held-out evaluation: avg@k and pass@k."""

    tasks: tuple[str, ...] = ("countdown-eval",)
    """Evaluation sets (names or paths for `tasks.load`); each is reported as eval/<set>/..."""
    limit: int = 0
    """Problems per set (0 = all)."""
    k: int = 4
    """Samples per problem for avg@k and pass@k."""
    every: int = 0
    """Evaluate every N training steps (0 = only at the end)."""
    at_start: bool = False
    """Also evaluate before the first step (step 0)."""
    at_end: bool = True
    """Evaluate after the last step."""
    temperature: float = 1.0
    """Validation temperature (the reference: 1.0)."""
    top_p: float = 0.7
    """Validation nucleus mass (the reference: 0.7)."""
    seed: int = 1234
    """Sampling seed of evaluation (the same at every evaluation, so curves compare)."""

    def __post_init__(self) -> None:
        _positive("eval", self, "k")
        _at_most("eval", self, k=MAX_GROUP)
        if self.every < 0 or self.limit < 0:
            raise ValueError(f"eval.every and eval.limit must be >= 0, got {self.every}, {self.limit}")
        if not 0 < self.top_p <= 1 or self.temperature <= 0:
            raise ValueError("eval.top_p must be in (0, 1] and eval.temperature > 0, "
                             f"got top_p={self.top_p}, temperature={self.temperature}")


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """Run directory, metrics sinks and checkpoints (section `log`)."""

    run_dir: str = "runs"
    """Parent directory of runs; a run writes to <run_dir>/<name>/."""
    name: str = ""
    """Run name; empty = <algo>-seed<seed>."""
    tensorboard: bool = True
    """Write TensorBoard event files to <run>/tb/."""
    progress: bool = True
    """Show a rich progress bar with ETA."""
    save_every: int = 0
    """Checkpoint every N steps (0 = only at the end)."""
    keep_checkpoints: int = 1
    """Checkpoints kept on disk (oldest deleted first)."""
    save_model: bool = True
    """Also save the final policy as an HF model directory <run>/model/."""
    overwrite: bool = False
    """Start fresh in a run directory that already has checkpoints (deleting them and the old metrics)."""

    def __post_init__(self) -> None:
        _positive("log", self, "keep_checkpoints")
        if self.save_every < 0:
            raise ValueError(f"log.save_every must be >= 0 (0 = only at the end), got {self.save_every}")


def _positive(section: str, obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 1:
            raise ValueError(f"{section}.{name} must be >= 1, got {value}")


def _need(section: str, obj: Any, ok: bool, rule: str, *names: str) -> None:
    """Unless `ok`, raise "<section>: need <rule>; got name=value, ..." for the fields `names`."""
    if not ok:
        got = ", ".join(f"{name}={getattr(obj, name)}" for name in names)
        raise ValueError(f"{section}: need {rule}; got {got}")


def _at_most(section: str, obj: Any, **caps: int) -> None:
    for name, cap in caps.items():
        value = getattr(obj, name)
        if value > cap:
            raise ValueError(f"{section}.{name}={value} is out of range: it must be at most {cap}; "
                             "check the value (a typo or a wrong unit)")
