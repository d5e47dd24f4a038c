import collections
import math

import pytest

import tasks
from tasks import generate_split, grade, list_datasets, load, register_dataset
from tasks.generators import FAMILY_GENERATORS

OPTIONAL = {"gsm-symbolic-train", "gsm-symbolic-eval", "champ-eval"}


@pytest.mark.parametrize("info", [d for d in list_datasets() if d.name not in OPTIONAL], ids=lambda d: d.name)
def test_every_shipped_set_loads_with_its_declared_size_and_family(info):
    loaded = load(info.name)
    assert len(loaded) == info.size
    assert {t.family for t in loaded} == {info.family}
    assert len({t.id for t in loaded}) == len(loaded)                 # ids unique


@pytest.mark.parametrize("name", ["arith-tool", "word-short", "word-long"])
def test_generated_splits_are_disjoint_and_deterministic(name):
    train, evaluation = load(name, split="train"), load(name, split="eval")
    assert not {t.prompt for t in train} & {t.prompt for t in evaluation}
    family, sizes, _ = tasks.catalog.GENERATED[name]
    again = generate_split(family, "eval", sizes, prefix=name)
    assert [t.to_dict() for t in again] == [t.to_dict() for t in evaluation]
    # the eval split does not depend on the size of the train split cut after it
    shorter = generate_split(family, "eval", {"eval": sizes["eval"], "train": 3}, prefix=name)
    assert [t.prompt for t in shorter] == [t.prompt for t in evaluation]
    assert generate_split(family, "eval", sizes, seed=1, prefix=name)[0].prompt != evaluation[0].prompt


def test_tool_family_covers_every_kind_at_every_level():
    loaded = load("arith-tool-train")
    kinds = collections.Counter((t.meta["kind"], t.meta["difficulty"]) for t in loaded)
    assert len(kinds) == len(FAMILY_GENERATORS["tool"]) * 3


@pytest.mark.parametrize("name, index, answer", [
    ("arith-tool-eval", 0, str(185 * 385)),
])
def test_generated_answer_is_exact(name, index, answer):
    task = load(name)[index]
    assert task.prompt == "What is 185 × 385?" and task.answer == answer


def test_hand_checked_generated_answers():
    by_kind = {t.meta["kind"]: t for t in load("arith-tool-train")}
    base = by_kind["base_conversion"]
    number = int(base.prompt.split("decimal number ")[1].split(" ")[0])
    radix = int(base.prompt.split("in base ")[1].split(" ")[0])
    assert int(base.answer, radix) == number
    gcd = by_kind["gcd"]
    a, c = (int(x) for x in gcd.prompt.rstrip("?").split("of ")[1].split(" and "))
    assert int(gcd.answer) == math.gcd(a, c)


def test_long_cot_fraction_answers_grade_against_decimals():
    task = next(t for t in load("word-long-train") if t.meta["kind"] == "dice")
    num, den = (int(x) for x in task.answer[len(r"\frac{"):-1].split("}{"))
    assert grade(rf"\boxed{{{num / den:.12f}}}", task.answer).correct        # within math-verify rounding
    assert grade(rf"\boxed{{{num / den:.3f}}}", task.answer).status == "wrong"
    assert grade(rf"\boxed{{\dfrac{{{num}}}{{{den}}}}}", task.answer).correct


def test_register_dataset_and_unknown_names():
    register_dataset("tmp-test-set", lambda: [tasks.Task(id="a", prompt="p", answer="1")],
                     description="x", size=1)
    assert load("tmp-test-set")[0].id == "a"
    assert "tmp-test-set" in {d.name for d in list_datasets()}
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("tmp-test-set", list, description="x")
    with pytest.raises(KeyError, match="did you mean 'countdown-eval'"):
        load("countdown-evl")
    with pytest.raises(KeyError, match="countdown-dev"):
        load("countdown", split="dev")
