r"""A small byte-level BPE tokenizer for the CPU preset, trained locally on the preset's own format.

Every token costs CPU time, so the tokenizer is trained on text in exactly the format the tiny model
reads and writes (ChatML turns, Hermes tool calls, Countdown prompts, `\\boxed{}` answers), and the
long fixed strings of that format are single added tokens (`FORMAT_TOKENS`: the whole JSON prefix of
a `code_interpreter` call up to `print(`, its closing `)"}}`, `\\boxed{`, and the prompt's words).
Digits are split one per token, so numbers compose. Special tokens: ChatML (`<|im_start|>`,
`<|im_end|>`, `<|pad|>`, `<|endoftext|>`) and tool markup (`<tool_call>`, `</tool_call>`,
`<tool_response>`, `</tool_response>`).

The normalizer (NFC) and pre-tokenizer are exactly Qwen2's, because `AutoTokenizer.from_pretrained`
on a directory whose config says `qwen2` rebuilds the tokenizer as `Qwen2Tokenizer` with those
(transformers 5); the saved tokenizer therefore encodes identically however it is loaded (tested).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

if TYPE_CHECKING:  # transformers is imported where used: it costs ~1 s of CPU at `stare --help`
    from transformers import PreTrainedTokenizerFast

PAD, BOS_TURN, EOS_TURN, UNK = "<|pad|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS_TURN, EOS_TURN, UNK, *TOOL_MARKUP)
CALL_PREFIX = '{"name": "code_interpreter", "arguments": {"code": "print('
CALL_SUFFIX = ')"}}'
FORMAT_TOKENS: tuple[str, ...] = (CALL_PREFIX, CALL_SUFFIX, "\\boxed{", "Use ", " to make ")
"""Fixed strings of the preset's format, each one (non-special, decodable) added token."""

CHAT_TEMPLATE = (
    # ChatML; tool results are rendered Qwen2.5-style (consecutive tool messages share one user
    # turn, each wrapped in <tool_response>). `tools=` is accepted but not rendered: the tiny model
    # learns the call format from its demonstrations, and a schema would cost ~100 tokens per prompt.
    "{%- for m in messages %}"
    "{%- if m['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['content'] %}{{ m['content'] }}{%- endif %}"
    "{%- for call in m.get('tool_calls') or [] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    "{{ '<tool_call>' + ({'name': fn['name'], 'arguments': fn['arguments']} | tojson) + '</tool_call>' }}"
    "{%- endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML with Qwen2.5-style tool messages; see the module docstring for what `tools=` does."""

DEFAULT_PROMPT = "Use {numbers} to make {target}"
"""The preset's Countdown prompt (numbers space-separated). Must match the env's `prompt_template`."""


def tool_call_text(code: str) -> str:
    """The Hermes tool call an agent writes to run `code` with `code_interpreter`."""
    body = json.dumps({"name": "code_interpreter", "arguments": {"code": code}})
    return f"<tool_call>{body}</tool_call>"


def render_chatml(messages: list[dict[str, str]], *, add_generation_prompt: bool = False) -> str:
    """Render plain-content messages exactly as `CHAT_TEMPLATE` does (a test checks they agree)."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            first = i == 0 or messages[i - 1]["role"] != "tool"
            last = i == len(messages) - 1 or messages[i + 1]["role"] != "tool"
            out.append(
                ("<|im_start|>user" if first else "")
                + f"\n<tool_response>\n{m['content']}\n</tool_response>"
                + ("<|im_end|>\n" if last else "")
            )
        else:
            out.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    return "".join(out) + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def synthetic_conversation(rng: random.Random, prompt: str = DEFAULT_PROMPT) -> list[dict[str, str]]:
    """One Countdown-style tool conversation in the preset's format (random, not necessarily solved)."""
    nums = [rng.randint(1, 9) for _ in range(3)]
    messages = [
        {
            "role": "user",
            "content": prompt.format(numbers=" ".join(map(str, nums)), target=rng.randint(10, 99)),
        }
    ]
    for _ in range(rng.randint(1, 4)):
        a, b, c = rng.sample(nums, 3)
        expr = rng.choice(["{}{}{}{}{}", "({}{}{}){}{}", "{}{}({}{}{})"]).format(
            a, rng.choice("+-*"), b, rng.choice("+-*"), c
        )
        messages.append({"role": "assistant", "content": tool_call_text(f"print({expr})")})
        messages.append({"role": "tool", "content": str(rng.randint(-80, 729))})  # only the shape matters
    messages.append({"role": "assistant", "content": f"\\boxed{{{expr}}}"})
    return messages


def synthetic_corpus(
    num_conversations: int = 2000, *, prompt: str = DEFAULT_PROMPT, seed: int = 0
) -> Iterator[str]:
    """Yield the text between special and format tokens of rendered synthetic conversations (BPE corpus)."""
    rng = random.Random(seed)
    split = re.compile("|".join(re.escape(t) for t in (*SPECIAL_TOKENS, *FORMAT_TOKENS)))
    for _ in range(num_conversations):
        for seg in split.split(render_chatml(synthetic_conversation(rng, prompt))):
            if seg:
                yield seg


def build_tokenizer(corpus: Iterable[str] | None = None, *, vocab_size: int = 512,
                    format_tokens: Sequence[str] = FORMAT_TOKENS) -> PreTrainedTokenizerFast:
    """Train the preset's byte-level BPE tokenizer and wrap it for transformers.

    Args:
        corpus: Text segments to learn merges from; `synthetic_corpus()` when None. Segments must
            not contain special or format tokens (they are added, not learned).
        vocab_size: Upper bound on the learned vocabulary (256 byte symbols + specials + merges);
            training stops earlier when no pair occurs twice. `format_tokens` come on top.
        format_tokens: Fixed strings added as single tokens (default: the Countdown preset's).

    Returns:
        A `PreTrainedTokenizerFast` with `eos_token="<|im_end|>"`, `pad_token="<|pad|>"`, the tool
        markup as additional special tokens, `format_tokens` as added tokens, and the ChatML
        `chat_template`. Deterministic for a given corpus.
    """
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [  # Qwen2's: digits one by one, words, punctuation runs
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(synthetic_corpus() if corpus is None else corpus, trainer)
    tk.add_tokens([AddedToken(t, normalized=False, special=False) for t in format_tokens])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token=EOS_TURN,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[BOS_TURN, *TOOL_MARKUP],
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok
