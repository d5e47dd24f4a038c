"""Chat rendering as an append-only token stream: the prompt once, then template deltas.

The sampled ids are never re-encoded. After each assistant turn the conversation is re-rendered
as text and checked against what the ledger already holds:

    P_t   = render(history_t, generation_prompt=True)             # what the policy was prompted with
    A_t   = render(history_t + [assistant_t])                     # must start with P_t + S_t
    N_t   = render(history_t + [assistant_t] + injected, True)    # must start with A_t
    delta = A_t[len(P_t) + len(S_t):] + N_t[len(A_t):]            # tail glue + injected messages

where `S_t` is the decoded sampled text (content plus the stop token's text). Only `delta` is
encoded; its tokens are TOOL inside an injected message's content and GLUE elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import Any

from agents.errors import REWRITE_OPTIONS, TemplateError, text_diff
from agents.trajectory import Segment

Message = dict[str, Any]


def template_name(tokenizer: Any, chat_template: str | None = None) -> str:
    """A readable name for the chat template in use: the tokenizer's path plus a short hash."""
    source = chat_template or getattr(tokenizer, "chat_template", None) or ""
    digest = hashlib.sha1(str(source).encode()).hexdigest()[:8]
    return f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__} (template sha1 {digest})"


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Decode ids verbatim: special tokens kept, no whitespace clean-up."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Encode text without adding BOS/EOS (the chat template already wrote them)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def truncate_content(tokenizer: Any, message: Message, max_tokens: int | None) -> tuple[Message, bool]:
    """Cut an injected message's content to about `max_tokens` tokens, marker included.

    The head of the content is kept and a marker `[... N tokens truncated]` appended; the two are
    budgeted together (re-encoding the joined text may differ by a token at the seam).

    Args:
        tokenizer: The policy's tokenizer.
        message: A chat message; non-string content is left alone.
        max_tokens: Token budget of the content; None = unlimited.

    Returns:
        (message, truncated): a copy with shortened content when it was over budget.
    """
    content = message.get("content")
    if max_tokens is None or not isinstance(content, str):
        return message, False
    ids = encode(tokenizer, content)
    if len(ids) <= max_tokens:
        return message, False
    marker = f"\n[... {len(ids)} tokens, truncated]"
    keep = max_tokens - len(encode(tokenizer, marker))
    cut = decode(tokenizer, ids[:keep]) + marker if keep > 0 else decode(tokenizer, ids[:max_tokens])
    return {**message, "content": cut}, True


class ChatRenderer:
    """Renders one episode's conversation as an append-only id stream (see module docstring).

    Args:
        tokenizer: A transformers tokenizer with a chat template.
        messages: The env's initial messages (system, user, ...).
        tools: OpenAI function schemas passed to the template (`tools=`); None or [] for none.
        chat_template: Template string overriding the tokenizer's own.
        chat_template_kwargs: Extra template variables (e.g. `{"enable_thinking": False}`).
    """

    def __init__(
        self,
        tokenizer: Any,
        messages: Sequence[Message],
        *,
        tools: Sequence[dict] | None = None,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.messages: list[Message] = [dict(m) for m in messages]
        self._tools = list(tools) if tools else None
        self._chat_template = chat_template
        self._kwargs = dict(chat_template_kwargs or {})
        self.name = template_name(tokenizer, chat_template)
        self._text = self._render(self.messages, generation_prompt=True)
        self._tail = ""
        self.prompt_ids: list[int] = encode(tokenizer, self._text)
        """Ids of the initial prompt (system + user + generation prompt)."""

    def _render(self, messages: Sequence[Message], *, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=self._tools,
            chat_template=self._chat_template,
            add_generation_prompt=generation_prompt,
            tokenize=False,
            **self._kwargs,
        )

    def _require_prefix(self, before: str, after: str, what: str) -> None:
        if not after.startswith(before):
            raise TemplateError(
                f"chat template {self.name} rewrote earlier turns when {what}; the rendering is not "
                f"append-only, so token trajectories would drift.\n"
                f"{text_diff(before, after[: len(before)])}\n"
                f"{REWRITE_OPTIONS}"
            )

    def render_ids(self, messages: Sequence[Message]) -> list[int]:
        """Ids of the whole conversation `messages` with the generation prompt (a per-turn prompt)."""
        return encode(self.tokenizer, self._render(messages, generation_prompt=True))

    def add_assistant(
        self,
        ids: Sequence[int],
        *,
        stopped: bool,
        build: Callable[[str], Message] | None = None,
        stop_ids: Collection[int] = (),
    ) -> str:
        """Record a sampled assistant turn and return its text (the env's action).

        The stop token is split off the content when the template re-creates it after the content
        (ChatML's `<|im_end|>`); otherwise it stays part of the content.

        Args:
            ids: The sampled ids of this turn, exactly as the policy returned them.
            stopped: True when the turn ended on a stop token (finish_reason "stop").
            build: Makes the history message from the content (a tool format's `assistant_message`,
                e.g. structured `tool_calls`); default `{"role": "assistant", "content": content}`.
            stop_ids: Declared stop ids: a turn ending on one never keeps it as content (the
                template must re-create it after the content, or the turn does not render verbatim).

        Returns:
            The assistant message content given to the env.

        Raises:
            TemplateError: The template rewrote history or renders the turn differently from `ids`.
        """
        build = build or (lambda text: {"role": "assistant", "content": text})
        splits = ([len(ids) - 1] if stopped and ids else []) + [len(ids)]
        if stopped and ids and ids[-1] in stop_ids:
            splits = splits[:1]
        rendered = ""
        for cut in splits:
            content = decode(self.tokenizer, ids[:cut])
            sampled_text = content + decode(self.tokenizer, ids[cut:])
            message = build(content)
            rendered = self._render([*self.messages, message], generation_prompt=False)
            self._require_prefix(self._text, rendered, "an assistant turn was added")
            turn = rendered[len(self._text) :]
            if turn.startswith(sampled_text) and self._clean_split(ids, cut, turn[len(sampled_text) :]):
                self.messages.append(message)
                self._tail, self._text = turn[len(sampled_text) :], rendered
                return content
        raise TemplateError(
            f"chat template {self.name} does not render the sampled assistant turn verbatim (it edits "
            f"the content, e.g. strips whitespace or drops reasoning), so the ids the policy sampled "
            f"cannot be kept as they are.\n"
            f"{text_diff(decode(self.tokenizer, ids), rendered[len(self._text) :])}\n{REWRITE_OPTIONS}"
        )

    def _clean_split(self, ids: Sequence[int], cut: int, tail: str) -> bool:
        """True unless the stop-token split only matches as text.

        Example: a sampled "<" followed by the template's "<|im_end|>" reads, as text, like a stop
        token; the split is clean only if encoding the stop text plus the tail starts with that id.
        """
        if cut == len(ids):
            return True
        return encode(self.tokenizer, decode(self.tokenizer, ids[cut:]) + tail)[:1] == list(ids[cut:])

    def add_messages(self, new: Sequence[Message]) -> tuple[list[int], list[int]]:
        """Render injected messages (tool results, user turns) as a delta of the template.

        Args:
            new: Messages the env returned from `step`, in order.

        Returns:
            (ids, segments): the delta ids ending with the next generation prompt, and a `Segment`
            value per id (TOOL inside a message's content, GLUE for template tokens).

        Raises:
            TemplateError: Rendering the new messages changed the earlier text.
        """
        new = [dict(m) for m in new]
        rendered = self._render([*self.messages, *new], generation_prompt=True)
        self._require_prefix(self._text, rendered, f"{len(new)} injected message(s) were added")
        delta = self._tail + rendered[len(self._text) :]
        spans = _content_spans(delta, [m.get("content") for m in new])
        ids, segments = _encode_with_spans(self.tokenizer, delta, spans)
        self.messages.extend(new)
        self._text, self._tail = rendered, ""
        return ids, segments


def _content_spans(text: str, contents: Sequence[Any]) -> list[tuple[int, int]]:
    """Character spans of each string content inside `text`, searched left to right."""
    spans, cursor = [], 0
    for content in contents:
        if not isinstance(content, str) or not content:
            continue
        start = text.find(content, cursor)
        if start < 0:  # the template transformed the content: its tokens count as glue
            continue
        spans.append((start, start + len(content)))
        cursor = start + len(content)
    return spans


def _encode_with_spans(
    tokenizer: Any, text: str, spans: list[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """Encode `text` piecewise (glue / content / glue ...) so every id has one clear provenance."""
    ids: list[int] = []
    segments: list[int] = []
    cursor = 0
    for start, end in [*spans, (len(text), len(text))]:
        for piece, kind in ((text[cursor:start], Segment.GLUE), (text[start:end], Segment.TOOL)):
            if piece:
                piece_ids = encode(tokenizer, piece)
                ids += piece_ids
                segments += [int(kind)] * len(piece_ids)
        cursor = end
    return ids, segments
