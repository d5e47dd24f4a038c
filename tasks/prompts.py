"""Prompt text as data: `tasks/data/prompts.yaml` holds every instruction and system prompt."""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import yaml

from tasks.task import Task

PROMPTS_FILE = pathlib.Path(__file__).with_name("data") / "prompts.yaml"

COT_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."
"""The reference instruction appended (after a newline) to every chain-of-thought problem."""


@functools.lru_cache(maxsize=1)
def _prompts() -> dict[str, Any]:
    with open(PROMPTS_FILE, encoding="utf-8") as f:
        return yaml.safe_load(f)


def prompt_styles() -> list[str]:
    """Names accepted by `format_prompt(style=...)`."""
    return sorted(_prompts()["styles"])


def default_style(task: Task) -> str:
    """The style a task uses unless told otherwise: by grader, then by family."""
    if task.meta.get("grader") == "countdown":
        return "countdown"
    return _prompts()["family_styles"][task.family]


def format_prompt(task: Task, style: str | None = None) -> str:
    """The user message for `task`.

    Args:
        task: The task.
        style: "cot" (problem, newline, the reference instruction), "tool", "countdown", "plain",
            or None for `default_style(task)`.
    """
    styles = _prompts()["styles"]
    style = style or default_style(task)
    if style not in styles:
        raise ValueError(f"format_prompt: unknown style {style!r}; choose one of {sorted(styles)}")
    return styles[style].format(prompt=task.prompt)


def system_prompt(name: str) -> str:
    """A system prompt by name: "tool" (explains the `code_interpreter` tool) or "countdown"."""
    systems = _prompts()["system"]
    if name not in systems:
        raise ValueError(f"system_prompt: unknown name {name!r}; choose one of {sorted(systems)}")
    return systems[name]


def strip_cot_suffix(prompt: str) -> str:
    """Remove the reference instruction from a user message (verl parquet prompts include it)."""
    text = prompt.rstrip()
    return text[: -len(COT_SUFFIX)].rstrip() if text.endswith(COT_SUFFIX) else prompt


def check_prompt_template(template: str | None) -> None:
    """Raise for a user-prompt template that is neither "{prompt}"-style nor a style name (None is fine)."""
    if template is None or "{prompt}" in template:
        return
    if template not in prompt_styles():
        raise ValueError(f"prompt_template {template!r} must contain '{{prompt}}' or be a style name in "
                         f"{prompt_styles()} (or None for the task's default style)")


def user_prompt(task: Task, template: str | None) -> str:
    """The user message for `task` under an env's `prompt_template`.

    A template with "{prompt}" has every "{prompt}" replaced by `task.prompt` (other braces stay);
    otherwise the template is a style name for `format_prompt` (None = the task's default style).
    """
    if template is not None and "{prompt}" in template:
        return template.replace("{prompt}", task.prompt)
    return format_prompt(task, template)
