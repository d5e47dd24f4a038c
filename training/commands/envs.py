"""`stare envs list` and `stare envs check ID`."""

from __future__ import annotations

import typer

import envs

app = typer.Typer(help="Tool environments: list the registered ids, check one for conformance.",
                  no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """Show every registered env id (ours and installed plugins) with the first line of its card."""
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "description", box=None, header_style="bold")
    for env_id, summary in envs.list_envs():
        table.add_row(env_id, summary)
    Console(width=160).print(table)


@app.command("check")
def check_command(env_id: str = typer.Argument(..., help="Env id, e.g. stare/PythonTool-v0."),
                  seed: int = typer.Option(0, help="Seed for the resets.")) -> None:
    """Run the conformance checker on one env; exit code 1 when a check fails."""
    try:
        env = envs.make(env_id)
    except envs.UnknownEnvError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    try:
        passed = envs.check_env(env, seed=seed)
    except envs.EnvCheckError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    finally:
        env.close()
    typer.echo(f"{env_id}: passed {len(passed)} checks ({', '.join(passed)})")
