"""`stare tasks list`, `stare tasks show NAME_OR_PATH`, `stare tasks grade` and `stare tasks export`."""

from __future__ import annotations

import json

import typer

import tasks

app = typer.Typer(help="Task sets: list the shipped datasets, show tasks, grade an answer.",
                  no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """Show every registered dataset with its family, size and description."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table("name", "family", "size", "description", box=None, header_style="bold")
    for info in tasks.list_datasets():
        size = "-" if info.size is None else str(info.size)
        table.add_row(info.name, info.family or "-", size, escape(info.description))
    Console(width=160).print(table)


@app.command("show")
def show_command(name_or_path: str = typer.Argument(..., help="A registered name or a task file."),
                 split: str = typer.Option(None, help="Split of a name or a saved HF DatasetDict."),
                 limit: int = typer.Option(3, help="How many tasks to print."),
                 style: str = typer.Option(None, help="Prompt style (cot, tool, countdown, plain).")) -> None:
    """Print the first tasks of a dataset as JSON lines, with the formatted prompt."""
    try:
        loaded = tasks.load(name_or_path, split=split, limit=limit)
    except (KeyError, ValueError, FileNotFoundError, tasks.MissingExtraError) as err:
        typer.echo(f"error: {err.args[0] if isinstance(err, KeyError) else err}", err=True)
        raise typer.Exit(1) from None
    for task in loaded:
        row = {**task.to_dict(), "formatted": tasks.format_prompt(task, style)}
        typer.echo(json.dumps(row, ensure_ascii=False))


@app.command("grade")
def grade_command(answer: str = typer.Argument(..., help="The reference answer, e.g. '\\frac{1}{2}'."),
                  response: str = typer.Argument(..., help="The model response text."),
                  mode: str = typer.Option("default", help="Math grading mode: default, or authors "
                                                           "(adds mathruler, as the STARE reward).")) -> None:
    """Grade one response against a reference answer and print the Grade as JSON."""
    try:
        g = tasks.grade(response, answer, mode=mode)  # type: ignore[arg-type]
    except (ValueError, ImportError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps({"status": g.status, "prediction": g.prediction, "correct": g.correct}))


@app.command("export")
def export_command(name_or_path: str = typer.Argument(..., help="A registered name or a task file."),
                   out: str = typer.Argument(..., help="Output file, e.g. data/train.parquet."),
                   split: str = typer.Option(None, help="Split of a name or a saved HF DatasetDict."),
                   limit: int = typer.Option(None, help="Export at most this many tasks."),
                   style: str = typer.Option(None, help="Prompt style of the user message (default: the "
                                                        "task's own)."),
                   system_prompt: str = typer.Option(None, help="System message before each prompt."),
                   env_class: str = typer.Option(None, help="SkyRL env_class of every row (default: the "
                                                            "family's env).")) -> None:
    """Write tasks as verl-style parquet that SkyRL reads too (`tasks.load` reads it back)."""
    try:
        loaded = tasks.load(name_or_path, split=split, limit=limit)
        path = tasks.save_parquet(loaded, out, split=split or "train", style=style,
                                  system_prompt=system_prompt, env_class=env_class)
    except (KeyError, ValueError, FileNotFoundError, tasks.MissingExtraError) as err:
        typer.echo(f"error: {err.args[0] if isinstance(err, KeyError) else err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {len(loaded)} tasks to {path}")
