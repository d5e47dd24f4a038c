import time

import pytest

from tasks.extract import MAX_BOX_CHARS, answer_region, clean_prediction, extract_answer, last_boxed


@pytest.mark.parametrize("text, expected", [
    (r"so \boxed{5}", "5"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\left\{1, 2\right\}}", r"\left\{1, 2\right\}"),
    (r"a \boxed{3} then b \boxed{4}", "4"),                 # several boxes: the last one
    (r"draft \boxed{3}. Final: \boxed{\sqrt{2}}", r"\sqrt{2}"),
    (r"\fbox{7}", "7"),
    (r"\boxed 12 apples", "12"),
    (r"\boxed{}", ""),
    ("no box here", None),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_an_unclosed_last_box_falls_back_to_the_previous_complete_one():
    assert last_boxed(r"\boxed{1} and then \boxed{2") == "1"


def test_answer_region_follows_the_reference_order():
    assert answer_region("a <answer>x</answer> b <answer>y</answer>") == "y"
    assert answer_region(r"<think>\boxed{1}</think> \boxed{2}") == r" \boxed{2}"
    assert answer_region("<|begin_of_solution|>42<|end_of_solution|>") == "42"


def test_boxed_answer_inside_think_draft_is_ignored_after_think_ends():
    found = extract_answer(r"<think>maybe \boxed{3}</think>The answer is \boxed{5}.")
    assert found.prediction == "5"


@pytest.mark.parametrize("text, prediction", [
    ("Work...\nFinal Answer: 17", "17"),
    ("**Answer**: $\\frac{3}{4}$.", "\\frac{3}{4}"),
    ("Answer: 12\nbecause ...", "12"),
    ("Final Answer: The final answer is $\\boxed{9}$. I hope it is correct.", "9"),
])
def test_marker_fallbacks(text, prediction):
    assert extract_answer(text).prediction == prediction


def test_empty_box_is_no_answer():
    found = extract_answer(r"I think \boxed{}")
    assert found.prediction is None and found.candidate is None


def test_without_box_or_marker_the_tail_goes_to_the_verifier():
    found = extract_answer("blah " * 200 + "so it is 42")
    assert found.prediction is None
    assert len(found.candidate) == 300 and found.candidate.endswith("so it is 42")


def test_clean_prediction():
    assert clean_prediction(" $5$. ") == "5"
    assert clean_prediction(r"\(x+1\)") == "x+1"
    assert clean_prediction("3...") == "3..."


def test_million_character_output_is_fast():
    text = "x{" * 500_000 + r"\boxed{7}"             # 10^6 characters of unbalanced braces
    start = time.perf_counter()
    assert extract_answer(text).prediction == "7"
    many_unclosed = r"\boxed{" * 150_000 + "a" * 10
    assert last_boxed(many_unclosed) is None
    assert time.perf_counter() - start < 2.0


def test_box_longer_than_the_cap_is_not_an_answer():
    assert last_boxed(r"\boxed{" + "1" * (MAX_BOX_CHARS + 5) + "}") is None
