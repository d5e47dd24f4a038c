"""`--import MODULE_OR_FILE`: import a module, or a `.py` file by path, so the envs it registers exist."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import typer


def import_plugin(spec: str) -> None:
    """Import a module by name, or a `.py` file by path (its folder is put on sys.path first)."""
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise typer.BadParameter(f"--import {spec}: no such file")
        sys.path.insert(0, str(path.resolve().parent))
        importlib.import_module(path.stem)
    else:
        importlib.import_module(spec)


def import_plugins(specs: list[str] | None) -> None:
    """`import_plugin` of each spec, in order."""
    for spec in specs or []:
        import_plugin(spec)
