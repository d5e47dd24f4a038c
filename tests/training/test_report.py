"""The bench's statistics and endpoints, on hand-computed numbers."""

import json
import math

import pytest

from training.bench.analysis import accuracy_gain, analyse, run_endpoints
from training.bench.heldout import pass_at_k, pass_curve
from training.bench.report import report_from_dir
from training.bench.runs import Run
from training.bench.stats import (
    block_bootstrap,
    mde80,
    mean_ci,
    paired_test,
    puzzle_bootstrap,
    seeds_needed,
    slope,
)


def _run(arm, seed, steps=10, **series):
    metrics = [{"step": s, **{k: f(s) for k, f in series.items()}} for s in range(1, steps + 1)]
    return Run(arm=arm, seed=seed, path=None, metrics=metrics)


def test_mean_ci_is_student_t_over_seeds():
    e = mean_ci([1.0, 2.0, 3.0, float("nan")])
    # sd 1, n 3: t_{0.975,2} = 4.303 -> half-width 4.303 / sqrt(3) = 2.484
    assert e.n == 3 and e.mean == 2.0 and e.hi - e.mean == pytest.approx(2.4841, abs=1e-3)
    assert math.isnan(mean_ci([5.0]).lo) and mean_ci([]).n == 0


def test_paired_tests_and_power():
    t_p, sign_p, positive = paired_test([0.1, 0.2, 0.3, 0.4])
    assert positive == 4 and sign_p == pytest.approx(0.125)  # 2 * 0.5**4
    assert t_p == pytest.approx(0.0305, abs=1e-3)  # t = 0.25 / (0.129 / 2) = 3.873, df 3
    # large n: MDE -> (z_.975 + z_.8) sd / sqrt(n) = 2.802 * 1 / 10
    assert mde80(1.0, 100) == pytest.approx(0.2816, abs=3e-3)
    assert mde80(1.0, 4) > mde80(1.0, 8) > 0
    assert seeds_needed(0.2816, 1.0) == pytest.approx(100, abs=2)
    assert math.isnan(seeds_needed(0.0, 1.0))


def test_bootstraps_and_slope():
    same = block_bootstrap([[1.0, 3.0], [1.0, 3.0], [1.0, 3.0]])
    assert same.mean == 2.0 and same.lo == same.hi == 2.0 and same.n == 6
    pooled = block_bootstrap([[0.0], [1.0, 1.0, 1.0]])  # pooled over values, not blocks
    assert pooled.mean == 0.75 and 0.0 <= pooled.lo <= pooled.hi <= 1.0
    d = puzzle_bootstrap([0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    assert d.mean == 0.5 and d.n == 4 and 0.0 <= d.lo <= 0.5 <= d.hi <= 1.0
    assert slope([1, 2, 3], [1.0, 3.0, 5.0]) == pytest.approx(2.0)


def test_unbiased_pass_at_k():
    assert pass_at_k(8, 0, 3) == 0.0 and pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_curve([1, 0], 4) == pytest.approx([0.125, 0.25, 0.375, 0.5])
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(4, 5, 1)


def test_learning_gain_and_windows():
    run = _run("dapo", 0, steps=20, **{"train/acc": lambda s: 0.1 if s <= 2 else 0.4 if s > 18 else 0.2})
    assert accuracy_gain(run) == pytest.approx(0.3)  # last 2 steps 0.4 - first 2 steps 0.1
    ends = run_endpoints(
        _run(
            "a",
            0,
            steps=10,
            **{"train/entropy_all": lambda s: 1.0 - 0.1 * s, "stare/gate_on": lambda s: float(s > 7)},
        ),
        branch=5,
        target=0.3,
        band=0.2,
    )
    assert ends["entropy_all"] == pytest.approx((0.3 + 0.2 + 0.1 + 0.0) / 4)  # last 40% = steps 7..10
    assert ends["slope"] == pytest.approx(-0.1) and ends["gate_on"] == pytest.approx(3 / 5)
    assert ends["in_band_all"] == pytest.approx(1 / 5)  # only step 7 (0.3) in [0.24, 0.36]


def test_paired_entropy_endpoint_and_push():
    runs = []
    for seed, gap in ((0, 0.02), (1, 0.04)):
        runs.append(
            _run(
                "dapo",
                seed,
                **{
                    "train/entropy_all": lambda s: 0.5,
                    "probe/dH/dapo": lambda s: -0.001,
                    "stare/gate_on": lambda s: 1.0,  # logged, but dapo never reweights
                    "probe/dH/stare-o1-w2": lambda s: -0.0008,
                },
            )
        )
        runs.append(
            _run(
                "stare-o1",
                seed,
                **{
                    "train/entropy_all": lambda s, g=gap: 0.5 + (g if s > 5 else 0),
                    "stare/gate_on": lambda s: 1.0,
                },
            )
        )
    res = analyse(runs, arms=["dapo", "stare-o1"], baseline="dapo", branch_step=5, target=0.45, band=0.2)
    p = res.paired["stare-o1"]["entropy_all"]
    assert (
        p.diffs == pytest.approx([0.02, 0.04]) and p.positive == 2 and p.estimate.mean == pytest.approx(0.03)
    )
    assert res.push["dapo"].mean == pytest.approx(-0.001) and res.push["dapo"].n == 20
    assert res.push_excess["stare-o1-w2"].mean == pytest.approx(0.0002)
    assert res.gated == {"stare-o1": ["11111", "11111"]}  # the gate raster: only the arm with a gate
    assert res.per_arm["dapo"]["gate_on"].n == 0 and res.per_arm["stare-o1"]["gate_on"].mean == 1.0


def test_report_dir_writes_summary_with_the_documented_schema(tmp_path):
    for arm in ("dapo", "stare-o1"):
        for seed in (0, 1):
            d = tmp_path / f"{arm}-s{seed}"
            d.mkdir()
            rows = [
                {
                    "step": s,
                    "train/acc": 0.1 + 0.02 * s,
                    "train/entropy_all": 0.5 - 0.01 * s,
                    "train/entropy": 0.49 - 0.01 * s,
                    "stare/gate_on": float(arm != "dapo" and s > 3),
                    "train/groups_kept": 12,
                    "train/gen_rounds": 1,
                    "probe/dH/dapo": -0.001 * (seed + 1),
                }
                for s in range(1, 11)
            ]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            held = {
                "n": 2,
                "puzzles": [{"id": "a", "difficulty": "easy"}, {"id": "b", "difficulty": "hard"}],
                "settings": {
                    "top_p=1": {"correct": [2, 0], "entropy": 0.4, "tool_calls": 1.5, "response_length": 20.0}
                },
            }
            (d / "heldout.json").write_text(json.dumps(held))
    path = report_from_dir(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    gain = summary["learning"]["dapo"]["accuracy_gain"]
    assert gain["mean"] == pytest.approx(0.18) and len(gain["ci95"]) == 2  # step 10 - step 1: 0.02 * 9
    assert summary["entropy_endpoint"]["n_seeds"] == 2 and summary["entropy_endpoint"]["mean"] == 0.0
    assert set(summary["entropy_endpoint"]) >= {"mean", "ci95", "mde80", "n_seeds"}
    assert summary["push"]["dapo"]["mean"] == pytest.approx(-0.0015) and summary["push"]["dapo"]["n"] == 20
    assert summary["heldout"]["top_p=1"]["dapo"]["pass@1"]["mean"] == pytest.approx(0.5)
    text = path.read_text()
    assert "all-episode entropy" in text and "TRAINING accuracy" in text and "HELD-OUT pass@k" in text
    assert "gate.png" in text and (tmp_path / "heldout.png").exists()
