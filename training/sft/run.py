"""`stare sft`: a supervised run on demonstration files, on accelerate, with checkpoints and metrics.

    demos (JSONL / parquet) -> encode with the model's chat template (training.sft.encode)
    -> steps of `training.sft.loop.sft_step` -> <out>/metrics.jsonl (+ tb/), progress bar
    -> atomic checkpoints every `save_every` steps (training.checkpoint) -> <out>/model/

A resumed run (`resume=True`) restores model, optimizer and RNG states from the newest checkpoint
and replays the demonstration order to its step, so it continues exactly as a straight run.
Nothing is written before the model, tokenizer and demonstrations have loaded: a failed setup
leaves no run directory behind.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agents.episode import RolloutLimits
from training import preset
from training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from training.metrics import MetricsLogger
from training.sft.data import Demo, read_demos
from training.sft.encode import encode_demos
from training.sft.loop import DemoOrder, SFTConfig, lr_at, sft_step
from training.sft.scratch import TinySpec, build_scratch

SUMMARY_FILE = "sft.json"


@dataclass(frozen=True, kw_only=True)
class SFTRun:
    """One `stare sft` invocation."""

    model: str
    """Model directory with a chat template, `preset:<name>`, or `tiny` (built from the demos)."""
    demos: tuple[str, ...]
    """Demonstration files (.jsonl / .parquet)."""
    out: Path
    """Run directory: metrics.jsonl, checkpoints/, model/."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    limits: RolloutLimits = field(
        default_factory=lambda: RolloutLimits(
            max_turns=64, max_response_tokens=4096, max_tool_output_tokens=None
        )
    )
    """Budgets applied when encoding (use the RL run's, so SFT trains what RL will see)."""
    tiny: TinySpec = field(default_factory=TinySpec)
    """Size of a from-scratch model (`model="tiny"`)."""
    cache_dir: str = ".cache/stare"
    """Where `preset:` models are built."""
    save_every: int = 0
    """Checkpoint every N steps (0 = only at the end)."""
    keep_checkpoints: int = 1
    progress: bool = True
    tensorboard: bool = False
    cpu: bool = True
    """Force CPU even when a GPU is visible."""


def load_model(spec: str, demos: list[Demo], run: SFTRun) -> tuple[Any, Any]:
    """(model, tokenizer) from a directory, a preset, or built from scratch (`tiny`)."""
    if spec == "tiny":
        return build_scratch(demos, run.tiny)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(spec).expanduser()
    if spec.startswith("preset:"):

        path = Path(preset.resolve_model_path(spec, Path(run.cache_dir).expanduser()))
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model {spec!r}: {path} holds no config.json; give a local HF model directory, "
            "preset:<name>, or `tiny` to build a model from the demonstrations"
        )
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"model {spec!r}: the tokenizer has no chat template; SFT renders demonstrations with it"
        )
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32), tokenizer


def run_sft(run: SFTRun, *, resume: bool = False) -> dict[str, Any]:
    """Train; returns the summary also written to <out>/sft.json (losses, timings, model dir)."""
    from accelerate import Accelerator

    demos = [d for path in run.demos for d in read_demos(path)]
    model, tokenizer = load_model(run.model, demos, run)
    trajs = [t for t in encode_demos(demos, tokenizer, run.limits) if sum(t.loss_mask)]
    if not trajs:
        raise ValueError("no demonstration has an assistant token within the budgets; raise the limits")
    if not resume and latest_checkpoint(run.out) is not None:
        raise FileExistsError(f"{run.out} already holds checkpoints: pass --resume, or another --out")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    acc = Accelerator(cpu=run.cpu)
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.sft.lr, weight_decay=run.sft.weight_decay)
    model, optimizer = acc.prepare(model, optimizer)
    order, start, elapsed = DemoOrder(len(trajs), run.sft.batch_size, run.sft.seed), 0, 0.0
    checkpoint = latest_checkpoint(run.out) if resume else None
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, acc)
        start, elapsed = int(state["step"]), float(state["elapsed"])
        order.skip(start)
    logger = MetricsLogger(
        run.out,
        total_steps=run.sft.steps,
        tensorboard=run.tensorboard,
        progress=run.progress,
        start_step=start,
    )
    began, losses = time.perf_counter(), []
    model.train()
    try:
        for step in range(start + 1, run.sft.steps + 1):
            t0 = time.perf_counter()
            record = sft_step(
                model,
                optimizer,
                [trajs[i] for i in order.next()],
                run.sft,
                pad_id=pad,
                lr=lr_at(step - 1, run.sft),
                accelerator=acc,
            )
            losses.append(record["sft/loss"])
            seconds = elapsed + time.perf_counter() - began
            logger.log({"step": step, **record, "time/step_s": time.perf_counter() - t0, "time": seconds})
            if (run.save_every and step % run.save_every == 0) or step == run.sft.steps:
                save_checkpoint(
                    run.out, step, acc, {"elapsed": seconds, "demos": len(trajs)}, keep=run.keep_checkpoints
                )
    finally:
        logger.close()
    return _finish(run, acc, model, tokenizer, trajs, losses, elapsed + time.perf_counter() - began)


def _finish(
    run: SFTRun, acc: Any, model: Any, tokenizer: Any, trajs: list[Any], losses: list[float], seconds: float
) -> dict[str, Any]:
    out = run.out / "model"
    if acc.is_main_process:
        shutil.rmtree(out, ignore_errors=True)
        acc.unwrap_model(model).save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    summary = {
        "model_dir": str(out),
        "steps": run.sft.steps,
        "demos": len(trajs),
        "trained_tokens_per_demo": sum(sum(t.loss_mask) for t in trajs) / len(trajs),
        "loss_first": losses[0] if losses else None,
        "loss_final": losses[-1] if losses else None,
        "seconds": seconds,
        "config": asdict(run.sft),
        "base": run.model,
    }
    if acc.is_main_process:
        (run.out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    return summary
