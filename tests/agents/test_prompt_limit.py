"""The initial prompt's token limit (`RolloutLimits.max_prompt_tokens`, verl's max_prompt_length)."""

from types import SimpleNamespace

import pytest

from agents import (
    PromptTooLongError,
    RolloutLimits,
    SamplingParams,
    ScriptedPolicy,
    check_trajectory,
    limit_prompt,
    rollout,
    rollout_batch,
)

LONG = "You are a helpful assistant. Solve the problem: what is 17 * 23? " * 6


class RecordingPolicy(ScriptedPolicy):
    """A ScriptedPolicy that keeps every prompt it was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts = []

    def generate(self, prompts, sampling):
        self.prompts += [list(p) for p in prompts]
        return super().generate(prompts, sampling)


def _task(name="long-1"):
    return SimpleNamespace(id=name, prompt=LONG, answer="42")


def _play(kit, tokenizer, **limits):
    env = kit.FakeToolEnv()
    policy = RecordingPolicy([kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer)
    traj = rollout(env, policy, tokenizer, options={"task": _task()},
                   limits=RolloutLimits(max_response_tokens=1024, **limits))
    return traj, policy, env


def test_a_long_prompt_is_cut_from_the_left_to_exactly_n_ids(kit, tokenizer):
    full, _, _ = _play(kit, tokenizer)
    assert len(full.prompt_ids) > 300 and full.metrics["prompt_truncated"] == 0.0
    cut, policy, env = _play(kit, tokenizer, max_prompt_tokens=64)
    assert cut.prompt_ids == full.prompt_ids[-64:]                       # the last 64 ids, in order
    assert cut.metrics["prompt_truncated"] == 1.0
    assert cut.metrics["prompt_tokens_cut"] == len(full.prompt_ids) - 64
    assert policy.prompts[0] == cut.prompt_ids                            # the policy saw the cut prompt
    assert policy.prompts[1] == cut.prompt_ids + cut.response_ids[: len(policy.prompts[1]) - 64]
    # multi-turn: only the first prompt is limited; the response (sampled, tool, glue) is unchanged
    for name in ("response_ids", "loss_mask", "logprobs", "turn_index", "segment"):
        assert getattr(cut, name) == getattr(full, name), name
    assert (cut.reward, cut.finish_reason, cut.num_turns, env.closed) == (1.0, "stop", 2, True)


def test_the_cut_trajectory_passes_the_ledger_check(kit, tokenizer):
    traj, policy, _ = _play(kit, tokenizer, max_prompt_tokens=40)
    assert len(traj.prompt_ids) == 40
    # rebuild the turn record from what the policy saw and returned: every invariant holds on the cut ids
    completions = []
    replay = ScriptedPolicy([kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer)
    for prompt in policy.prompts:
        completions += replay.generate([prompt], SamplingParams(max_tokens=1024))
    check_trajectory(traj, completions, policy.prompts, tokenizer=tokenizer)


def test_error_mode_raises_naming_the_task_its_length_and_the_key(kit, tokenizer):
    env = kit.FakeToolEnv()
    with pytest.raises(PromptTooLongError, match=r"task 'long-1'.* \d+ tokens.*max_prompt_tokens=64") as err:
        rollout(env, RecordingPolicy([kit.ANSWER_TURN], tokenizer), tokenizer, options={"task": _task()},
                limits=RolloutLimits(max_prompt_tokens=64, prompt_truncation="error"))
    assert "rollout.max_prompt_tokens" in str(err.value) and "prompt_truncation=left" in str(err.value)
    assert isinstance(err.value, ValueError) and env.closed


def test_error_mode_in_a_batch_closes_every_env(kit, tokenizer):
    made = []

    def make_env():
        made.append(kit.FakeToolEnv())
        return made[-1]
    short = SimpleNamespace(id="short", prompt="6 * 7?", answer="42")
    with pytest.raises(PromptTooLongError, match="long-2"):
        rollout_batch(make_env, RecordingPolicy([kit.ANSWER_TURN], tokenizer), tokenizer,
                      [short, _task("long-2")], group_size=2, sampling=SamplingParams(),
                      limits=RolloutLimits(max_prompt_tokens=300, prompt_truncation="error"))
    assert len(made) == 4 and all(env.closed for env in made)


def test_no_limit_or_a_short_prompt_leaves_the_ids_unchanged(kit, tokenizer):
    full, _, _ = _play(kit, tokenizer)
    roomy, _, _ = _play(kit, tokenizer, max_prompt_tokens=len(full.prompt_ids))
    assert roomy.prompt_ids == full.prompt_ids and roomy.metrics["prompt_truncated"] == 0.0
    ids = list(range(10))
    assert limit_prompt(ids, RolloutLimits()) == (ids, 0)
    assert limit_prompt(ids, RolloutLimits(max_prompt_tokens=10, prompt_truncation="error")) == (ids, 0)
    assert limit_prompt(ids, RolloutLimits(max_prompt_tokens=3)) == ([7, 8, 9], 7)


@pytest.mark.parametrize("bad", [{"max_prompt_tokens": 0}, {"prompt_truncation": "right"}])
def test_bad_limits_are_refused(bad):
    with pytest.raises(ValueError, match="RolloutLimits"):
        RolloutLimits(**bad)
