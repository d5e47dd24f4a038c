"""Rollout-loop speed on the tiny random model, side by side in one run (issue 6, item 6).

1. Loop overhead: generated tokens per CPU second of `agents.rollout_batch` over 64 multi-turn tool
   episodes vs bare `model.generate` on exactly the same per-turn prompt batches (goal: <= 25%).
   CPU time, not wall time: on a shared machine wall time mostly measures the neighbours.
2. Tools sequential (max_workers=1) vs overlapped (max_workers=64), with an injected tool latency
   (wall time: the latency is sleep).
3. A history-rewriting template: the real Qwen3 template with `enable_thinking=False` (its empty
   `<think></think>` blocks vanish from earlier turns), so every episode becomes per-turn samples and
   every turn re-renders and re-encodes the whole history. The loop's own CPU work vs the CPU inside
   generate, next to the same ratio for the append-only ChatML run of part 1 (goal: <= 10%).

Run: `.venv/bin/python benchmarks/bench_rollout.py [--latency 0.05] [--episodes 64]`
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time

import torch

from agents import HFPolicy, RolloutLimits, SamplingParams, rollout_batch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load_test_helpers():
    """The offline tokenizer builder of tests/agents/conftest.py (byte-level BPE + ChatML template)."""
    spec = importlib.util.spec_from_file_location("agents_conftest", ROOT / "tests/agents/conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ToolEveryTurnEnv:
    """Every assistant turn is 'executed' as a tool call (sleeping `latency`); the third turn ends it."""

    def __init__(self, latency: float):
        self.latency, self.steps = latency, 0

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        task = (options or {}).get("task", "task")
        return (
            [
                {"role": "system", "content": "Solve it with Python."},
                {"role": "user", "content": f"Problem {task}"},
            ],
            {"tools": []},
        )

    def step(self, action):
        self.steps += 1
        time.sleep(self.latency)
        if self.steps >= 3:
            return [], 0.0, True, False, {"tool_calls": 0, "tool_errors": 0, "grade": {"status": "wrong"}}
        output = {"role": "tool", "content": f"stdout: {len(action)} chars, {action[:40]}"}
        return [output], 0.0, False, False, {"tool_calls": 1, "tool_errors": 0}


class RecordingPolicy:
    """Wraps a policy and records every batch it is asked to generate (to replay with plain generate)."""

    def __init__(self, inner):
        self.inner, self.calls, self.cpu_s = inner, [], 0.0

    def generate(self, prompts, sampling):
        self.calls.append(([list(p) for p in prompts], sampling))
        start = time.process_time()
        try:
            return self.inner.generate(prompts, sampling)
        finally:
            self.cpu_s += time.process_time() - start


def time_batches(model, policy, calls, pad_id, repeats):
    """Per recorded batch, alternate `policy.generate` and bare `model.generate` (same seed, so the same
    tokens); keep the fastest of `repeats` for each. Returns (tokens, policy_s, plain_s)."""
    tokens, policy_s, plain_s = 0, 0.0, 0.0
    for prompts, sampling in calls:
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), pad_id)
        mask = torch.zeros_like(ids)
        for b, p in enumerate(prompts):
            ids[b, width - len(p) :], mask[b, width - len(p) :] = torch.tensor(p), 1
        best_policy, best_plain = float("inf"), float("inf")
        for _ in range(repeats):
            torch.manual_seed(0)
            start = time.process_time()
            completions = policy.generate(prompts, sampling)
            best_policy = min(best_policy, time.process_time() - start)
            torch.manual_seed(0)
            start = time.process_time()
            with torch.no_grad():
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    top_k=0,
                    top_p=1.0,
                    temperature=sampling.temperature,
                    max_new_tokens=sampling.max_tokens,
                    eos_token_id=list(sampling.stop_token_ids),
                    pad_token_id=pad_id,
                )
            best_plain = min(best_plain, time.process_time() - start)
        tokens += sum(len(c.ids) for c in completions)
        policy_s, plain_s = policy_s + best_policy, plain_s + best_plain
    return tokens, policy_s, plain_s


def run_loop(policy, tok, episodes, latency, workers, sampling, limits, seed=0, template_kwargs=None):
    torch.manual_seed(seed)
    tasks = [f"t{i}" for i in range(episodes // 8)]
    batch = rollout_batch(
        lambda: ToolEveryTurnEnv(latency),
        policy,
        tok,
        tasks,
        group_size=8,
        sampling=sampling,
        limits=limits,
        seed=seed,
        max_workers=workers,
        chat_template_kwargs=template_kwargs,
    )
    return batch


def own_work(policy, tok, episodes, sampling, limits, template_kwargs=None):
    """(batch, CPU s of the loop's own work, CPU s inside generate) of one rollout run."""
    recorder = RecordingPolicy(policy)
    start = time.process_time()
    batch = run_loop(recorder, tok, episodes, 0.0, 8, sampling, limits, template_kwargs=template_kwargs)
    return batch, time.process_time() - start - recorder.cpu_s, recorder.cpu_s


def per_turn_part(helpers, episodes, chatml_ratio):
    """Part 3: the loop's own work with the real Qwen3 template (per-turn samples) vs generate."""
    tok = helpers.build_family_tokenizer("qwen3")
    model = helpers.build_model(tok, hidden_size=128, intermediate_size=384, num_hidden_layers=4)
    stops = (tok.eos_token_id, *range(4, 400, 17))
    sampling = SamplingParams(max_tokens=48, stop_token_ids=stops)
    limits = RolloutLimits(max_turns=3, max_response_tokens=512)
    policy = HFPolicy(model, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    no_think = {"enable_thinking": False}
    own_work(policy, tok, 16, sampling, limits, no_think)  # warm-up
    batch, own_s, gen_s = own_work(policy, tok, episodes, sampling, limits, no_think)
    per_turn = sum(t.per_turn for t in batch)
    rows = sum(len(t.rows()) for t in batch)
    print("| part | measurement | CPU s | share of generate CPU |")
    print("|---|---|---|---|")
    print(f"| 3 | Qwen3 template, enable_thinking=False: {per_turn}/{len(batch)} episodes per-turn, {rows} "
          f"samples; CPU inside generate | {gen_s:.2f} | |")
    print(f"| 3 | same: rollout loop's own work (render + re-encode the history each turn, per-sample "
          f"ledger checks, env, bookkeeping) | {own_s:.2f} | **{own_s / gen_s:.1%}** |")
    print(f"| 3 | (part 1, append-only ChatML: own work / generate CPU) | | {chatml_ratio:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.05, help="injected seconds per tool call (part 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    helpers = _load_test_helpers()
    tok = helpers.build_tokenizer()
    model = helpers.build_model(tok, hidden_size=128, intermediate_size=384, num_hidden_layers=4)
    params = sum(p.numel() for p in model.parameters())
    stops = (tok.eos_token_id, *range(4, 400, 17))  # a random model rarely samples eos: frequent stops
    sampling = SamplingParams(max_tokens=48, stop_token_ids=stops)
    limits = RolloutLimits(max_turns=3, max_response_tokens=512)
    policy = HFPolicy(model, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    run_loop(policy, tok, 16, 0.0, 8, sampling, limits)  # warm-up

    # Part 1 in CPU seconds of this process (time.process_time, all threads; one torch thread): on a
    # shared machine wall time mostly measures the neighbours. The loop's own cost (render, ledger
    # checks, env, bookkeeping) = CPU of the rollout run minus CPU inside generate; HFPolicy vs bare
    # generate are alternated on the very same batches (same seed, same tokens; fastest of repeats).
    recorder = RecordingPolicy(policy)
    start = time.process_time()
    loop = run_loop(recorder, tok, args.episodes, 0.0, 8, sampling, limits)
    loop_own_s = time.process_time() - start - recorder.cpu_s
    chatml_ratio = loop_own_s / recorder.cpu_s
    s = loop.stats
    tokens, policy_s, plain_s = time_batches(model, policy, recorder.calls, tok.pad_token_id, args.repeats)
    loop_s = policy_s + loop_own_s
    print(
        f"model: tiny Qwen2, {params / 1e6:.2f} M params, torch threads {torch.get_num_threads()}; "
        f"{args.episodes} episodes, {sum(t.num_turns for t in loop)} turns, "
        f"{s.generate_calls} generate calls, "
        f"{s.sampled_tokens} sampled tokens"
    )
    print("| part | measurement | CPU s | generated tok per CPU s |")
    print("|---|---|---|---|")
    rows = [
        (f"bare `model.generate` on the loop's per-turn batches (fastest of {args.repeats})", plain_s),
        ("`HFPolicy.generate` (scores, log-probs, trimming) on the same batches", policy_s),
        ("rollout loop's own work (render, ledger checks, env steps, bookkeeping)", loop_own_s),
        ("rollout loop total = HFPolicy + own work", loop_s),
    ]
    for label, sec in rows:
        print(f"| 1 | {label} | {sec:.2f} | {tokens / sec:,.0f} |")
    print(
        "| 1 | **overhead of the loop vs bare generate** (loop / bare - 1) | | "
        f"**{loop_s / plain_s - 1:.1%}** |"
    )
    print(
        f"| 1 | (wall of the rollout run: {s.wall_s:.2f} s, of which generate {s.generation_s:.2f} s) | | |"
    )
    print("| part | measurement | wall s | generated tok/s |")
    print("|---|---|---|---|")
    for workers in (1, args.episodes):
        b = run_loop(policy, tok, args.episodes, args.latency, workers, sampling, limits, seed=100)
        label = (
            "sequential tools (max_workers=1)"
            if workers == 1
            else f"overlapped tools (max_workers={workers})"
        )
        calls = sum(t.metrics["tool_calls"] for t in b) + sum(t.finish_reason == "stop" for t in b)
        print(
            f"| 2 | {label}: {calls:.0f} env steps x {args.latency * 1000:.0f} ms, time in env-step phases | "
            f"{b.stats.tool_s:.2f} | |"
        )
        print(f"| 2 | {label}: whole rollout wall | {b.stats.wall_s:.2f} | {b.stats.tokens_per_s:,.0f} |")
    per_turn_part(helpers, args.episodes, chatml_ratio)


if __name__ == "__main__":
    main()
