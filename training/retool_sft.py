r"""ReTool-SFT rows -> demonstration records for `stare sft` (the paper's tool-use cold start).

ReTool's cold-start set (`JoeYing/ReTool-SFT`, about 2k episodes; bring a local copy) stores each
episode as two messages: a user message whose problem follows the marker "*user question:*", and one
assistant message in which reasoning text alternates with `<code>```python ...```</code>` calls,
`<interpreter>...</interpreter>` outputs and a final `<answer>...</answer>`. `convert_row` splits the
trace into OpenAI-style messages (assistant `tool_calls` to `code_interpreter`, `tool` replies) and
puts in front of them the system and user messages that `stare/PythonTool-v0` shows in RL, with its
tool schema, so the cold start and RL see the same prompt and tool.

    python -m training.retool_sft ReTool-SFT/train.parquet --out retool-demos.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import envs
from envs.core import Message
from tasks.extract import last_boxed
from tasks.task import Task

QUESTION_MARKER = "*user question:*"
TOOL_NAME = "code_interpreter"
_FENCE = re.compile(r"```(?:python|py)?\s*\n?(.*?)```", re.DOTALL)


class ReToolRowError(ValueError):
    """A ReTool-SFT row is malformed; the message names the row and what is missing."""


def _cut(text: str, start: str, stop: str, where: str) -> tuple[str, str, str] | None:
    """(before, inside, after) for the first `start ... stop` span, or None without `start`."""
    i = text.find(start)
    if i < 0:
        return None
    j = text.find(stop, i + len(start))
    if j < 0:
        raise ReToolRowError(f"{where}: {start} at offset {i} is never closed by {stop}")
    return text[:i], text[i + len(start):j], text[j + len(stop):]


def split_trace(trace: str, where: str = "trace") -> list[Message]:
    """The assistant/tool messages of one ReTool trace, in order.

    Each `<code>` span ends an assistant turn (its text before the span, one `code_interpreter` call
    with the fenced code); the `<interpreter>` span that follows is the tool reply; the
    `<answer>` span ends the last assistant turn (tags dropped, text kept).
    """
    messages: list[Message] = []
    rest = trace
    while rest.strip():
        code = _cut(rest, "<code>", "</code>", where)
        if code is None:
            answer = _cut(rest, "<answer>", "</answer>", where)
            if answer is None:
                raise ReToolRowError(f"{where}: the trace ends without an <answer>...</answer> span")
            messages.append({"role": "assistant", "content": (answer[0] + answer[1]).strip()})
            break
        before, body, rest = code
        fenced = _FENCE.search(body)
        call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": {
            "code": (fenced.group(1) if fenced else body).strip()}}}
        messages.append({"role": "assistant", "content": before.strip(), "tool_calls": [call]})
        reply = _cut(rest, "<interpreter>", "</interpreter>", where)
        if reply is None:
            raise ReToolRowError(f"{where}: a <code> call has no <interpreter> reply after it")
        messages.append({"role": "tool", "name": TOOL_NAME, "content": reply[1].strip()})
        rest = reply[2]
    return messages


def question_of(user_text: str, where: str = "row") -> str:
    """The problem after ReTool's "*user question:*" marker, without its `<answer>` tags."""
    at = user_text.find(QUESTION_MARKER)
    if at < 0:
        raise ReToolRowError(f"{where}: messages[0] has no {QUESTION_MARKER!r} marker before the problem")
    return user_text[at + len(QUESTION_MARKER):].replace("<answer>", "").replace("</answer>", "").strip()


def convert_row(row: dict[str, Any], env: Any, index: int = 0) -> dict[str, Any]:
    """One ReTool-SFT row -> one `stare sft` record with the env's own prompt messages and tools.

    Args:
        row: `{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}` as ReTool-SFT stores it.
        env: A `stare/PythonTool-v0` env (its `reset` renders the prompt; no tool runs).
        index: Row number, for error messages and the record's `task_id`.
    """
    where = f"ReTool-SFT row {index}"
    messages = row.get("messages") or []
    if len(messages) < 2 or messages[0].get("role") != "user" or messages[1].get("role") != "assistant":
        raise ReToolRowError(f"{where}: needs messages [user, assistant], got "
                             f"{[m.get('role') for m in messages]}")
    question = question_of(messages[0].get("content") or "", where)
    turns = split_trace(messages[1].get("content") or "", where)
    answer = last_boxed(turns[-1]["content"]) or turns[-1]["content"] or "?"
    task = Task(f"retool-sft-{index}", question, answer, "tool")
    prompt, info = env.reset(options={"task": task})
    return {"messages": [*prompt, *turns], "tools": info["tools"], "task_id": task.id,
            "source": "retool-sft"}


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a ReTool-SFT `.parquet` or `.jsonl` file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix in (".jsonl", ".json"):
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    raise ValueError(f"{path}: unknown file type; pass the ReTool-SFT .parquet or a .jsonl of its rows")


def convert_file(source: Path, out: Path, make_env: Callable[[], Any]) -> int:
    """Convert every row of `source` into JSONL demonstrations at `out`; returns the count."""
    env = make_env()
    try:
        records = [convert_row(row, env, i) for i, row in enumerate(read_rows(source))]
    finally:
        env.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return len(records)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m training.retool_sft SOURCE --out DEMOS.jsonl [--env-kwargs JSON]`."""
    parser = argparse.ArgumentParser(prog="python -m training.retool_sft", description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="ReTool-SFT .parquet (or .jsonl of its rows)")
    parser.add_argument("--out", type=Path, required=True, help="demonstration JSONL for `stare sft`")
    parser.add_argument("--env", default="stare/PythonTool-v0", help="env whose prompt and tool to use")
    parser.add_argument("--env-kwargs", default="{}", help="JSON dict for envs.make, as in the RL config")
    args = parser.parse_args(argv)
    kwargs = json.loads(args.env_kwargs)
    count = convert_file(args.source, args.out, lambda: envs.make(args.env, **kwargs))
    print(json.dumps({"out": str(args.out), "written": count}))


if __name__ == "__main__":
    main()
