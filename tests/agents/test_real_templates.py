"""Full tool episodes through the real Qwen3, Llama 3.1 and Mistral v3 chat templates (data/templates).

A scripted policy plays a real `TextEnv` with one `add` tool: exact ids, masks, log-probs and rewards;
templates that rewrite history become per-turn samples, and where the template is append-only the
per-turn mode gives exactly the samples cut from the append-only trajectory.
"""

import pytest

from agents import RolloutLimits, SamplingParams, ScriptedPolicy, TemplateError, rollout, split_turns
from agents.render import decode, encode
from envs import TextEnv
from tasks.task import Task

TASK = Task(id="add-2-3", prompt="What is 2 + 3?", answer="5", family="tool")
LOGPROB = -0.25


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First addend.
        b: Second addend.
    """
    return a + b


def _env(parser: str) -> TextEnv:
    return TextEnv(dataset=[TASK], tools=[add], system_prompt="Be brief.", parser=parser)


def _play(tok, turns, parser, *, history="auto", stops=(), **template_kwargs):
    policy = ScriptedPolicy(turns, tok, logprob=LOGPROB, lockstep=True)
    sampling = SamplingParams(max_tokens=256, stop_token_ids=(tok.eos_token_id, *stops))
    traj = rollout(_env(parser), policy, tok, options={"task": TASK}, sampling=sampling,
                   limits=RolloutLimits(max_response_tokens=4096), history=history,
                   chat_template_kwargs=template_kwargs or None)
    return traj, policy


def _first_prompt(tok, **template_kwargs) -> str:
    messages, info = _env("hermes").reset(options={"task": TASK})
    return tok.apply_chat_template(messages, tools=info["tools"], add_generation_prompt=True, tokenize=False,
                                   **template_kwargs)


def _rows(samples):
    return [(s.prompt_ids, s.response_ids, s.loss_mask, s.logprobs, s.turn_index, s.reward) for s in samples]


def _check_turns(traj, policy):
    """Every sample holds exactly one scripted turn's ids, all trained, with the engine's log-probs."""
    assert [s.response_ids for s in traj.samples] == policy.turns
    for k, sample in enumerate(traj.samples):
        n = len(policy.turns[k])
        assert sample.loss_mask == [1] * n and sample.logprobs == [LOGPROB] * n
        assert sample.turn_index == [k] * n
        assert sample.reward == traj.reward and sample.group_id == traj.group_id


# ---- Qwen3 ------------------------------------------------------------------------------------------
QWEN_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def test_qwen3_thinking_episode_is_append_only_and_per_turn_agrees(family_tokenizers):
    tok = family_tokenizers["qwen3"]
    turns = ["<think>\nI should add.\n</think>\n\n" + QWEN_CALL,
             "<think>\nThe tool says 5.\n</think>\n\nThe answer is \\boxed{5}."]
    traj, policy = _play(tok, turns, "qwen3")
    assert not traj.per_turn and (traj.reward, traj.num_turns, traj.metrics["tool_calls"]) == (1.0, 2, 1.0)
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    assert sampled == policy.turns[0] + policy.turns[1]
    assert decode(tok, traj.prompt_ids + traj.response_ids) + "\n" == tok.apply_chat_template(
        traj.messages, tools=_env("qwen3").tools.schemas, tokenize=False)
    per_turn, _ = _play(tok, turns, "qwen3", history="per_turn")
    assert per_turn.per_turn and _rows(per_turn.samples) == _rows(split_turns(traj))
    _check_turns(per_turn, policy)


@pytest.mark.parametrize("thinking", [False, True], ids=["enable_thinking=False", "skipped-reasoning"])
def test_qwen3_dropped_empty_think_block_becomes_per_turn_samples(family_tokenizers, thinking):
    tok = family_tokenizers["qwen3"]
    kwargs = {} if thinking else {"enable_thinking": False}
    empty = "<think>\n\n</think>\n\n" if thinking else ""  # the model skips reasoning / the prompt did
    traj, policy = _play(tok, [empty + QWEN_CALL, empty + "The answer is \\boxed{5}."], "qwen3", **kwargs)
    assert traj.per_turn and traj.reward == 1.0 and traj.metrics["tool_calls"] == 1.0
    _check_turns(traj, policy)
    p0 = _first_prompt(tok, **kwargs)
    assert traj.samples[0].prompt_ids == encode(tok, p0)
    # Turn 1 is prompted with the template's own rendering: the empty block of turn 0 is gone.
    history = (p0.removesuffix("<think>\n\n</think>\n\n") + QWEN_CALL + "<|im_end|>\n<|im_start|>user\n"
               "<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    history += "" if thinking else "<think>\n\n</think>\n\n"
    assert traj.samples[1].prompt_ids == encode(tok, history)
    assert traj.sampled_tokens == len(policy.turns[0]) + len(policy.turns[1])
    with pytest.raises(TemplateError, match="rewrote earlier turns"):
        _play(tok, [empty + QWEN_CALL, empty + "\\boxed{5}"], "qwen3", history="append", **kwargs)


def test_qwen3_call_inside_the_reasoning_is_not_run(family_tokenizers):
    tok = family_tokenizers["qwen3"]
    traj, _ = _play(tok, ["<think>\nMaybe " + QWEN_CALL + "? No: 5.\n</think>\n\n\\boxed{5}"], "qwen3")
    assert (traj.num_turns, traj.metrics["tool_calls"], traj.reward) == (1, 0.0, 1.0)


# ---- Llama 3.1 --------------------------------------------------------------------------------------
LLAMA_CALL = '{"name": "add", "parameters": {"a": 2, "b": 3}}'


def test_llama31_json_call_and_ipython_turn_are_append_only_and_per_turn_agrees(family_tokenizers):
    tok = family_tokenizers["llama3_1"]
    turns = [LLAMA_CALL, "The answer is \\boxed{5}."]
    traj, policy = _play(tok, turns, "llama3_json")
    assert not traj.per_turn and traj.reward == 1.0
    assert (traj.metrics["tool_calls"], traj.metrics["tool_errors"]) == (1, 0)
    injected = decode(tok, [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if not m])
    assert injected == '<|start_header_id|>ipython<|end_header_id|>\n\n"5"<|eot_id|>' \
                       "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert traj.prompt_ids == encode(tok, _first_prompt(tok))
    per_turn, _ = _play(tok, turns, "llama3_json", history="per_turn")
    assert _rows(per_turn.samples) == _rows(split_turns(traj))
    _check_turns(per_turn, policy)


def test_llama31_call_ended_by_eom_is_re_rendered_with_eot_so_per_turn(family_tokenizers):
    tok = family_tokenizers["llama3_1"]
    eom = tok.convert_tokens_to_ids("<|eom_id|>")
    turns = [LLAMA_CALL + "<|eom_id|>", "The answer is \\boxed{5}."]
    traj, policy = _play(tok, turns, "llama3_json", stops=(eom,))
    assert policy.turns[0][-2:] == [eom, tok.eos_token_id]        # the script; generation stops at eom
    assert traj.per_turn and traj.reward == 1.0 and traj.samples[0].response_ids[-1] == eom
    assert tok.decode(traj.samples[1].prompt_ids).endswith(
        LLAMA_CALL + '<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"5"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n")


# ---- Mistral v3 -------------------------------------------------------------------------------------
def _mistral_call(call_id: str | None) -> str:
    tail = f', "id": "{call_id}"' if call_id else ""
    return '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}' + tail + "}]"


def test_mistral_call_with_its_own_id_is_append_only(family_tokenizers):
    tok = family_tokenizers["mistral_v3"]
    traj, policy = _play(tok, [_mistral_call("a1b2c3d4e"), "The answer is \\boxed{5}."], "mistral")
    assert not traj.per_turn and traj.reward == 1.0 and traj.metrics["tool_calls"] == 1.0
    assert traj.messages[2]["tool_calls"][0]["id"] == traj.messages[3]["tool_call_id"] == "a1b2c3d4e"
    injected = decode(tok, [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if not m])
    assert injected == '[TOOL_RESULTS]{"content": 5, "call_id": "a1b2c3d4e"}[/TOOL_RESULTS]'
    per_turn, _ = _play(tok, [_mistral_call("a1b2c3d4e"), "The answer is \\boxed{5}."], "mistral",
                        history="per_turn")
    _check_turns(per_turn, policy)
    # Same samples, except that append-only encodes the tool result apart from its JSON glue
    # (`{"content": ` | `5` | ...) while the per-turn prompt is the whole text encoded at once.
    cut = split_turns(traj)
    assert _rows(per_turn.samples[:1]) == _rows(cut[:1])
    assert per_turn.samples[1].response_ids == cut[1].response_ids
    assert decode(tok, per_turn.samples[1].prompt_ids) == decode(tok, cut[1].prompt_ids)
    assert per_turn.samples[1].prompt_ids != cut[1].prompt_ids


def test_mistral_call_without_id_gets_a_9_character_id_and_per_turn_samples(family_tokenizers):
    tok = family_tokenizers["mistral_v3"]
    traj, policy = _play(tok, [_mistral_call(None), "The answer is \\boxed{5}."], "mistral")
    assert traj.per_turn and traj.reward == 1.0
    _check_turns(traj, policy)
    p0 = _first_prompt(tok)
    assert traj.samples[0].prompt_ids == encode(tok, p0)
    result = '[TOOL_RESULTS]{"content": 5, "call_id": "call00000"}[/TOOL_RESULTS]'
    assert traj.samples[1].prompt_ids == encode(tok, p0 + _mistral_call("call00000") + "</s>" + result)


# ---- every format: malformed calls are observations ---------------------------------------------------
@pytest.mark.parametrize(("family", "parser", "bad"), [
    ("qwen3", "qwen3", '<tool_call>\n{"name": "add", "arguments": {"a": 2,\n</tool_call>'),
    ("llama3_1", "llama3_json", '{"name": "add", "parameters": {"a": 2,'),
    ("mistral_v3", "mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2,'),
])
def test_malformed_call_is_an_observation_in_every_format(family_tokenizers, family, parser, bad):
    tok = family_tokenizers[family]
    traj, policy = _play(tok, [bad, "The answer is \\boxed{5}."], parser)
    assert (traj.metrics["tool_calls"], traj.metrics["tool_errors"], traj.reward) == (1.0, 1.0, 1.0)
    tool = next(m for m in traj.messages if m["role"] == "tool")
    assert tool["content"].startswith("Error: malformed tool call: invalid JSON")
    assert sum(row.loss_mask.count(1) for row in traj.rows()) == len(policy.turns[0]) + len(policy.turns[1])


def test_auto_parser_binds_to_the_template_format(family_tokenizers):
    tok = family_tokenizers["mistral_v3"]
    traj, _ = _play(tok, [_mistral_call("a1b2c3d4e"), "\\boxed{5}"], "auto")
    assert traj.metrics["tool_calls"] == 1.0 and traj.reward == 1.0
