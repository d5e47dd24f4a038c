"""Write any task list as verl-style parquet that SkyRL reads too (`stare tasks export`).

One row per task, with both trainers' columns, so one file drives this project, verl and SkyRL side
by side:

| column | value | read by |
|---|---|---|
| `data_source` | `meta["source"]`, else the family | verl (reward routing), SkyRL |
| `prompt` | chat list: optional system message, then the formatted user prompt | verl, SkyRL |
| `ability` | "math" | verl |
| `reward_model` | `{"style": "rule", "ground_truth": answer}` | verl |
| `env_class`, `reward_spec` | env id to play it in; `{"method": "rule", "ground_truth": answer}` | SkyRL |
| `agent_name` | "tool_agent" for tool tasks, else "single_turn_agent" | verl's agent loop |
| `extra_info` | `index`, `split`, `stare_task` (the exact task, JSON), `tools_kwargs` | verl, us |

A tool task's `extra_info` also has `need_tools_kwargs: true` and `tools_kwargs =
{"code_interpreter": {"create_kwargs": {"ground_truth": answer}}}` (verl's tool agent loop).

`tasks.load` reads the file back to the same tasks (from `stare_task`).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

from tasks.prompts import format_prompt
from tasks.task import Task

DEFAULT_ENV_CLASS = {"tool": "stare/PythonTool-v0", "short_cot": "stare/MathCoT-v0",
                     "long_cot": "stare/MathCoT-v0"}
"""The env each family is played in (the `env_class` column)."""


def verl_row(task: Task, index: int, *, split: str = "train", style: str | None = None,
             system_prompt: str | None = None, env_class: str | None = None) -> dict[str, Any]:
    """One parquet row for `task` (see the module table).

    Args:
        task: The task.
        index: Its position (verl's `extra_info.index`).
        split: `extra_info.split`.
        style: Prompt style of the user message (`tasks.prompt_styles()`); None for the task's default.
        system_prompt: System message placed before it, or None for none.
        env_class: The `env_class` column; None for the family's default env.
    """
    chat = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": format_prompt(task, style)}]
    tool = task.family == "tool"
    extra: dict[str, Any] = {"index": index, "split": split, "stare_task": json.dumps(task.to_dict())}
    if tool:
        extra["need_tools_kwargs"] = True
        extra["tools_kwargs"] = {"code_interpreter": {"create_kwargs": {"ground_truth": task.answer}}}
    return {"data_source": str(task.meta.get("source") or task.family), "prompt": chat, "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": task.answer},
            "env_class": env_class or DEFAULT_ENV_CLASS[task.family],
            "reward_spec": {"method": "rule", "ground_truth": task.answer},
            "agent_name": "tool_agent" if tool else "single_turn_agent", "extra_info": extra}


def save_parquet(tasks: Sequence[Task], path: str | pathlib.Path, **row_options: Any) -> pathlib.Path:
    """Write `tasks` as verl/SkyRL parquet (`verl_row` per task); returns the path.

    Raises:
        ValueError: `tasks` is empty, or `path` does not end in ".parquet".
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = pathlib.Path(path)
    if path.suffix != ".parquet":
        raise ValueError(f"{path}: the output file must end in .parquet")
    if not tasks:
        raise ValueError("no tasks to export")
    rows = [verl_row(task, i, **row_options) for i, task in enumerate(tasks)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


__all__ = ["DEFAULT_ENV_CLASS", "save_parquet", "verl_row"]
