"""Per-turn samples: checked per sample, serialisable, budgets, and the Mistral tool list moving."""

import dataclasses

import pytest

from agents import (
    Completion,
    RolloutLimits,
    SamplingParams,
    ScriptedPolicy,
    Trajectory,
    TrajectoryError,
    build_samples,
    check_trajectory,
    rollout,
)
from agents.render import encode

PARAMETERS = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                           "parameters": PARAMETERS}}]


class FeedbackEnv:
    """Answers the first turn with a *user* message ("Try again."), grades the second."""

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}], \
            {"tools": TOOLS}

    def step(self, action):
        self.steps += 1
        if self.steps == 1:
            return [{"role": "user", "content": "Try again."}], 0.0, False, False, {}
        correct = "\\boxed{5}" in action
        grade = {"status": "correct" if correct else "wrong", "prediction": None, "correct": correct}
        return [], float(correct), True, False, {"grade": grade}

    def close(self):
        pass


def _play(tok, turns, **kwargs):
    policy = ScriptedPolicy(turns, tok, lockstep=True, logprob=-1.0)
    sampling = SamplingParams(max_tokens=64, stop_token_ids=(tok.eos_token_id,))
    return rollout(FeedbackEnv(), policy, tok, sampling=sampling, **kwargs), policy


def test_mistral_moves_tools_and_system_to_the_new_last_user_message(family_tokenizers):
    tok = family_tokenizers["mistral_v3"]
    traj, policy = _play(tok, ["I think 4.", "The answer is \\boxed{5}."])
    assert traj.per_turn and traj.reward == 1.0 and [s.response_ids for s in traj.samples] == policy.turns
    first = '<s>[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "add", '
    assert tok.decode(traj.samples[0].prompt_ids).startswith(first)
    tools = tok.apply_chat_template([{"role": "user", "content": "x"}], tools=TOOLS, tokenize=False)
    tools = tools[len("<s>"): tools.index("[INST]")]
    assert traj.samples[1].prompt_ids == encode(
        tok, "<s>[INST]What is 2 + 3?[/INST]I think 4.</s>" + tools + "[INST]Be brief.\n\nTry again.[/INST]")


def test_per_turn_budget_counts_the_history_past_the_first_prompt(family_tokenizers):
    tok = family_tokenizers["mistral_v3"]
    traj, policy = _play(tok, ["I think 4.", "The answer is \\boxed{5}."],
                         limits=RolloutLimits(max_response_tokens=len(encode(tok, "I think 4.</s>")) + 3))
    # Turn 1's prompt grew the history past the budget (the tool list moved in): no room to sample.
    assert (traj.finish_reason, traj.num_turns, traj.per_turn) == ("length", 1, True)
    assert traj.samples[0].response_ids == policy.turns[0]


def test_samples_survive_a_dict_round_trip(family_tokenizers):
    traj, _ = _play(family_tokenizers["mistral_v3"], ["I think 4.", "\\boxed{5}"])
    again = Trajectory(**dataclasses.asdict(traj))
    assert again == traj and all(isinstance(s, Trajectory) for s in again.samples)


def test_every_sample_is_checked():
    episode = Trajectory(prompt_ids=[], reward=1.0)
    turns = [Completion([7, 8], [-0.1, -0.2], "stop"), Completion([9], [-0.3], "stop")]
    samples = build_samples(episode, [[1, 2], [1, 3]], turns)
    assert [s.turn_index for s in samples] == [[0, 0], [1]] and samples[1].reward == 1.0
    check_trajectory(samples[1], [turns[1]], [[1, 3]], first_turn=1)
    with pytest.raises(TrajectoryError, match="turn 0: turn_index"):
        check_trajectory(samples[1], [turns[1]], [[1, 3]])
    with pytest.raises(TrajectoryError, match="1 turn prompts"):
        build_samples(episode, [[1, 2]], turns)
    with pytest.raises(TrajectoryError, match="per-turn sample 1: Trajectory.logprobs has 2 entries"):
        build_samples(episode, [[1, 2], [1, 3]], [turns[0], Completion([9], [-0.3, -0.4], "stop")])


def test_qwen3_drops_reasoning_before_a_new_user_query(family_tokenizers):
    tok = family_tokenizers["qwen3"]
    turns = ["<think>\nfour?\n</think>\n\nI think 4.", "<think>\nno, five\n</think>\n\n\\boxed{5}"]
    traj, policy = _play(tok, turns)
    assert traj.per_turn and traj.reward == 1.0 and [s.response_ids for s in traj.samples] == policy.turns
    second = tok.decode(traj.samples[1].prompt_ids)   # turn 0 is now before the last user query
    assert "four?" not in second and second.endswith(
        "<|im_start|>assistant\nI think 4.<|im_end|>\n"
        "<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\n")
