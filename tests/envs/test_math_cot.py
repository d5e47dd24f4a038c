from __future__ import annotations

import pytest

import tasks
from envs.math_cot import MathCoTEnv


def test_single_turn_graded_with_the_reference_prompt():
    task = tasks.load("word-short-train")[0]
    env = MathCoTEnv()
    messages, info = env.reset(options={"task": task})
    assert messages == [{"role": "user", "content": f"{task.prompt}\n{tasks.COT_SUFFIX}"}]
    assert info["tools"] == []
    result = env.step(f"Let me think. ... So \\boxed{{{task.answer}}}")
    assert result.terminated and not result.truncated and result.reward == 1.0 and result.messages == []
    assert result.info["grade"]["prediction"] == task.answer


def test_default_dataset_draw_is_seeded():
    first = [MathCoTEnv().reset(seed=s)[0][-1]["content"] for s in (0, 0, 1)]
    assert first[0] == first[1] != first[2]


def test_countdown_tasks_use_their_own_grader():
    task = next(t for t in tasks.load("countdown-train") if t.prompt == "Use 4 7 7 to make 45")
    env = MathCoTEnv(dataset=[task])
    env.reset(seed=0)
    assert env.step("\\boxed{7*7-4}").reward == 1.0
    env.reset(seed=0)
    assert env.step("\\boxed{45}").reward == 0.0  # the target itself is not an expression of the numbers


def test_grader_by_name_selects_the_authors_math_mode():
    """`data.env_kwargs: {grader: authors}` in a config: mathruler's "1.5e3" = 1500 counts only there."""
    pytest.importorskip("mathruler")
    task = tasks.Task("e", "Write 1500 in e-notation.", "1500")
    rewards = {}
    for grader in (None, "default", "authors"):
        env = MathCoTEnv(dataset=[task], grader=grader)
        env.reset(seed=0)
        rewards[grader] = env.step("\\boxed{1.5e3}").reward
    assert rewards == {None: 0.0, "default": 0.0, "authors": 1.0}
    with pytest.raises(ValueError, match="math grading mode 'paper'"):
        MathCoTEnv(grader="paper")
