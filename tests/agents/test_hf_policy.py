"""HFPolicy: log-probs of the distribution actually sampled from, stops, padding, the live model."""

import pytest
import torch

from agents import HFPolicy, RolloutLimits, SamplingParams, Segment, rollout_batch


def _policy(model, tokenizer):
    return HFPolicy(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)


def _manual_logprobs(model, prompt, ids, *, temperature, top_k, top_p):
    """log p(ids[t] | prompt, ids[:t]) under softmax(top_p(top_k(logits / T))), from one full forward pass."""
    with torch.no_grad():
        logits = (
            model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float() / temperature
        )  # (T, V)
    if top_k > 0:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
        drop_sorted = probs.cumsum(-1) - probs > top_p  # mass before this token already exceeds top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, -1, 1.0), (0.7, 20, 1.0), (1.3, -1, 0.8)])
def test_log_probs_match_a_manual_forward_pass(tiny_model, tokenizer, temperature, top_k, top_p):
    torch.manual_seed(1)
    prompts = [[5, 9, 30, 41, 7, 8], [12, 3], [100, 101, 102, 200]]  # ragged: exercises left padding
    sampling = SamplingParams(max_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p)
    completions = _policy(tiny_model, tokenizer).generate(prompts, sampling)
    for prompt, comp in zip(prompts, completions, strict=True):
        expected = _manual_logprobs(
            tiny_model, prompt, comp.ids, temperature=temperature, top_k=top_k, top_p=top_p
        )
        assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=2e-4), (comp.logprobs, expected)
        assert all(lp > float("-inf") for lp in comp.logprobs)  # every sampled id lies inside the kept set
    if temperature != 1.0:  # tempered log-probs are not the raw model log-probs
        raw = _manual_logprobs(
            tiny_model, prompts[0], completions[0].ids, temperature=1.0, top_k=-1, top_p=1.0
        )
        assert not torch.allclose(torch.tensor(completions[0].logprobs), raw, atol=1e-3)


def test_stops_are_kept_and_padding_after_them_is_trimmed(tiny_model, tokenizer):
    torch.manual_seed(0)
    stops = tuple(range(0, 400, 3))  # a third of the vocabulary: rows stop after a few tokens
    completions = _policy(tiny_model, tokenizer).generate(
        [[5, 6, 7]] * 16, SamplingParams(max_tokens=10, stop_token_ids=stops)
    )
    finishes = {c.finish_reason for c in completions}
    assert finishes == {"stop", "length"}, finishes
    for c in completions:
        assert len(c.ids) == len(c.logprobs) and 1 <= len(c.ids) <= 10
        assert not any(i in stops for i in c.ids[:-1])  # nothing after the first stop id
        assert (c.ids[-1] in stops) == (c.finish_reason == "stop")
        assert c.finish_reason == "stop" or len(c.ids) == 10


def test_works_on_the_live_training_model_and_restores_its_mode(kit, tokenizer):
    model = kit.build_model(tokenizer, seed=3, dropout=0.5).train()
    torch.manual_seed(2)
    comp = _policy(model, tokenizer).generate([[4, 5, 6]], SamplingParams(max_tokens=8))[0]
    assert model.training and all(p.grad is None for p in model.parameters())
    model.eval()  # the log-probs are those of the dropout-free model: generation ran in eval mode
    expected = _manual_logprobs(model, [4, 5, 6], comp.ids, temperature=1.0, top_k=-1, top_p=1.0)
    assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=2e-4)


def test_64_concurrent_multi_turn_episodes_with_the_tiny_random_model(kit, tiny_model, tokenizer):
    class AlwaysTool(kit.FakeToolEnv):  # every action is answered with a tool message for 3 turns
        def step(self, action):
            self.steps += 1
            if self.steps >= 3:
                return (
                    [],
                    0.0,
                    True,
                    False,
                    {
                        "tool_calls": 0,
                        "tool_errors": 0,
                        "grade": {"status": "wrong", "prediction": None, "correct": False},
                    },
                )
            return (
                [{"role": "tool", "content": f"out {self.steps}: {action[:20]}"}],
                0.0,
                False,
                False,
                {"tool_calls": 1, "tool_errors": 0},
            )

    torch.manual_seed(0)
    policy = _policy(tiny_model, tokenizer)
    stops = (tokenizer.eos_token_id, *range(4, 400, 17))  # frequent stops: turns end after ~20 tokens
    batch = rollout_batch(
        AlwaysTool,
        policy,
        tokenizer,
        ["a", "b"],
        group_size=32,
        sampling=SamplingParams(max_tokens=24, stop_token_ids=stops),
        limits=RolloutLimits(max_response_tokens=200),
        seed=0,
        max_workers=8,
    )
    assert len(batch) == 64 and batch.stats.generate_calls <= 3
    assert {t.finish_reason for t in batch} <= {"stop", "length"}
    multi = [t for t in batch if t.num_turns >= 2]
    assert multi, "random sampling should reach a second turn in some episodes"
    for t in batch:  # ledger already checked inside rollout_batch; spot-check the masks here
        assert all((m == 1) == (s == Segment.SAMPLED) for m, s in zip(t.loss_mask, t.segment, strict=True))
        assert len(t.response_ids) <= 200 and t.metrics["sampled_tokens"] == sum(t.loss_mask)
