"""The TextEnv contract, driven by scripted actions through the Lookup env (no math grader needed)."""

from __future__ import annotations

import pytest

from envs.core import GradeInfo, StepInfo, StepResult, TextEnv
from envs.errors import ResetNeeded
from envs.lookup import LookupEnv, directory_tasks, grade_exact, lookup
from tasks.task import Task

OFFICE_TASK = next(t for t in directory_tasks()
                   if t.prompt == "In which office does the manager of Ada Park sit?")


def test_multi_turn_episode_scripted(tool_call):
    env = LookupEnv()
    messages, info = env.reset(seed=0, options={"task": OFFICE_TASK})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == OFFICE_TASK.prompt
    assert [t["function"]["name"] for t in info["tools"]] == ["lookup"]
    assert info["task_id"] == OFFICE_TASK.id

    result = env.step("I will look her up. " + tool_call("lookup", name="Ada Park"))
    assert isinstance(result, StepResult)
    assert result.messages == [{"role": "tool", "name": "lookup", "tool_call_id": "call_1_0",
                                "content": "team: Compilers; office: B214; manager: Lena Ortiz"}]
    assert (result.reward, result.terminated, result.truncated) == (0.0, False, False)
    assert result.info == {"tool_calls": 1, "tool_errors": 0, "error_kinds": [], "tool_turns": 1}

    messages, reward, terminated, truncated, info = env.step(tool_call("lookup", name="Lena Ortiz"))
    assert "office: C300" in messages[0]["content"] and messages[0]["tool_call_id"] == "call_2_0"

    final = env.step("Her manager sits in \\boxed{C300}.")
    assert final.messages == [] and final.reward == 1.0 and final.terminated and not final.truncated
    assert final.info["grade"] == {"status": "correct", "prediction": "C300", "correct": True}
    assert final.info["tool_turns"] == 2


def test_reset_info_tools_is_a_copy():
    env = LookupEnv()
    _, info = env.reset(seed=0)
    info["tools"][0]["function"]["name"] = "hacked"
    assert env.reset(seed=0)[1]["tools"][0]["function"]["name"] == "lookup"


def test_reset_draws_the_same_task_under_the_same_seed():
    picks = [LookupEnv().reset(seed=s)[0][-1]["content"] for s in (1, 1, 2, 3, 4, 5)]
    assert picks[0] == picks[1]
    assert len(set(picks[1:])) > 1  # the seed matters


def test_reset_rejects_a_non_task_option():
    with pytest.raises(TypeError, match="options\\['task'\\] must be a tasks.Task"):
        LookupEnv().reset(options={"task": {"prompt": "hi"}})


def test_turn_budget_truncates_without_running_the_extra_call(tool_call):
    env = LookupEnv(max_tool_turns=2)
    env.reset(seed=0, options={"task": OFFICE_TASK})
    for _ in range(2):
        assert not env.step(tool_call("lookup", name="Ada Park")).truncated
    last = env.step(tool_call("lookup", name="Lena Ortiz"))
    assert last.truncated and not last.terminated and last.reward == 0.0 and last.messages == []
    assert last.info["tool_calls"] == 0 and last.info["truncated_reason"] == "max_tool_turns"
    assert last.info["grade"] == {"status": "no_answer", "prediction": None, "correct": False}


def test_calls_beyond_the_per_turn_limit_are_refused(tool_call):
    env = LookupEnv()
    env.reset(seed=0)
    result = env.step(" ".join(tool_call("lookup", name="Ada Park") for _ in range(5)))
    assert result.info["tool_calls"] == 5 and result.info["tool_errors"] == 1
    assert result.info["error_kinds"] == ["too_many_calls"]
    assert [m["tool_call_id"] for m in result.messages] == [f"call_1_{i}" for i in range(5)]


def test_tool_errors_are_counted_and_shaping_is_off_by_default(tool_call):
    for penalty, expected in ((0.0, 1.0), (0.25, 0.5)):
        env = LookupEnv(tool_error_penalty=penalty)
        env.reset(options={"task": OFFICE_TASK})
        r1 = env.step(tool_call("lookup", name="Nobody Here"))
        assert r1.info["error_kinds"] == ["not_found"]
        assert "no person named 'Nobody Here'" in r1.messages[0]["content"]
        r2 = env.step("<tool_call>{oops</tool_call>")
        assert r2.info["error_kinds"] == ["malformed_call"] and r2.messages[0]["name"] == ""
        assert env.step("\\boxed{C300}").reward == pytest.approx(expected)


def test_step_before_reset_after_end_and_with_a_non_string():
    env = LookupEnv()
    with pytest.raises(ResetNeeded):
        env.step("hi")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be the assistant's text"):
        env.step(["hi"])
    env.step("\\boxed{x}")
    with pytest.raises(ResetNeeded):
        env.step("again")


def test_prompt_overrides_keep_literal_braces():
    env = LookupEnv(system_prompt=None, prompt_template="Q: {prompt}\nA: \\boxed{}")
    messages, _ = env.reset(options={"task": OFFICE_TASK})
    assert messages == [{"role": "user", "content": f"Q: {OFFICE_TASK.prompt}\nA: \\boxed{{}}"}]


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt_template": "no placeholder"}, "must contain '{prompt}'"),
    ({"dataset": []}, "non-empty list of tasks.Task"),
    ({"max_tool_turns": -1}, "max_tool_turns >= 0"),
])
def test_config_mistakes_raise_at_once(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LookupEnv(**kwargs)


def test_a_toolless_env_grades_tool_markup_as_text():
    env = TextEnv(dataset=[Task("x", "Say 5.", "5")], grader=grade_exact)
    env.reset(seed=0)
    result = env.step('<tool_call>{"name": "lookup", "arguments": {}}</tool_call> \\boxed{5}')
    assert result.terminated and result.reward == 1.0


def test_close_is_idempotent_and_ends_the_episode():
    ended = []

    class Tracked(TextEnv):
        def on_episode_end(self) -> None:
            ended.append(1)

    env = Tracked(dataset=directory_tasks(), tools=[lookup], grader=grade_exact)
    env.reset(seed=0)
    env.close()
    env.close()
    assert ended == [1]


def test_step_info_carries_exactly_the_keys_of_the_step_info_contract(tool_call):
    env = LookupEnv()
    env.reset(seed=0, options={"task": OFFICE_TASK})
    middle = env.step(tool_call("lookup", name="Ada Park")).info
    assert set(middle) == set(StepInfo.__required_keys__)
    final = env.step("\\boxed{C300}").info
    assert set(StepInfo.__required_keys__) <= set(final) <= set(StepInfo.__annotations__)
    assert set(final["grade"]) == set(GradeInfo.__annotations__)
