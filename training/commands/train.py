"""`stare train CONFIG [key=value ...] [--resume]` and `stare eval CONFIG [key=value ...] [--model DIR]`.

Under `torchrun` / `accelerate launch` only process 0 prints (and writes `--out`); see `ranks`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from training.commands.plugins import import_plugins
from training.commands.ranks import echo_main, is_main_process

ConfigArg = Annotated[str, typer.Argument(help="YAML config file or preset name in configs/ (cpu-tiny).")]
OverridesArg = Annotated[list[str] | None, typer.Argument(
    help="Dotted overrides, e.g. algo=stare-o1 seed=1 train.steps=50 algo.stare.w=1.5.", show_default=False)]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the run from its latest checkpoint.")]
PrintOpt = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
ModelOpt = Annotated[Path | None, typer.Option(
    "--model", help="Model dir to evaluate (default: model.path; a run dir uses its model/ folder).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Also write the metrics as JSON here.")]
ImportOpt = Annotated[list[str] | None, typer.Option(
    "--import", help="Module or .py file that registers envs (e.g. units_env.py).")]


def _load(config: str, overrides: list[str] | None):
    from training.config import load_config
    from training.config_parse import ConfigError
    try:
        return load_config(config, overrides or [])
    except ConfigError as err:
        typer.secho(f"config error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None


def train(config: ConfigArg, overrides: OverridesArg = None, resume: ResumeOpt = False,
          print_config: PrintOpt = False, plugin: ImportOpt = None) -> None:
    """Train a tool-using agent with STARE, DAPO or GRPO (metrics in runs/<name>/)."""
    from training.config import dump_yaml
    import_plugins(plugin)
    cfg = _load(config, overrides)
    if print_config:
        echo_main(dump_yaml(cfg))
        return
    from training.trainer import train as run_training
    summary = run_training(cfg, resume=resume)
    echo_main(json.dumps({"run_dir": summary["run_dir"], "steps": summary["steps"],
                          "wall_s": round(summary["wall_s"], 1), "eval": summary["eval"]}, indent=1))


def eval(config: ConfigArg, overrides: OverridesArg = None,  # noqa: A001 - the command is `stare eval`
         model: ModelOpt = None, out: OutOpt = None, plugin: ImportOpt = None) -> None:
    """Evaluate a model: avg@k and pass@k on eval.tasks with validation sampling (T 1.0, top-p 0.7)."""
    from training.evaluate import evaluate_model
    import_plugins(plugin)
    cfg = _load(config, overrides)
    metrics = evaluate_model(cfg, model)
    text = json.dumps(metrics, indent=1)
    if not is_main_process():
        return
    typer.echo(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


COMMANDS = [train, eval]
