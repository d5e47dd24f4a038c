"""`check_env(env)`: the conformance checker every registered text env passes (tests run it over all ids).

Checks: spaces, reset/step result types, message roles, tool schemas, determinism under a seed,
`options["task"]` honoured, malformed actions answered (never raised), the turn budget ends the
episode, `step` after the end refused, `close()` idempotent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import gymnasium

from envs.core import ROLES
from envs.errors import EnvCheckError

_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def malformed_actions(tool_names: list[str]) -> list[str]:
    """Model mistakes every env must answer with an observation or a grade, never an exception."""
    tool = tool_names[0] if tool_names else "some_tool"
    return [
        "",
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
        f'<tool_call>{{"name": "{tool}", "arguments": {{"no_such_argument": 1}}}}</tool_call>',
        f'<tool_call>{{"name": "{tool}", "arguments": []}}</tool_call>',
        "</tool_call> stray close tag",
        "```python\nthis is not python(\n```",
        "\\boxed{} \\boxed{",
    ]


def schema_problems(schema: Any) -> list[str]:
    """What is wrong with one OpenAI function schema (empty when valid)."""
    if not (isinstance(schema, dict) and schema.get("type") == "function"
            and isinstance(schema.get("function"), dict)):
        return ['a tool schema must be {"type": "function", "function": {...}}']
    fn, problems = schema["function"], []
    if not isinstance(fn.get("name"), str) or not fn["name"].isidentifier():
        problems.append(f"tool name {fn.get('name')!r} must be an identifier")
    if not isinstance(fn.get("description"), str) or not fn["description"].strip():
        problems.append(f"tool {fn.get('name')!r} needs a non-empty description")
    params = fn.get("parameters")
    if not (isinstance(params, dict) and params.get("type") == "object"
            and isinstance(params.get("properties"), dict)):
        return [*problems, f"tool {fn.get('name')!r}: parameters must be an object schema with properties"]
    for arg, prop in params["properties"].items():
        kinds = [p.get("type") for p in prop.get("anyOf", [prop])] if isinstance(prop, dict) else [None]
        if not all(k in _JSON_TYPES for k in kinds):
            problems.append(f"tool {fn['name']!r}: argument {arg!r} has no valid JSON type")
    missing = set(params.get("required", [])) - set(params["properties"])
    if missing:
        problems.append(f"tool {fn['name']!r}: required {sorted(missing)} not among properties")
    return problems


def _message_problems(messages: Any, where: str) -> list[str]:
    if not isinstance(messages, list):
        return [f"{where}: messages must be a list, got {type(messages).__name__}"]
    return [f"{where}: message {i} must be a dict with role in {ROLES} and str content, got {m!r:.80}"
            for i, m in enumerate(messages)
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str))]


def _step_problems(result: Any, where: str) -> list[str]:
    """Types of one step result: messages, finite float reward, bool flags (not both), info keys."""
    if not (isinstance(result, tuple) and len(result) == 5):
        return [f"{where}: step must return a 5-tuple StepResult, got {type(result).__name__}"]
    messages, reward, terminated, truncated, info = result
    problems = _message_problems(messages, where)
    if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward):
        problems.append(f"{where}: reward must be a finite float, got {reward!r}")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool) or (terminated and truncated):
        problems.append(f"{where}: terminated/truncated must be bools, not both True; "
                        f"got {terminated!r}, {truncated!r}")
    counts = ("tool_calls", "tool_errors")
    if not (isinstance(info, dict) and all(isinstance(info.get(k), int) for k in counts)):
        return [*problems, f"{where}: info must be a dict with int 'tool_calls' and 'tool_errors'"]
    grade = info.get("grade")
    has_grade = isinstance(grade, dict) and {"status", "prediction", "correct"} <= set(grade)
    if (terminated or truncated) and not has_grade:
        problems.append(f"{where}: the final step's info['grade'] must have status, prediction, correct")
    return problems


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=repr)


def _check_reset(env: gymnasium.Env, seed: int) -> list[str]:
    result = env.reset(seed=seed)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        return ["reset must return (messages, info) with a dict info"]
    messages, info = result
    problems = _message_problems(messages, "reset")
    if not messages or messages[-1].get("role") != "user":
        problems.append("reset must return at least one message, ending with the user prompt")
    if not isinstance(info.get("tools"), list):
        return [*problems, "reset info['tools'] must be a list of tool schemas (empty when none)"]
    return problems + [p for schema in info["tools"] for p in schema_problems(schema)]


def _check_determinism(env: gymnasium.Env, seed: int, action: str) -> list[str]:
    runs = []
    for _ in range(2):
        obs, info = env.reset(seed=seed)
        runs.append(_dump([obs, info, env.step(action)]))
    return [] if runs[0] == runs[1] else [f"reset(seed={seed}) then the same action gave different results"]


def _check_task_option(env: gymnasium.Env, seed: int) -> list[str]:
    obs, _ = env.reset(seed=seed)
    task = getattr(env.unwrapped, "task", None)
    if task is None:
        return []
    again, _ = env.reset(seed=seed + 1, options={"task": task})
    return [] if _dump(again) == _dump(obs) else ["reset(options={'task': t}) did not start an episode on t"]


def _check_malformed(env: gymnasium.Env, seed: int, actions: list[str]) -> list[str]:
    problems = []
    for action in actions:
        env.reset(seed=seed)
        try:
            problems += _step_problems(env.step(action), f"step({action!r:.40})")
        except Exception as err:  # the point of the check: model mistakes must not raise
            problems.append(f"step({action!r:.40}) raised {type(err).__name__}: {err}")
    return problems


def _check_budget(env: gymnasium.Env, seed: int, action: str, max_steps: int) -> list[str]:
    env.reset(seed=seed)
    for n in range(1, max_steps + 1):  # noqa: B007 - n is read after the loop
        _, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    else:
        return [f"repeating a tool call did not end the episode within {max_steps} steps "
                "(turn budget ignored)"]
    limit = getattr(env.unwrapped, "max_tool_turns", None)
    if truncated and (reward > 0 or (limit is not None and n != limit + 1)):
        return [f"truncated after {n} steps with reward {reward} "
                f"(expected {limit} tool turns + 1, reward <= 0)"]
    try:
        env.step(action)
    except Exception:
        return []
    return ["step() after the episode ended must raise (e.g. envs.ResetNeeded), not continue"]


def _check_spaces(env: gymnasium.Env) -> list[str]:
    if isinstance(env.observation_space, gymnasium.Space) and isinstance(env.action_space, gymnasium.Space):
        return []
    return ["observation_space and action_space must be gymnasium.Space instances"]


def _check_close(env: gymnasium.Env) -> list[str]:
    env.close()
    env.close()  # must not raise
    return []


def check_env(env: gymnasium.Env, *, seed: int = 0, max_steps: int = 64) -> list[str]:
    """Run every conformance check on `env`; returns the names of the checks that passed.

    Args:
        env: A text env (wrapped or not), e.g. `envs.make("stare/PythonTool-v0")`.
        seed: Seed for the resets.
        max_steps: Steps within which repeated tool calls must end an episode.

    Raises:
        EnvCheckError: One or more checks failed; the message lists each failure.
    """
    if not isinstance(env, gymnasium.Env):
        raise TypeError(f"check_env needs a gymnasium.Env, got {type(env).__name__}")
    try:
        schemas = env.reset(seed=seed)[1].get("tools", [])
    except Exception as err:
        raise EnvCheckError(f"reset(seed={seed}) raised {type(err).__name__}: {err}") from err
    tools = [s["function"]["name"] for s in schemas
             if isinstance(s, dict) and isinstance(s.get("function"), dict)]
    bad = malformed_actions(tools)
    checks: list[tuple[str, Callable[[], list[str]]]] = [
        ("spaces", lambda: _check_spaces(env)),
        ("reset", lambda: _check_reset(env, seed)),
        ("determinism", lambda: _check_determinism(env, seed, bad[2])),
        ("task_option", lambda: _check_task_option(env, seed)),
        ("malformed_actions", lambda: _check_malformed(env, seed, bad)),
        ("turn_budget", lambda: _check_budget(env, seed, bad[2], max_steps)),
        ("close_idempotent", lambda: _check_close(env)),
    ]
    passed, failures = [], []
    for name, check in checks:
        try:
            problems = check()
        except Exception as err:
            problems = [f"raised {type(err).__name__}: {err}"]
        (failures.extend(f"{name}: {p}" for p in problems) if problems else passed.append(name))
    if failures:
        raise EnvCheckError(f"{env.spec.id if env.spec else type(env.unwrapped).__name__} failed "
                            f"{len(failures)} check(s):\n- " + "\n- ".join(failures))
    return passed
