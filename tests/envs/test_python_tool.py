"""PythonTool-v0 on a fake sandbox (session interface), with scripted actions."""

from __future__ import annotations

import pytest

from envs.errors import SandboxUnavailable, ToolError
from envs.lookup import grade_exact
from envs.python_tool import DEFAULT_SYSTEM_PROMPT, PythonToolEnv, format_run
from envs.sandbox.result import RunResult, RunStatus

TRACEBACK = ('Traceback (most recent call last):\n  File "<cell>", line 1, in <module>\n'
             "ZeroDivisionError: division by zero\n")


def make_env(sandbox, math_tasks, **kw) -> PythonToolEnv:
    return PythonToolEnv(dataset=math_tasks, sandbox=sandbox, grader=grade_exact, **kw)


@pytest.mark.parametrize("result, expected", [
    (RunResult(RunStatus.Finished, "  391\n\n", "", 0, 0.1), "391"),
    (RunResult(RunStatus.Finished, "", "", 0, 0.1), "(no output)"),
])
def test_format_run_success_is_stripped_stdout(result, expected):
    assert format_run(result, timeout=10, memory_mb=1024) == expected


@pytest.mark.parametrize("result, kind, text", [
    (RunResult(RunStatus.Finished, "", TRACEBACK, 1, 0.1), "code_error",
     '  File "<cell>", line 1, in <module>\nZeroDivisionError: division by zero'),
    (RunResult(RunStatus.Finished, "partial\n", TRACEBACK, 1, 0.1), "code_error",
     'partial\n  File "<cell>", line 1, in <module>\nZeroDivisionError: division by zero'),
    (RunResult(RunStatus.Finished, "", "", 3, 0.1), "code_error", "the code exited with status 3"),
    (RunResult(RunStatus.TimeLimitExceeded, "", "", None, 2.5), "timeout",
     "TimeoutError: the code ran longer than 2.5 s and was stopped."),
    (RunResult(RunStatus.MemoryLimitExceeded, "", "", None, 0.1), "memory_limit",
     "MemoryError: the code used more than 256 MB and was stopped."),
])
def test_format_run_failures_are_distinct_tool_errors(result, kind, text):
    with pytest.raises(ToolError) as err:
        format_run(result, timeout=2.5, memory_mb=256, stderr_lines=2)
    assert err.value.kind == kind
    assert text in str(err.value)


def test_format_run_keeps_sandbox_notes_on_timeout():
    note = "[sandbox] the next call starts an empty one."
    result = RunResult(RunStatus.TimeLimitExceeded, "", note, None, 1.0)
    with pytest.raises(ToolError) as err:
        format_run(result, timeout=1, memory_mb=64)
    assert str(err.value) == ("TimeoutError: the code ran longer than 1 s and was stopped.\n"
                              "[sandbox] the next call starts an empty one.")


def test_format_run_sandbox_fault_is_a_world_failure():
    with pytest.raises(SandboxUnavailable, match="launcher failed"):
        result = RunResult(RunStatus.SandboxError, "", "launcher failed", None, 0.0)
        format_run(result, timeout=1, memory_mb=1)


def test_episode_with_a_persistent_session(fake_sandbox, math_tasks, tool_call):
    env = make_env(fake_sandbox, math_tasks, timeout=3.0, memory_mb=512)
    messages, info = env.reset(options={"task": math_tasks[0]})
    assert messages[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert info["tools"][0]["function"]["name"] == "code_interpreter"
    assert info["tools"][0]["function"]["parameters"]["required"] == ["code"]
    assert fake_sandbox.sessions == []  # opened lazily, on the first call

    r1 = env.step(tool_call("code_interpreter", code="x = 17 * 23"))
    assert r1.messages[0]["content"] == "(no output)" and r1.messages[0]["name"] == "code_interpreter"
    r2 = env.step(tool_call("code_interpreter", code="print(x)"))
    assert r2.messages[0]["content"] == "391"  # state persisted
    (session,) = fake_sandbox.sessions
    assert session.calls[0][1:] == (3.0, 512, "")
    final = env.step("So the product is \\boxed{391}.")
    assert final.reward == 1.0 and final.terminated and session.closed


def test_each_episode_gets_its_own_session_and_close_releases_it(fake_sandbox, math_tasks, tool_call):
    env = make_env(fake_sandbox, math_tasks)
    env.reset(seed=0)
    env.step(tool_call("code_interpreter", code="y = 1"))
    env.reset(seed=1)  # abandons the episode: its session must close
    assert fake_sandbox.sessions[0].closed
    r = env.step(tool_call("code_interpreter", code="print(y)"))
    assert "NameError" in r.messages[0]["content"] and r.info["error_kinds"] == ["code_error"]
    env.close()
    env.close()
    assert [s.closed for s in fake_sandbox.sessions] == [True, True]


def test_answering_without_code_opens_no_session(fake_sandbox, math_tasks):
    env = make_env(fake_sandbox, math_tasks)
    env.reset(options={"task": math_tasks[1]})
    assert env.step("\\boxed{5}").reward == 1.0
    assert fake_sandbox.sessions == []


@pytest.mark.parametrize("code, kind, fragment", [
    ("while True: pass", "timeout", "TimeoutError: the code ran longer than 10 s"),
    ("x = bytearray(10**12)", "memory_limit", "MemoryError: the code used more than 1024 MB"),
    ("1/0", "code_error", "ZeroDivisionError: division by zero"),
    ("print(", "code_error", "SyntaxError"),
])
def test_code_failures_are_distinct_observations(fake_sandbox, math_tasks, tool_call, code, kind, fragment):
    env = make_env(fake_sandbox, math_tasks)
    env.reset(seed=0)
    result = env.step(tool_call("code_interpreter", code=code))
    assert result.info["error_kinds"] == [kind] and result.info["tool_errors"] == 1
    assert fragment in result.messages[0]["content"]
    assert not (result.terminated or result.truncated)


def test_sandbox_fault_raises_episode_error(fake_sandbox, math_tasks, tool_call):
    env = make_env(fake_sandbox, math_tasks)
    env.reset(seed=0)
    with pytest.raises(SandboxUnavailable):
        env.step(tool_call("code_interpreter", code="SANDBOX_DOWN"))


def test_long_output_is_cut_in_the_middle(fake_sandbox, math_tasks, tool_call):
    env = make_env(fake_sandbox, math_tasks, max_output_chars=120)
    env.reset(seed=0)
    result = env.step(tool_call("code_interpreter", code="print('a' * 50 + 'b' * 500 + 'c' * 50)"))
    content = result.messages[0]["content"]
    assert len(content) <= 120 and content.startswith("a" * 40) and content.endswith("c" * 40)
    assert "characters omitted]..." in content


def test_fenced_python_blocks_for_base_models(fake_sandbox, math_tasks):
    env = make_env(fake_sandbox, math_tasks, parser="python", system_prompt=None,
                   prompt_template="Q: {prompt}\nA:")
    messages, _ = env.reset(options={"task": math_tasks[0]})
    assert messages == [{"role": "user", "content": "Q: What is 17 * 23?\nA:"}]
    assert env.step("```python\nprint(17 * 23)\n```").messages[0]["content"] == "391"


def test_a_run_only_sandbox_gets_a_fresh_interpreter_per_call(math_tasks, tool_call):
    class RunOnly:
        def __init__(self):
            self.codes = []

        def run(self, code, *, timeout, memory_mb, stdin):
            self.codes.append(code)
            return RunResult(RunStatus.Finished, "7\n", "", 0, 0.0)

    sandbox = RunOnly()
    env = make_env(sandbox, math_tasks)
    env.reset(seed=0)
    assert env.step(tool_call("code_interpreter", code="print(7)")).messages[0]["content"] == "7"
    assert sandbox.codes == ["print(7)"]


@pytest.mark.parametrize("kwargs, message", [
    ({"sandbox": 42}, "sandbox must be 'local', an http"),
    ({"timeout": 0}, "timeout > 0"),
    ({"stderr_lines": 0}, "stderr_lines >= 1"),
])
def test_config_mistakes_raise_at_construction(math_tasks, kwargs, message):
    with pytest.raises(ValueError, match=message):
        PythonToolEnv(dataset=math_tasks, **kwargs)


def test_traceback_marker_lines_are_dropped():
    stderr = ('Traceback (most recent call last):\n  File "<cell>", line 1, in <module>\n'
              "    1/0\n     ~^~\nZeroDivisionError: division by zero\n")
    with pytest.raises(ToolError) as err:
        format_run(RunResult(RunStatus.Finished, "", stderr, 1, 0.1), timeout=1, memory_mb=1)
    assert str(err.value) == "    1/0\nZeroDivisionError: division by zero"


def test_default_prompt_uses_the_task_style_and_templates_can_be_style_names(fake_sandbox, math_tasks):
    import tasks

    task = tasks.load("countdown-train")[0]
    messages, _ = PythonToolEnv(dataset=[task], sandbox=fake_sandbox).reset(seed=0)
    assert messages[1]["content"] == tasks.format_prompt(task)  # the countdown style
    messages, _ = PythonToolEnv(dataset=[task], sandbox=fake_sandbox, prompt_template="plain",
                                system_prompt=None).reset(seed=0)
    assert messages == [{"role": "user", "content": task.prompt}]
    with pytest.raises(ValueError, match="must contain '{prompt}' or be a style name"):
        PythonToolEnv(dataset=[task], prompt_template="fancy")
