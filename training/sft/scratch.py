r"""A from-scratch tiny model for any env: tokenizer and model sized from the env's demonstrations.

The CPU preset's recipe, generalised: a byte-level BPE tokenizer (`training.preset.tokenizer`)
trained on the demonstrations' own rendered text, with the fixed strings of their format as single
tokens (the JSON head of each tool's Hermes call, `\\boxed{`), and a tiny Qwen2
(`training.preset.model`) whose context covers twice the longest demonstration. Nothing is
downloaded. `stare sft --init tiny` uses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from training.preset.model import TinySpec, build_from_spec
from training.preset.tokenizer import SPECIAL_TOKENS, build_tokenizer, render_chatml
from training.sft.data import Demo
from training.sft.encode import assistant_text, encode_demo


def format_tokens(demos: Sequence[Demo]) -> tuple[str, ...]:
    r"""Fixed strings of the demos' format: `{"name": "<tool>", "arguments": {` per tool, `\\boxed{`."""
    names = sorted(
        {
            str((c.get("function") or c)["name"])
            for d in demos
            for m in d.messages
            for c in m.get("tool_calls") or []
        }
        | {str(t.get("function", t).get("name")) for d in demos for t in d.tools}
        | set(
            re.findall(
                r'<tool_call>\{"name": "([^"]+)"', " ".join(m["content"] for d in demos for m in d.messages)
            )
        )
    )
    return tuple(f'{{"name": "{n}", "arguments": {{' for n in names) + ("\\boxed{",)


def plain_messages(demo: Demo) -> list[dict[str, str]]:
    """The demonstration with each assistant turn as the text a policy writes (tool calls inlined)."""
    return [
        {"role": m["role"], "content": assistant_text(m) if m["role"] == "assistant" else m["content"]}
        for m in demo.messages
    ]


def demo_corpus(demos: Sequence[Demo], fixed: Sequence[str]) -> Iterator[str]:
    """Rendered demonstrations, split around special and fixed tokens (the BPE training text)."""
    split = re.compile(
        "|".join(re.escape(t) for t in sorted((*SPECIAL_TOKENS, *fixed), key=len, reverse=True))
    )
    for demo in demos:
        for segment in split.split(render_chatml(plain_messages(demo))):
            if segment:
                yield segment


def build_scratch(demos: Sequence[Demo], spec: TinySpec = TinySpec()) -> tuple[Any, Any]:  # noqa: B008 (frozen)
    """(model, tokenizer) sized from `demos`: vocabulary from their text, context 2 × the longest one."""
    if not demos:
        raise ValueError("a from-scratch model needs demonstrations to size its tokenizer")
    fixed = format_tokens(demos)
    tokenizer = build_tokenizer(demo_corpus(demos, fixed), vocab_size=spec.vocab_size, format_tokens=fixed)
    longest = max(len(t.prompt_ids) + len(t.response_ids) for t in (encode_demo(d, tokenizer) for d in demos))
    positions = 64
    while positions < 2 * longest:
        positions *= 2
    return build_from_spec(tokenizer, spec, max_positions=positions), tokenizer
