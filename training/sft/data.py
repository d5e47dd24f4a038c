r"""Demonstration files: one episode per record as OpenAI-style chat messages, JSONL or verl parquet.

A record (one JSONL line, or one parquet row with the same columns):

    {"messages": [{"role": "system", "content": "..."},
                  {"role": "user", "content": "How many mi are 5 km?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function",
                                   "function": {"name": "convert", "arguments": {"value": 5, ...}}}]},
                  {"role": "tool", "content": "3.11"},
                  {"role": "assistant", "content": "\\boxed{3.11}"}],
     "tools": [<OpenAI function schemas>],           # optional: rendered into the prompt by the template
     "task_id": "units-0", "reward": 1.0, "source": "solver"}   # optional provenance

This is the ReTool / OpenAI-messages shape (and verl's multi-turn SFT parquet: a `messages` column,
an optional `tools` column). `arguments` may be a dict or a JSON string. An assistant message may
instead carry the tool call in its text (`<tool_call>{...}</tool_call>`), which is what rollouts
record. `"truncated": true` on the last assistant message marks a turn cut by a token budget (it is
trained without an end-of-turn token).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.jsonl import jsonl_lines

ROLES = ("system", "user", "assistant", "tool")


class DemoFileError(ValueError):
    """A demonstration file or record is malformed; the message names the record and the field."""


@dataclass(frozen=True)
class Demo:
    """One demonstration episode."""

    messages: list[dict[str, Any]]
    """The conversation, starting with the prompt messages and ending with an assistant turn."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI function schemas given to the chat template (empty: none)."""
    task_id: str = ""
    reward: float | None = None
    """The env's reward for the episode when it was played (None: unknown)."""
    source: str = ""
    """Where it came from: `solver`, `policy`, or a file name."""

    def key(self) -> str:
        """Deduplication key: the messages and tools, canonical JSON."""
        return json.dumps({"m": self.messages, "t": self.tools}, sort_keys=True, ensure_ascii=False)

    def to_record(self) -> dict[str, Any]:
        """The JSON-able record written to a demonstration file."""
        out: dict[str, Any] = {"messages": self.messages}
        if self.tools:
            out["tools"] = self.tools
        for name in ("task_id", "reward", "source"):
            value = getattr(self, name)
            if value not in ("", None):
                out[name] = value
        return out


def check_record(record: Any, where: str) -> Demo:
    """A `Demo` from a parsed record, or `DemoFileError` naming `where` and the bad field."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise DemoFileError(f"{where}: needs a `messages` list of chat messages (see docs/sft.md)")
    messages = [dict(m) for m in record["messages"]]
    for i, m in enumerate(messages):
        if m.get("role") not in ROLES:
            raise DemoFileError(f"{where}: messages[{i}].role is {m.get('role')!r}; use one of {ROLES}")
        if m.get("content") is None:
            m["content"] = ""
        if not isinstance(m["content"], str):
            raise DemoFileError(f"{where}: messages[{i}].content must be a string")
    while messages and messages[-1]["role"] != "assistant":  # trailing env feedback is not trained
        messages.pop()
    if not any(m["role"] == "assistant" for m in messages):
        raise DemoFileError(f"{where}: no assistant message, so nothing to learn from")
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    if first == 0:
        raise DemoFileError(f"{where}: the first message is an assistant turn; a prompt must come first")
    tools = record.get("tools") or []
    if isinstance(tools, str):
        tools = json.loads(tools)
    reward = record.get("reward")
    return Demo(
        messages=messages,
        tools=list(tools),
        task_id=str(record.get("task_id") or ""),
        reward=None if reward is None else float(reward),
        source=str(record.get("source") or ""),
    )


def read_demos(path: str | Path) -> list[Demo]:
    """Demonstrations from a `.jsonl` file or a verl-style `.parquet` file (see the module docstring).

    Raises:
        FileNotFoundError: No such file.
        DemoFileError: A malformed line or row (named with its 1-based line or 0-based row).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"demonstration file {path} not found; make one with `stare demos ENV_ID`")
    if path.suffix == ".parquet":
        return [check_record(_plain(row), f"{path} row {i}") for i, row in enumerate(_parquet(path))]
    if path.suffix not in (".jsonl", ".json"):
        raise DemoFileError(f"{path}: unknown demonstration file type; use .jsonl or .parquet")
    return [check_record(record, f"{path} line {i}") for i, record in jsonl_lines(path, DemoFileError)]


def _parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Parquet rows store nested dicts with every key of the column's struct: drop the None ones."""
    messages = [{k: v for k, v in m.items() if v is not None} for m in row.get("messages") or []]
    return {**row, "messages": messages}


def write_demos(path: str | Path, demos: Iterable[Demo]) -> int:
    """Write demonstrations as JSONL (parents created); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w") as handle:
        for demo in demos:
            handle.write(json.dumps(demo.to_record(), ensure_ascii=False) + "\n")
            count += 1
    return count


def dedupe(demos: Sequence[Demo]) -> list[Demo]:
    """The demonstrations with exact duplicates (same messages and tools) removed, first kept."""
    seen: set[str] = set()
    out = []
    for demo in demos:
        key = demo.key()
        if key not in seen:
            seen.add(key)
            out.append(demo)
    return out
