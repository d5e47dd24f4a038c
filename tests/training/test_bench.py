import json
import os

import pytest
from typer.testing import CliRunner

from training.bench import BenchPlan, arm_overrides, parse_arms, parse_seeds, report_from_dir


def _fake_run(root, name, *, entropy, gate_from=None, steps=12):
    d = root / name
    d.mkdir(parents=True)
    rows = [
        {
            "step": s,
            "train/acc": 0.1,
            "train/reward": 0.1,
            "train/entropy": entropy(s),
            "stare/gate_on": float(gate_from is not None and s >= gate_from),
            "stare/target_entropy": 0.3,
            "train/response_length": 20.0,
            "train/tool_calls": 1.5,
            "train/reflection_words": 0.0,
            "time/step_s": 1.0,
        }
        for s in range(1, steps + 1)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "eval.jsonl").write_text(
        json.dumps({"step": steps, "eval/cd/avg@4": 0.2, "eval/cd/pass@4": 0.4}) + "\n"
    )
    return d


def test_seeds_and_arms_parse_with_clear_errors():
    assert parse_seeds("0,1,2") == (0, 1, 2) and parse_seeds("n=4") == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="comma-separated"):
        parse_seeds("a,b")
    assert parse_arms("dapo, stare-o1") == ("dapo", "stare-o1")
    with pytest.raises(ValueError, match="unknown algorithm preset"):
        parse_arms("dapo,stare-o3")
    with pytest.raises(ValueError, match="distinct"):
        BenchPlan(seeds=(0, 0))


def test_each_run_gets_its_identity_after_the_user_overrides(tmp_path):
    plan = BenchPlan(overrides=("train.steps=7", "seed=99"), threads=1)
    ov = arm_overrides(plan, tmp_path, "stare-o1", 2)
    assert ov.index("train.steps=7") < ov.index("seed=2")  # the run's seed wins over a user "seed="
    assert {
        "algo=stare-o1",
        "seed=2",
        f"log.run_dir={tmp_path}",
        "log.name=stare-o1-s2",
        "train.num_threads=1",
    } <= set(ov)
    assert ov[0] == "model.cache_dir=.cache/stare"
    assert ov.index("train.steps=80") < ov.index("train.steps=7")  # the budget defaults come first
    bare = arm_overrides(BenchPlan(use_defaults=False), tmp_path, "dapo", 0)
    assert not any(o.startswith("train.steps=") for o in bare)


def test_report_only_works_on_run_dirs_without_bench_json(tmp_path):
    for seed in (0, 1):
        _fake_run(tmp_path, f"dapo-s{seed}", entropy=lambda s: 0.5 - 0.02 * s)
        _fake_run(
            tmp_path,
            f"stare-o1-s{seed}",
            entropy=lambda s: 0.5 - 0.02 * s + (0.05 if s > 6 else 0),
            gate_from=6,
        )
    path = report_from_dir(tmp_path)
    text = path.read_text()
    assert "the gate fired in 2 of 2 seeds (first at steps 6, 6)" in text
    # steps 6..12 (7 steps), +0.05 on 7..12: 6 * 0.05 / 7 = 0.043 in both seeds
    assert "train entropy: +0.043 ± 0.000, 2 of 2 seeds positive" in text
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "accuracy.png",
        "entropy.png",
        "gate.png",
        "length.png",
    ]


def test_cli_report_only_and_bad_input(tmp_path):
    import typer

    from training.commands.bench import bench

    app = typer.Typer()
    app.command()(bench)
    _fake_run(tmp_path, "dapo-s0", entropy=lambda s: 0.4)
    result = CliRunner().invoke(app, ["--report-only", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.md").exists() and "report:" in result.output
    bad = CliRunner().invoke(app, ["--seeds", "x"])
    assert bad.exit_code == 2 and "--seeds" in bad.output


def test_tiny_bench_end_to_end(tmp_path):
    """Two arms × one seed, 2 steps each, on the seconds-long smoke preset; real trainer, env and report.

    ~15 s on an idle 2-core machine (the smoke warm start is built into tmp_path unless
    STARE_TEST_CACHE points at a cache).
    """
    from training.bench import run_bench

    plan = BenchPlan(
        config="cpu-tiny",
        arms=("dapo", "stare-o1"),
        seeds=(0,),
        name="smoke",
        run_dir=str(tmp_path),
        cache_dir=os.environ.get("STARE_TEST_CACHE", str(tmp_path / "cache")),
        overrides=(
            "model.path=preset:cpu-tiny-smoke",
            "train.steps=2",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "algo.max_gen_rounds=1",
            "eval.limit=2",
            "eval.k=2",
            "eval.every=0",
            "eval.at_start=true",
            "log.save_every=0",
            "log.tensorboard=false",
        ),
    )
    report = run_bench(plan)
    text = report.read_text()
    record = json.loads((tmp_path / "smoke" / "bench.json").read_text())
    assert [(r["arm"], r["seed"]) for r in record["runs"]] == [("dapo", 0), ("stare-o1", 0)]
    assert record["warmstart"]["preset"] == "cpu-tiny-smoke" and record["target_entropy"] > 0
    for arm in ("dapo", "stare-o1"):
        rows = [
            json.loads(x)
            for x in (tmp_path / "smoke" / f"{arm}-s0" / "metrics.jsonl").read_text().splitlines()
        ]
        assert [r["step"] for r in rows] == [1, 2]
        assert f"| {arm} | 0 | 2 |" in text
    assert "## What this run measured" in text and (tmp_path / "smoke" / "entropy.png").exists()


def test_live_episodes_covers_training_rounds_and_evaluation():
    from training.bench import live_episodes
    from training.config import load_config

    cfg = load_config(
        "cpu-tiny", ["rollout.prompts_per_step=16", "rollout.group_size=8", "eval.limit=64", "eval.k=8"]
    )
    assert live_episodes(cfg) == 512
    cfg = load_config(
        "cpu-tiny", ["rollout.prompts_per_step=16", "rollout.group_size=8", "eval.limit=4", "eval.k=2"]
    )
    assert live_episodes(cfg) == 128
