"""The `stare` command. Each command group lives in `training/commands/<group>.py`."""

from __future__ import annotations

import importlib

import typer

from training import __version__

app = typer.Typer(help="STARE Gym: tool environments, exact-token rollouts, STARE vs DAPO.",
                  no_args_is_help=True, add_completion=False)

# (module under training.commands, group name or None for top-level commands)
_GROUPS: list[tuple[str, str | None]] = [
    ("algo", "algo"), ("tasks", "tasks"), ("envs", "envs"), ("sandbox", "sandbox"),
    ("train", None), ("bench", None), ("sft", None),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"stare-gym {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """STARE Gym command line."""


for _module, _group in _GROUPS:
    try:
        _mod = importlib.import_module(f"training.commands.{_module}")
    except ModuleNotFoundError as err:  # a command group not built yet
        if err.name != f"training.commands.{_module}":
            raise
        continue
    if _group is None:
        for _cmd in getattr(_mod, "COMMANDS", []):
            app.command()(_cmd)
    else:
        app.add_typer(_mod.app, name=_group)


def main() -> None:
    """Console-script entry point."""
    app()
