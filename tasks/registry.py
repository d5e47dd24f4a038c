"""Named datasets: `register_dataset`, `list_datasets`, and `load` (names or paths)."""

from __future__ import annotations

import difflib
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

from tasks.loaders import load_path
from tasks.task import Task

Loader = Callable[[], list[Task]]


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset."""

    name: str
    """Registry name, e.g. "countdown-eval"."""
    loader: Loader
    """Builds the tasks (called on every `load`; shipped sets are cached inside)."""
    description: str
    """One line for `stare tasks list`."""
    size: int | None = None
    """Number of tasks, when known without loading (None for unbounded generators)."""
    family: str | None = None
    """Task family of the set, for listing."""


_DATASETS: dict[str, DatasetInfo] = {}


def register_dataset(name: str, loader_fn: Loader, *, description: str, size: int | None = None,
                     family: str | None = None) -> None:
    """Register a dataset name for `tasks.load`.

    Args:
        name: Unique name; `load(base, split=s)` also finds `"{base}-{s}"`.
        loader_fn: Zero-argument function returning the tasks.
        description: One line shown by `stare tasks list`.
        size: Number of tasks, if known.
        family: The set's task family, if it has one.
    """
    if name in _DATASETS:
        raise ValueError(f"dataset {name!r} is already registered; pick another name")
    _DATASETS[name] = DatasetInfo(name, loader_fn, description, size, family)


def list_datasets() -> list[DatasetInfo]:
    """Every registered dataset, sorted by name."""
    return [_DATASETS[n] for n in sorted(_DATASETS)]


def _resolve(name: str, split: str | None) -> str:
    key = f"{name}-{split}" if split else name
    if key in _DATASETS:
        return key
    guess = difflib.get_close_matches(key, _DATASETS, n=1)
    hint = f"did you mean {guess[0]!r}?" if guess else f"known names: {sorted(_DATASETS)}"
    raise KeyError(f"no dataset named {key!r} and no such file; {hint}")


def load(name_or_path: str | pathlib.Path, *, split: str | None = None,
         limit: int | None = None) -> list[Task]:
    """Load tasks by registered name or from a path.

    Paths: our JSONL, GSM8K-/MATH-style JSONL, `.json` lists, verl/STARE parquet, or a folder
    written by `datasets.Dataset(Dict).save_to_disk` (format detected from the first row).

    Args:
        name_or_path: A registered name ("countdown-eval", or "countdown" with `split`) or a path.
        split: Split of a registered name, or of a saved `DatasetDict`.
        limit: Keep only the first `limit` tasks.

    Raises:
        KeyError: unknown name (with a suggestion).
        tasks.loaders.TaskFileError: a bad file (names the file, line or row, and field).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit={limit}; use a non-negative number or None")
    text = str(name_or_path)
    looks_like_path = "/" in text or text.endswith((".jsonl", ".json", ".parquet"))
    if isinstance(name_or_path, pathlib.Path) or looks_like_path or pathlib.Path(text).exists():
        return load_path(text, split=split, limit=limit)
    tasks = _DATASETS[_resolve(text, split)].loader()
    return list(tasks[:limit] if limit is not None else tasks)


_LOADED: dict[str, list[Task]] = {}
"""Datasets loaded by `load_cached`, by name."""


def load_cached(name: str) -> list[Task]:
    """`load(name)`, cached per process so that many env instances share one copy (not to be mutated).

    Raises:
        ValueError: the dataset is empty.
    """
    if name not in _LOADED:
        loaded = load(name)
        if not loaded:
            raise ValueError(f"dataset {name!r} is empty; pass dataset=<name or list of Task>")
        _LOADED[name] = loaded
    return _LOADED[name]
