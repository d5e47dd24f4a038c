"""Step-time breakdown of the trainer on the CPU preset: generation, tools, old-log-prob pass, update.

    python benchmarks/bench_train.py                     # CPU preset (builds/loads the warm start)
    python benchmarks/bench_train.py --random-model      # tiny random Qwen2 of the preset's size
    python benchmarks/bench_train.py --steps 8 --threads 1 --algo dapo

Runs `--steps` training steps of configs/cpu-tiny.yaml (same batch: 16 prompts × 8 episodes, same
token budgets; dynamic sampling off, so every step plays exactly 128 episodes) three times, side by
side with the same seed: with the fused on-policy update (the default: the update's forward pass
doubles as the old-log-prob pass), with a separate no-grad old-log-prob pass, and with one-step
off-policy rollouts (`rollout.async_steps=1`: the next step's episodes play in a second thread
during the update, so that arm uses two cores; its rollout row is the main thread's wait). Prints
the mean seconds per step of each phase over the steps after the first (warm-up), read from the
runs' metrics.jsonl, as a Markdown table for BENCHMARKS.md.
With `--random-model`, rewards are the parity of the sampled ids (the random model never solves a
puzzle), so groups have both signs and every step runs a real update.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch

PHASES = [
    ("rollout (generation + tools + rendering)", "time/rollout_s"),
    ("  generation (policy.generate)", "time/generation_s"),
    ("  tools (env.step, concurrent)", "time/tools_s"),
    ("  rendering (ledger, chat template)", "time/render_s"),
    ("  env creation and reset", "time/reset_s"),
    ("  round played ahead (rollout thread, async arm)", "time/prefetch_s"),
    ("old-log-prob pass", "time/old_logprob_s"),
    ("update (fwd + bwd + AdamW)", "time/update_s"),
    ("whole step", "time/step_s"),
]


def _random_model_dir(root: Path) -> str:
    from training.preset import build_tiny_model, build_tokenizer
    tok = build_tokenizer()
    model = build_tiny_model(tok)          # the preset's size: hidden 64, 4 layers, FFN 256
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return str(root / "model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--algo", default="stare-o1")
    parser.add_argument("--random-model", action="store_true")
    parser.add_argument("--cache-dir", default=None, help="model.cache_dir of the preset build")
    args = parser.parse_args()
    arms = {"fused on-policy (default)": ["train.fuse_on_policy=true"],
            "separate old-log-prob pass": ["train.fuse_on_policy=false"],
            "one-step off-policy (rollout.async_steps=1)": ["rollout.async_steps=1"]}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        extra = [f"model.path={_random_model_dir(root)}",
                 "train.target_entropy=0.3"] if args.random_model else []
        for i, (label, overrides) in enumerate(arms.items()):   # same seed: the same prompts and seeds
            results[label] = _run_arm(root / f"arm{i}", args, [*overrides, *extra])
    model = "tiny random Qwen2 (preset size)" if args.random_model else "CPU preset (warm-started)"
    first = next(iter(results.values()))
    print(f"Trainer step breakdown: {model}, algo {args.algo}, 16 prompts × 8 episodes per step "
          f"(dynamic sampling off), torch threads {args.threads}, mean s/step of steps 2-{args.steps} "
          f"({platform.machine()}, torch {torch.__version__})\n")
    print("| phase | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for label, key in PHASES:
        cells = [f"{r[key]:.3f} ({r[key] / r['time/step_s']:.0%})" for r in results.values()]
        print(f"| {label} | " + " | ".join(cells) + " |")
    cells = [f"{r['perf/tokens_per_s']:.1f}" for r in results.values()]
    print("| sampled tokens / s of step time | " + " | ".join(cells) + " |")
    cells = [f"{r['train/response_length']:.2f}" for r in results.values()]
    print("| sampled tokens per episode | " + " | ".join(cells) + " |")
    print(f"\nmean sampled tokens per episode {first['train/response_length']:.1f}, "
          "tokens per episode incl. tool "
          f"output {first['train/total_length']:.1f}, tool calls per episode {first['train/tool_calls']:.2f}")


def _run_arm(root: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, float]:
    from training.config import load_config
    from training.trainer import fit, setup
    cfg = load_config("cpu-tiny", [f"algo={args.algo}", f"train.steps={args.steps}", f"log.run_dir={root}",
                                   f"train.num_threads={args.threads}", "eval.at_start=false", "eval.every=0",
                                   "eval.at_end=false", "log.save_every=0", "log.progress=false",
                                   "log.tensorboard=false", "log.save_model=false",
                                   "algo.dynamic_sampling=false", *extra])
    run = setup(cfg)
    if args.random_model:
        run.play_train = _parity(run.play_train)
        if run.prefetcher is not None:
            run.prefetcher.play = _parity(run.prefetcher.play)
    fit(run)
    records = [json.loads(x) for x in (cfg.run_path / "metrics.jsonl").read_text().splitlines()][1:]
    keys = [key for _, key in PHASES] + ["perf/tokens_per_s", "train/response_length", "train/total_length",
                                         "train/tool_calls", "train/gen_rounds"]
    return {key: sum(r.get(key, 0.0) for r in records) / len(records) for key in keys}


def _parity(play):
    def wrapped(tasks, group_size, seed):
        trajs = play(tasks, group_size, seed)
        for t in trajs:
            t.reward = float(sum(i for i, m in zip(t.response_ids, t.loss_mask, strict=False) if m) % 2 == 0)
        return trajs
    return wrapped


if __name__ == "__main__":
    main()
