"""The training config: frozen keyword-only dataclasses, one docstring per field, YAML + overrides.

`load_config("configs/cpu-tiny.yaml", ["algo=stare-o1", "seed=1", "train.steps=50"])` reads a YAML
preset, applies dotted `key=value` overrides, and validates everything. The algorithm section is
stare's own `AlgoConfig`, chosen by preset name (`algo=dapo`) and adjusted field by field
(`algo.clip_high=0.3`, `algo.stare.w=1.5`); its fields are documented once, in `stare/`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

import stare
from training.config_parse import ConfigError, build, deep_merge, did_you_mean, parse_override, set_dotted

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


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
    vllm_gpu_memory_utilization: float = 0.5
    """vLLM: fraction of the GPU memory the engine may take (colocated with the trainer: leave it room)."""
    vllm_enforce_eager: bool = True
    """vLLM: no CUDA graphs / torch.compile (fast start; false = faster generation after a long warm-up)."""
    vllm_tensor_parallel_size: int = 1
    """vLLM: GPUs the engine shards the model over."""
    vllm_dtype: str = ""
    """vLLM: engine dtype (empty = model.dtype)."""
    vllm_max_model_len: int = 0
    """vLLM: max prompt + response tokens per sequence (0 = the model's own limit)."""
    vllm_device_ids: tuple[int, ...] = ()
    """vLLM: physical GPU ids for the engine, e.g. [1] beside a trainer on GPU 0 (empty = colocated)."""

    def __post_init__(self) -> None:
        _positive(self, "prompts_per_step", "group_size", "max_new_tokens", "max_turns",
                  "max_response_tokens", "max_tool_tokens", "max_workers", "vllm_tensor_parallel_size")
        gpu_share = self.vllm_gpu_memory_utilization
        if self.tis_cap < 0 or not 0 < gpu_share <= 1 or self.vllm_max_model_len < 0:
            raise ValueError("rollout: need tis_cap >= 0 (0 = off), vllm_gpu_memory_utilization in (0, 1], "
                             f"vllm_max_model_len >= 0; got tis_cap={self.tis_cap}, "
                             f"vllm_gpu_memory_utilization={gpu_share}, "
                             f"vllm_max_model_len={self.vllm_max_model_len}")
        if self.async_steps not in (0, 1):
            raise ValueError(f"rollout.async_steps must be 0 (synchronous) or 1 (one-step off-policy), "
                             f"got {self.async_steps}")
        if self.max_prompt_tokens < 0 or self.prompt_truncation not in ("left", "error"):
            raise ValueError("rollout: need max_prompt_tokens >= 0 (0 = no limit) and prompt_truncation in "
                             f"('left', 'error'); got {self.max_prompt_tokens}, {self.prompt_truncation!r}")
        if self.history not in ("auto", "append", "per_turn"):
            raise ValueError(f"rollout.history must be auto, append or per_turn, got {self.history!r}")
        if self.max_live_episodes < 0:
            raise ValueError(f"rollout.max_live_episodes must be >= 0 (0 = all), "
                             f"got {self.max_live_episodes}")
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
        if self.lr <= 0 or self.grad_clip < 0 or self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("optim: need lr > 0, grad_clip >= 0, warmup_steps >= 0, min_lr_ratio in [0, 1]; "
                             f"got lr={self.lr}, grad_clip={self.grad_clip}, "
                             f"warmup_steps={self.warmup_steps}, "
                             f"min_lr_ratio={self.min_lr_ratio}")


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
    target_entropy: str = ""
    """Override of algo.stare.target_entropy: a number, `auto` (factor × warm-start entropy), or empty."""
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
        _positive(self, "steps", "mini_batches", "epochs", "micro_batch_tokens")
        if self.num_threads < 0:
            raise ValueError(f"train.num_threads must be >= 0, got {self.num_threads}")
        if self.target_entropy not in ("", "auto"):
            try:
                float(self.target_entropy)
            except ValueError:
                raise ValueError(f"train.target_entropy must be a number, 'auto' or empty, "
                                 f"got {self.target_entropy!r}") from None


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
        _positive(self, "k")
        if self.every < 0 or self.limit < 0:
            raise ValueError(f"eval.every and eval.limit must be >= 0, got {self.every}, {self.limit}")


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


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything one training run needs."""

    seed: int = 0
    """Seed of data order, rollout sampling and initialisation."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    data: DataConfig = field(default_factory=DataConfig)
    """Tasks and environment."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Episode sampling."""
    algo: stare.AlgoConfig = field(default_factory=lambda: stare.get_preset("stare-o1"))
    """The algorithm (a stare preset, chosen with algo=<name>, fields as algo.<key>=...)."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and schedule."""
    train: LoopConfig = field(default_factory=LoopConfig)
    """Training loop."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""
    log: LogConfig = field(default_factory=LogConfig)
    """Logging and checkpoints."""

    @property
    def run_name(self) -> str:
        """`log.name`, or <algo>-seed<seed> when it is empty."""
        return self.log.name or f"{algo_name(self.algo)}-seed{self.seed}"

    @property
    def run_path(self) -> Path:
        """<log.run_dir>/<run_name>."""
        return Path(self.log.run_dir).expanduser() / self.run_name


def algo_name(algo: Any) -> str:
    """The preset name recorded on an AlgoConfig (its `name` field), or 'custom'."""
    return str(getattr(algo, "name", "") or "custom")


def _positive(obj: Any, *names: str) -> None:
    section = type(obj).__name__.replace("Config", "").lower()
    for name in names:
        value = getattr(obj, name)
        if value < 1:
            raise ValueError(f"{section}.{name} must be >= 1, got {value}")


def resolve_path(path_or_name: str | Path) -> Path:
    """A YAML path, or a preset name looked up in configs/ (`cpu-tiny` -> configs/cpu-tiny.yaml)."""
    path = Path(path_or_name).expanduser()
    if path.is_file():
        return path
    candidate = CONFIG_DIR / f"{path_or_name}.yaml"
    if candidate.is_file():
        return candidate
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"config {str(path_or_name)!r} is neither a file nor a preset in {CONFIG_DIR}."
                      f"{did_you_mean(str(path_or_name), names)} Presets: {', '.join(names)}")


def load_config(path_or_name: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML preset (or start from defaults), apply `key=value` overrides, validate.

    Args:
        path_or_name: YAML file, preset name in configs/, or None for the defaults.
        overrides: dotted overrides, e.g. ["algo=stare-o1", "seed=1", "train.steps=50"].

    Returns:
        The frozen TrainConfig.

    Raises:
        ConfigError: unknown key (with did-you-mean), bad value (naming the allowed values),
            unknown algorithm preset.
    """
    tree: dict[str, Any] = {}
    if path_or_name is not None:
        path = resolve_path(path_or_name)
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping of sections, "
                              f"got {type(loaded).__name__}")
        tree = copy.deepcopy(dict(loaded))
    for text in overrides:
        keys, value = parse_override(text)
        if keys == ["algo"] and not isinstance(value, Mapping):
            keys = ["algo", "preset"]
        set_dotted(tree, keys, value)
    return from_dict(tree)


def from_dict(tree: Mapping[str, Any]) -> TrainConfig:
    """Build a TrainConfig from a nested dict; `algo` is a preset name or {preset: name, <field>: ...}."""
    tree = dict(tree)
    algo = tree.pop("algo", None)
    if isinstance(algo, str) or algo is None:
        algo = {"preset": algo or "stare-o1"}
    if not isinstance(algo, Mapping):
        raise ConfigError(f"algo must be a preset name ({', '.join(stare.PRESETS)}) or a mapping, "
                          f"got {algo!r}")
    algo = dict(algo)
    preset = str(algo.pop("preset", None) or algo.pop("name", None) or "stare-o1")
    if preset not in stare.PRESETS:
        hint = did_you_mean(preset, list(stare.PRESETS))
        raise ConfigError(f"algo={preset!r} is not a known preset.{hint} "
                          f"Choose one of {list(stare.PRESETS)}")
    target = (algo.get("stare") or {}).get("target_entropy") if isinstance(algo.get("stare"),
                                                                           Mapping) else None
    if isinstance(target, str):   # `algo.stare.target_entropy=auto` is routed to train.target_entropy
        algo["stare"] = {k: v for k, v in algo["stare"].items() if k != "target_entropy"}
        tree = deep_merge(tree, {"train": {"target_entropy": target}})
    algo_cfg = build(type(stare.get_preset(preset)), algo, where="algo", base=stare.get_preset(preset))
    cfg = build(TrainConfig, tree)
    return _replace_algo(cfg, algo_cfg)


def _replace_algo(cfg: TrainConfig, algo: Any) -> TrainConfig:
    import dataclasses
    return dataclasses.replace(cfg, algo=algo)


def dump_yaml(cfg: TrainConfig) -> str:
    """The full resolved config as YAML (written to <run>/config.yaml)."""
    from training.config_parse import to_dict
    data = to_dict(cfg)
    data["algo"] = {"preset": algo_name(cfg.algo), **{k: v for k, v in data["algo"].items() if k != "name"}}
    return yaml.safe_dump(data, sort_keys=False)
