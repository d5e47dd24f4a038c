"""`Trajectory.is_correct` / `is_verifier_failure`: the one reading of the grade status."""

from agents.trajectory import Trajectory


def test_is_correct_reads_the_grade_and_falls_back_to_the_reward_without_one():
    def traj(status, reward):
        return Trajectory(prompt_ids=[1], grade_status=status, reward=reward)
    assert traj("correct", 0.0).is_correct                 # the grade wins over a penalised reward
    assert not traj("wrong", 1.0).is_correct               # ... and over shaping
    assert traj("", 0.5).is_correct and not traj("", 0.0).is_correct   # no grade: reward > 0


def test_is_verifier_failure_is_a_timeout_or_a_crash_only():
    statuses = ["correct", "wrong", "no_answer", "verifier_timeout", "verifier_error", ""]
    failing = [s for s in statuses if Trajectory(prompt_ids=[1], grade_status=s).is_verifier_failure]
    assert failing == ["verifier_timeout", "verifier_error"]
