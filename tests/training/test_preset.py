import dataclasses
import json
import random

import pytest
import torch

from tasks.countdown import countdown_splits, evaluate_expression
from training.preset import (
    PRESETS,
    build_tiny_model,
    build_tokenizer,
    get_preset,
    resolve_model_path,
    resolve_target_entropy,
)
from training.preset import warmstart as ws
from training.preset.demos import scripted_turns
from training.preset.tokenizer import SPECIAL_TOKENS, render_chatml, synthetic_conversation, tool_call_text


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_tokenizer_round_trips_any_text(tok):
    for text in [
        "Use 4 7 7 to make 45",
        "Hé! 3+4=\\boxed{7} 🚀",
        "wait, let me verify",
        tool_call_text("print(1)"),
    ]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text


def test_tokenizer_compresses_the_preset_format(tok):
    for special in SPECIAL_TOKENS:
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    call = tok(tool_call_text("print((3+4)*5)"), add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(call)
    # <tool_call>, the whole JSON prefix up to "print((", 3 + 4 )* 5, the closing ')"}}', </tool_call>
    assert len(call) <= 10, pieces
    assert tok("1234", add_special_tokens=False)["input_ids"] == [
        tok.convert_tokens_to_ids(c) for c in "1234"
    ]
    assert len(tok) < 512 and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>"


def test_chat_template_matches_the_reference_renderer_and_ignores_tools(tok):
    conv = synthetic_conversation(random.Random(3))
    assert tok.apply_chat_template(conv, tokenize=False) == render_chatml(conv)
    schema = [{"type": "function", "function": {"name": "code_interpreter", "parameters": {}}}]
    user = [{"role": "user", "content": "Use 1 2 3 to make 7"}]
    rendered = tok.apply_chat_template(user, tools=schema, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nUse 1 2 3 to make 7<|im_end|>\n<|im_start|>assistant\n"


def test_consecutive_tool_messages_share_one_user_turn_qwen_style(tok):
    conv = [
        {"role": "assistant", "content": "x"},
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "2"},
    ]
    assert tok.apply_chat_template(conv, tokenize=False) == (
        "<|im_start|>assistant\nx<|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response>"
        "\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    )


def test_openai_tool_calls_render_as_hermes(tok):
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": "print(1)"}}}
        ],
    }
    assert tok.apply_chat_template([msg], tokenize=False) == (
        "<|im_start|>assistant\n" + tool_call_text("print(1)") + "<|im_end|>\n"
    )


def test_tokenizer_and_model_round_trip_through_save_pretrained(tok, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = build_tiny_model(tok)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    tok2, model2 = AutoTokenizer.from_pretrained(tmp_path), AutoModelForCausalLM.from_pretrained(tmp_path)
    conv = synthetic_conversation(random.Random(0))
    assert tok2.apply_chat_template(conv, tokenize=False) == render_chatml(conv)
    assert tok2(render_chatml(conv))["input_ids"] == tok(render_chatml(conv))["input_ids"]
    ids = torch.tensor([tok("Use 1 2 3 to make 7")["input_ids"]])
    assert torch.equal(model(ids).logits, model2(ids).logits)


def test_tiny_model_has_the_cpu_demo_shape(tok):
    model = build_tiny_model(tok)
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.num_attention_heads) == (
        64,
        4,
        256,
        4,
    )
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight  # tied
    params = sum(p.numel() for p in model.parameters())
    # 4 layers x (attention 4*64*64 + biases 3*64 + MLP 3*64*256 + 2 norms 2*64) + final norm 64 + V*64
    assert params == 4 * (4 * 64 * 64 + 3 * 64 + 3 * 64 * 256 + 2 * 64) + 64 + len(tok) * 64
    assert torch.equal(
        build_tiny_model(tok, seed=1).lm_head.weight, build_tiny_model(tok, seed=1).lm_head.weight
    )
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_model(tok, hidden_size=66)


def test_scripted_searcher_boxes_the_first_hit_or_the_last_try():
    tasks = countdown_splits()["train"][:200]
    rng, hits = random.Random(0), 0
    for task in tasks:
        turns, hit = scripted_turns(task, rng)
        calls, answer = turns[:-1], turns[-1]
        assert 1 <= len(calls) <= 4 and answer.startswith("\\boxed{") and answer.endswith("}")
        tried = [
            json.loads(c[len("<tool_call>") : -len("</tool_call>")])["arguments"]["code"][6:-1] for c in calls
        ]
        assert len(set(tried)) == len(tried)  # distinct candidates
        values = [evaluate_expression(e)[0] for e in tried]
        target = task.meta["target"]
        assert hit == (target in values) and answer == f"\\boxed{{{tried[-1]}}}"
        assert target not in values[:-1]  # stops at the first hit
        hits += hit
    assert 0.02 < hits / len(tasks) < 0.3  # imperfect: the CPU prototype's expert solved ~6-16%


def test_preset_cache_key_tracks_settings_and_unknown_names_fail():
    base = get_preset("cpu-tiny")
    assert dataclasses.replace(base, sft_steps=601).key() != base.key()
    assert get_preset("cpu-tiny").key() == PRESETS["cpu-tiny"].key()
    with pytest.raises(ValueError, match="known presets"):
        get_preset("cpu-huge")
    with pytest.raises(ValueError, match="preset:<name>"):
        resolve_model_path("cpu-tiny", "/tmp")


def test_resolve_model_path_builds_once_then_uses_the_cache(tmp_path, monkeypatch):
    builds = []

    def fake_build(settings, out_dir):
        builds.append(out_dir)
        (out_dir / "warmstart.json").write_text(json.dumps({"entropy": 0.5}))

    monkeypatch.setattr(ws, "build_warmstart", fake_build)
    first = resolve_model_path("preset:cpu-tiny-smoke", tmp_path)
    second = resolve_model_path("preset:cpu-tiny-smoke", tmp_path)
    assert first == second and len(builds) == 1
    assert first.name == f"cpu-tiny-smoke-{get_preset('cpu-tiny-smoke').key()}"
    assert builds[0] != first and not builds[0].exists()  # built under a temp name, renamed
    assert resolve_target_entropy(first, 0.7) == pytest.approx(0.35)
    with pytest.raises(FileNotFoundError, match="warmstart.json"):
        resolve_target_entropy(tmp_path, 0.7)


def test_a_failed_build_leaves_no_cache_entry(tmp_path, monkeypatch):
    def broken(settings, out_dir):
        (out_dir / "partial").write_text("x")
        raise RuntimeError("boom")

    monkeypatch.setattr(ws, "build_warmstart", broken)
    with pytest.raises(RuntimeError, match="boom"):
        resolve_model_path("preset:cpu-tiny-smoke", tmp_path)
    assert [p.name for p in (tmp_path / "presets").iterdir() if p.is_dir()] == []
