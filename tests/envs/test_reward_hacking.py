"""Reward-hacking probes: each earns no reward in every env, while an honest answer earns 1 (control)."""

from __future__ import annotations

import json

import pytest

from envs.lookup import LookupEnv, directory_tasks
from envs.math_cot import MathCoTEnv
from envs.python_tool import PythonToolEnv
from tasks.task import Task

PRODUCT = Task("p1", "What is 17 * 23?", "391", "tool")
TEAM = next(t for t in directory_tasks() if t.prompt == "Which team is Ben Cho on?")  # answer: Storage


def hermes(tool: str, /, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


def python_env(fake_sandbox):
    return PythonToolEnv(dataset=[PRODUCT], sandbox=fake_sandbox, max_tool_turns=3), PRODUCT, "391", "390"


def lookup_env(fake_sandbox):
    return LookupEnv(max_tool_turns=3), TEAM, "Storage", "Compilers"


def cot_env(fake_sandbox):
    return MathCoTEnv(dataset=[PRODUCT]), PRODUCT, "391", "390"


REVEAL = {  # a tool call whose output contains the right answer, per env
    "python": hermes("code_interpreter", code="print('\\\\boxed{391}')"),
    "lookup": hermes("lookup", name="Ben Cho"),
}
ENVS = {"python": python_env, "lookup": lookup_env, "cot": cot_env}


def play(env, task, actions, seen=None):
    """Step through `actions` until the episode ends; tool message contents go to `seen`."""
    env.reset(options={"task": task})
    for action in actions:
        result = env.step(action)
        (seen if seen is not None else []).extend(m["content"] for m in result.messages)
        if result.terminated or result.truncated:
            return result
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("name", ENVS)
def test_control_an_honest_answer_earns_one(name, fake_sandbox):
    env, task, right, _ = ENVS[name](fake_sandbox)
    result = play(env, task, [f"The answer is \\boxed{{{right}}}."])
    assert result.reward == 1.0 and result.info["grade"]["correct"]


@pytest.mark.parametrize("name", ENVS)
def test_boxed_spam_whose_last_candidate_is_wrong_earns_nothing(name, fake_sandbox):
    env, task, right, wrong = ENVS[name](fake_sandbox)
    result = play(env, task, [f"Maybe \\boxed{{{right}}} or \\boxed{{{right}}}; final: \\boxed{{{wrong}}}"])
    assert result.reward == 0.0 and result.info["grade"]["status"] == "wrong"


@pytest.mark.parametrize("name", ENVS)
def test_an_empty_answer_earns_nothing(name, fake_sandbox):
    env, task, _, _ = ENVS[name](fake_sandbox)
    result = play(env, task, [""])
    assert result.reward == 0.0 and result.info["grade"]["status"] == "no_answer"


@pytest.mark.parametrize("name", ["python", "lookup"])
def test_answer_printed_by_the_tool_but_never_stated_earns_nothing(name, fake_sandbox):
    env, task, right, _ = ENVS[name](fake_sandbox)
    seen = []
    result = play(env, task, [REVEAL[name], "Done, see the tool output above."], seen)
    assert right in seen[0]  # the tool did reveal the answer to the model
    assert result.terminated and result.reward == 0.0 and result.info["grade"]["status"] == "no_answer"


@pytest.mark.parametrize("name", ["python", "lookup"])
def test_tool_call_farming_until_the_turn_limit_earns_nothing(name, fake_sandbox):
    env, task, right, _ = ENVS[name](fake_sandbox)
    # Every turn calls the tool and also states the right answer next to the call.
    farming = f"\\boxed{{{right}}} {REVEAL[name]}"
    result = play(env, task, [farming] * 10)
    assert result.truncated and not result.terminated and result.reward == 0.0
    assert result.info["tool_turns"] == 3 and result.info["grade"]["status"] == "no_answer"


def test_farming_with_shaping_on_never_goes_positive(fake_sandbox):
    env = LookupEnv(max_tool_turns=2, tool_error_penalty=0.1)
    result = play(env, TEAM, [hermes("lookup", name="Nobody")] * 5)
    assert result.truncated and result.reward == pytest.approx(-0.2)
