"""The `stare` command. Each command group lives in `training/commands/<group>.py`."""

from __future__ import annotations

import typer

from training import __version__
from training.commands import algo, bench, envs, sandbox, sft, tasks, train

app = typer.Typer(help="STARE Gym: tool environments, exact-token rollouts, STARE vs DAPO.",
                  no_args_is_help=True, add_completion=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"stare-gym {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """STARE Gym command line."""


for _group, _module in (("algo", algo), ("tasks", tasks), ("envs", envs), ("sandbox", sandbox)):
    app.add_typer(_module.app, name=_group)
for _command in (*train.COMMANDS, *bench.COMMANDS, *sft.COMMANDS):   # train, eval, bench, demos, sft
    app.command()(_command)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":   # `python -m training.cli ...` works like `stare ...`
    main()
