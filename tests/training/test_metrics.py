"""Episode statistics, reflection words, and the JSONL / TensorBoard sinks."""

from __future__ import annotations

import json

from agents.trajectory import Trajectory
from training.metrics import MetricsLogger, episode_metrics, reflection_count


def _traj(text, *, reward, mask, tools=0, errors=0, status=""):
    return Trajectory(prompt_ids=[1], response_ids=list(range(len(mask))), loss_mask=mask, reward=reward,
                      num_turns=1 + tools, grade_status=status,
                      messages=[{"role": "user", "content": "Wait, check this"}, {"role": "assistant",
                                                                                  "content": text},
                                {"role": "tool", "content": "but however wait"}],
                      metrics={"tool_calls": tools, "tool_errors": errors})


def test_reflection_words_are_whole_words_case_insensitive():
    assert reflection_count("Wait... however, let me VERIFY and check. But waiting/checked do not count") == 5
    assert reflection_count("") == 0


def test_episode_metrics_by_hand():
    trajs = [_traj("wait, 3*4", reward=1.0, mask=[1, 1, 0, 0, 1], tools=2, errors=1, status="correct"),
             _traj("no", reward=0.0, mask=[1, 1, 1], status="wrong")]
    m = episode_metrics(trajs)
    assert m["train/reward"] == 0.5 and m["train/acc"] == 0.5
    assert m["train/response_length"] == 3.0      # sampled tokens only: (3 + 3) / 2
    assert m["train/total_length"] == 4.0         # with tool tokens: (5 + 3) / 2
    assert m["train/tool_calls"] == 1.0 and m["train/tool_errors"] == 0.5
    assert m["train/reflection_words"] == 0.5     # only assistant text counts (user/tool text ignored)
    assert m["train/turns"] == 2.0


def test_logger_writes_jsonl_and_tensorboard_and_truncates_on_resume(tmp_path):
    log = MetricsLogger(tmp_path, total_steps=3, tensorboard=True, progress=False)
    for step in (1, 2, 3):
        log.log({"step": step, "train/reward": step / 10, "train/entropy": float("nan")})
    log.log({"step": 3, "eval/x/avg@4": 0.5}, kind="eval")
    log.close()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and records[1]["train/reward"] == 0.2
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    # a resume from step 2 drops the records of the lost step 3 before appending
    MetricsLogger(tmp_path, total_steps=3, tensorboard=False, progress=False, start_step=2).close()
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (tmp_path / "eval.jsonl").read_text() == ""


def test_progress_bar_runs(tmp_path):
    log = MetricsLogger(tmp_path, total_steps=2, tensorboard=False, progress=True)
    log.log({"step": 1, "train/acc": 0.5, "train/entropy": 0.3, "stare/gate_on": 1.0})
    log.close()
