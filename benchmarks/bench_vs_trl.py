"""Training tokens per second: our trainer vs TRL's `GRPOTrainer`, side by side in one process (CPU).

    python benchmarks/bench_vs_trl.py                          # 6 steps, 1 torch thread, 64 new tokens
    python benchmarks/bench_vs_trl.py --steps 8 --threads 2 --max-new-tokens 32
    python benchmarks/bench_vs_trl.py --skip-ours              # TRL arms only

Every arm trains the same tiny random Qwen2 (the CPU preset's size: hidden 64, 4 layers, FFN 256,
saved once and reloaded per arm) with the preset's tokenizer, on the same Countdown prompts
(`countdown-train`, rendered by the same ChatML template), 16 prompts × 8 completions per step,
single-turn completions of at most `--max-new-tokens` tokens at temperature 1, one optimizer step
per rollout batch (on-policy), AdamW lr 3e-4, the same torch thread count, and the same reward: 1
when the sum of the sampled token ids is even (a random model never solves a puzzle; parity gives
every group both signs, so every step runs a real update). The loss is the same in all arms:
clip 0.2 / 0.28, token-mean over the batch, no KL.

Arms (T = `--threads`):
- `ours (stare-o1)`: `training.trainer` (setup + fit, as `train(cfg)`) on configs/cpu-tiny.yaml with
  the env's tool loop limited to one turn, STARE-O1 with the gate held on (target 100) and no
  dynamic sampling: it does strictly more work than TRL's stock loss; T threads;
- `ours (..., rollout.async_steps=1)`: the same with one-step off-policy rollouts: the next step's
  generation runs in a second thread during the update (T threads each, so 2T cores);
- `TRL GRPOTrainer`: stock, `loss_type="dapo"`, `per_device_train_batch_size=128` (one micro-batch),
  with T threads and with 2T threads (the cores the async arm uses);
- `TRL + STARE`: `training.integrations.trl.StareGRPOTrainer`, same settings, gate held on, T threads.

Every arm runs `--repeats` times, the arms interleaved, and its fastest run is reported (a shared
machine's load spikes only ever slow a run down). "vs TRL" divides by the stock TRL arm with the
same number of cores (for the async arm: TRL's
faster of its T- and 2T-thread runs).

Training tokens = completion tokens in the loss mask (sampled by the policy), counted from each
trainer's own batch; tokens / s = their sum over the timed steps / the summed step wall time (generation,
scoring, old-log-prob or entropy pass, forward, backward, optimizer). The first step is warm-up
and is not timed. Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

PROMPTS, GROUP, LR = 16, 8, 3e-4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="training steps per arm (the first is warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per arm (T)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="max completion length of every arm")
    parser.add_argument("--skip-ours", action="store_true", help="measure the TRL arms only")
    parser.add_argument("--repeats", type=int, default=2, help="runs per arm, interleaved; fastest counts")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is warm-up)")
    t = args.threads
    arms: list[tuple[str, int, Any]] = []      # (name, torch threads, run(out_dir, model_dir))
    if not args.skip_ours:
        arms += [("ours (stare-o1)", t, lambda out, md: run_ours(out, md, args)),
                 ("ours (stare-o1, rollout.async_steps=1)", t,
                  lambda out, md: run_ours(out, md, args, async_steps=1))]
    arms += [("TRL GRPOTrainer", t, lambda out, md: run_trl(out, md, args, stare_on=False)),
             (f"TRL GRPOTrainer, {2 * t} threads", 2 * t,
              lambda out, md: run_trl(out, md, args, stare_on=False)),
             ("TRL + STARE (StareGRPOTrainer)", t, lambda out, md: run_trl(out, md, args, stare_on=True))]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = save_random_model(root / "model")
        for repeat in range(args.repeats):          # arms interleaved, so a slow spell hits all of them
            for i, (name, threads, run) in enumerate(arms):
                torch.set_num_threads(threads)
                cores = 2 * t if "async" in name else threads
                result = {"cores": cores, **run(root / f"arm{i}-{repeat}", model_dir)}
                if name not in results or result["s_per_step"] < results[name]["s_per_step"]:
                    results[name] = result
    print_table(results, args)


def save_random_model(path: Path) -> str:
    """The CPU preset's architecture with random weights (seed 0) and the preset tokenizer, saved once."""
    from training.preset import build_tiny_model, build_tokenizer
    tokenizer = build_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def parity(ids: list[int]) -> float:
    """The shared reward: 1.0 when the sum of the sampled ids is even."""
    return float(sum(ids) % 2 == 0)


# -- our trainer ----------------------------------------------------------------------------------------

def run_ours(run_root: Path, model_dir: str, args: argparse.Namespace, *, async_steps: int = 0
             ) -> dict[str, float]:
    """`training.trainer` on configs/cpu-tiny.yaml, single-turn, parity reward; per-step records."""
    from training.config import load_config
    from training.trainer import fit, setup
    n = args.max_new_tokens
    cfg = load_config("cpu-tiny", [
        f"model.path={model_dir}", f"log.run_dir={run_root}", f"train.steps={args.steps}",
        f"train.num_threads={args.threads}", f"rollout.prompts_per_step={PROMPTS}",
        f"rollout.group_size={GROUP}",
        "rollout.max_turns=1", f"rollout.max_new_tokens={n}", f"rollout.max_response_tokens={n}",
        "rollout.temperature=1.0", "rollout.top_p=1.0", f"optim.lr={LR}", "algo=stare-o1",
        "algo.dynamic_sampling=false", "algo.overlong_buffer=0", "train.target_entropy=100",
        "eval.at_start=false", "eval.every=0", "eval.at_end=false", "log.save_every=0", "log.progress=false",
        "log.tensorboard=false", "log.save_model=false", f"rollout.async_steps={async_steps}"])
    run = setup(cfg)
    run.play_train = with_parity(run.play_train)
    if run.prefetcher is not None:
        run.prefetcher.play = with_parity(run.prefetcher.play)
    fit(run)
    records = [json.loads(line) for line in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if "time/step_s" in r][1:]
    tokens = sum(r["train/response_length"] * PROMPTS * GROUP for r in timed)
    seconds = sum(r["time/step_s"] for r in timed)
    return summary(tokens, seconds, len(timed), rollout_s=sum(r["time/rollout_s"] for r in timed),
                   gate=sum(r.get("stare/gate_on", 0.0) for r in timed) / len(timed))


def with_parity(play: Any) -> Any:
    """Wrap a (tasks, group_size, seed) player: every episode's reward becomes the parity reward."""
    def play_with_parity(tasks: Any, group_size: int, seed: int) -> Any:
        trajs = play(tasks, group_size, seed)
        for t in trajs:
            t.reward = parity([i for i, m in zip(t.response_ids, t.loss_mask, strict=False) if m])
        return trajs
    return play_with_parity


# -- TRL ------------------------------------------------------------------------------------------------

def run_trl(out: Path, model_dir: str, args: argparse.Namespace, *, stare_on: bool) -> dict[str, float]:
    """TRL's GRPOTrainer (or StareGRPOTrainer) with the same model, prompts, batch and reward."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import stare
    import tasks as task_sets
    base: type = GRPOTrainer
    extra: dict[str, Any] = {}
    if stare_on:
        from training.integrations.trl import StareGRPOTrainer
        base = StareGRPOTrainer
        extra["stare"] = stare.get_preset("stare-o1").stare.replace(target_entropy=100.0)   # gate held on
    tokens_per_step: list[float] = []
    rollout_seconds: list[float] = []

    class Counting(base):   # counts the trained (loss-mask) completion tokens of each rollout batch
        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            batch = super()._generate_and_score_completions(inputs)
            rollout_seconds.append(time.perf_counter() - t0)
            mask = batch["completion_mask"] * batch.get("tool_mask", 1)
            tokens_per_step.append(float(mask.sum()))
            return batch

    step_seconds: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kwargs):
            step_seconds.append(time.perf_counter() - self.t0)

    rows = [{"prompt": [{"role": "user", "content": t.prompt}]} for t in task_sets.load("countdown-train")]
    config = GRPOConfig(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP, max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0,
        loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28, learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0, max_grad_norm=1.0, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True, seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    def parity_reward(completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
        return [parity(ids) for ids in completion_ids]

    trainer = Counting(model=model, reward_funcs=parity_reward, args=config,
                       train_dataset=Dataset.from_list(rows),
                       processing_class=AutoTokenizer.from_pretrained(model_dir), **extra)
    trainer.add_callback(Timer())
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    gate = [r["stare/gate_on"] for r in trainer.state.log_history if "stare/gate_on" in r][1:]
    return summary(sum(tokens_per_step[1:]), sum(step_seconds[1:]), len(step_seconds) - 1,
                   rollout_s=sum(rollout_seconds[1:]), gate=sum(gate) / len(gate) if gate else float("nan"))


# -- report ---------------------------------------------------------------------------------------------

def summary(tokens: float, seconds: float, steps: int, *, rollout_s: float, gate: float) -> dict[str, float]:
    """Means over the timed steps; `rollout_s` is generation + scoring (+ TRL's old-policy passes)."""
    return {"steps": steps, "s_per_step": seconds / steps, "rollout_s": rollout_s / steps,
            "tokens_per_step": tokens / steps, "tokens_per_s": tokens / seconds, "gate": gate}


def print_table(results: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    import transformers
    import trl
    def trl_best(cores: float) -> float:   # stock TRL's best tokens/s with at most `cores` threads
        return max(r["tokens_per_s"] for name, r in results.items()
                   if name.startswith("TRL GRPOTrainer") and r["cores"] <= cores)

    print(f"\nTraining tokens/s on CPU: tiny random Qwen2 (hidden 64, 4 layers), {PROMPTS} prompts × "
          f"{GROUP} completions per step, ≤ {args.max_new_tokens} new tokens, "
          f"steps 2-{args.steps} timed, best of {args.repeats} interleaved runs per arm "
          f"({platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__})\n")
    print("| trainer | cores (torch threads) | s / step | of which rollout (main thread) "
          "| trained tokens / step | tokens / s | vs TRL on the same cores | STARE gate on |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        gate = "-" if r["gate"] != r["gate"] else f"{r['gate']:.0%}"
        print(f"| {name} | {r['cores']:.0f} | {r['s_per_step']:.2f} | {r['rollout_s']:.2f} | "
              f"{r['tokens_per_step']:.0f} | {r['tokens_per_s']:.0f} | "
              f"{r['tokens_per_s'] / trl_best(r['cores']):.2f}× | {gate} |")


if __name__ == "__main__":
    main()
