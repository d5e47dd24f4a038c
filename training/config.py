"""The training config: frozen keyword-only dataclasses, one docstring per field, YAML + overrides.

`load_config("configs/cpu-tiny.yaml", ["algo=stare-o1", "seed=1", "train.steps=50"])` reads a YAML
preset, applies dotted `key=value` overrides, and validates everything. The algorithm section is
stare's own `AlgoConfig`, chosen by preset name (`algo=dapo`) and adjusted field by field
(`algo.clip_high=0.3`, `algo.stare.w=1.5`); its fields are documented once, in `stare/`.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import stare
from training.config_parse import (
    ConfigError,
    build,
    deep_merge,
    did_you_mean,
    parse_override,
    set_dotted,
    to_dict,
)
from training.config_sections import (
    DataConfig,
    EvalConfig,
    LogConfig,
    LoopConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
)

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


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
    tree, algo = _upgrade(tree, algo)
    algo_cfg = build(type(stare.get_preset(preset)), algo, where="algo", base=stare.get_preset(preset))
    cfg = build(TrainConfig, tree)
    return _replace_algo(cfg, algo_cfg)


VLLM_KEYS = ("gpu_memory_utilization", "enforce_eager", "tensor_parallel_size", "dtype", "max_model_len",
             "device_ids")
"""The `rollout.vllm.*` keys, once flat `rollout.vllm_*` keys (still read, with a deprecation message)."""


def _upgrade(tree: dict[str, Any], algo: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Move keys of older configs to their current place (with a deprecation message naming the new key).

    `rollout.vllm_<key>` -> `rollout.vllm.<key>`; `algo.stare.target_entropy=auto` ->
    `train.target_entropy=auto`; `algo.dynamic_sampling_metric` (never read) is dropped; an empty
    `train.target_entropy` (older run dumps) means null.
    """
    rollout = dict(tree.get("rollout") or {}) if isinstance(tree.get("rollout"), Mapping) else None
    if rollout is not None:
        for key in VLLM_KEYS:
            if f"vllm_{key}" in rollout:
                _deprecated(f"rollout.vllm_{key}", f"rollout.vllm.{key}")
                rollout = deep_merge(rollout, {"vllm": {key: rollout.pop(f"vllm_{key}")}})
        tree = {**tree, "rollout": rollout}
    stare_part = algo.get("stare")
    if isinstance(stare_part, Mapping) and isinstance(stare_part.get("target_entropy"), str):
        _deprecated("algo.stare.target_entropy=auto", "train.target_entropy=auto")
        algo = {**algo, "stare": {k: v for k, v in stare_part.items() if k != "target_entropy"}}
        tree = deep_merge(tree, {"train": {"target_entropy": stare_part["target_entropy"]}})
    if "dynamic_sampling_metric" in algo:
        _deprecated("algo.dynamic_sampling_metric", "nothing (it was never read; the filter reads accuracy)")
        algo = {k: v for k, v in algo.items() if k != "dynamic_sampling_metric"}
    train = tree.get("train")
    if isinstance(train, Mapping) and train.get("target_entropy") == "":
        tree = deep_merge(tree, {"train": {"target_entropy": None}})
    return tree, algo


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"config key {old} is deprecated and will be removed; use {new}", FutureWarning,
                  stacklevel=4)


def _replace_algo(cfg: TrainConfig, algo: Any) -> TrainConfig:
    return dataclasses.replace(cfg, algo=algo)


def dump_yaml(cfg: TrainConfig) -> str:
    """The full resolved config as YAML (written to <run>/config.yaml)."""
    data = to_dict(cfg)
    data["algo"] = {"preset": algo_name(cfg.algo), **{k: v for k, v in data["algo"].items() if k != "name"}}
    return yaml.safe_dump(data, sort_keys=False)
