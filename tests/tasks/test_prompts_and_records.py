import pytest

from tasks import COT_SUFFIX, FAMILIES, Grade, Task, format_prompt, load, prompt_styles, system_prompt


def test_cot_prompt_is_the_reference_format():
    task = Task(id="t", prompt="What is 2+2?", answer="4")
    expected = "What is 2+2?\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert format_prompt(task) == expected == "What is 2+2?\n" + COT_SUFFIX
    assert format_prompt(Task(id="t", prompt="Q", answer="1", family="long_cot")) == "Q\n" + COT_SUFFIX


def test_styles_by_family_and_grader():
    tool = Task(id="t", prompt="What is 17 × 23?", answer="391", family="tool")
    assert "code_interpreter" in format_prompt(tool) and format_prompt(tool).startswith(tool.prompt + "\n")
    countdown = load("countdown-eval", limit=1)[0]
    assert format_prompt(countdown, "plain") == countdown.prompt
    assert "\\boxed{}" in format_prompt(countdown)
    assert set(prompt_styles()) == {"cot", "tool", "countdown", "plain"}
    with pytest.raises(ValueError, match="unknown style 'fancy'"):
        format_prompt(tool, "fancy")


def test_tool_system_prompt_explains_the_hermes_code_interpreter_call():
    text = system_prompt("tool")
    assert '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": ' in text
    assert "</tool_call>" in text and "\\boxed{}" in text
    assert "35" in system_prompt("countdown")
    with pytest.raises(ValueError, match="unknown name"):
        system_prompt("nope")


def test_task_records_are_validated_and_frozen():
    with pytest.raises(ValueError, match="task 'x': field 'prompt' is empty"):
        Task(id="x", prompt="  ", answer="1")
    with pytest.raises(ValueError, match="field 'answer' is empty"):
        Task(id="x", prompt="p", answer="")
    with pytest.raises(ValueError, match="'family'"):
        Task(id="x", prompt="p", answer="1", family="chess")
    task = Task(id="x", prompt="p", answer="1", meta={"a": 1})
    with pytest.raises(AttributeError):
        task.prompt = "q"
    with pytest.raises(TypeError):
        task.meta["a"] = 2
    assert FAMILIES == ("short_cot", "long_cot", "tool")


def test_grade_record_reward_and_failures():
    assert Grade(True, "1", "correct").reward == 1.0
    assert Grade(False, None, "verifier_timeout").is_verifier_failure
    assert not Grade(False, "2", "wrong").is_verifier_failure


def test_a_task_pickles_with_its_read_only_meta():
    """Tasks cross process boundaries (worker pools, spawned rollout workers) intact."""
    import pickle

    task = Task(id="t-1", prompt="2 + 2?", answer="4", meta={"grader": "math", "numbers": [2, 2]})
    back = pickle.loads(pickle.dumps(task))
    assert back == task and dict(back.meta) == {"grader": "math", "numbers": [2, 2]}
    with pytest.raises(TypeError):
        back.meta["grader"] = "countdown"          # still a read-only view
