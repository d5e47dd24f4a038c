"""`stare bench`: DAPO vs STARE-O1 (and other arms) on the same tasks, seeds and warm start, plus a report."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from training.bench import BenchPlan, parse_arms, parse_seeds, report_from_dir, run_bench


def bench(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Config overrides for every arm, e.g. train.steps=60.")
    ] = None,
    preset: Annotated[
        str, typer.Option("--preset", help="YAML preset (configs/<name>.yaml) or path.")
    ] = "cpu-tiny",
    arms: Annotated[
        str, typer.Option(help="Comma-separated algorithm presets; the first is the baseline.")
    ] = "dapo,stare-o1",
    seeds: Annotated[
        str, typer.Option(help="Comma-separated seeds, or n=<count> for 0..count-1.")
    ] = "0,1,2,3",
    steps: Annotated[int, typer.Option(help="Training steps per run (0 = the preset's train.steps).")] = 0,
    name: Annotated[
        str, typer.Option(help="Bench name: runs/<name>/ (default: bench-<preset>-<time>).")
    ] = "",
    run_dir: Annotated[str, typer.Option(help="Parent directory of the bench directory.")] = "runs",
    workers: Annotated[int, typer.Option(help="Runs trained in parallel (processes).")] = 2,
    threads: Annotated[int, typer.Option(help="torch threads per worker.")] = 1,
    cache_dir: Annotated[str, typer.Option(help="Cache of preset warm starts.")] = ".cache/stare",
    band: Annotated[float, typer.Option(help="Relative half-width of the target-entropy band.")] = 0.2,
    branch_frac: Annotated[
        float, typer.Option(help="Share of the steps played as one DAPO trunk per seed.")
    ] = 0.3,
    target: Annotated[float | None, typer.Option(help="Fixed H_tgt instead of the trunk rule.")] = None,
    probe_every: Annotated[int, typer.Option(help="Counterfactual probe every N steps (0 = off).")] = 4,
    heldout_limit: Annotated[int, typer.Option(help="Held-out puzzles of the final evaluation.")] = 256,
    heldout_n: Annotated[int, typer.Option(help="Samples per held-out puzzle.")] = 8,
    no_defaults: Annotated[bool, typer.Option("--no-defaults", help="Skip the bench's budget overrides.")] = (
        False
    ),
    report_only: Annotated[
        Path | None, typer.Option("--report-only", help="Only rewrite this bench dir's report.")
    ] = None,
) -> None:
    """Benchmark STARE against DAPO: train every arm × seed, then write runs/<name>/report.md with plots."""
    try:
        if report_only is not None:
            path = report_from_dir(report_only, band=band)
        else:
            extra = [*(overrides or []), *([f"train.steps={steps}"] if steps else [])]
            plan = BenchPlan(
                config=preset,
                arms=parse_arms(arms),
                seeds=parse_seeds(seeds),
                name=name,
                run_dir=run_dir,
                overrides=tuple(extra),
                workers=workers,
                threads=threads,
                cache_dir=cache_dir,
                band=band,
                branch_frac=branch_frac,
                target=target,
                probe_every=probe_every,
                heldout_limit=heldout_limit,
                heldout_n=heldout_n,
                extra={"command": "stare " + shlex.join(sys.argv[1:])},
                use_defaults=not no_defaults,
            )
            path = run_bench(plan)
    except (ValueError, FileNotFoundError) as err:
        typer.secho(f"stare bench: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from err
    typer.echo(f"report: {path}")


COMMANDS = [bench]
