"""The shared JSON Lines reader behind bench runs (metrics.jsonl) and SFT demonstrations."""

import pytest

from training.bench.runs import read_jsonl
from training.jsonl import jsonl_lines
from training.sft.data import DemoFileError, read_demos


def test_lines_are_numbered_from_one_and_blank_lines_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n\n  \n[2, 3]\n')
    assert list(jsonl_lines(path)) == [(1, {"step": 1}), (4, [2, 3])]


def test_a_bad_line_is_named_with_file_and_line_in_both_readers(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('\n{oops\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        read_jsonl(path)
    with pytest.raises(DemoFileError, match=r"bad\.jsonl:2: not valid JSON"):
        read_demos(path)
