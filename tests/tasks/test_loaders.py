import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tasks
from tasks import COT_SUFFIX, TaskFileError, load, save_jsonl

FIXTURES = pathlib.Path(tasks.__file__).with_name("data") / "fixtures"


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_our_jsonl_fixture():
    loaded = load(FIXTURES / "ours.jsonl")
    assert [t.id for t in loaded] == ["ours-1", "ours-2", "ours-3", "ours-4"]
    assert [t.family for t in loaded] == ["tool", "short_cot", "long_cot", "tool"]
    assert loaded[3].meta["grader"] == "countdown"


def test_gsm8k_fixture_takes_the_number_after_hashes():
    loaded = load(FIXTURES / "gsm8k.jsonl")
    assert len(loaded) == 8 and loaded[0].answer == "33" and loaded[0].id == "gsm8k-1"
    assert loaded[0].prompt.startswith("Mina has 3 boxes")
    assert "<<3*14=42>>" in loaded[0].meta["solution"]


def test_math_fixture_takes_the_last_boxed_answer():
    loaded = load(FIXTURES / "math.jsonl")
    assert [t.answer for t in loaded[:3]] == [r"\frac{5}{6}", "6", "(2,3)"]
    assert loaded[0].id == "fixture/prealgebra/1.json" and loaded[0].meta["level"] == "Level 1"


def test_verl_parquet_fixture():
    loaded = load(str(FIXTURES / "verl.parquet"))
    assert [t.answer for t in loaded] == ["55", "24", r"\frac{7}{8}", "9", "97"]
    assert loaded[0].prompt == "What is the sum of the first 10 positive integers?"   # suffix removed
    assert loaded[0].meta["chat"][0]["content"].endswith(COT_SUFFIX)
    assert loaded[0].meta["source"] == "Short_CoT" and loaded[0].id == "Short_CoT-0"


def test_verl_long_cot_source_sets_the_family(tmp_path):
    row = {"data_source": "DAPO-Math-17k-text-longcot", "prompt": [{"role": "user", "content": "Q?"}],
           "reward_model": {"ground_truth": "3"}}
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "x.parquet")
    assert load(tmp_path / "x.parquet")[0].family == "long_cot"


def test_hf_dataset_saved_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k.jsonl").read_text().splitlines()]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:5]),
                          "test": datasets.Dataset.from_list(rows[5:])}).save_to_disk(tmp_path / "dd")
    assert [t.answer for t in load(tmp_path / "dd")] == ["33", "615", "148", "110", "55"]
    assert len(load(tmp_path / "dd", split="test")) == 3
    with pytest.raises(TaskFileError, match=r"split 'dev' not found; pass split= one of \['train', 'test'\]"):
        load(tmp_path / "dd", split="dev")
    datasets.Dataset.from_list(rows[:2]).save_to_disk(tmp_path / "single")
    assert len(load(tmp_path / "single")) == 2


def test_round_trip_and_limit(tmp_path):
    original = load("countdown-eval", limit=5)
    save_jsonl(original, tmp_path / "cd.jsonl")
    again = load(tmp_path / "cd.jsonl")
    as_json = [{**t.to_dict(), "meta": {**t.meta, "numbers": list(t.meta["numbers"])}} for t in original]
    assert [t.to_dict() for t in again] == as_json
    assert len(load(tmp_path / "cd.jsonl", limit=2)) == 2


# ---- malformed files: the error names the file, the line or row, and the field -------------------

@pytest.mark.parametrize("rows, message", [
    ([{"prompt": "Q", "answer": "1"}, {"prompt": "Q2"}],
     r"bad\.jsonl:line 2: missing field 'answer' \(ours format\)"),
    ([{"prompt": "Q", "answer": "1"}, "{not json"], r"bad\.jsonl:line 2: not valid JSON"),
    ([{"prompt": "Q", "answer": ""}], r"bad\.jsonl:line 1: task 'bad-1': field 'answer' is empty"),
    ([{"prompt": "Q", "answer": "1", "family": "poetry"}], r"line 1: .*field 'family' is 'poetry'"),
    ([{"prompt": "Q", "answer": "1", "meta": [1]}], r"line 1: field 'meta' must be an object"),
    ([{"question": "Q", "answer": "no hashes"}], r"line 1: field 'answer' has no '#### <number>'"),
    ([{"question": "Q", "answer": "#### 3"}, {"question": "Q2"}],
     r"line 2: missing field 'answer' \(gsm8k format\)"),
    ([{"problem": "P", "solution": "no box"}], r"line 1: field 'solution' has no \\boxed"),
    ([{"problem": "P", "solution": r"\boxed{1}"}, {"problem": "P2"}],
     r"line 2: missing field 'solution' \(math"),
    ([[1, 2]], r"line 1: expected a JSON object, got list"),
])
def test_malformed_jsonl(tmp_path, rows, message):
    with pytest.raises(TaskFileError, match=message):
        load(_write_jsonl(tmp_path / "bad.jsonl", rows))


@pytest.mark.parametrize("row, message", [
    ({"reward_model": {"style": "rule"}},
     r"bad\.parquet:row 1: missing field 'reward_model\.ground_truth'"),
    ({"prompt": [{"role": "system", "content": "S"}]},
     r"bad\.parquet:row 1: field 'prompt' has no message with role 'user'"),
])
def test_malformed_verl_parquet(tmp_path, row, message):
    good = {"data_source": "s", "prompt": [{"role": "user", "content": "Q"}],
            "reward_model": {"style": "rule", "ground_truth": "1"}}
    row = {**good, **row}
    pq.write_table(pa.Table.from_pylist([good, row]), tmp_path / "bad.parquet")
    with pytest.raises(TaskFileError, match=message):
        load(tmp_path / "bad.parquet")


def test_parquet_missing_column_and_garbage_file(tmp_path):
    pq.write_table(pa.Table.from_pylist([{"question": "Q"}]), tmp_path / "q.parquet")
    message = r"q\.parquet:row 0: cannot tell the format from fields \['question'\]"
    with pytest.raises(TaskFileError, match=message):
        load(tmp_path / "q.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(TaskFileError, match=r"junk\.parquet: not a readable parquet file"):
        load(tmp_path / "junk.parquet")


def test_malformed_hf_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"problem": "P", "solution": r"\boxed{1}"}, {"problem": "P2", "solution": "x"}]
    datasets.Dataset.from_list(rows).save_to_disk(tmp_path / "hf")
    with pytest.raises(TaskFileError, match=r"hf:row 1: field 'solution' has no \\boxed"):
        load(tmp_path / "hf")


def test_other_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TaskFileError, match="no tasks"):
        load(tmp_path / "empty.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unknown task file type"):
        load(tmp_path / "x.csv")
    (tmp_path / "obj.json").write_text('{"prompt": "Q"}')
    with pytest.raises(TaskFileError, match="must hold a list"):
        load(tmp_path / "obj.json")
    with pytest.raises(ValueError, match="split='train' applies only"):
        load(FIXTURES / "ours.jsonl", split="train")
    with pytest.raises(ValueError, match="limit=-1"):
        load("countdown-eval", limit=-1)
