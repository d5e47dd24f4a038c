"""Smoke test of benchmarks/bench_stare.py on a tiny shape: runs, agrees with the reference, counts syncs."""

import importlib.util
import pathlib

import torch

from stare import token_weights_with_stats

PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "bench_stare.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_stare", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_baselines_give_the_same_weights_and_the_row_reports_one_sync_against_ten():
    bench = _load()
    lp, adv, mask = bench.make_batch(4, 256, device="cpu")
    ours, _ = token_weights_with_stats(lp, adv, mask, variant="C2")
    assert torch.equal(ours, bench.full_sort(lp, adv, mask)[0])
    assert torch.equal(ours, bench.reference_way(lp, adv, mask)[0])
    row = bench.bench_shape(4, 256, repeats=2, device="cpu")
    assert "| 1 / 1 / 10 |" in row and row.endswith("| yes |")


def test_loss_table_times_every_baseline_against_dapo():
    bench = _load()
    row, ratios = bench.bench_losses(2, 64, repeats=1, device="cpu")
    assert set(ratios) == set(bench.BASELINES) and all(r > 0 for r in ratios.values())
    assert row.startswith("| 2 × 64 |") and row.count("|") == len(bench.BASELINES) + 3
