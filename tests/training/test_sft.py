"""`stare sft` / `stare demos`: demonstration files, exact masks, solver demos, micro-batching, resume."""

import json
import random

import pytest
import torch
from typer.testing import CliRunner

import training.commands.sft as sft_cmd
from agents.episode import RolloutLimits
from agents.trajectory import Segment
from tasks.countdown import countdown_splits
from tests.training.scripted_demos import make_demos
from training.cli import app
from training.preset import build_tiny_model, build_tokenizer, get_preset
from training.preset.solver import countdown_solver
from training.preset.warmstart import make_env_factory, rollout_limits
from training.sft.data import DemoFileError, check_record, dedupe, read_demos, write_demos
from training.sft.demos import find_solver, play_solver
from training.sft.encode import encode_demo, encode_demos
from training.sft.loop import SFTConfig, sft_loss, sft_step
from training.sft.run import SFTRun, run_sft
from training.sft.scratch import TinySpec

CALL = {"type": "function", "function": {"name": "code_interpreter", "arguments": '{"code": "print(1+2*3)"}'}}
RECORD = {
    "messages": [
        {"role": "user", "content": "Use 1 2 3 to make 7"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "7"},
        {"role": "assistant", "content": "\\boxed{1+2*3}"},
        {"role": "user", "content": "correct"},
    ]
}


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _pieces(tok, traj):
    return [
        (tok.decode([i]), m, s)
        for i, m, s in zip(traj.response_ids, traj.loss_mask, traj.segment, strict=True)
    ]


def test_loss_covers_exactly_the_assistant_tokens_and_their_eos(tok):
    traj = encode_demo(check_record(RECORD, "r"), tok)
    s, t, g = Segment.SAMPLED, Segment.TOOL, Segment.GLUE
    call = [
        "<tool_call>",
        '{"name": "code_interpreter", "arguments": {"code": "print(',
        "1",
        "+",
        "2",
        "*",
        "3",
        ')"}}',
        "</tool_call>",
        "<|im_end|>",
    ]
    glue_in = ["\n", "<|im_start|>", "user", "\n", "<tool_response>", "\n"]
    glue_out = ["\n", "</tool_response>", "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"]
    answer = ["\\boxed{", "1", "+", "2", "*", "3", "}", "<|im_end|>"]
    expected = (
        [(p, 1, s) for p in call]
        + [(p, 0, g) for p in glue_in]
        + [("7", 0, t)]
        + [(p, 0, g) for p in glue_out]
        + [(p, 1, s) for p in answer]
    )
    assert _pieces(tok, traj) == expected  # the trailing "correct" user turn is not trained
    assert (
        tok.decode(traj.prompt_ids)
        == "<|im_start|>user\nUse 1 2 3 to make 7<|im_end|>\n<|im_start|>assistant\n"
    )


def test_budgets_cut_like_a_rollout(tok):
    limits = RolloutLimits(max_turns=1, max_response_tokens=1000, max_tool_output_tokens=None)
    one = encode_demo(check_record(RECORD, "r"), tok, limits)
    assert sum(one.loss_mask) == 10 and len(one.response_ids) == 10 and one.num_turns == 1
    short = encode_demo(check_record(RECORD, "r"), tok, RolloutLimits(max_turns=4, max_response_tokens=6))
    assert short.loss_mask == [1] * 6 and short.finish_reason == "length"  # cut turn: no eos


def test_records_are_checked_and_files_round_trip(tmp_path, tok):
    with pytest.raises(DemoFileError, match="messages\\[1\\].role"):
        check_record({"messages": [{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}]}, "r")
    with pytest.raises(DemoFileError, match="no assistant message"):
        check_record({"messages": [{"role": "user", "content": "x"}]}, "r")
    demo = check_record(RECORD, "r")
    assert write_demos(tmp_path / "d.jsonl", [demo, demo]) == 2
    back = read_demos(tmp_path / "d.jsonl")
    assert len(dedupe(back)) == 1 and back[0].messages == demo.messages
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"messages": RECORD["messages"]}]), tmp_path / "d.parquet")
    from_parquet = encode_demo(read_demos(tmp_path / "d.parquet")[0], tok)
    assert from_parquet.response_ids == encode_demo(demo, tok).response_ids


def test_solver_demos_encode_to_the_ids_a_rollout_of_the_same_script_records(tok):
    settings = get_preset("cpu-tiny")
    tasks = list(countdown_splits()["train"][:12])
    make_env = make_env_factory(settings)
    env = make_env()

    def prompt(task):
        messages, _ = env.reset(options={"task": task})
        return list(
            tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )

    played, _ = make_demos(
        tasks,
        copies=1,
        make_env=make_env,
        tokenizer=tok,
        initial_prompt=prompt,
        limits=rollout_limits(settings),
        seed=0,
    )
    demos = play_solver(make_env, tasks, countdown_solver, copies=1, seed=0, max_turns=settings.max_turns)
    encoded = encode_demos(demos, tok, rollout_limits(settings))
    for a, b in zip(played, encoded, strict=True):
        assert (a.prompt_ids, a.response_ids, a.loss_mask, a.segment, a.reward) == (
            b.prompt_ids,
            b.response_ids,
            b.loss_mask,
            b.segment,
            b.reward,
        )
    with pytest.raises(LookupError, match="solve"):
        find_solver(object(), "acme/None-v0")


def test_micro_batches_accumulate_the_whole_batch_gradient(tok):
    demos = [
        encode_demo(check_record(RECORD, "r"), tok),
        encode_demo(check_record({"messages": RECORD["messages"][:2]}, "r"), tok),
    ]
    grads = []
    for budget in (0, 40):
        model = build_tiny_model(tok, hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        record = sft_step(
            model,
            opt,
            demos,
            SFTConfig(steps=2, batch_size=2, warmup_steps=0, micro_batch_tokens=budget, grad_clip=0),
            pad_id=0,
            lr=0.0,
        )
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        assert record["sft/micro_batches"] == (1 if budget == 0 else 2)
        expected = float(sft_loss(model, demos, pad_id=0).detach())
        assert record["sft/loss"] == pytest.approx(expected, rel=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def _units_demos(path):
    rng = random.Random(0)
    lines = []
    for i in range(12):
        v = rng.randint(1, 99)
        args = {"value": v, "from_unit": "km", "to_unit": "mi"}
        lines.append(
            {
                "messages": [
                    {"role": "user", "content": f"How many mi are {v} km?"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"type": "function", "function": {"name": "convert", "arguments": args}}
                        ],
                    },
                    {"role": "tool", "content": f"{v * 0.621371:.2f}"},
                    {"role": "assistant", "content": f"\\boxed{{{v * 0.621371:.2f}}}"},
                ],
                "task_id": f"u{i}",
                "reward": 1.0,
            }
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_resumed_run_ends_exactly_where_a_straight_run_does(tmp_path):
    demos = _units_demos(tmp_path / "demos.jsonl")
    cfg = SFTConfig(steps=4, batch_size=5, lr=3e-3, warmup_steps=1, micro_batch_tokens=256)

    def run(out, steps, resume=False):
        return run_sft(
            SFTRun(
                model="tiny",
                demos=(str(demos),),
                out=out,
                sft=cfg,
                save_every=2,
                progress=False,
                limits=RolloutLimits(max_turns=4, max_response_tokens=10**4),
                tiny=TinySpec(hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2),
            ),
            resume=resume,
        )

    straight = run(tmp_path / "a", 4)
    run(tmp_path / "b", 4)
    import shutil

    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step_000004")  # as if it died after step 2
    resumed = run(tmp_path / "b", 4, resume=True)
    assert resumed["loss_final"] == straight["loss_final"]
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(straight["model_dir"]).state_dict()
    b = AutoModelForCausalLM.from_pretrained(resumed["model_dir"]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert straight["loss_final"] < straight["loss_first"]


def test_a_failed_setup_writes_no_run_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        run_sft(
            SFTRun(
                model=str(tmp_path / "nope"),
                demos=(str(_units_demos(tmp_path / "d.jsonl")),),
                out=tmp_path / "run",
                progress=False,
            )
        )
    assert not (tmp_path / "run").exists()


def test_rejection_sampling_keeps_the_rewarded_episodes_without_world_failures(monkeypatch, tok):
    from agents.trajectory import Trajectory
    from training.sft import demos as gen

    def fake_rollout(make_env, policy, tokenizer, tasks, *, group_size, **kwargs):
        out = []
        for task in tasks:
            for j, (reward, failed) in enumerate(
                [(1.0, None), (0.0, None), (1.0, "SandboxDown")][:group_size]
            ):
                msgs = [
                    {"role": "user", "content": task.prompt},
                    {"role": "assistant", "content": f"\\boxed{{{j}}}"},
                    {"role": "user", "content": "ok"},
                ]
                out.append(
                    Trajectory(prompt_ids=[1], reward=reward, failed=failed, task_id=task.id, messages=msgs)
                )
        return out

    monkeypatch.setattr(gen, "rollout_batch", fake_rollout)
    tasks = list(countdown_splits()["train"][:2])
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2)
    kept, played = gen.sample_demos(
        make_env_factory(get_preset("cpu-tiny")),
        model,
        tok,
        tasks,
        k=3,
        sampling=None,
        limits=RolloutLimits(),
    )
    assert played == 6 and [d.task_id for d in kept] == [t.id for t in tasks]
    assert (
        kept[0].messages[-1] == {"role": "assistant", "content": "\\boxed{0}"} and kept[0].source == "policy"
    )


def test_sft_threads_option_sets_torch_threads_and_refuses_negatives(monkeypatch, tmp_path):
    seen = {}

    def fake_run(run, resume=False):
        seen["threads"] = torch.get_num_threads()
        return {"model_dir": "m", "demos": 0, "loss_first": 0.0, "loss_final": 0.0, "seconds": 0.0}

    monkeypatch.setattr(sft_cmd, "run_sft", fake_run)
    before = torch.get_num_threads()
    try:
        args = ["sft", "tiny", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "o")]
        result = CliRunner().invoke(app, [*args, "--threads", "1"])
        assert result.exit_code == 0, result.output
        assert seen["threads"] == 1
        bad = CliRunner().invoke(app, [*args, "--threads", "-1"])
        assert bad.exit_code == 2 and "--threads" in bad.output
    finally:
        torch.set_num_threads(before)
