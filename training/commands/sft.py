"""`stare demos ENV_ID` (demonstrations to JSONL) and `stare sft MODEL DEMOS...` (supervised cold start)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import torch
import typer

import envs
import tasks as task_lib
from agents import RolloutLimits, SamplingParams
from training.commands.plugins import import_plugins
from training.commands.ranks import echo_main
from training.sft import demos as gen
from training.sft.data import dedupe, write_demos
from training.sft.loop import SFTConfig
from training.sft.run import SFTRun, run_sft

Opt = typer.Option


def demos(
    env_id: Annotated[
        str, typer.Argument(help="Registered env id, e.g. stare/PythonTool-v0 or acme/Units-v0.")
    ],
    out: Annotated[Path, Opt("--out", help="JSONL file to write.")],
    tasks: Annotated[
        str, Opt("--tasks", help="Task set name or file (tasks.load); default: the env's own.")
    ] = "",
    env_kwargs: Annotated[str, Opt("--env-kwargs", help="JSON dict for envs.make.")] = "{}",
    limit: Annotated[int, Opt("--limit", help="Use the first N tasks (0 = all).")] = 0,
    copies: Annotated[int, Opt("--copies", help="Solver episodes per task.")] = 1,
    policy: Annotated[
        str, Opt("--policy", help="Model dir: rejection-sample it instead of the solver.")
    ] = "",
    k: Annotated[int, Opt("-k", help="With --policy: episodes per task.")] = 8,
    max_new_tokens: Annotated[int, Opt("--max-new-tokens", help="With --policy: tokens per turn.")] = 256,
    max_turns: Annotated[int, Opt("--max-turns", help="Assistant turns per episode.")] = 8,
    seed: Annotated[int, Opt("--seed")] = 0,
    keep_duplicates: Annotated[
        bool, Opt("--keep-duplicates", help="Do not drop identical episodes.")
    ] = False,
    keep_unrewarded: Annotated[
        bool, Opt("--keep-unrewarded", help="Solver: keep episodes with reward 0.")
    ] = False,
    plugin: Annotated[
        list[str] | None, Opt("--import", help="Module or .py file that registers envs.")
    ] = None,
) -> None:
    """Write demonstration episodes of ENV_ID: its scripted solver, or rejection sampling from --policy."""
    import_plugins(plugin)
    kwargs = json.loads(env_kwargs)
    probe = envs.make(env_id, **kwargs)
    task_list = (
        list(task_lib.load(tasks, limit=limit or None))
        if tasks
        else list(getattr(probe.unwrapped, "dataset", []))[: limit or None]
    )
    if not task_list:
        raise typer.BadParameter("no tasks: pass --tasks NAME_OR_FILE")
    make_env = lambda: envs.make(env_id, **kwargs)  # noqa: E731
    if policy:
        from transformers import AutoModelForCausalLM, AutoTokenizer


        model = AutoModelForCausalLM.from_pretrained(policy).eval()
        tokenizer = AutoTokenizer.from_pretrained(policy)
        found, played = gen.sample_demos(
            make_env,
            model,
            tokenizer,
            task_list,
            k=k,
            sampling=SamplingParams(max_tokens=max_new_tokens),
            limits=RolloutLimits(max_turns=max_turns),
            seed=seed,
        )
    else:
        solver = gen.find_solver(probe, env_id)
        found = gen.play_solver(make_env, task_list, solver, copies=copies, seed=seed, max_turns=max_turns)
        played = len(found)
        if not keep_unrewarded:
            found = [d for d in found if (d.reward or 0) > 0]
    probe.close()
    kept = found if keep_duplicates else dedupe(found)
    write_demos(out, kept)
    echo_main(
        json.dumps(
            {
                "out": str(out),
                "episodes": played,
                "rewarded": sum((d.reward or 0) > 0 for d in found),
                "written": len(kept),
            }
        )
    )


def sft(
    model: Annotated[str, typer.Argument(help="Model dir with a chat template, preset:<name>, or `tiny`.")],
    demo_files: Annotated[list[Path], typer.Argument(help="Demonstration files (.jsonl / .parquet).")],
    out: Annotated[Path, Opt("--out", help="Run directory (metrics, checkpoints, model/).")],
    steps: Annotated[int, Opt("--steps")] = 200,
    batch_size: Annotated[int, Opt("--batch-size", help="Demonstrations per step.")] = 32,
    lr: Annotated[float, Opt("--lr", help="Peak learning rate (warmup, then cosine to 0).")] = 1e-4,
    warmup: Annotated[int, Opt("--warmup")] = 10,
    weight_decay: Annotated[float, Opt("--weight-decay")] = 0.0,
    micro_batch_tokens: Annotated[
        int, Opt("--micro-batch-tokens", help="0 = the whole batch at once.")
    ] = 8192,
    max_turns: Annotated[int, Opt("--max-turns")] = 64,
    max_response_tokens: Annotated[int, Opt("--max-response-tokens")] = 4096,
    max_tool_tokens: Annotated[int, Opt("--max-tool-tokens", help="0 = tool output not cut.")] = 0,
    save_every: Annotated[int, Opt("--save-every", help="Checkpoint every N steps (0 = at the end).")] = 0,
    seed: Annotated[int, Opt("--seed")] = 0,
    resume: Annotated[bool, Opt("--resume", help="Continue from the newest checkpoint in --out.")] = False,
    progress: Annotated[bool, Opt("--progress/--no-progress")] = True,
    cpu: Annotated[bool, Opt("--cpu/--gpu", help="Force CPU even when a GPU is visible.")] = True,
    threads: Annotated[int, Opt("--threads", min=0, help="torch threads (0 = torch's default, one per "
                                "core). On a machine shared with other jobs 1 is often several times "
                                "faster.")] = 0,
) -> None:
    """Supervised cold start: train MODEL on the assistant tokens of demonstration episodes."""
    if threads:
        torch.set_num_threads(threads)
    limits = RolloutLimits(
        max_turns=max_turns,
        max_response_tokens=max_response_tokens,
        max_tool_output_tokens=max_tool_tokens or None,
    )
    cfg = SFTConfig(
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=warmup,
        weight_decay=weight_decay,
        micro_batch_tokens=micro_batch_tokens,
        seed=seed,
    )
    summary = run_sft(
        SFTRun(
            model=model,
            demos=tuple(str(p) for p in demo_files),
            out=out,
            sft=cfg,
            limits=limits,
            save_every=save_every,
            progress=progress,
            cpu=cpu,
        ),
        resume=resume,
    )
    echo_main(
        json.dumps(
            {k: summary[k] for k in ("model_dir", "demos", "loss_first", "loss_final", "seconds")}, indent=1
        )
    )


COMMANDS = [demos, sft]
