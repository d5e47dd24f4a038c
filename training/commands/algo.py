"""`stare algo ...`: the algorithm presets (GRPO, DAPO, GRPO-ds, STARE-O1, STARE-C2)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from stare.config import PRESETS

app = typer.Typer(help="Algorithm presets.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Algorithm presets: GRPO, DAPO, GRPO-ds, STARE-O1, STARE-C2."""


@app.command("list")
def list_presets() -> None:
    """Print every preset with its settings, one column per preset."""
    table = Table(title="Algorithm presets (stare.config.PRESETS)")
    table.add_column("setting", style="bold", no_wrap=True)
    for name in PRESETS:
        table.add_column(name)
    flat = {name: cfg.flat() for name, cfg in PRESETS.items()}
    for key in flat["grpo"]:
        if key == "name":
            continue
        values = [str(flat[name][key]) for name in PRESETS]
        style = None if len(set(values)) == 1 else "cyan"
        table.add_row(key, *values, style=style)
    console = Console()
    console.width = max(console.width, 30 + 16 * len(PRESETS))   # the whole table, even in a narrow pipe
    console.print(table)
