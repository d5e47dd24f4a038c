"""Adapters for offline PyPI datasets (optional extras, imported only when used).

- `reasoning-gym` (extra `[reasoning-gym]`): procedural generators, e.g. `gsm_symbolic` (GSM8K templates);
- `champ-dataset` (extra `[champ]`): 270 competition problems, a held-out evaluation set nobody here wrote.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from tasks.task import Family, Task


class MissingExtraError(ImportError):
    """An optional dataset package is not installed; the message says which extra to install."""


def require(module: str, extra: str, package: str) -> ModuleType:
    """Import `module` or raise `MissingExtraError` naming the pip extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"this dataset needs the optional package {package!r}: pip install 'stare-gym[{extra}]' "
            f"(or pip install {package})") from err


def _plain(value: Any) -> Any:
    """Keep JSON-able metadata only (reasoning-gym metadata may hold arbitrary objects)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def reasoning_gym_tasks(name: str = "gsm_symbolic", *, size: int = 500, seed: int = 0,
                        family: Family = "short_cot", exclude: frozenset[str] = frozenset()) -> list[Task]:
    """Tasks from a reasoning-gym generator (`reasoning_gym.create_dataset(name, size=, seed=)`).

    Args:
        name: reasoning-gym dataset name, e.g. "gsm_symbolic", "basic_arithmetic", "chain_sum".
        size: Number of problems drawn (fewer are returned when some are in `exclude`).
        seed: Generator seed.
        family: Family the tasks get.
        exclude: Questions to leave out (to keep a train split disjoint from an eval split).
    """
    rg = require("reasoning_gym", "reasoning-gym", "reasoning-gym")
    data = rg.create_dataset(name, size=size, seed=seed)
    tasks = []
    for i, entry in enumerate(data):
        if entry["question"] in exclude:
            continue
        meta = {"source": f"reasoning-gym:{name}", "rg_metadata": _plain(entry.get("metadata", {}))}
        tasks.append(Task(id=f"rg-{name}-{seed}-{i:05d}", prompt=entry["question"],
                          answer=str(entry["answer"]), family=family, meta=meta))
    return tasks


def champ_tasks() -> list[Task]:
    """The CHAMP competition problems as long chain-of-thought tasks, sorted by problem id.

    270 problems: number theory, inequalities, polynomials, sequences, combinatorics.
    """
    champ = require("champ_dataset", "champ", "champ-dataset")
    problems = champ.load("v0").problems
    return [Task(id=f"champ-{pid}", prompt=p.text, answer=str(p.answer), family="long_cot",
                 meta={"source": "champ", "category": str(getattr(p, "category", ""))})
            for pid, p in sorted(problems.items())]
