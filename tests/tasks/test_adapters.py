import importlib.util

import pytest

import tasks
from tasks.adapters import MissingExtraError, require

HAS_RG = importlib.util.find_spec("reasoning_gym") is not None
HAS_CHAMP = importlib.util.find_spec("champ_dataset") is not None


def test_missing_extra_names_the_extra():
    with pytest.raises(MissingExtraError, match=r"pip install 'stare-gym\[champ\]'"):
        require("no_such_module_xyz", "champ", "champ-dataset")


@pytest.mark.skipif(not HAS_RG, reason="optional extra [reasoning-gym] not installed")
def test_gsm_symbolic_splits_are_disjoint_and_gradable():
    evaluation, train = tasks.load("gsm-symbolic-eval"), tasks.load("gsm-symbolic-train")
    assert len(evaluation) == 200 and 900 < len(train) <= 1000
    assert not {t.prompt for t in evaluation} & {t.prompt for t in train}
    assert evaluation[0].meta["source"] == "reasoning-gym:gsm_symbolic"
    assert all(tasks.grade(rf"\boxed{{{t.answer}}}", t.answer).correct for t in evaluation[:20])
    assert [t.to_dict() for t in tasks.reasoning_gym_tasks("chain_sum", size=3, seed=5)] == \
        [t.to_dict() for t in tasks.reasoning_gym_tasks("chain_sum", size=3, seed=5)]


@pytest.mark.skipif(not HAS_CHAMP, reason="optional extra [champ] not installed")
def test_champ_eval_set():
    loaded = tasks.load("champ-eval")
    assert len(loaded) == 270 and {t.family for t in loaded} == {"long_cot"}
    assert collections_count(t.meta["category"] for t in loaded)["Number-Theory"] == 80


def collections_count(items):
    import collections

    return collections.Counter(items)
