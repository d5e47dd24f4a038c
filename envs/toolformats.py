"""Tool-call formats of the major model families: parse a turn's calls and build its history messages.

A `ToolFormat` is a `ToolCallParser` (`parse(text, tools)`, used by the env) that also says how the
assistant turn and the tool results go back into the chat history, because some chat templates
render tool calls only from structured `tool_calls` and check the ids that link calls and results:

- `hermes`: `<tool_call>{"name", "arguments"}</tool_call>` blocks; history: the text as content.
- `qwen3`: Hermes blocks after an optional `<think>...</think>` block; history: the text as content.
- `llama3_json`: one bare JSON object `{"name", "parameters"}` (Llama 3.x); history: the text.
- `mistral`: `[TOOL_CALLS][{"name", "arguments", "id"}, ...]`; history: structured `tool_calls`
  with 9-character alphanumeric ids, and tool results carrying the same ids.

Every JSON body is decoded by the Hermes path (`envs.parsers`), so a malformed call in any format is
the same `ToolCallError` (kind "malformed_call") the env turns into an observation; only the hint
naming the expected syntax differs. `detect_format(chat_template)` names the format a template
renders (None when no marker is found); `parser="auto"` binds to it when the rollout starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from envs.parsers import (
    HERMES_HINT,
    MALFORMED,
    PARSERS,
    HermesParser,
    ToolCallError,
    _decode_hermes,
    safe_json_loads,
)
from envs.tools import ToolCall, ToolSet

Message = dict[str, Any]

LLAMA_HINT = 'Answer with only {"name": "<tool>", "parameters": {...}} to call a tool.'
MISTRAL_HINT = 'Use [TOOL_CALLS][{"name": "<tool>", "arguments": {...}}].'
MISTRAL_OPEN = "[TOOL_CALLS]"
PYTHON_TAG = "<|python_tag|>"
_CALL_ID = re.compile(r"^[A-Za-z0-9]{9}$")


class ToolFormat(Protocol):
    """A tool-call parser that also writes the turn back into the chat history."""

    name: str

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """One entry per call attempt, in order; empty when the text makes no attempt."""
        ...

    def assistant_message(self, text: str, turn: int) -> Message:
        """The history message of assistant turn `turn` (0-based) whose text is `text`."""
        ...

    def tool_messages(self, messages: Sequence[Message], assistant: Message, turn: int) -> list[Message]:
        """The env's tool messages for that turn, with the call ids the template needs."""
        ...


def _decode(body: str, hint: str) -> ToolCall | ToolCallError:
    """The Hermes JSON decode of one call body, its error naming this format's syntax."""
    result = _decode_hermes(body)
    if isinstance(result, ToolCallError) and hint != HERMES_HINT:
        return replace(result, message=result.message.replace(HERMES_HINT, hint))
    return result


def call_id(turn: int, index: int) -> str:
    """A 9-character alphanumeric call id, unique per (turn, index) in an episode: `call` + 5 digits."""
    return f"call{turn % 1000:03d}{index % 100:02d}"


def _link_ids(messages: Sequence[Message], assistant: Message, turn: int) -> list[Message]:
    """Tool messages whose `tool_call_id` is the id of the assistant's call at the same position."""
    ids = [c["id"] for c in assistant.get("tool_calls") or []]
    out = []
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            message = {**message, "tool_call_id": ids[i] if i < len(ids) else call_id(turn, i)}
        out.append(dict(message))
    return out


class HermesFormat(HermesParser):
    """Hermes `<tool_call>` blocks (Qwen2.5, Hermes, many fine-tunes); the text stays the content."""

    name = "hermes"

    def assistant_message(self, text: str, turn: int) -> Message:
        """`{"role": "assistant", "content": text}`: these templates render the calls from the text."""
        return {"role": "assistant", "content": text}

    def tool_messages(self, messages: Sequence[Message], assistant: Message, turn: int) -> list[Message]:
        """The env's messages unchanged (these templates ignore call ids)."""
        return [dict(m) for m in messages]


class Qwen3Format(HermesFormat):
    """Qwen3: Hermes blocks, read only after the `</think>` that closes the reasoning block.

    A call written inside the reasoning is not a call; a turn whose reasoning never closes makes no
    call (it is graded as a final answer).
    """

    name = "qwen3"

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """Hermes parse of the text after the last `</think>` (all of it when there is no `<think>`)."""
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[1]
        elif "<think>" in text:
            return []
        return super().parse(text, tools)


class Llama3JsonFormat(HermesFormat):
    """Llama 3.1-3.3 custom tools: the whole turn is one JSON object `{"name", "parameters"}`.

    A turn whose text (after an optional `<|python_tag|>`) starts with `{` or `[` is a call attempt: a
    JSON object is one call, a JSON list of objects several; anything else is a final answer.
    """

    name = "llama3_json"

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """The calls of a bare-JSON turn, or [] for a prose answer."""
        body = text.strip()
        if body.startswith(PYTHON_TAG):
            body = body[len(PYTHON_TAG) :].strip()
        if not body.startswith(("{", "[")):
            return []
        return _decode_list(body, LLAMA_HINT)


def _loads(body: str) -> Any:
    """Decode a list of calls (the one JSON decode here outside the Hermes path); None if refused."""
    return safe_json_loads(body)[0]


def _decode_list(body: str, hint: str) -> list[ToolCall | ToolCallError]:
    """A JSON object (one call) or a list of objects (several), each decoded by the Hermes path."""
    if not body.startswith("["):
        return [_decode(body, hint)]
    items, problem = safe_json_loads(body)   # deep nesting or huge numbers: malformed, never raised
    if problem is not None:
        return [ToolCallError(f"{MALFORMED}{problem}. {hint}")]
    if not items:
        return [ToolCallError(f"{MALFORMED}empty list of calls. {hint}")]
    return [_decode(json.dumps(item), hint) for item in items]


class MistralFormat:
    """Mistral instruct models: `[TOOL_CALLS]` then a JSON list of `{"name", "arguments", "id"}`.

    The history message is structured (`content` "" and `tool_calls`), as Mistral templates require,
    with the model's own 9-character ids where valid and `call_id(turn, i)` otherwise; the tool
    results carry the same ids. A turn whose calls do not all parse keeps its text as content.
    """

    name = "mistral"

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """The calls after `[TOOL_CALLS]`, or [] when the marker is absent."""
        if MISTRAL_OPEN not in text:
            return []
        return _decode_list(text.split(MISTRAL_OPEN, 1)[1].strip(), MISTRAL_HINT)

    def assistant_message(self, text: str, turn: int) -> Message:
        """Structured `tool_calls` when every call parses, else the text as content.

        `arguments` is a JSON string, as in OpenAI messages (the Mistral templates splice a string
        verbatim; a dict goes through `tojson|safe`, which HTML-escapes the rest of the call).
        """
        if MISTRAL_OPEN not in text:
            return {"role": "assistant", "content": text}
        body = text.split(MISTRAL_OPEN, 1)[1].strip()
        calls = _decode_list(body, MISTRAL_HINT)
        if not calls or any(isinstance(c, ToolCallError) for c in calls):
            return {"role": "assistant", "content": text}
        given = _given_ids(body)
        tool_calls = [
            {"id": given[i] if i < len(given) and _CALL_ID.match(str(given[i])) else call_id(turn, i),
             "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(calls)
        ]
        return {"role": "assistant", "content": "", "tool_calls": tool_calls}

    def tool_messages(self, messages: Sequence[Message], assistant: Message, turn: int) -> list[Message]:
        """Tool messages carrying the assistant's call ids (generated 9-character ids past them)."""
        return _link_ids(messages, assistant, turn)


def _given_ids(body: str) -> list[Any]:
    """The `id` of each call in a parsed Mistral body (None where absent)."""
    items = _loads(body) if body.startswith("[") else [_loads(body)]
    return [item.get("id") if isinstance(item, dict) else None for item in items or []]


FORMATS: dict[str, type] = {
    "hermes": HermesFormat, "qwen3": Qwen3Format, "llama3_json": Llama3JsonFormat, "mistral": MistralFormat,
}
"""Tool-call formats by name (also accepted by every env's `parser=`)."""


def detect_format(chat_template: str | None) -> str | None:
    """The tool-call format a chat template renders, from markers only the family's templates contain.

    `[TOOL_CALLS]` -> mistral; `<|start_header_id|>` with `"parameters"` -> llama3_json;
    `<tool_call>` with `</think>` -> qwen3; `<tool_call>` -> hermes; otherwise None (not reliable).
    """
    source = chat_template or ""
    if MISTRAL_OPEN in source:
        return "mistral"
    if "<|start_header_id|>" in source and '"parameters"' in source:
        return "llama3_json"
    if "<tool_call>" in source:
        return "qwen3" if "</think>" in source else "hermes"
    return None


class AutoFormat:
    """`parser="auto"`: the format `detect_format` finds in the policy's chat template.

    The rollout calls `bind(chat_template)` before the first turn; until then (or when nothing is
    detected) it behaves as Hermes.
    """

    name = "auto"

    def __init__(self) -> None:
        self.format: ToolFormat = HermesFormat()

    def bind(self, chat_template: str | None) -> ToolFormat:
        """Switch to the detected format (Hermes when none is detected); returns it."""
        self.format = FORMATS[detect_format(chat_template) or "hermes"]()
        return self.format

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """Parse with the bound format."""
        return self.format.parse(text, tools)

    def assistant_message(self, text: str, turn: int) -> Message:
        """The bound format's history message."""
        return self.format.assistant_message(text, turn)

    def tool_messages(self, messages: Sequence[Message], assistant: Message, turn: int) -> list[Message]:
        """The bound format's tool messages."""
        return self.format.tool_messages(messages, assistant, turn)


def history_format(parser: Any) -> ToolFormat:
    """The `ToolFormat` of an env's parser: itself when it is one, Hermes (text as content) otherwise."""
    if all(callable(getattr(parser, name, None)) for name in ("assistant_message", "tool_messages")):
        return parser
    return HermesFormat()


PARSERS.update({**FORMATS, "auto": AutoFormat})
