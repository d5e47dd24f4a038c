"""The markdown of the bench report: tables and sentences generated from the measured numbers only.

Every sentence is derived mechanically from `Results` (signs, CIs, counts), so the report says what
the runs show whatever the sign; nothing is written by hand per run, and the expectation paragraph
is computed from this run's own counterfactual push.
"""

from __future__ import annotations

import math
from typing import Any

from training.bench.analysis import LEARNING_GOAL, WINDOW_FRAC, Results, power_line
from training.bench.plots import WINDOW
from training.bench.stats import Estimate

PUSH_NAME = "stare-o1-w2"
"""The counterfactual matching the bench's STARE-O1 arm (W = 2), used for the expectation."""
ARM_ROWS: tuple[tuple[str, str, int], ...] = (
    ("accuracy_gain", "train accuracy gain (last 10% − first 10% of steps)", 3),
    ("acc_last", "train accuracy, last 10% of steps", 3),
    ("entropy_all", "all-episode entropy, last 40% (nats/token)", 3),
    ("entropy_gate", "gate H̄ (kept groups), last 40%", 3),
    ("slope", "all-episode entropy slope after the branch (nats/step)", 5),
    ("in_band_all", "share of steps after the branch with all-episode entropy in band", 2),
    ("in_band_gate", "share of steps after the branch with H̄ in band", 2),
    ("gate_on", "gate-on share after the branch", 2),
    ("tool_calls", "tool calls per episode, last 40%", 2),
    ("response_length", "sampled tokens per episode, last 40%", 1),
    ("groups_kept", "kept groups per step (of prompts_per_step)", 1),
    ("gen_rounds", "generation rounds per step (1 = no refill)", 2),
    ("no_update", "share of steps without an update", 3),
    ("adv_share_pos_high", "\\|A\\| share: positive, high surprisal", 3),
    ("adv_share_pos_low", "\\|A\\| share: positive, low surprisal", 3),
    ("adv_share_neg_high", "\\|A\\| share: negative, high surprisal", 3),
    ("adv_share_neg_low", "\\|A\\| share: negative, low surprisal", 3),
)
PAIRED_ROWS = (
    ("entropy_all", "all-episode entropy, last 40% (PRIMARY)", 4),
    ("entropy_gate", "gate H̄, last 40%", 4),
    ("slope", "entropy slope after the branch", 5),
    ("in_band_all", "time in band", 3),
    ("tool_calls", "tool calls", 3),
    ("response_length", "response length", 2),
    ("acc_last", "train accuracy, last 10%", 3),
)


def _p(p: float) -> str:
    return "–" if p is None or math.isnan(p) else f"{p:.3f}"


def _header(meta: dict[str, Any]) -> list[str]:
    lines = [f"# {meta.get('title', 'Bench report')}", ""]
    for key, value in meta.items():
        if key != "title":
            lines.append(f"- **{key}**: {value}")
    return [*lines, ""]


def _learning(res: Results) -> list[str]:
    e = res.learning.get(res.baseline)
    if e is None or e.n == 0:
        return []
    met = e.mean >= LEARNING_GOAL and e.n > 1 and e.lo > 0
    verdict = "MET" if met else "NOT MET"
    return [
        "## Does RL learn? (the bench's precondition)",
        "",
        f"{res.baseline}: training accuracy over the last 10% of steps minus the first 10% = "
        f"**{e.text(3, signed=True)}** (mean [95% CI over {e.n} seeds]). Goal: ≥ {LEARNING_GOAL} with a CI "
        f"excluding 0: **{verdict}**.",
        "",
    ]


def _push(res: Results) -> list[str]:
    if not res.push:
        return [
            "## Mechanism: counterfactual push",
            "",
            "No counterfactual probe was run (probe_every=0).",
            "",
        ]
    dapo = res.push.get("dapo")
    lines = [
        "## Mechanism: counterfactual push per update",
        "",
        "Every few steps of the baseline's trajectory, each update below is applied once to a copy of "
        "the same model and AdamW state on the same batch (STARE gate forced on); ΔH is the change of "
        "the token-mean entropy on a fixed probe of held-out episodes, Δlog p the change of the mean "
        "log-prob of the probe's correct episodes. Means pool the probed steps; 95% CIs resample whole "
        "seeds (block bootstrap).",
        "",
        "| update | ΔH per update | excess over dapo | ratio to \\|ΔH_dapo\\| | Δlog p correct | n |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in res.push.items():
        ex = res.push_excess.get(name)
        ratio = ex.mean / abs(dapo.mean) if dapo and ex and dapo.mean else math.nan
        lines.append(
            f"| {name} | {e.text(5, True)} | {ex.text(5, True) if name != 'dapo' else '–'} | "
            f"{'–' if name == 'dapo' or math.isnan(ratio) else f'{ratio:+.2f}'} | "
            f"{res.dlogp[name].text(5, True)} | {e.n} |"
        )
    ws = sorted(
        (float(n.rsplit("-w", 1)[1]), res.push_excess[n].mean) for n in res.push_excess if "-o1-w" in n
    )
    if len(ws) > 1:
        steps = [b[1] - a[1] for a, b in zip(ws, ws[1:], strict=False)]
        trend = "grows" if all(d > 0 for d in steps) else "falls" if all(d < 0 for d in steps) \
            else "is not monotone"
        lines += [
            "",
            "Dose-response: the excess push "
            + trend
            + " with W ("
            + ", ".join(f"W={w:g}: {v:+.5f}" for w, v in ws)
            + ").",
        ]
    return [*lines, ""]


def _paired(res: Results) -> list[str]:
    lines = [
        "## Trajectory endpoints (pre-registered, paired by seed)",
        "",
        f"Each arm continues its seed's {res.baseline} trunk from step {res.branch_step} of {res.steps}. "
        f"Differences are arm − {res.baseline} per seed; mean [95% t CI], paired t-test p, two-sided sign "
        "test p, and the smallest difference detectable at 80% power given the observed spread (MDE).",
        "",
    ]
    for arm, rows in res.paired.items():
        lines += [
            f"### {arm} − {res.baseline}",
            "",
            "| endpoint | difference | t-test p | sign test p | seeds > 0 | MDE (80%) |",
            "|---|---|---|---|---|---|",
        ]
        for key, label, digits in PAIRED_ROWS:
            p = rows[key]
            lines.append(
                f"| {label} | {p.estimate.text(digits, True)} | {_p(p.t_p)} | {_p(p.sign_p)} | "
                f"{p.positive} of {p.estimate.n} | "
                f"{'–' if math.isnan(p.mde80) else f'{p.mde80:.{digits}f}'} |"
            )
        lines += ["", *_power(res, arm), ""]
    return lines


def _power(res: Results, arm: str) -> list[str]:
    pl = power_line(res, arm, PUSH_NAME)
    if not pl or not res.push_excess.get(PUSH_NAME):
        return []
    if pl["n_seeds"] < 2:
        return ["**Power.** One seed: no spread, so no power statement (run at least 2 seeds)."]
    push, gate = res.push_excess[PUSH_NAME], res.per_arm[arm]["gate_on"]
    gap, need = pl["expected_gap"], pl["seeds_needed"]
    observed = res.paired[arm]["entropy_all"].estimate.mean
    gated = gate.mean * (res.steps - res.branch_step)
    need_text = "—" if math.isnan(need) else f"about {need:.0f} seeds"
    return [
        f"**Power.** With {pl['n_seeds']} seeds and a paired spread of {pl['sd']:.4f} nats, this run "
        f"detects an all-episode entropy difference of {pl['mde80']:.4f} nats at 80% power.",
        "",
        f"**Expectation (computed from this run).** The measured excess push of {PUSH_NAME} is "
        f"{push.mean:+.5f} nats per update; × {gated:.0f} gated steps ({gate.mean:.2f} of the "
        f"{res.steps - res.branch_step} steps after the branch) ≈ **{gap:+.4f} nats** of entropy gap "
        f"expected at the end of the run, against an MDE of {pl['mde80']:.4f}: detecting it would need "
        f"{need_text}. The observed difference is {observed:+.4f} nats"
        + (f" ({observed / gap:.0%} of that expectation)" if gap and not math.isnan(gap) else "")
        + ": a push measured on a fixed probe need not add up along a trajectory whose own samples move.",
    ]


def _arm_table(res: Results) -> list[str]:
    lines = [
        "## Per arm (mean [95% CI over seeds])",
        "",
        "| metric | " + " | ".join(res.arms) + " |",
        "|---|" + "---|" * len(res.arms),
    ]
    for key, label, digits in ARM_ROWS:
        cells = [
            res.per_arm.get(arm, {}).get(key, Estimate(math.nan, math.nan, math.nan, 0)).text(digits)
            for arm in res.arms
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _heldout(res: Results) -> list[str]:
    if not res.heldout:
        return []
    lines = ["## Held-out (end of training)", ""]
    for setting, by_arm in res.heldout.items():
        n = next(iter(by_arm.values()))["n"]
        keys = [k for k in next(iter(by_arm.values())) if "/" in k]
        lines += [
            f"### T=1, {setting}",
            "",
            "| metric | " + " | ".join(by_arm) + " |",
            "|---|" + "---|" * len(by_arm),
        ]
        lines.append("| pass@1 | " + " | ".join(a["curve"][0].text(3) for a in by_arm.values()) + " |")
        lines.append(
            f"| pass@{n} (unbiased) | " + " | ".join(a["curve"][-1].text(3) for a in by_arm.values()) + " |"
        )
        for key in [*keys, "entropy", "tool_calls", "response_length"]:
            lines.append(f"| {key} | " + " | ".join(a[key].text(3) for a in by_arm.values()) + " |")
        if setting in res.heldout_start:
            start = res.heldout_start[setting]
            gains = res.heldout_gain.get(setting, {})
            lines.append("")
            lines.append(
                "The warm start on the same puzzles and seeds: "
                + ", ".join(f"{k} {v:.3f}" for k, v in start.items())
                + ". pass@1 gained by RL (per seed the mean over puzzles of the difference, then the "
                "mean and 95% t-CI over seeds): "
                + "; ".join(f"{arm} {e.text(3, True)}" for arm, e in gains.items()) + "."
            )
        for arm, pairs in res.heldout_paired.get(setting, {}).items():
            lines.append("")
            lines.append(
                f"Paired over puzzles ({arm} − {res.baseline}, per-puzzle scores averaged over seeds, "
                "puzzle bootstrap): " + "; ".join(f"{k} {e.text(3, True)}" for k, e in pairs.items()) + "."
            )
        lines.append("")
    return lines


def _definitions(res: Results) -> list[str]:
    band = (
        ""
        if res.target is None
        else (f"[{res.target * (1 - res.band):.3f}, {res.target * (1 + res.band):.3f}]")
    )
    return [
        "## Definitions",
        "",
        "- **all-episode entropy** (`train/entropy_all`): token-mean entropy of the pre-update policy over "
        "the sampled tokens of every episode of the step (tool output and template glue excluded).",
        "- **gate H̄** (`train/entropy`): the same over the kept groups only; STARE's gate compares it "
        "with H_tgt (the authors' definition).",
        f"- **band**: H_tgt ± {res.band:.0%} = {band}.",
        f"- **smoothing**: every training curve is a trailing {WINDOW}-step mean; endpoints use raw steps "
        f"over the stated windows (last {WINDOW_FRAC:.0%} of steps, last/first 10%).",
        "- **accuracy** curves are TRAINING accuracy on the sampled episodes; held-out results are separate "
        "points at the end of training.",
        "",
    ]


def render_markdown(res: Results, meta: dict[str, Any], figures: list[tuple[str, str]]) -> str:
    """The whole report.md."""
    lines = [*_header(meta), *_learning(res), *_push(res), *_paired(res), *_arm_table(res), *_heldout(res)]
    lines += ["## Figures", ""]
    for name, caption in figures:
        lines += [f"![{caption}]({name})", "", f"*{caption}.*", ""]
    lines += _definitions(res)
    return "\n".join(lines) + "\n"
