"""Scripted episodes through the real `stare/PythonTool-v0` env (local sandbox) and the ChatML tokenizer."""

import pytest

from agents import RolloutLimits, SamplingParams, ScriptedPolicy, Segment, rollout, rollout_batch
from agents.render import decode

gymnasium = pytest.importorskip("gymnasium")
envs = pytest.importorskip("envs")
from tasks.task import Task  # noqa: E402

TASK = Task(id="mul-1", prompt="What is 6 * 7?", answer="42", family="tool")
CALL = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}</tool_call>'


def _make():
    try:
        return gymnasium.make("stare/PythonTool-v0", dataset=[TASK])
    except Exception as err:  # the env area may still be landing
        pytest.skip(f"stare/PythonTool-v0 not available: {err}")


def test_scripted_tool_episode_through_python_tool_env(tokenizer):
    policy = ScriptedPolicy([CALL, "It printed 42, so the answer is \\boxed{42}."], tokenizer)
    traj = rollout(
        _make(),
        policy,
        tokenizer,
        seed=0,
        options={"task": TASK},
        limits=RolloutLimits(max_response_tokens=2048),
    )
    assert (traj.finish_reason, traj.reward, traj.grade_status) == ("stop", 1.0, "correct")
    assert traj.metrics["tool_calls"] == 1 and traj.metrics["tool_errors"] == 0
    tool_text = decode(
        tokenizer, [i for i, s in zip(traj.response_ids, traj.segment, strict=True) if s == Segment.TOOL]
    )
    assert tool_text.strip() == "42"  # the sandbox's stdout, injected and never trained
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    assert sampled == policy.turns[0] + policy.turns[1]
    assert traj.messages[-2]["role"] == "tool" and traj.messages[-1]["role"] == "assistant"


def test_malformed_call_and_crashing_code_are_observations(tokenizer):
    bad_json = '<tool_call>{"name": "code_interpreter", "arguments": {"code": </tool_call>'
    crash = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "1/0"}}</tool_call>'
    policy = ScriptedPolicy([bad_json, crash, "\\boxed{41}"], tokenizer)
    traj = rollout(
        _make(), policy, tokenizer, options={"task": TASK}, limits=RolloutLimits(max_response_tokens=2048)
    )
    assert (traj.finish_reason, traj.reward, traj.grade_status, traj.num_turns) == ("stop", 0.0, "wrong", 3)
    assert traj.metrics["tool_errors"] == 2 and traj.failed is None
    assert "ZeroDivisionError" in traj.messages[-2]["content"]


def test_batched_groups_through_python_tool_env(tokenizer):
    policy = ScriptedPolicy([CALL, "\\boxed{42}"], tokenizer)
    batch = rollout_batch(
        _make,
        policy,
        tokenizer,
        [TASK, TASK],
        group_size=2,
        sampling=SamplingParams(),
        limits=RolloutLimits(max_response_tokens=2048),
        seed=0,
        max_workers=4,
    )
    assert [t.reward for t in batch] == [1.0] * 4 and [t.group_id for t in batch] == [0, 0, 1, 1]
    assert batch.stats.generate_calls == 2
