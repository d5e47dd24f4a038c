"""The no-signal alarm: measured share of groups with advantage, the cause, the warning and the verdict."""

import pytest

from agents.trajectory import Trajectory
from training.alarm import CAUSES, NoSignalAlarm, diagnose, signal_share


def ep(reward=0.0, group=0, finish="stop", grade="wrong", tool_errors=0.0, text="x"):
    return Trajectory(prompt_ids=[1], reward=reward, group_id=group, finish_reason=finish, grade_status=grade,
                      metrics={"tool_errors": tool_errors},
                      messages=[{"role": "user", "content": "Q?"}, {"role": "assistant", "content": text}])


def test_signal_share_counts_groups_whose_rewards_differ():
    kept = [ep(1, 0), ep(0, 0), ep(0, 1), ep(0, 1), ep(1, 2), ep(1, 2)]
    assert signal_share(kept, prompts=4) == pytest.approx(1 / 4)   # only group 0 varies; 4 prompts asked


@pytest.mark.parametrize(("episodes", "cause"), [
    ([ep(1), ep(1)], "too_easy"),
    ([ep(finish="length"), ep(finish="length"), ep()], "truncated"),
    ([ep(grade="no_answer"), ep(grade=""), ep()], "wrong_format"),
    ([ep(tool_errors=1), ep(tool_errors=2), ep()], "tool_errors"),
    ([ep(), ep(), ep(finish="length")], "too_hard"),
    ([ep(1, 0), ep(1, 0), ep(0, 1), ep(0, 1)], "mixed"),
    ([ep(1)] + [ep(tool_errors=1)] * 30, "tool_errors"),      # 1 of 31 solved counts as none
])
def test_the_cause_is_measured_from_the_episodes(episodes, cause):
    assert diagnose(episodes) == cause


def test_warns_once_after_patience_weak_steps_with_a_failing_episode_and_ends_with_a_verdict():
    said = []
    alarm = NoSignalAlarm(prompts=2, total_steps=5, patience=3, echo=said.append)
    dead = [ep(text="I give up"), ep(text="no idea")]
    for step in (1, 2):
        metrics = alarm.observe(step, [], dead, groups_kept=0)
        assert not said and metrics["alarm/no_signal_steps"] == step
    metrics = alarm.observe(3, [], dead, groups_kept=0)
    assert metrics["alarm/cause"] == CAUSES.index("too_hard") and metrics["alarm/signal_share"] == 0.0
    assert len(said) == 1 and "too_hard" in said[0] and "I give up" in said[0] and "0% of groups" in said[0]
    alarm.observe(4, [], dead, groups_kept=0)
    assert len(said) == 1                               # one warning per streak
    alarm.observe(5, [], dead, groups_kept=0)
    assert len(said) == 2 and "VERDICT" in said[1] and "no update in 5 step(s)" in said[1]


def test_a_step_with_enough_signal_resets_the_streak_and_no_verdict_after_an_update():
    said = []
    alarm = NoSignalAlarm(prompts=2, total_steps=3, patience=2, echo=said.append)
    alarm.observe(1, [], [ep()], groups_kept=0)
    good = alarm.observe(2, [ep(1, 0), ep(0, 0)], [ep(1, 0), ep(0, 0)], groups_kept=1)
    assert good["alarm/signal_share"] == 0.5 and good["alarm/no_signal_steps"] == 0 and not said
    alarm.observe(3, [], [ep()], groups_kept=0)
    assert not said


def test_a_trainer_run_without_reward_logs_the_alarm_and_ends_with_the_verdict(make_cfg, capsys):
    import json

    from training.trainer import train
    cfg = make_cfg("algo=dapo", "train.steps=3", "algo.max_gen_rounds=1")
    train(cfg)   # a random model never answers Countdown: no group ever has signal
    records = [json.loads(line) for line in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["alarm/no_signal_steps"] for r in records] == [1, 2, 3]
    assert all(r["alarm/signal_share"] == 0.0 for r in records)
    err = capsys.readouterr().err
    assert "[no signal] step 3" in err and "one failing episode" in err and "VERDICT" in err
