"""check_env: every registered env passes; each kind of broken env is caught by name."""

from __future__ import annotations

import random

import gymnasium
import pytest

import envs
from envs.checker import schema_problems
from envs.core import ChatSpace, TextSpace
from envs.errors import EnvCheckError

SCHEMA = {"type": "function", "function": {"name": "echo", "description": "Echo text.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string", "description": "Text."}},
    "required": ["text"]}}}


@pytest.mark.parametrize("env_id", envs.env_ids())
def test_every_registered_env_passes_the_checker(env_id):
    env = envs.make(env_id)
    assert envs.check_env(env) == ["spaces", "reset", "determinism", "task_option", "malformed_actions",
                                   "turn_budget", "close_idempotent"]


class ToyEnv(gymnasium.Env):
    """A hand-written (not TextEnv) tool env; each flag breaks one part of the contract."""

    def __init__(self, *, raise_on_bad=False, ignore_seed=False, budget=3, close_twice_fails=False,
                 schema=SCHEMA, continue_after_end=False):
        self.observation_space, self.action_space = ChatSpace(), TextSpace()
        self.raise_on_bad, self.ignore_seed, self.budget = raise_on_bad, ignore_seed, budget
        self.close_twice_fails, self.schema = close_twice_fails, schema
        self.continue_after_end = continue_after_end
        self.closed, self.done, self.turns = False, True, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        n = random.randint(0, 10**9) if self.ignore_seed else int(self.np_random.integers(100))
        self.done, self.turns = False, 0
        return [{"role": "user", "content": f"Echo {n}."}], {"tools": [self.schema]}

    def step(self, action):
        if self.done and not self.continue_after_end:
            raise RuntimeError("episode over")
        if self.raise_on_bad and "{not json" in action:
            raise ValueError("cannot parse")
        if "<tool_call>" in action and self.turns < self.budget:
            self.turns += 1
            info = {"tool_calls": 1, "tool_errors": 1}
            return [{"role": "tool", "content": "Error."}], 0.0, False, False, info
        self.done = True
        grade = {"status": "no_answer", "prediction": None, "correct": False}
        truncated = "<tool_call>" in action
        return [], 0.0, not truncated, truncated, {"tool_calls": 0, "tool_errors": 0, "grade": grade}

    def close(self):
        if self.closed and self.close_twice_fails:
            raise RuntimeError("already closed")
        self.closed = True


def test_a_correct_hand_written_env_passes():
    assert "turn_budget" in envs.check_env(ToyEnv())


@pytest.mark.parametrize("kwargs, failing_check", [
    ({"raise_on_bad": True}, "malformed_actions: step('<tool_call>{not json</tool_call>') raised ValueError"),
    ({"ignore_seed": True}, "determinism: reset(seed=0) then the same action gave different results"),
    ({"budget": 1000}, "turn_budget: repeating a tool call did not end the episode within 64 steps"),
    ({"close_twice_fails": True}, "close_idempotent: raised RuntimeError: already closed"),
    ({"schema": {"type": "function", "function": {"name": "bad name", "description": "",
                                                  "parameters": {"type": "object", "properties": {}}}}},
     "reset: tool name 'bad name' must be an identifier"),
    ({"continue_after_end": True}, "turn_budget: step() after the episode ended must raise"),
])
def test_each_broken_contract_is_reported_by_name(kwargs, failing_check):
    with pytest.raises(EnvCheckError) as err:
        envs.check_env(ToyEnv(**kwargs))
    assert failing_check in str(err.value)


def test_truncation_must_come_after_exactly_the_declared_budget():
    env = ToyEnv(budget=5)
    env.max_tool_turns = 3  # declares 3 but allows 5
    with pytest.raises(EnvCheckError, match="truncated after 6 steps .*expected 3 tool turns"):
        envs.check_env(env)


def test_schema_problems():
    assert schema_problems(SCHEMA) == []
    bad = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"x": {"type": "str"}}, "required": ["y"]}}}
    assert schema_problems(bad) == ["tool 'f': argument 'x' has no valid JSON type",
                                    "tool 'f': required ['y'] not among properties"]
    assert schema_problems({"name": "f"}) == ['a tool schema must be {"type": "function", "function": {...}}']


def test_a_reset_that_raises_is_a_check_failure():
    class NoData(ToyEnv):
        def reset(self, *, seed=None, options=None):
            raise FileNotFoundError("tasks.jsonl")

    with pytest.raises(EnvCheckError, match="reset\\(seed=0\\) raised FileNotFoundError: tasks.jsonl"):
        envs.check_env(NoData())


def test_check_env_rejects_non_envs():
    with pytest.raises(TypeError, match="needs a gymnasium.Env"):
        envs.check_env("stare/Lookup-v0")


CARD_SECTIONS = ["## Description", "## Observation", "## Action", "## Reward", "## Episode End",
                 "## Arguments", "## Version History"]


@pytest.mark.parametrize("env_id", [i for i in envs.env_ids() if i.startswith("stare/")])
def test_every_shipped_env_has_a_full_card(env_id):
    doc = type(envs.make(env_id).unwrapped).__doc__
    positions = [doc.find(section) for section in CARD_SECTIONS]
    missing = [s for s, p in zip(CARD_SECTIONS, positions, strict=True) if p < 0]
    assert not missing, f"{env_id}: card lacks {missing}"
    assert positions == sorted(positions), f"{env_id}: card sections out of order"
    version = env_id.rsplit("-v", 1)[1]
    assert f"- v{version}:" in doc.split("## Version History")[1]  # the current version is listed
