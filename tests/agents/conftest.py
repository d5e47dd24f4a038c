"""Offline fixtures: a tiny byte-level BPE ChatML tokenizer (Qwen2.5-style tools); tiny Qwen2; fake env;
tokenizers rendering the real Qwen3, Llama 3.1 and Mistral v3 templates of `data/templates/`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

# Qwen2.5-style ChatML: tools listed in the system turn, consecutive tool messages grouped in one
# user turn as <tool_response> blocks. Built from pieces so that every output newline is explicit.
CHATML_TEMPLATE = "".join(
    [
        "{%- if tools %}{{ '<|im_start|>system\\n' }}",
        "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}",
        "{% else %}{{ 'You are a helpful assistant.' }}{% endif %}",
        "{{ '\\n\\n# Tools\\n\\n<tools>' }}{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}",
        "{{ '\\n</tools>\\n\\nReturn calls as ' }}",
        '{{ \'<tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\\n\' }}',
        "{%- elif messages[0]['role'] == 'system' %}",
        "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}",
        "{%- endif %}",
        "{%- for m in messages %}",
        "{%- if m['role'] == 'system' and loop.first %}",
        "{%- elif m['role'] == 'tool' %}",
        "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}",
        "{{ '<|im_start|>user' }}{% endif %}",
        "{{ '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}",
        "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}",
        "{%- else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}",
        "{%- endif %}",
        "{%- endfor %}",
        "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    ]
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CORPUS = [
    "Use the code_interpreter tool to compute the answer, then write \\boxed{42}.",
    "print(sum(range(10)))  # 45\nprint(6 * 7)\nimport math\nprint(math.sqrt(2))",
    '{"name": "code_interpreter", "arguments": {"code": "print(1 + 2)"}}',
    "The result is 3. So the answer is \\boxed{3}. Let me check with Python first.",
    "<tool_response>\nstdout: 45\n</tool_response> error: SyntaxError invalid syntax",
    "You are a helpful assistant. Solve the problem: what is 17 * 23? Countdown numbers 3 5 7 target 22.",
] * 20


def build_tokenizer():
    """A byte-level BPE (vocab ~400) wrapped as PreTrainedTokenizerFast with the ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|pad|>", bos_token=None, unk_token=None
    )
    tok.add_tokens(["<tool_call>", "</tool_call>"])  # added, not special: as in Qwen2.5
    tok.chat_template = CHATML_TEMPLATE
    return tok


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


TEMPLATES = Path(__file__).parent / "data" / "templates"

# Each family's special tokens are single tokens, as in the real tokenizers (first = pad, then bos/eos
# by name); `added` are non-special added tokens (Qwen3's tool and reasoning markup).
FAMILIES = {
    "qwen3": {
        "template": "qwen3.jinja", "pad": "<|endoftext|>", "bos": None, "eos": "<|im_end|>",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "added": ["<think>", "</think>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>"],
    },
    "llama3_1": {
        "template": "llama3_1.jinja", "pad": "<|finetune_right_pad_id|>", "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>", "added": [],
        "special": ["<|finetune_right_pad_id|>", "<|begin_of_text|>", "<|start_header_id|>",
                    "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
    },
    "mistral_v3": {
        "template": "mistral_v3.jinja", "pad": "<unk>", "bos": "<s>", "eos": "</s>", "added": [],
        "special": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
    },
}
FAMILY_CORPUS = CORPUS + [
    'Given the following functions, please respond with a JSON for a function call {"name": "add", '
    '"parameters": {"a": 2, "b": 3}} "arguments" "description": "Add two integers." "type": "integer"',
    "Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024 Environment: ipython",
    "# Tools You may call one or more functions to assist with the user query.",
    "I should add. The tool says 5.",
] * 10


def build_family_tokenizer(family: str):
    """A byte-level BPE (vocab ~500) with `family`'s special tokens and its real chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=spec["special"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(FAMILY_CORPUS, trainer)
    named = {spec["pad"], spec["bos"], spec["eos"]}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token=spec["pad"], bos_token=spec["bos"], eos_token=spec["eos"],
        unk_token=None, additional_special_tokens=[t for t in spec["special"] if t not in named],
    )
    if spec["added"]:
        tok.add_tokens(spec["added"])
    tok.chat_template = (TEMPLATES / spec["template"]).read_text()
    tok.name_or_path = family
    return tok


@pytest.fixture(scope="session")
def family_tokenizers():
    """`{family: tokenizer}` for qwen3, llama3_1 and mistral_v3."""
    return {family: build_family_tokenizer(family) for family in FAMILIES}


def build_model(tokenizer, *, seed: int = 0, dropout: float = 0.0, **overrides):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    shape = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        **overrides,
    }
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        attention_dropout=dropout,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    return build_model(tokenizer)


TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}


class FakeToolEnv:
    """The env contract in miniature: Hermes tool calls answered with a canned result, \\boxed answers graded.

    Args:
        latency: Seconds each tool call sleeps (to test overlap).
        fail_on_step: Raise RuntimeError on this step number (a world failure), or None.
        max_tool_turns: After this many tool turns the episode is truncated (graded as no answer).
        tool_output: Content of each tool message (default: echoes the call).
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        fail_on_step: int | None = None,
        max_tool_turns: int = 100,
        tool_output: str | None = None,
    ):
        self.latency, self.fail_on_step, self.max_tool_turns = latency, fail_on_step, max_tool_turns
        self.tool_output = tool_output
        self.closed = False
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        self.task = (options or {}).get("task")
        self.steps = 0
        question = getattr(self.task, "prompt", "What is 6 * 7?")
        return (
            [{"role": "system", "content": "Solve it."}, {"role": "user", "content": question}],
            {"tools": [TOOL_SCHEMA]},
        )

    def step(self, action: str):
        self.steps += 1
        if self.fail_on_step == self.steps:
            raise RuntimeError("sandbox unreachable")
        if "<tool_call>" not in action:
            answer = getattr(self.task, "answer", "42")
            correct = f"\\boxed{{{answer}}}" in action
            grade = {"status": "correct" if correct else "wrong", "prediction": None, "correct": correct}
            return [], float(correct), True, False, {"tool_calls": 0, "tool_errors": 0, "grade": grade}
        body = action.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
        try:
            code = json.loads(body)["arguments"]["code"]
            content, errors = self.tool_output or f"ran: {code}", 0
        except (ValueError, KeyError, TypeError) as err:
            content, errors = f"error: malformed tool call ({type(err).__name__})", 1
        time.sleep(self.latency)
        message = {"role": "tool", "name": "code_interpreter", "content": content}
        if self.steps >= self.max_tool_turns:
            grade = {"status": "no_answer", "prediction": None, "correct": False}
            return [message], 0.0, False, True, {"tool_calls": 1, "tool_errors": errors, "grade": grade}
        return [message], 0.0, False, False, {"tool_calls": 1, "tool_errors": errors}

    def close(self):
        self.closed = True


TOOL_TURN = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
ANSWER_TURN = "The result is 42. So the answer is \\boxed{42}."


@pytest.fixture(scope="session")
def kit():
    """Helpers shared by the test modules (conftest is not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        FakeToolEnv=FakeToolEnv,
        TOOL_TURN=TOOL_TURN,
        ANSWER_TURN=ANSWER_TURN,
        TOOL_SCHEMA=TOOL_SCHEMA,
        build_model=build_model,
        CHATML_TEMPLATE=CHATML_TEMPLATE,
    )
