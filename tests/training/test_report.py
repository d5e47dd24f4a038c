import json
import math

import matplotlib.image as mpimg
import pytest

from training.report import (
    first_gate_step,
    load_run,
    mean_ci,
    moving_average,
    paired_differences,
    read_jsonl,
    summarise,
    write_report,
)
from training.report_plots import plot_entropy, seed_mean_curve

TARGET = 0.36  # band ±20%: [0.288, 0.432]


def _dapo_entropy(step):  # 0.5 on steps 1-10, 0.36 on 11-30, 0.2 on 31-40: 20 of 40 steps in the band
    return 0.5 if step <= 10 else 0.36 if step <= 30 else 0.2


def _write_run(root, arm, seed, *, gate_from=None):
    """A synthetic 40-step run. The STARE twin equals DAPO until `gate_from`, then +0.1 entropy and calls."""
    d = root / f"{arm}-s{seed}"
    d.mkdir(parents=True)
    lines = []
    for step in range(1, 41):
        after = gate_from is not None and step > gate_from
        lines.append(
            {
                "step": step,
                "time": step * 2.0,
                "train/reward": 0.1 + 0.01 * seed,
                "train/acc": 0.1 + 0.01 * seed,
                "train/entropy": _dapo_entropy(step) + (0.1 if after else 0.0),
                "stare/gate_on": 1.0 if gate_from is not None and step >= gate_from else 0.0,
                "stare/target_entropy": TARGET,
                "stare/reweight_w": 2.0,
                "stare/reweight_m": 1.0,
                "train/response_length": 20.0,
                "train/tool_calls": 1.0 + (0.5 if after else 0.0),
                "train/reflection_words": 0.0,
                "time/step_s": 2.0,
            }
        )
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    evals = [
        {"step": 0, "eval/cd/avg@8": 0.05, "eval/cd/pass@8": 0.30, "eval/cd/entropy": 0.5},
        {
            "step": 40,
            "eval/cd/avg@8": 0.15,
            "eval/cd/pass@8": 0.18 + (0.02 if gate_from else 0.0),
            "eval/cd/entropy": 0.3,
        },
    ]
    (d / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in evals) + "\n")
    return d


@pytest.fixture
def bench_dir(tmp_path):
    for seed, gate in ((0, 20), (1, 25), (2, None)):  # seed 2: the gate never fires
        _write_run(tmp_path, "dapo", seed)
        _write_run(tmp_path, "stare-o1", seed, gate_from=gate)
    return tmp_path


def test_mean_ci_matches_hand_computed_student_t():
    mean, half, n = mean_ci([1.0, 2.0, 3.0])  # sd 1, t_{0.975,2} = 4.303
    assert (mean, n) == (2.0, 3)
    assert half == pytest.approx(4.303 / math.sqrt(3))
    assert math.isnan(mean_ci([0.7])[1]) and mean_ci([])[2] == 0


def test_moving_average_is_trailing():
    assert moving_average([1, 3, 5, 7], 2) == [1, 2, 4, 6]


def test_read_jsonl_names_file_and_line_of_a_bad_record(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n\nnot json\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:3"):
        read_jsonl(path)


def test_summary_counts_band_gate_and_final_eval(bench_dir):
    dapo = load_run(bench_dir / "dapo-s1")
    s = summarise(dapo, target=None, band=0.2)
    assert (dapo.arm, dapo.seed) == ("dapo", 1)
    assert s["in_band"] == pytest.approx(0.5)
    assert s["gate_rate"] == 0.0 and math.isnan(s["first_gate_step"])
    assert s["train_acc_final"] == pytest.approx(0.11)
    assert s["eval/cd/avg@8"] == pytest.approx(0.15) and s["eval/cd/pass@8/best"] == pytest.approx(0.30)
    assert s["wall_time_s"] == pytest.approx(80.0)
    stare = load_run(bench_dir / "stare-o1-s0")
    assert first_gate_step(stare) == 20
    assert summarise(stare, target=None, band=0.2)["gate_rate"] == pytest.approx(21 / 40)


def test_paired_difference_uses_only_steps_after_the_first_gate(bench_dir):
    base, other = load_run(bench_dir / "dapo-s0"), load_run(bench_dir / "stare-o1-s0")
    d = paired_differences(base, other)
    # steps 20..40 = 21 steps; the twin differs by +0.1 on steps 21..40 only: 20 * 0.1 / 21
    assert d["train/entropy"] == pytest.approx(2.0 / 21)
    assert d["train/tool_calls"] == pytest.approx(10.0 / 21)
    assert d["eval/cd/pass@8"] == pytest.approx(0.02)
    assert paired_differences(base, load_run(bench_dir / "dapo-s1")) is None


def test_report_states_expectation_and_measured_differences(bench_dir):
    runs = [load_run(p) for p in sorted(bench_dir.iterdir())]
    path = write_report(bench_dir / "report", runs, meta={"title": "synthetic", "preset": "cpu-tiny"})
    text = path.read_text()
    assert "weak or nil" in text and "what *this* run measured" in text
    assert "the gate fired in 2 of 3 seeds (first at steps 20, 25)" in text
    # seed 0: 20*0.1/21 = 0.09524; seed 1: 15*0.1/16 = 0.09375; mean 0.09449, half-width
    # t_{0.975,1} * sd / sqrt(2) = 12.706 * 0.001052 / 1.4142 = 0.0095
    assert "train entropy: +0.094 ± 0.009, 2 of 2 seeds positive: beyond seed noise" in text
    assert "| held-out cd/pass@8, at step 0 (the warm start) | 0.300 ± 0.000 | 0.300 ± 0.000 |" in text
    band_row = next(line for line in text.splitlines() if line.startswith("| share of steps with entropy"))
    assert band_row.split("|")[2].strip() == "0.50 ± 0.00"  # dapo: 20 of 40 steps in every seed
    assert "| held-out cd/avg@8, final | 0.150 ± 0.000 | 0.150 ± 0.000 |" in text
    for name in ("entropy.png", "accuracy.png", "length.png", "gate.png"):
        assert f"![{name}]({name})" in text
        image = mpimg.imread(bench_dir / "report" / name)
        assert image.shape[0] >= 300 and image.shape[1] >= 600
        assert image[..., :3].std() > 0.05  # not a blank canvas


def test_entropy_plot_draws_the_band_and_the_seed_mean(bench_dir):
    runs = [load_run(bench_dir / f"stare-o1-s{s}") for s in range(3)]
    fig = plot_entropy(runs, target=TARGET, band=0.2, window=1)
    ax = fig.axes[0]
    band = ax.patches[0]  # the axhspan rectangle, y in data coordinates
    assert band.get_y() == pytest.approx(0.288) and band.get_y() + band.get_height() == pytest.approx(0.432)
    mean_line = next(line for line in ax.lines if line.get_label().startswith("stare-o1 (mean of 3)"))
    steps, values = seed_mean_curve(runs, "train/entropy", 1)
    assert list(mean_line.get_xdata()) == steps == list(range(1, 41))
    # step 26: seeds 0 and 1 are past their gate (+0.1), seed 2 is not: (0.46 + 0.46 + 0.36) / 3
    assert values[25] == pytest.approx((0.46 + 0.46 + 0.36) / 3)


def test_load_run_needs_a_recognisable_name(tmp_path):
    (tmp_path / "weird").mkdir()
    with pytest.raises(ValueError, match="<arm>-s<seed>"):
        load_run(tmp_path / "weird")
