"""Read task files: our JSONL, GSM8K/MATH JSONL, verl/STARE and SkyRL parquet, HF datasets on disk.

Every row becomes a `Task`. A bad row raises `TaskFileError` naming the file, the line (JSONL,
1-based) or row (parquet / datasets, 0-based) and the missing field.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from tasks.extract import last_boxed
from tasks.prompts import strip_cot_suffix
from tasks.task import Task


class TaskFileError(ValueError):
    """A task file cannot be read: the message names the file, the line or row, and the field."""


def _default_id(where: str) -> str:
    """"data/x.jsonl:line 3" -> "x-3": an id for rows that carry none."""
    location, number = where.rsplit(" ", 1)
    return f"{pathlib.Path(location.rsplit(':', 1)[0]).stem}-{number}"


def _family_of(row: Mapping[str, Any], default: str) -> str:
    source = str(row.get("data_source", "")).lower().replace("-", "_")
    return row.get("family") or ("long_cot" if "longcot" in source or "long_cot" in source else default)


def _ours(row: Mapping[str, Any], where: str) -> Task:
    """Our format: {"id", "prompt", "answer", "family", "meta"} (id, family and meta optional)."""
    meta = row.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise TaskFileError(f"{where}: field 'meta' must be an object, got {type(meta).__name__}")
    return Task(id=str(row.get("id") or _default_id(where)), prompt=row["prompt"], answer=str(row["answer"]),
                family=row.get("family") or "short_cot", meta=meta)


def gsm8k_answer(solution: str) -> str | None:
    """The number after `####` in a GSM8K solution, thousands separators removed."""
    if "####" not in solution:
        return None
    return solution.rsplit("####", 1)[1].strip().replace(",", "") or None


def _gsm8k(row: Mapping[str, Any], where: str) -> Task:
    answer = gsm8k_answer(str(row["answer"]))
    if answer is None:
        raise TaskFileError(f"{where}: field 'answer' has no '#### <number>' final line (GSM8K format)")
    return Task(id=str(row.get("id") or _default_id(where)), prompt=row["question"], answer=answer,
                family="short_cot", meta={"source": "gsm8k", "solution": row["answer"]})


def _math(row: Mapping[str, Any], where: str) -> Task:
    answer = row.get("answer") or last_boxed(str(row["solution"]))  # KeyError names 'solution'
    if not answer:
        raise TaskFileError(f"{where}: field 'solution' has no \\boxed{{...}} answer "
                            "and there is no 'answer' field")
    meta = {k: row[k] for k in ("level", "type", "subject", "unique_id") if k in row}
    return Task(id=str(row.get("unique_id") or row.get("id") or _default_id(where)), prompt=row["problem"],
                answer=str(answer), family=_family_of(row, "short_cot"), meta={"source": "math", **meta})


def _chat_task(row: Mapping[str, Any], where: str, spec: str, truth: Any, meta: dict[str, Any]) -> Task:
    """A Task from a chat-list `prompt` row (verl, SkyRL): the last user message, `truth` as answer.

    A row written by `tasks.export` carries the exact task in `extra_info.stare_task` (JSON); it wins.
    """
    chat = row["prompt"]
    if isinstance(chat, str):
        chat = json.loads(chat)
    users = [m for m in chat if m.get("role") == "user"]
    if not users:
        raise TaskFileError(f"{where}: field 'prompt' has no message with role 'user'")
    extra = row.get("extra_info") or {}
    if isinstance(extra, Mapping) and isinstance(extra.get("stare_task"), str):
        exact = json.loads(extra["stare_task"])
        return Task(**{**exact, "meta": {**exact.get("meta", {}), **meta}})
    if truth in (None, ""):
        raise TaskFileError(f"{where}: missing field '{spec}' (the reference answer)")
    index = extra.get("index") if isinstance(extra, Mapping) else None
    meta = {"source": row.get("data_source", ""), "chat": list(chat), "ability": row.get("ability", ""),
            "extra_info": dict(extra) if isinstance(extra, Mapping) else extra, **meta}
    default_id = f"{row.get('data_source', 'verl')}-{index}" if index is not None else _default_id(where)
    return Task(id=str(row.get("id") or default_id),
                prompt=strip_cot_suffix(users[-1]["content"]),
                answer=truth if isinstance(truth, str) else json.dumps(truth),
                family=_family_of(row, "tool" if meta.get("agent_name") == "tool_agent" else "short_cot"),
                meta=meta)


def _mapping(row: Mapping[str, Any], field: str, where: str) -> Mapping[str, Any]:
    value = row.get(field) or {}
    if not isinstance(value, Mapping):
        raise TaskFileError(f"{where}: field '{field}' must be an object, got {type(value).__name__}")
    return value


def _verl(row: Mapping[str, Any], where: str) -> Task:
    """Verl / STARE parquet: chat-list `prompt`, `reward_model.ground_truth`, `data_source`.

    verl's agent loop columns are kept in meta: `agent_name` ("tool_agent", ...), and `tools_kwargs` /
    `interaction_kwargs` (from `extra_info`, where verl puts them, or top level). Without
    `reward_model.ground_truth`, a tool's `create_kwargs.ground_truth` in `tools_kwargs` is the answer.
    """
    extra = _mapping(row, "extra_info", where)
    tools_kwargs = extra.get("tools_kwargs") or row.get("tools_kwargs") or {}
    meta = {k: v for k, v in (("agent_name", row.get("agent_name")), ("tools_kwargs", tools_kwargs),
                              ("interaction_kwargs", extra.get("interaction_kwargs"))) if v}
    truth = _mapping(row, "reward_model", where).get("ground_truth")
    if truth in (None, "") and isinstance(tools_kwargs, Mapping):
        truth = next((kw.get("create_kwargs", {}).get("ground_truth") for kw in tools_kwargs.values()
                      if isinstance(kw, Mapping) and isinstance(kw.get("create_kwargs"), Mapping)), None)
    return _chat_task(row, where, "reward_model.ground_truth", truth, meta)


def _skyrl(row: Mapping[str, Any], where: str) -> Task:
    """SkyRL dataset rows: chat-list `prompt`, `env_class`, `reward_spec.ground_truth`, `data_source`."""
    spec = _mapping(row, "reward_spec", where)
    meta = {"env_class": row["env_class"], "reward_method": spec.get("method", "")}
    return _chat_task(row, where, "reward_spec.ground_truth", spec.get("ground_truth"), meta)


FORMATS: dict[str, tuple[tuple[str, ...], Any]] = {
    "verl": (("prompt", "reward_model"), _verl),
    "skyrl": (("prompt", "env_class", "reward_spec"), _skyrl),
    "ours": (("prompt", "answer"), _ours),
    "gsm8k": (("question", "answer"), _gsm8k),
    "math": (("problem",), _math),
}
"""Format name -> (fields that identify it, row converter); detection tries them in this order."""


def detect_format(row: Mapping[str, Any], where: str) -> str:
    """Name of the first format in `FORMATS` whose identifying fields the row has."""
    for name, (fields, _) in FORMATS.items():
        if all(f in row for f in fields):
            return name
    raise TaskFileError(
        f"{where}: cannot tell the format from fields {sorted(row)}; expected one of "
        + "; ".join(f"{n}: {', '.join(f)}" for n, (f, _) in FORMATS.items()))


def rows_to_tasks(rows: Iterable[tuple[str, Mapping[str, Any]]], *, limit: int | None = None) -> list[Task]:
    """Convert `(where, row)` pairs; the first row fixes the format, later rows must follow it."""
    tasks: list[Task] = []
    fmt = None
    for where, row in rows:
        if limit is not None and len(tasks) >= limit:
            break
        if not isinstance(row, Mapping):
            raise TaskFileError(f"{where}: expected a JSON object, got {type(row).__name__}")
        fmt = fmt or detect_format(row, where)
        fields, convert = FORMATS[fmt]
        try:
            missing = next((f for f in fields if f not in row), None)
            if missing:
                raise KeyError(missing)
            tasks.append(convert(row, where))
        except KeyError as err:
            raise TaskFileError(f"{where}: missing field {err.args[0]!r} ({fmt} format)") from None
        except ValueError as err:  # Task validation (empty prompt, bad family, ...)
            raise TaskFileError(f"{where}: {err}") from None
    return tasks


def _jsonl_rows(path: pathlib.Path) -> Iterable[tuple[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}:line {number}", json.loads(line)
            except json.JSONDecodeError as err:
                raise TaskFileError(f"{path}:line {number}: not valid JSON ({err.msg})") from None


def _json_rows(path: pathlib.Path) -> Iterable[tuple[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TaskFileError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, list):
        raise TaskFileError(f"{path}: a .json task file must hold a list of records")
    return ((f"{path}:row {i}", row) for i, row in enumerate(data))


def _parquet_rows(path: pathlib.Path) -> Iterable[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise TaskFileError(f"{path}: not a readable parquet file ({err})") from None
    i = 0
    for batch in table.to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            yield f"{path}:row {i}", row
            i += 1


def _hf_rows(path: pathlib.Path, split: str | None) -> Iterable[tuple[str, Any]]:
    try:
        import datasets
    except ImportError as err:
        raise TaskFileError(f"{path}: reading a saved Hugging Face dataset needs `datasets` "
                            "(pip install 'stare-gym[datasets]')") from err
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        names = list(data)
        chosen = split or ("train" if "train" in names else names[0] if len(names) == 1 else None)
        if chosen not in names:
            raise TaskFileError(f"{path}: split {chosen!r} not found; pass split= one of {names}")
        data = data[chosen]
    return ((f"{path}:row {i}", row) for i, row in enumerate(data))


def load_path(path: str | pathlib.Path, *, split: str | None = None, limit: int | None = None) -> list[Task]:
    """Read tasks from a file or a saved HF dataset folder (format detected from the first row)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"task file {path} does not exist")
    is_hf = path.is_dir() and any((path / n).exists() for n in ("dataset_info.json", "dataset_dict.json"))
    if split is not None and not is_hf:
        raise ValueError(f"{path}: split={split!r} applies only to registered names and saved HF datasets")
    if is_hf:
        rows = _hf_rows(path, split)
    elif re.search(r"\.jsonl$", path.name):
        rows = _jsonl_rows(path)
    elif path.suffix == ".json":
        rows = _json_rows(path)
    elif path.suffix == ".parquet":
        rows = _parquet_rows(path)
    else:
        raise ValueError(f"{path}: unknown task file type; use .jsonl, .json, .parquet or a folder written "
                         "by datasets' save_to_disk")
    tasks = rows_to_tasks(rows, limit=limit)
    if not tasks:
        raise TaskFileError(f"{path}: no tasks in the file")
    return tasks


def save_jsonl(tasks: Iterable[Task], path: str | pathlib.Path) -> None:
    """Write tasks in our JSONL format (the inverse of loading it)."""
    with open(path, "w", encoding="utf-8") as f:
        for task in tasks:
            f.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")

