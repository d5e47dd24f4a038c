"""Every ledger invariant fails loudly, with the position and decoded text, when it is broken."""

import copy

import pytest

from agents import Completion, RolloutLimits, ScriptedPolicy, Segment, TrajectoryError, check_trajectory
from agents.episode import Episode
from agents.policy import SamplingParams
from agents.rollout import RolloutStats, _play, _stop_ids


@pytest.fixture
def played(kit, tokenizer):
    """A finished two-turn episode with its ledger (prompts and completions per turn)."""
    episode = Episode(kit.FakeToolEnv(), tokenizer, RolloutLimits())
    episode.begin(episode.reset_env(None, None))
    policy = ScriptedPolicy([kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer, logprob=-0.5)
    _play([episode], policy, _stop_ids(tokenizer, SamplingParams()), RolloutStats(), pool=None)
    return episode.traj, episode.ledger


def _check(traj, ledger, tokenizer, completions=None, prompts=None):
    check_trajectory(
        traj, completions or ledger.completions, prompts or ledger.turn_prompts, tokenizer=tokenizer
    )


def test_a_real_episode_passes(played, tokenizer):
    traj, ledger = played
    _check(traj, ledger, tokenizer)
    assert [lp for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if m] == [-0.5] * sum(
        traj.loss_mask
    )


def test_mask_on_an_injected_token_is_caught(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    i = traj.segment.index(Segment.TOOL)
    traj.loss_mask[i] = 1
    with pytest.raises(
        TrajectoryError, match=rf"response position {i}: loss_mask=1 but segment=TOOL(.|\n)*>>> "
    ):
        _check(traj, ledger, tokenizer)


def test_log_prob_on_an_injected_token_is_caught(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    i = traj.segment.index(Segment.GLUE)
    traj.logprobs[i] = -1.0
    with pytest.raises(TrajectoryError, match=rf"position {i}: injected token carries log-prob -1.0"):
        _check(traj, ledger, tokenizer)


def test_a_changed_sampled_id_is_caught_with_a_decoded_diff(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    traj.response_ids[3] = tokenizer.convert_tokens_to_ids("<|pad|>")
    with pytest.raises(
        TrajectoryError,
        match=r"turn 0: sampled ids differ(.|\n)*first difference at token 3"
        r"(.|\n)*<\|pad\|>",
    ):
        _check(traj, ledger, tokenizer)


def test_a_broken_prefix_is_caught(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    prompts = [list(p) for p in ledger.turn_prompts]
    prompts[1][len(traj.prompt_ids) + 2] += 1  # turn 1 was prompted with something else
    with pytest.raises(TrajectoryError, match="turn 1: its prompt is not a prefix"):
        _check(traj, ledger, tokenizer, prompts=prompts)


def test_engine_log_probs_must_be_kept(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    comps = list(ledger.completions)
    comps[1] = Completion(ids=comps[1].ids, logprobs=[-0.25] * len(comps[1].ids), finish_reason="stop")
    with pytest.raises(
        TrajectoryError, match="turn 1: positions .* not marked SAMPLED with the engine's log-probs"
    ):
        _check(traj, ledger, tokenizer, completions=comps)


def test_extra_sampled_tokens_not_produced_by_the_engine_are_caught(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    traj.response_ids.append(7)
    traj.loss_mask.append(1)
    traj.logprobs.append(-0.1)
    traj.turn_index.append(1)
    traj.segment.append(int(Segment.SAMPLED))
    with pytest.raises(TrajectoryError, match="the loss mask covers ids the policy never produced"):
        _check(traj, ledger, tokenizer)


def test_length_mismatch_is_caught(played, tokenizer):
    traj, ledger = copy.deepcopy(played)
    traj.segment.pop()
    with pytest.raises(TrajectoryError, match="Trajectory.segment has"):
        _check(traj, ledger, tokenizer)
