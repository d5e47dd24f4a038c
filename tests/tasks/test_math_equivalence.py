"""Math equivalence decisions on a shared list of cases: ours ("default", "authors" modes) vs the authors'.

`data/math_equivalence.json` holds, per case, the reference answer, a boxed prediction, the STARE
authors' decision (`authors`: math-verify on the answer text OR on the bare boxed content OR mathruler
0.1.0's `grade_answer`, as their `math_stare.compute_score_answer`) and our default mode's decision.
The stored decisions let the tests run without mathruler; with it installed, the authors' column is
recomputed from math-verify and mathruler themselves.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from tasks import grade_many
from tasks.grading import check_math_mode, task_grader

CASES = json.loads((pathlib.Path(__file__).parent / "data" / "math_equivalence.json").read_text())
IDS = [c["what"] for c in CASES]
needs_mathruler = pytest.mark.skipif(importlib.util.find_spec("mathruler") is None,
                                     reason="needs mathruler: pip install mathruler==0.1.0 pylatexenc")


def _responses() -> list[str]:
    return ["Reasoning...\n\\boxed{" + c["prediction"] + "}" for c in CASES]


@pytest.fixture(scope="module")
def default_grades():
    return grade_many(_responses(), [c["answer"] for c in CASES])


@pytest.fixture(scope="module")
def authors_grades():
    return grade_many(_responses(), [c["answer"] for c in CASES], mode="authors")


def _authors_reference(answer: str, prediction: str) -> bool:
    """The authors' three checks, written from their reward function, on the boxed content."""
    from math_verify import parse, verify
    from mathruler.grader import grade_answer

    def math_verify_check(text: str) -> bool:
        parsed = parse(text)
        return len(parsed) >= 2 and (any(str(p) == answer for p in parsed)
                                     or bool(verify(parse("\\boxed{" + answer + "}"), parsed)))

    return (math_verify_check("\\boxed{" + prediction + "}") or math_verify_check(prediction)
            or grade_answer(prediction, answer))


def test_the_list_is_broad_and_has_both_verdicts():
    assert len(CASES) >= 40
    assert {c["authors"] for c in CASES} == {True, False}
    assert len({c["what"] for c in CASES}) == len(CASES)


@needs_mathruler
@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_stored_authors_decision_is_what_their_checks_say(i):
    case = CASES[i]
    assert _authors_reference(case["answer"], case["prediction"]) == case["authors"], case


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_default_mode_decisions(default_grades, i):
    assert default_grades[i].correct == CASES[i]["default"], (CASES[i], default_grades[i])
    assert default_grades[i].status in ("correct", "wrong")


@needs_mathruler
@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_authors_mode_matches_the_authors(authors_grades, i):
    assert authors_grades[i].correct == CASES[i]["authors"], (CASES[i], authors_grades[i])
    assert authors_grades[i].status in ("correct", "wrong")


def test_the_modes_differ_only_where_mathruler_or_the_bare_box_accepts():
    """docs/tasks.md lists these: the default mode is stricter on exactly these cases."""
    differ = {c["prediction"] for c in CASES if c["authors"] != c["default"]}
    assert differ == {"10 dollars", "1.5e3", r"\frac{31}{4}"}
    assert all(c["authors"] for c in CASES if c["prediction"] in differ)


@needs_mathruler
def test_authors_mode_hang_is_a_timeout_not_wrong(hook_pool):
    from tasks.verify_worker import HANG_CANDIDATE

    results = hook_pool.verify([("1", HANG_CANDIDATE, "1"), ("1500", r"\boxed{1.5e3}", "1.5e3")], timeout=1.0)
    assert results == [("verifier_timeout", None), ("correct", "1.5e3")]


def test_bad_mode_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="'default', 'authors'"):
        check_math_mode("strict")
    with pytest.raises(ValueError, match="math grading mode 'strict'"):
        task_grader("strict")


def test_authors_mode_without_mathruler_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mathruler" else real(name, *a))
    with pytest.raises(ImportError, match="pip install mathruler==0.1.0"):
        grade_many([r"\boxed{1}"], ["1"], mode="authors")
