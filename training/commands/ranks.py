"""Which process of a `torchrun` / `accelerate launch` job prints: process 0 only.

Under W data-parallel processes every process runs the same command; summaries, configs and metrics
printed by each would appear W times. The commands print through `echo_main`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import typer


def is_main_process(env: Mapping[str, str] | None = None) -> bool:
    """True on the process that prints: global rank 0, or the only process.

    Order of evidence: an initialised `torch.distributed` group (its rank), else the launcher's
    environment: `RANK` (the global rank torchrun and accelerate set), else `LOCAL_RANK` (a
    single-node launcher that sets only that), else True (a plain `python` / `stare` process).

    Args:
        env: The environment to read (default `os.environ`); given, the process group is ignored.

    Raises:
        ValueError: RANK or LOCAL_RANK is set but is not an integer.
    """
    if env is None:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank() == 0
        env = os.environ
    for name in ("RANK", "LOCAL_RANK"):
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value) == 0
            except ValueError:
                raise ValueError(f"environment variable {name}={value!r} is not an integer rank; "
                                 f"unset it or let the launcher (torchrun, accelerate) set it") from None
    return True


def echo_main(text: str) -> None:
    """`typer.echo(text)` on the main process only (see `is_main_process`)."""
    if is_main_process():
        typer.echo(text)
