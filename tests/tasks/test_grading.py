import threading

import pytest

from tasks import Task, grade, grade_many, grade_task, grade_tasks
from tasks.grading import fast_verdict


@pytest.mark.parametrize("response, answer", [
    (r"\boxed{0.5}", r"\frac{1}{2}"),
    (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\frac34}", r"75\%"),
    (r"\boxed{5 \text{ cm}}", "5"),
    (r"\boxed{(1,2]}", r"(1,2]"),
    (r"\boxed{(1, 2)}", "(1,2)"),
    (r"\boxed{\frac{\sqrt{2}}{2}}", r"\sqrt{2}/2"),
    (r"\boxed{(x+1)^2}", "x^2+2x+1"),
    (r"\boxed{x=3}", "3"),
    (r"\boxed{1,000}", "1000"),
    (r"\boxed{3.0}", "3"),
    (r"\boxed{\{1,2,3,4\}}", r"\{1,3\}\cup\{2,4\}"),
])
def test_equivalent_forms_are_correct(response, answer):
    g = grade("Reasoning...\n" + response, answer)
    assert (g.status, g.correct) == ("correct", True), g


@pytest.mark.parametrize("response, answer", [
    (r"\boxed{205}", "204"),
    (r"\boxed{[1,2)}", "(1,2)"),
    (r"\boxed{\frac{1}{3}}", "0.5"),
    (r"\boxed{(2,1)}", "(1,2)"),
])
def test_different_answers_are_wrong(response, answer):
    g = grade(response, answer)
    assert (g.status, g.correct, g.reward) == ("wrong", False, 0.0), g


def test_several_boxes_grade_the_last_one():
    assert grade(r"First \boxed{3}, no wait, \boxed{4}.", "4").correct
    assert not grade(r"First \boxed{4}, no wait, \boxed{3}.", "4").correct


def test_empty_box_and_no_text_are_no_answer():
    assert grade(r"\boxed{}", "1").status == "no_answer"
    assert grade("", "1").status == "no_answer"
    assert grade("I do not know.", "1").status == "no_answer"


def test_unparseable_explicit_answer_is_wrong_not_no_answer():
    g = grade(r"\boxed{banana}", "7")
    assert g.status == "wrong" and g.prediction == "banana"


def test_answer_without_box_found_in_the_tail():
    g = grade("So the total is 42.", "42")
    assert g.correct and g.prediction == "42"


def test_million_character_output_is_graded():
    g = grade("la " * 333_333 + r"\boxed{12}", "12")
    assert g.correct


def test_fast_verdict_decides_only_plain_cases():
    assert fast_verdict("1,000", "1000") == "correct"
    assert fast_verdict(r"\dfrac{1}{2}", r"\frac{1}{2}") == "correct"
    assert fast_verdict("7", "8") == "wrong"
    assert fast_verdict("0.75", r"75\%") is None             # needs math-verify
    assert fast_verdict("0.333", "0.3333") is None           # decimals may round: math-verify decides


def test_grade_many_keeps_order_and_lengths():
    texts = [r"\boxed{1}", r"\boxed{0.5}", "nothing", r"\boxed{2}"]
    answers = ["1", r"\frac12", "3", "3"]
    statuses = [g.status for g in grade_many(texts, answers)]
    assert statuses == ["correct", "correct", "no_answer", "wrong"]
    with pytest.raises(ValueError, match="2 texts but 1 answers"):
        grade_many(["a", "b"], ["1"])


def test_grading_from_worker_threads():
    results = {}

    def work(i):
        texts = [rf"\boxed{{\frac{{{i}}}{{2}}}}", rf"\boxed{{{i}}}"]
        results[i] = grade_many(texts, [str(i / 2), str(i + 1)])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == list(range(1, 7))
    for grades in results.values():
        assert [g.status for g in grades] == ["correct", "wrong"]


def test_grade_task_dispatches_on_meta_grader():
    math_task = Task(id="m", prompt="1/2?", answer=r"\frac{1}{2}")
    countdown = Task(id="c", prompt="Use 2 3 4 to make 20", answer="(2+3)*4", family="tool",
                     meta={"grader": "countdown", "numbers": [2, 3, 4], "target": 20})
    assert grade_task(r"\boxed{0.5}", math_task).correct
    assert grade_task(r"\boxed{4*(3+2)}", countdown).correct
    assert grade_task(r"\boxed{20}", countdown).status == "wrong"     # 20 is not one of the numbers
    grades = grade_tasks([r"\boxed{4*(2+3)}", r"\boxed{0.5}"], [countdown, math_task])
    assert [g.correct for g in grades] == [True, True]
    bad = Task(id="b", prompt="p", answer="a", meta={"grader": "chess"})
    with pytest.raises(ValueError, match="known graders"):
        grade_task("x", bad)


@pytest.mark.parametrize("prediction, answer, verdict", [
    (r"\dfrac{117}{382}", "117/382", "correct"),
    ("0.5", "1/2", "correct"),
    (r"-\frac{3}{4}", "-0.75", "correct"),
    (r"\frac{2}{4}", r"\frac{1}{2}", "correct"),
    (r"\frac{1}{3}", "0.5", None),            # unequal non-integers: math-verify decides
    (r"\frac{1}{0}", "1", None),
])
def test_fast_verdict_on_integer_fractions(prediction, answer, verdict):
    assert fast_verdict(prediction, answer) == verdict
