"""Scripted episodes through a fake tool env: the ledger, the rendering and every budget path."""

import pytest

from agents import (
    RolloutLimits,
    SamplingParams,
    ScriptedPolicy,
    Segment,
    TemplateError,
    rollout,
    rollout_batch,
)
from agents.render import decode


def _play(kit, tokenizer, turns, env=None, **limits):
    env = env or kit.FakeToolEnv()
    policy = ScriptedPolicy(turns, tokenizer)
    traj = rollout(env, policy, tokenizer, limits=RolloutLimits(**{"max_response_tokens": 1024, **limits}))
    return traj, policy, env


def test_tool_episode_matches_template_and_masks_exactly_the_sampled_ids(kit, tokenizer):
    traj, policy, env = _play(kit, tokenizer, [kit.TOOL_TURN, kit.ANSWER_TURN])
    assert (traj.finish_reason, traj.reward, traj.grade_status, traj.num_turns) == ("stop", 1.0, "correct", 2)
    assert env.closed and policy.calls == 2
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m == 1]
    assert sampled == policy.turns[0] + policy.turns[1]  # the engine's ids, nothing else
    # The ledger decodes to exactly what the template renders for the same conversation.
    rendered = tokenizer.apply_chat_template(traj.messages, tools=[kit.TOOL_SCHEMA], tokenize=False)
    assert rendered.startswith(decode(tokenizer, traj.prompt_ids + traj.response_ids))
    assert rendered[len(decode(tokenizer, traj.prompt_ids + traj.response_ids)) :] == "\n"
    assert traj.metrics["tool_calls"] == 1 and traj.metrics["sampled_tokens"] == len(sampled)
    assert set(traj.turn_index) == {0, 1}


def test_tool_output_is_never_trainable_even_when_it_repeats_sampled_text(kit, tokenizer):
    env = kit.FakeToolEnv(tool_output=kit.TOOL_TURN)  # the tool echoes the model's own call
    traj, _, _ = _play(kit, tokenizer, [kit.TOOL_TURN, kit.ANSWER_TURN], env=env)
    tool = [i for i, s in enumerate(traj.segment) if s == Segment.TOOL]
    assert decode(tokenizer, [traj.response_ids[i] for i in tool]) == kit.TOOL_TURN
    assert all(traj.loss_mask[i] == 0 and traj.logprobs[i] == 0.0 for i in tool)
    glue = [i for i, s in enumerate(traj.segment) if s == Segment.GLUE]
    assert decode(tokenizer, [traj.response_ids[i] for i in glue]).startswith(
        "\n<|im_start|>user\n<tool_response>"
    )


def test_non_canonical_token_ids_are_kept_verbatim(kit, tokenizer):
    text = "The answer is \\boxed{42}."
    canonical = tokenizer(text, add_special_tokens=False)["input_ids"]
    split = [tid for ch in text for tid in tokenizer(ch, add_special_tokens=False)["input_ids"]]
    assert split != canonical and decode(tokenizer, split) == text
    turn = split + [tokenizer.eos_token_id]
    traj, _, _ = _play(kit, tokenizer, [turn])
    assert traj.response_ids == turn and traj.reward == 1.0
    assert traj.loss_mask == [1] * len(turn)


def test_malformed_tool_call_is_an_observation(kit, tokenizer):
    bad = '<tool_call>{"name": "code_interpreter", "arguments": </tool_call>'
    traj, _, _ = _play(kit, tokenizer, [bad, kit.TOOL_TURN, kit.ANSWER_TURN])
    assert traj.finish_reason == "stop" and traj.num_turns == 3
    assert (traj.metrics["tool_calls"], traj.metrics["tool_errors"]) == (2, 1)
    assert "malformed" in traj.messages[3]["content"]


def test_response_budget_cuts_the_sampled_turn(kit, tokenizer):
    traj, _, _ = _play(kit, tokenizer, [kit.TOOL_TURN, kit.ANSWER_TURN], max_response_tokens=70)
    assert traj.finish_reason == "length" and len(traj.response_ids) == 70
    assert traj.loss_mask[-1] == 1 and traj.response_ids[-1] != tokenizer.eos_token_id  # cut mid-turn
    assert traj.reward == 0.0 and traj.grade_status == ""


def test_response_budget_reached_by_injected_tokens_cuts_only_injected_ids(kit, tokenizer):
    first = len(tokenizer(kit.TOOL_TURN, add_special_tokens=False)["input_ids"]) + 1
    traj, _, _ = _play(kit, tokenizer, [kit.TOOL_TURN, kit.ANSWER_TURN], max_response_tokens=first + 5)
    assert traj.finish_reason == "length" and len(traj.response_ids) == first + 5
    assert traj.loss_mask == [1] * first + [0] * 5


def test_turn_budget_and_env_truncation(kit, tokenizer):
    traj, _, _ = _play(kit, tokenizer, [kit.TOOL_TURN] * 5, max_turns=3)
    assert traj.finish_reason == "max_turns" and traj.num_turns == 3 and traj.metrics["tool_calls"] == 3
    assert traj.loss_mask[-1] == 1  # the last tool result is not appended: nothing follows it
    env = kit.FakeToolEnv(max_tool_turns=2)
    traj, _, _ = _play(kit, tokenizer, [kit.TOOL_TURN] * 5, env=env)
    assert (traj.finish_reason, traj.grade_status, traj.num_turns) == ("max_turns", "no_answer", 2)


def test_tool_output_budget_truncates_content(kit, tokenizer):
    env = kit.FakeToolEnv(tool_output="print(6 * 7) " * 100)
    traj, _, _ = _play(kit, tokenizer, [kit.TOOL_TURN, kit.ANSWER_TURN], env=env, max_tool_output_tokens=40)
    tool_tokens = [i for i, s in zip(traj.response_ids, traj.segment, strict=True) if s == Segment.TOOL]
    assert traj.metrics["truncated_tool_outputs"] == 1 and traj.finish_reason == "stop"
    assert decode(tokenizer, tool_tokens).endswith("[... 700 tokens, truncated]") and len(tool_tokens) <= 41


def test_per_turn_max_tokens_ends_the_episode_with_length(kit, tokenizer):
    policy = ScriptedPolicy([kit.TOOL_TURN], tokenizer)
    traj = rollout(kit.FakeToolEnv(), policy, tokenizer, sampling=SamplingParams(max_tokens=7))
    assert traj.finish_reason == "length" and traj.response_ids == policy.turns[0][:7]


def test_world_failures_are_recorded_not_raised(kit, tokenizer):
    traj, _, env = _play(
        kit, tokenizer, [kit.TOOL_TURN, kit.ANSWER_TURN], env=kit.FakeToolEnv(fail_on_step=2)
    )
    assert traj.finish_reason == "error" and "sandbox unreachable" in traj.failed and env.closed

    class BrokenReset(kit.FakeToolEnv):
        def reset(self, *, seed=None, options=None):
            raise ConnectionError("no sandbox")

    traj, _, _ = _play(kit, tokenizer, [kit.ANSWER_TURN], env=BrokenReset())
    assert traj.finish_reason == "error" and traj.prompt_ids == [] and "no sandbox" in traj.failed


# A template that drops <think> blocks from every assistant message except the last one
# (how Qwen3 treats earlier turns): rendering the next turn rewrites history.
def _rewriting_template(kit):
    return kit.CHATML_TEMPLATE.replace(
        "{%- else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}",
        "{%- elif m['role'] == 'assistant' and not loop.last %}"
        "{{ '<|im_start|>assistant\\n' + m['content'].split('</think>')[-1] + '<|im_end|>\\n' }}"
        "{%- else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}",
    )


def test_history_rewriting_template_raises_with_options(kit, tokenizer):
    policy = ScriptedPolicy(["<think>six sevens</think>" + kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer)
    with pytest.raises(TemplateError, match=r"rewrote earlier turns(.|\n)*chat_template="):
        rollout(kit.FakeToolEnv(), policy, tokenizer, chat_template=_rewriting_template(kit),
                history="append")
    policy = ScriptedPolicy([kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer)  # no <think>: nothing rewritten
    assert rollout(kit.FakeToolEnv(), policy, tokenizer, chat_template=_rewriting_template(kit)).reward == 1.0


def test_history_rewriting_template_becomes_per_turn_samples_by_default(kit, tokenizer):
    think = "<think>six sevens</think>" + kit.TOOL_TURN
    policy = ScriptedPolicy([think, kit.ANSWER_TURN], tokenizer, lockstep=True)
    traj = rollout(kit.FakeToolEnv(), policy, tokenizer, chat_template=_rewriting_template(kit))
    assert traj.per_turn and len(traj.samples) == 2 and traj.reward == 1.0
    first, second = traj.samples
    assert first.response_ids == policy.turns[0] and second.response_ids == policy.turns[1]
    assert first.loss_mask == [1] * len(policy.turns[0]) and set(second.turn_index) == {1}
    # Turn 1's prompt is the template's rendering of the history: the <think> block is gone.
    prompt_text = decode(tokenizer, second.prompt_ids)
    assert "six sevens" not in prompt_text
    assert prompt_text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert (traj.prompt_ids, traj.response_ids) == (second.prompt_ids, second.response_ids)
    sampled = len(policy.turns[0]) + len(policy.turns[1])
    assert traj.sampled_tokens == sampled == traj.metrics["sampled_tokens"]
    assert traj.metrics["per_turn"] == 1.0 and first.reward == second.reward == 1.0


def test_template_that_edits_the_sampled_turn_raises(kit, tokenizer):
    stripping = kit.CHATML_TEMPLATE.replace("m['content'] + '<|im_end|>", "m['content'] | trim + '<|im_end|>")
    policy = ScriptedPolicy(["  " + kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer)
    with pytest.raises(TemplateError, match="does not render the sampled assistant turn verbatim"):
        rollout(kit.FakeToolEnv(), policy, tokenizer, chat_template=stripping, history="append")


def test_rollout_batch_order_groups_and_one_generate_call_per_turn(kit, tokenizer):
    from tasks.task import Task

    tasks = [Task(id=f"t{i}", prompt=f"What is {i} * 7?", answer=str(7 * i), family="tool") for i in range(3)]
    made = []

    def make_env():
        made.append(kit.FakeToolEnv())
        return made[-1]

    policy = ScriptedPolicy([kit.TOOL_TURN, "\\boxed{7}"], tokenizer)
    batch = rollout_batch(
        make_env,
        policy,
        tokenizer,
        tasks,
        group_size=2,
        sampling=SamplingParams(),
        limits=RolloutLimits(),
        seed=0,
    )
    assert [t.group_id for t in batch] == [0, 0, 1, 1, 2, 2]
    assert [t.task_id for t in batch] == ["t0", "t0", "t1", "t1", "t2", "t2"]
    assert [t.reward for t in batch] == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert policy.calls == 2 and batch.stats.generate_calls == 2 and batch.stats.episodes == 6
    assert len(made) == 6 and all(env.closed for env in made)


def test_tools_overlap_across_episodes(kit, tokenizer):
    policy = ScriptedPolicy([kit.TOOL_TURN, kit.ANSWER_TURN], tokenizer)
    batch = rollout_batch(
        lambda: kit.FakeToolEnv(latency=0.3),
        policy,
        tokenizer,
        ["a"] * 8,
        group_size=1,
        sampling=SamplingParams(),
        limits=RolloutLimits(),
        max_workers=8,
    )
    assert all(t.reward == 1.0 for t in batch)
    assert batch.stats.tool_s < 0.3 * 8 / 2  # eight 0.3 s calls run side by side, not one after another
