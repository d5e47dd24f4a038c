"""Supervised cold start on tool-use demonstrations (`stare demos`, `stare sft`); see docs/sft.md.

`data` reads and writes demonstration files (OpenAI-style chat messages, JSONL or verl parquet),
`encode` turns one into a token trajectory through the rollouts' renderer and ledger, `demos` makes
them from an env's scripted solver or by rejection sampling, `loop` is the supervised step, `run`
the `stare sft` run (accelerate, checkpoints, metrics) and `scratch` a tiny model sized from demos.
"""

from training.sft.data import Demo, read_demos, write_demos
from training.sft.encode import encode_demo, encode_demos
from training.sft.loop import SFTConfig, sft_step, train_sft

__all__ = [
    "Demo",
    "SFTConfig",
    "encode_demo",
    "encode_demos",
    "read_demos",
    "sft_step",
    "train_sft",
    "write_demos",
]
