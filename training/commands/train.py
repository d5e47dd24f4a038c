"""`stare train CONFIG [key=value ...] [--resume]` and `stare eval CONFIG [key=value ...] [--model DIR]`.

Under `torchrun` / `accelerate launch` only process 0 prints (and writes `--out`); see `ranks`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import torch
import typer

from envs.sandbox import LazyLocalSandbox
from training import runtime
from training.commands.ranks import echo_main, is_main_process
from training.config import TrainConfig, dump_yaml, load_config
from training.config_parse import ConfigError
from training.evaluate import evaluate
from training.trainer import train as run_training

ConfigArg = Annotated[str, typer.Argument(help="YAML config file or preset name in configs/ (cpu-tiny).")]
OverridesArg = Annotated[list[str] | None, typer.Argument(
    help="Dotted overrides, e.g. algo=stare-o1 seed=1 train.steps=50 algo.stare.w=1.5.", show_default=False)]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the run from its latest checkpoint.")]
PrintOpt = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
ModelOpt = Annotated[Path | None, typer.Option(
    "--model", help="Model dir to evaluate (default: model.path; a run dir uses its model/ folder).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Also write the metrics as JSON here.")]


def _load(config: str, overrides: list[str] | None) -> TrainConfig:
    try:
        return load_config(config, overrides or [])
    except ConfigError as err:
        typer.secho(f"config error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None


def train(config: ConfigArg, overrides: OverridesArg = None, resume: ResumeOpt = False,
          print_config: PrintOpt = False) -> None:
    """Train a tool-using agent with STARE, DAPO or GRPO (metrics in runs/<name>/)."""
    cfg = _load(config, overrides)
    if print_config:
        echo_main(dump_yaml(cfg))
        return
    summary = run_training(cfg, resume=resume)
    echo_main(json.dumps({"run_dir": summary["run_dir"], "steps": summary["steps"],
                          "wall_s": round(summary["wall_s"], 1), "eval": summary["eval"]}, indent=1))


def eval(config: ConfigArg, overrides: OverridesArg = None,  # noqa: A001 - the command is `stare eval`
         model: ModelOpt = None, out: OutOpt = None) -> None:
    """Evaluate a model: avg@k and pass@k on eval.tasks with validation sampling (T 1.0, top-p 0.7)."""
    cfg = _load(config, overrides)
    metrics = evaluate_model(cfg, model)
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
    if model_dir is not None:
        path = Path(model_dir)
        path = path / "model" if (path / "model" / "config.json").is_file() else path
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(path)))
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    accelerator = runtime.make_accelerator(cfg)
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, runtime.resolve_model_dir(cfg))
    model = model.to(accelerator.device).eval()
    e = cfg.eval
    sets = {name: runtime.load_tasks(name, e.limit) for name in e.tasks}
    with LazyLocalSandbox() as sandbox:     # the evaluation's own, started by the first tool call
        play = runtime.make_player(cfg, runtime.make_policy(model, tokenizer), tokenizer,
                                   runtime.make_env_factory(cfg, sandbox), temperature=e.temperature,
                                   top_p=e.top_p, sandbox=sandbox)
        return evaluate(play, model, sets, k=e.k, seed=e.seed, pad_id=runtime.pad_id(tokenizer),
                        temperature=e.temperature, token_budget=cfg.train.micro_batch_tokens,
                        device=accelerator.device)


COMMANDS = [train, eval]
