"""`stare train CONFIG [key=value ...] [--resume]` and `stare eval CONFIG [key=value ...] [--model DIR]`.

Under `torchrun` / `accelerate launch` only process 0 prints (and writes `--out`); see `ranks`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from envs.sandbox import LazyLocalSandbox
from training import distributed, runtime
from training.bench.stats import mean_ci
from training.commands.plugins import import_plugins
from training.commands.ranks import echo_main, is_main_process
from training.config import TrainConfig, dump_yaml, load_config
from training.config_parse import ConfigError
from training.evaluate import evaluate, problem_accuracy
from training.sampling import PlayFn
from training.trainer import train as run_training

ConfigArg = Annotated[str, typer.Argument(help="YAML config file or preset name in configs/ (cpu-tiny).")]
OverridesArg = Annotated[list[str] | None, typer.Argument(
    help="Dotted overrides, e.g. algo=stare-o1 seed=1 train.steps=50 algo.stare.w=1.5.", show_default=False)]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the run from its latest checkpoint.")]
PrintOpt = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
ModelOpt = Annotated[Path | None, typer.Option(
    "--model", help="Model dir to evaluate (default: model.path; a run dir uses its model/ folder).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Also write the metrics as JSON here.")]
BaselineOpt = Annotated[Path | None, typer.Option(
    "--baseline", help="Also evaluate this model (a model or run dir, or preset:<name> such as the cached "
    "warm start preset:cpu-tiny) on the same problems and seeds, and report "
    "the paired gain of avg@k (model - baseline) with a 95% CI over problems.")]
ImportOpt = Annotated[list[str] | None, typer.Option(
    "--import", help="Module or .py file that registers envs (e.g. units_env.py).")]


def _load(config: str, overrides: list[str] | None) -> TrainConfig:
    try:
        return load_config(config, overrides or [])
    except ConfigError as err:
        typer.secho(f"config error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None


def train(config: ConfigArg, overrides: OverridesArg = None, resume: ResumeOpt = False,
          print_config: PrintOpt = False, plugin: ImportOpt = None) -> None:
    """Train a tool-using agent with STARE, DAPO or GRPO (metrics in runs/<name>/)."""
    import_plugins(plugin)
    cfg = _load(config, overrides)
    if print_config:
        echo_main(dump_yaml(cfg))
        return
    summary = run_training(cfg, resume=resume)
    echo_main(json.dumps({"run_dir": summary["run_dir"], "steps": summary["steps"],
                          "wall_s": round(summary["wall_s"], 1), "eval": summary["eval"]}, indent=1))


def eval(config: ConfigArg, overrides: OverridesArg = None,  # noqa: A001 - the command is `stare eval`
         model: ModelOpt = None, out: OutOpt = None, plugin: ImportOpt = None,
         baseline: BaselineOpt = None) -> None:
    """Evaluate a model: avg@k and pass@k on eval.tasks with validation sampling (T 1.0, top-p 0.7)."""
    import_plugins(plugin)
    cfg = _load(config, overrides)
    metrics = compare_models(cfg, baseline, model) if baseline is not None else evaluate_model(cfg, model)
    text = json.dumps(metrics, indent=1)
    if not is_main_process():
        return
    typer.echo(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def evaluate_model(cfg: TrainConfig, model_dir: Path | None = None) -> dict[str, float]:
    """`stare eval`: load a model (default `cfg.model.path`) and evaluate it on `cfg.eval.tasks`.

    Under `torchrun` / `accelerate launch` the accelerator joins the process group, so the problems
    are shared between the processes as in training (`training.evaluate.evaluate_set`); every
    process returns the same global metrics.

    Args:
        cfg: the config (eval, rollout limits, data.env and model settings are used).
        model_dir: a model directory, or a run directory holding `model/`; None = cfg.model.path.

    Returns:
        `eval/<set>/<metric>` for every set.
    """
    cfg = _with_model(cfg, model_dir)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    accelerator = runtime.make_accelerator(cfg)
    e = cfg.eval
    sets = {name: runtime.load_tasks(name, e.limit) for name in e.tasks}
    with _eval_player(cfg, accelerator.device) as (model, tokenizer, play):
        return evaluate(play, model, sets, k=e.k, seed=e.seed, pad_id=runtime.pad_id(tokenizer),
                        temperature=e.temperature, token_budget=cfg.train.micro_batch_tokens,
                        device=accelerator.device)


@contextmanager
def _eval_player(cfg: TrainConfig, device: torch.device) -> Iterator[tuple[Any, Any, PlayFn]]:
    """Yield (model, tokenizer, play) for an evaluation of `cfg.model.path` on `device`.

    The model is in eval mode; the player samples with `cfg.eval`'s temperature and top-p and uses
    the evaluation's own sandbox (started by the first tool call, closed on exit).
    """
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, runtime.resolve_model_dir(cfg))
    model = model.to(device).eval()
    with LazyLocalSandbox() as sandbox:
        yield model, tokenizer, runtime.make_player(
            cfg, runtime.make_policy(model, tokenizer), tokenizer, runtime.make_env_factory(cfg, sandbox),
            temperature=cfg.eval.temperature, top_p=cfg.eval.top_p, sandbox=sandbox)


def _with_model(cfg: TrainConfig, model_dir: Path | None) -> TrainConfig:
    """`cfg` with `model.path` = `model_dir`; None keeps it.

    A run directory means its `model/`; `preset:<name>` stays a preset (built or found in the cache).
    """
    if model_dir is None:
        return cfg
    path = Path(model_dir)
    path = path / "model" if (path / "model" / "config.json").is_file() else path
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(path)))


def compare_models(cfg: TrainConfig, baseline: Path, model_dir: Path | None = None) -> dict[str, float]:
    """`stare eval --baseline`: both models on the same problems, k samples and seeds; the paired gain.

    For each set with N problems, c_i / k per problem for the baseline (b_i) and the model (m_i):

        gain = (1/N) Σ_i (m_i − b_i),  95% CI = gain ± t_{0.975, N−1} · sd(m − b) / √N

    (problems are the units; k samples per problem and the seeds are shared). One process only.

    Returns:
        `eval/<set>/avg@k` (the model), `eval/<set>/baseline_avg@k`, `eval/<set>/gain`,
        `eval/<set>/gain_ci95_lo`, `eval/<set>/gain_ci95_hi`, `eval/<set>/num_problems`.
    """
    if distributed.world_size() > 1:
        raise typer.BadParameter("--baseline runs in one process (the paired scores are not sharded)")
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    device = runtime.make_accelerator(cfg).device
    e = cfg.eval
    sets = {name: runtime.load_tasks(name, e.limit) for name in e.tasks}
    scores: dict[tuple[str, str], list[float]] = {}
    for which, path in (("baseline", baseline), ("model", model_dir)):
        with _eval_player(_with_model(cfg, path), device) as (_, _, play):
            for name, tasks in sets.items():
                scores[which, name] = problem_accuracy(play, tasks, k=e.k, seed=e.seed)
    out: dict[str, float] = {}
    for name in sets:
        base, tuned = scores["baseline", name], scores["model", name]
        gain = mean_ci([m - b for b, m in zip(base, tuned, strict=True)])
        n = max(1, len(tuned))
        out |= {f"eval/{name}/avg@{e.k}": sum(tuned) / n, f"eval/{name}/baseline_avg@{e.k}": sum(base) / n,
                f"eval/{name}/gain": gain.mean, f"eval/{name}/gain_ci95_lo": gain.lo,
                f"eval/{name}/gain_ci95_hi": gain.hi, f"eval/{name}/num_problems": float(len(tuned))}
    return out


COMMANDS = [train, eval]
