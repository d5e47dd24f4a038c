"""`stare bench`: plan, trunk rule, counterfactual variants, task mix and an end-to-end run."""

import json
import os
import random
from collections import Counter

import pytest
from typer.testing import CliRunner

import stare
from tasks.countdown import countdown_solutions, countdown_splits
from training.bench import BenchPlan, parse_arms, parse_seeds, run_overrides
from training.bench.probe import probe_variants
from training.bench.runner import trunk_target
from training.preset.demos import scripted_turns


def test_seeds_and_arms_parse_with_clear_errors():
    assert parse_seeds("0,1,2") == (0, 1, 2) and parse_seeds("n=4") == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="comma-separated"):
        parse_seeds("a,b")
    assert parse_arms("dapo, stare-o1") == ("dapo", "stare-o1")
    with pytest.raises(ValueError, match="unknown algorithm preset"):
        parse_arms("dapo,stare-o3")
    with pytest.raises(ValueError, match="distinct"):
        BenchPlan(seeds=(0, 0))
    with pytest.raises(ValueError, match="fixed target"):
        BenchPlan(branch_frac=0.0)


def test_each_run_gets_its_identity_after_the_user_overrides(tmp_path):
    plan = BenchPlan(overrides=("train.steps=7", "seed=99"), threads=1)
    ov = run_overrides(plan, tmp_path, "stare-o1", 2, "stare-o1-s2")
    assert ov.index("train.steps=7") < ov.index("seed=2")  # the run's seed wins over a user "seed="
    assert {"algo=stare-o1", "seed=2", f"log.run_dir={tmp_path}", "log.name=stare-o1-s2"} <= set(ov)
    assert ov.index("eval.every=0") < ov.index("train.steps=7")  # the bench defaults come first
    assert not any(
        o.startswith("eval.") for o in run_overrides(BenchPlan(use_defaults=False), tmp_path, "dapo", 0, "x")
    )


def test_branch_step_and_trunk_target(tmp_path):
    plan = BenchPlan()
    assert plan.branch_step(100) == 30 and plan.branch_step(3) == 1
    for seed, base in ((0, 0.40), (1, 0.50)):
        d = tmp_path / f"trunk-s{seed}"
        d.mkdir()
        rows = [{"step": s, "train/entropy_all": base + 0.01 * s} for s in range(1, 11)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # last 2 steps: seed 0 mean 0.495, seed 1 mean 0.595 -> 0.545
    assert trunk_target([tmp_path / "trunk-s0", tmp_path / "trunk-s1"], 2) == pytest.approx(0.545)


def test_probe_variants_differ_only_in_the_stare_block():
    base = stare.PRESETS["dapo"]
    variants = {v.name: v.algo for v in probe_variants(base, (1.1, 2.0, 5.0), 0.2)}
    assert list(variants) == ["dapo", "stare-o1-w1.1", "stare-o1-w2", "stare-o1-w5", "stare-c2"]
    assert not variants["dapo"].stare.enabled and variants["stare-o1-w5"].stare.w == 5.0
    assert variants["stare-c2"].stare.variant == "C2" and variants["stare-c2"].stare.top_ratio == 0.2
    assert all(v.clip_high == base.clip_high and v.dynamic_sampling for v in variants.values())


def test_train_mix_is_mostly_easy_with_a_hard_quarter():
    train = countdown_splits(0)["train"]
    kinds = Counter(t.meta["difficulty"] for t in train)
    assert kinds == {"easy": 461, "hard": 154}
    assert [t.meta["difficulty"][0] for t in train[:8]] == list("eeeheeeh")  # spread, one hard per three easy


def test_aware_searcher_picks_among_the_solutions():
    tasks = countdown_splits(0)["train"][:60]
    rng = random.Random(0)
    for task in tasks:
        turns, hit = scripted_turns(task, rng, aware=1.0)
        answer = turns[-1][len("\\boxed{") : -1]
        assert (
            hit
            and len(turns) == 2
            and answer in countdown_solutions(task.meta["numbers"], task.meta["target"])
        )
    easy = next(t for t in tasks if t.meta["n_solutions"] >= 8)
    answers = {scripted_turns(easy, rng, aware=1.0)[0][-1] for _ in range(40)}
    assert len(answers) >= 4  # uniform among the solutions: diverse
    blind = [scripted_turns(t, random.Random(1), aware=0.0)[0] for t in tasks]
    assert blind == [scripted_turns(t, random.Random(1))[0] for t in tasks]
    with pytest.raises(ValueError, match="aware"):
        scripted_turns(tasks[0], rng, aware=1.5)


def test_persistent_searcher_tries_again_after_a_miss():
    tasks = countdown_splits(0)["train"][:80]
    rng = random.Random(0)
    for task in tasks:                          # persist 1: stops only at a hit or after max_tries
        turns, hit = scripted_turns(task, rng, max_tries=3, persist=1.0)
        assert hit or len(turns) == 4
    single = [scripted_turns(t, rng, max_tries=3, persist=0.0) for t in tasks]
    assert all(len(turns) == 2 for turns, _ in single)   # persist 0: one try, whatever it gave


def test_gain_over_the_warm_start_is_paired_by_puzzle_and_averaged_over_seeds():
    from pathlib import Path

    from training.bench.analysis import analyse
    from training.bench.runs import Run

    def heldout(correct):
        return {"n": 4, "puzzles": [{"id": str(i), "difficulty": "easy"} for i in range(3)],
                "settings": {"top_p=1": {"correct": correct, "entropy": 0.3, "tool_calls": 1.0,
                                         "response_length": 9.0}}}

    def run(arm, seed, correct):
        return Run(arm=arm, seed=seed, path=Path(f"{arm}-s{seed}"), heldout=heldout(correct),
                   metrics=[{"step": 1, "train/acc": 0.1, "train/entropy_all": 0.3}])

    runs = [run("dapo", 0, [4, 2, 0]), run("dapo", 1, [2, 2, 2]), run("stare-o1", 0, [1, 1, 1])]
    res = analyse(runs, arms=["dapo", "stare-o1"], baseline="dapo", branch_step=0, target=0.3, band=0.2,
                  start=heldout([1, 1, 1]))
    assert res.heldout_start["top_p=1"] == {"pass@1": 0.25, "pass@4": 1.0}
    # dapo: seed 0 mean((3, 1, -1) / 4) = 0.25, seed 1 mean((1, 1, 1) / 4) = 0.25 -> 0.25, sd 0
    gain = res.heldout_gain["top_p=1"]["dapo"]
    assert (gain.mean, gain.lo, gain.hi, gain.n) == pytest.approx((0.25, 0.25, 0.25, 2))
    assert res.heldout_gain["top_p=1"]["stare-o1"].mean == 0.0
    no_start = analyse(runs, arms=["dapo"], baseline="dapo", branch_step=0, target=0.3, band=0.2)
    assert no_start.heldout_gain == {}


def test_cli_report_only_and_bad_input(tmp_path):
    import typer

    from training.commands.bench import bench

    app = typer.Typer()
    app.command()(bench)
    d = tmp_path / "dapo-s0"
    d.mkdir()
    (d / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "train/acc": 0.1, "train/entropy_all": 0.4}) + "\n"
    )
    result = CliRunner().invoke(app, ["--report-only", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.md").exists() and (tmp_path / "summary.json").exists()
    bad = CliRunner().invoke(app, ["--seeds", "x"])
    assert bad.exit_code == 2 and "--seeds" in bad.output


@pytest.mark.slow
def test_tiny_bench_end_to_end(tmp_path):
    """Two arms × two seeds, trunk 2 + branch 2 steps, on the seconds-long smoke preset: real trainer,
    env, counterfactual probe, held-out evaluation and report."""
    from training.bench import run_bench

    plan = BenchPlan(
        seeds=(0, 1),
        name="smoke",
        run_dir=str(tmp_path),
        branch_frac=0.5,
        probe_every=1,
        probe_puzzles=2,
        probe_samples=2,
        heldout_limit=4,
        heldout_n=2,
        target_window=1,
        cache_dir=os.environ.get("STARE_TEST_CACHE", str(tmp_path / "cache")),
        overrides=(
            "model.path=preset:cpu-tiny-smoke",
            "train.steps=4",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "algo.dynamic_sampling=false",
        ),
    )
    report = run_bench(plan)
    bench = tmp_path / "smoke"
    record = json.loads((bench / "bench.json").read_text())
    assert [(r["kind"], r["arm"], r["seed"]) for r in record["runs"]][:2] == [
        ("trunk", "dapo", 0),
        ("trunk", "dapo", 1),
    ]
    assert record["branch_step"] == 2 and record["target_entropy"] > 0
    trunk = [json.loads(x) for x in (bench / "trunk-s0" / "metrics.jsonl").read_text().splitlines()]
    for arm in ("dapo", "stare-o1"):
        rows = [json.loads(x) for x in (bench / f"{arm}-s0" / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[:2] == trunk  # the shared trunk
        assert all("train/entropy_all" in r for r in rows)
        assert (bench / f"{arm}-s0" / "heldout.json").exists()
    dapo = [json.loads(x) for x in (bench / "dapo-s0" / "metrics.jsonl").read_text().splitlines()]
    assert "probe/dH/stare-o1-w2" in dapo[-1]
    summary = json.loads((bench / "summary.json").read_text())
    assert "stare-o1-w2" in summary["push"] and report.exists()
    assert ("start", "dapo", 0) in [(r["kind"], r["arm"], r["seed"]) for r in record["runs"]]
    start = json.loads((bench / "warmstart" / "heldout.json").read_text())
    assert len(start["settings"]["top_p=1"]["correct"]) == 4
    assert set(summary["heldout_gain"]["top_p=1"]) == {"dapo", "stare-o1"}
    assert "The warm start on the same puzzles" in report.read_text()
