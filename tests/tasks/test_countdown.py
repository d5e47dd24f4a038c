import collections

import pytest

from tasks import countdown_candidates, countdown_solutions, evaluate_expression, grade_countdown, load
from tasks.countdown import HARD_MAX_SOLUTIONS, countdown_splits


def test_candidate_counts():
    # distinct numbers: 6 ordered pairs x 3 ops + 6 orders x 9 op pairs x 3 forms = 18 + 162
    assert len(countdown_candidates([3, 5, 7])) == 180
    assert len(set(countdown_candidates([3, 5, 7]))) == 180
    assert len(countdown_candidates([3, 3, 7])) == 90      # swapping the two 3s gives the same string
    assert len(countdown_candidates([3, 3, 3])) == 30
    assert {"3+5", "3*5-7", "(3+5)*7", "3*(5+7)", "7-5"} <= set(countdown_candidates([3, 5, 7]))


def test_every_candidate_value_matches_the_safe_parser():
    for numbers in ([3, 5, 7], [9, 1, 9], [2, 2, 2]):
        for expr in countdown_candidates(numbers):
            value, literals = evaluate_expression(expr)
            assert collections.Counter(literals) <= collections.Counter(numbers)
            assert expr in countdown_solutions(numbers, value)


def test_solutions_hand_counted():
    # 22 from 3 5 7 only as 3*5+7: both factor orders x both sides of + x with/without brackets = 8
    expected = ["3*5+7", "5*3+7", "7+3*5", "7+5*3", "(3*5)+7", "(5*3)+7", "7+(3*5)", "7+(5*3)"]
    assert sorted(countdown_solutions([3, 5, 7], 22)) == sorted(expected)
    # 56 = (3+5)*7 needs brackets: 4 strings, a "hard" puzzle
    assert sorted(countdown_solutions([3, 5, 7], 56)) == sorted(["(3+5)*7", "(5+3)*7", "7*(3+5)", "7*(5+3)"])


@pytest.mark.parametrize("expr, value", [
    ("1+2*3", 7), ("(1+2)*3", 9), ("10-4-3", 3), ("2*(3-(4+1))", -4), ("3 \\times 4", 12), ("$2\\cdot5$", 10),
])
def test_safe_parser_values(expr, value):
    assert evaluate_expression(expr)[0] == value


@pytest.mark.parametrize("expr", [
    "", "1+", "(1+2", "1+2)", "-1+2", "2/1", "2**3", "__import__('os')", "1 2", "03+1",
    "((((" * 30 + "1" + "))))" * 30,
    "9" * 300,
])
def test_safe_parser_rejects(expr):
    with pytest.raises((ValueError, RecursionError)):
        evaluate_expression(expr)


@pytest.mark.parametrize("response, status", [
    (r"I try 3*5+7 ... \boxed{3*5+7}", "correct"),
    (r"\boxed{7+5*3}", "correct"),
    (r"\boxed{(3+5)*7}", "wrong"),           # 56, not 22
    (r"\boxed{3*5+7+0}", "wrong"),          # 0 is not a given number
    (r"\boxed{35-13}", "wrong"),            # concatenating 3 and 5 is not allowed
    (r"\boxed{3*5+7*1}", "wrong"),
    (r"\boxed{7+7+5+3}", "wrong"),          # 7 used twice
    (r"\boxed{22}", "wrong"),
    (r"\boxed{3*5 + seven}", "wrong"),
    (r"\boxed{}", "no_answer"),
    ("3*5+7", "no_answer"),
])
def test_countdown_grader_multiset_rule(response, status):
    assert grade_countdown(response, [3, 5, 7], 22).status == status


def test_repeated_numbers_may_each_be_used_once():
    assert grade_countdown(r"\boxed{7*7-4}", [4, 7, 7], 45).correct
    assert not grade_countdown(r"\boxed{7*7-4}", [4, 7, 1], 45).correct


def test_splits_are_deterministic_sized_and_balanced():
    splits = countdown_splits(0)
    assert {k: len(v) for k, v in splits.items()} == {"eval": 256, "eval-hard": 128, "train": 615}
    assert [t.to_dict() for t in splits["eval"]] == [t.to_dict() for t in load("countdown-eval")]
    assert countdown_splits(1)["eval"][0] != splits["eval"][0]
    for name, tasks in splits.items():
        kinds = collections.Counter(t.meta["difficulty"] for t in tasks)
        expected = {"eval-hard": {"hard": 128}, "eval": {"hard": 128, "easy": 128},
                    "train": {"hard": 154, "easy": 461}}[name]
        assert kinds == expected


def test_splits_are_disjoint_by_numbers_and_target():
    keys = {name: {(tuple(sorted(t.meta["numbers"])), t.meta["target"]) for t in tasks}
            for name, tasks in countdown_splits(0).items()}
    assert sum(len(k) for k in keys.values()) == 256 + 128 + 615       # no duplicates inside a split
    assert not keys["train"] & keys["eval"] and not keys["train"] & keys["eval-hard"]
    assert not keys["eval"] & keys["eval-hard"]


def test_task_fields_match_their_definition():
    for task in countdown_splits(0)["eval"][:64]:
        numbers, target = task.meta["numbers"], task.meta["target"]
        assert len(numbers) == 3 and all(1 <= n <= 9 for n in numbers) and 10 <= target <= 99
        assert task.prompt == f"Use {' '.join(map(str, numbers))} to make {target}"
        n = len(countdown_solutions(numbers, target))
        assert task.meta["n_solutions"] == n >= 1
        assert task.meta["difficulty"] == ("hard" if n <= HARD_MAX_SOLUTIONS else "easy")
        assert task.family == "tool" and task.meta["grader"] == "countdown"
        assert grade_countdown(rf"\boxed{{{task.answer}}}", numbers, target).correct
        # the target comes from an expression that uses all three numbers
        assert any(len(evaluate_expression(e)[1]) == 3 for e in countdown_solutions(numbers, target))
