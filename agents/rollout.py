"""The rollout loops: `rollout` plays one episode, `rollout_batch` plays tasks × group_size at once.

Each turn of `rollout_batch`:

1. one `policy.generate` call over the contexts of ALL live episodes (one batch);
2. every episode records its sampled ids in its ledger (never re-encoded) and decodes its action;
3. the `env.step` calls run concurrently in a thread pool (tool executions overlap each other);
4. each env's new messages are rendered as a template delta and appended (mask 0), or, once the
   template is seen rewriting history, the next prompt is the template's rendering of the history
   and the episode is trained as one sample per turn (`history=`, see `agents.episode`).

Every finished episode's ledger is checked (`agents.check_trajectory`, per sample when per-turn);
a broken invariant raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from agents.episode import Episode, HistoryMode, RolloutLimits, StepOutcome
from agents.errors import TrajectoryError
from agents.policy import Policy, SamplingParams
from agents.trajectory import Trajectory


@dataclass
class RolloutStats:
    """Wall-clock accounting of one `rollout_batch` call (seconds unless noted)."""

    episodes: int = 0
    generate_calls: int = 0
    """Calls to `policy.generate` (one per turn)."""
    sampled_tokens: int = 0
    reset_s: float = 0.0
    """Creating and resetting the envs (concurrently)."""
    generation_s: float = 0.0
    """Inside `policy.generate`."""
    tool_s: float = 0.0
    """Wall time of the concurrent `env.step` phases."""
    render_s: float = 0.0
    """Recording turns and rendering injected messages (tokenizer + template)."""
    wall_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        """Sampled tokens per second of wall time."""
        return self.sampled_tokens / self.wall_s if self.wall_s > 0 else 0.0


class RolloutBatch(list):
    """A `list[Trajectory]` that also carries the batch's `RolloutStats` as `.stats`."""

    stats: RolloutStats


def _stop_ids(tokenizer: Any, sampling: SamplingParams) -> SamplingParams:
    if sampling.stop_token_ids:
        return sampling
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError(
            "SamplingParams.stop_token_ids is empty and the tokenizer has no eos_token_id; "
            "pass the end-of-turn id(s), e.g. stop_token_ids=(tok.convert_tokens_to_ids('<|im_end|>'),)"
        )
    return replace(sampling, stop_token_ids=(int(eos),))


def _play(
    episodes: list[Episode],
    policy: Policy,
    sampling: SamplingParams,
    stats: RolloutStats,
    pool: ThreadPoolExecutor | None,
) -> None:
    """Drive live episodes turn by turn until none is left (steps 1-4 of the module docstring)."""
    while live := [e for e in episodes if e.live]:
        prompts = [e.context() for e in live]
        max_new = max(min(sampling.max_tokens, e.budget_left()) for e in live)
        start = time.perf_counter()
        completions = policy.generate(prompts, replace(sampling, max_tokens=max_new))
        elapsed = time.perf_counter() - start
        if len(completions) != len(prompts):
            raise ValueError(
                f"policy.generate returned {len(completions)} completions for {len(prompts)} prompts"
            )
        stats.generate_calls += 1
        stats.generation_s += elapsed
        start = time.perf_counter()
        stepping = []
        for episode, prompt, completion in zip(live, prompts, completions, strict=True):
            episode.counts["generation_s"] += elapsed
            action = episode.take_turn(prompt, completion, sampling.max_tokens)
            if action is not None:
                stepping.append((episode, action))
        stats.render_s += time.perf_counter() - start
        start = time.perf_counter()
        run = pool.map if pool is not None else map
        outcomes = list(run(lambda ea: ea[0].step_env(ea[1]), stepping))
        stats.tool_s += time.perf_counter() - start
        start = time.perf_counter()
        for (episode, _), outcome in zip(stepping, outcomes, strict=True):
            episode.absorb(outcome)
        stats.render_s += time.perf_counter() - start


def _close_all(episodes: list[Episode], stats: RolloutStats) -> RolloutBatch:
    """Close every episode (env closed, ledger checked); the first broken ledger raises after all closed."""
    batch, errors = RolloutBatch(), []
    for episode in episodes:
        try:
            batch.append(episode.close())
        except TrajectoryError as err:
            errors.append(err)
    if errors:
        raise errors[0]
    stats.episodes = len(batch)
    stats.sampled_tokens = sum(t.sampled_tokens for t in batch)
    batch.stats = stats
    return batch


def rollout(
    env: Any,
    policy: Policy,
    tokenizer: Any,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sampling: SamplingParams | None = None,
    limits: RolloutLimits | None = None,
    group_id: int = 0,
    chat_template: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    history: HistoryMode = "auto",
) -> Trajectory:
    """Play one episode of `env` with `policy` and return its checked token trajectory.

    Args:
        env: A text env (`reset(seed=, options=)`, `step(text)`); it is closed at the end.
        policy: Any `Policy` (HFPolicy, VLLMPolicy, ScriptedPolicy).
        tokenizer: The policy's tokenizer, with the chat template used for rendering.
        seed: Passed to `env.reset`.
        options: Passed to `env.reset`, e.g. `{"task": Task}`.
        sampling: Per-turn sampling (default `SamplingParams()`); empty `stop_token_ids` = tokenizer eos.
        limits: Budgets (default `RolloutLimits()`).
        group_id: Stored on the trajectory.
        chat_template: Template overriding the tokenizer's own.
        chat_template_kwargs: Extra template variables (e.g. `{"enable_thinking": False}`).
        history: "auto" (append-only until the template rewrites history, then per-turn samples),
            "append" (raise `TemplateError` on a rewrite) or "per_turn" (always per-turn samples).

    Returns:
        The trajectory; `.metrics` holds tool_calls, tool_errors, response_tokens, sampled_tokens,
        num_turns, generation_s, tool_s, truncated_tool_outputs, prompt_truncated (1.0 when
        `limits.max_prompt_tokens` cut the prompt) and prompt_tokens_cut.

    Raises:
        TemplateError: The chat template is not append-only and `history="append"`.
        TrajectoryError: A ledger invariant broke.
        PromptTooLongError: The prompt exceeds `limits.max_prompt_tokens` with truncation "error".
    """
    sampling = _stop_ids(tokenizer, sampling or SamplingParams())
    stats = RolloutStats()
    start = time.perf_counter()
    render = {"chat_template": chat_template, "chat_template_kwargs": chat_template_kwargs}
    episode = Episode(env, tokenizer, limits or RolloutLimits(), group_id=group_id, render_kwargs=render,
                      history=history, stop_ids=sampling.stop_token_ids)
    try:
        episode.begin(episode.reset_env(seed, options))
        _play([episode], policy, sampling, stats, pool=None)
    except BaseException:
        env.close()
        raise
    stats.wall_s = time.perf_counter() - start
    return _close_all([episode], stats)[0]


def rollout_batch(
    make_env: Callable[[], Any],
    policy: Policy,
    tokenizer: Any,
    tasks: Sequence[Any],
    *,
    group_size: int,
    sampling: SamplingParams,
    limits: RolloutLimits,
    seed: int | None = None,
    max_workers: int = 8,
    chat_template: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    history: HistoryMode = "auto",
) -> RolloutBatch:
    """Play `len(tasks) * group_size` episodes at once; one batched `generate` call per turn.

    Episode i = (task index i // group_size, copy i % group_size): order is task-major and
    `group_id` is the task index. Each episode gets its own env from `make_env`, reset with
    `options={"task": task}` and `seed + i` (None when `seed` is None), closed at the end.

    Args:
        make_env: Builds one env (e.g. `lambda: gymnasium.make("stare/PythonTool-v0")`).
        policy: Any `Policy`.
        tokenizer: The policy's tokenizer, with its chat template.
        tasks: `tasks.Task` records.
        group_size: Episodes per task (GRPO group size).
        sampling: Per-turn sampling; empty `stop_token_ids` = tokenizer eos.
        limits: Budgets of every episode.
        seed: Base seed of the env resets.
        max_workers: Threads running `env.reset`/`env.step` concurrently (1 = sequential tools).
        chat_template: Template overriding the tokenizer's own.
        chat_template_kwargs: Extra template variables.
        history: "auto", "append" or "per_turn" (see `rollout`).

    Returns:
        A `RolloutBatch` (a list of trajectories, task-major) with `.stats: RolloutStats`.

    Raises:
        PromptTooLongError: A prompt exceeds `limits.max_prompt_tokens` with truncation "error"
            (every env is closed first).
    """
    if group_size < 1:
        raise ValueError(f"rollout_batch: group_size must be >= 1, got {group_size}")
    if max_workers < 1:
        raise ValueError(f"rollout_batch: max_workers must be >= 1, got {max_workers}")
    sampling = _stop_ids(tokenizer, sampling)
    stats = RolloutStats()
    start = time.perf_counter()
    render = {"chat_template": chat_template, "chat_template_kwargs": chat_template_kwargs}
    slots = [(g, task) for g, task in enumerate(tasks) for _ in range(group_size)]
    episodes: list[Episode] = []
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rollout-env") as pool:
        try:
            envs = list(pool.map(lambda _: make_env(), slots))
            episodes = [
                Episode(env, tokenizer, limits, group_id=g, render_kwargs=render, history=history,
                        stop_ids=sampling.stop_token_ids)
                for env, (g, _) in zip(envs, slots, strict=True)
            ]
            t0 = time.perf_counter()
            resets = list(pool.map(lambda i: _reset(episodes[i], slots[i][1], seed, i), range(len(episodes))))
            for episode, outcome in zip(episodes, resets, strict=True):
                episode.begin(outcome)
            stats.reset_s = time.perf_counter() - t0
            _play(episodes, policy, sampling, stats, pool)
        except BaseException:
            for episode in episodes:
                episode.env.close()
            raise
    stats.wall_s = time.perf_counter() - start
    return _close_all(episodes, stats)


def _reset(episode: Episode, task: Any, seed: int | None, index: int) -> StepOutcome:
    return episode.reset_env(None if seed is None else seed + index, {"task": task})
