"""The markdown of the bench report: tables and plain sentences generated from the measured numbers.

The sentences are derived mechanically from the paired differences (sign, CI, count of seeds), so
the report says what the runs show whatever the sign; nothing is written by hand per run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

EXPECTATION = (
    "On this Countdown-with-tool task the CPU prototype (`CPU_DEMO.md`, part 2) found that STARE-O1 "
    "keeps token entropy and tool use higher than DAPO once its gate fires (entropy +0.07 to +0.14 "
    "nats, 1.4-1.8 tool calls against 1.0-1.2), while the **reward difference was weak or nil** "
    "(pass@1 equal; pass@8 +0.01 on average over 3 gated seed pairs, well within noise). Expect an "
    "entropy / tool-use difference and at most a weak reward difference here; a run of this size "
    "cannot establish a reward effect. The section below reports what *this* run measured."
)

ROWS: tuple[tuple[str, str, int], ...] = (
    ("train_acc_final", "train accuracy, final (last 10% of steps)", 3),
    ("train_acc_best", "train accuracy, best 10-step mean", 3),
    ("entropy_final", "train entropy, final (nats/token)", 3),
    ("in_band", "share of steps with entropy in the target band", 2),
    ("gate_rate", "gate-on rate (steps with H < H_tgt; reweights only in STARE arms)", 2),
    ("response_length", "response length, final (tokens)", 1),
    ("tool_calls", "tool calls per episode, final", 2),
    ("reflection_words", "reflection words per episode, final", 2),
    ("wall_time_s", "wall time per run (s)", 0),
    ("steps", "training steps", 0),
)
PAIRED_ROWS = (
    ("train/entropy", "train entropy", 3),
    ("train/acc", "train accuracy", 3),
    ("train/tool_calls", "tool calls per episode", 2),
    ("train/response_length", "response length (tokens)", 1),
)


def fmt(mean: float, ci: float, n: int, digits: int, *, signed: bool = False) -> str:
    """`mean ± ci`, `mean` alone for one seed, `–` when missing; `signed` prints the sign of the mean."""
    if n == 0 or math.isnan(mean):
        return "–"
    head = f"{mean:+.{digits}f}" if signed else f"{mean:.{digits}f}"
    return head if n < 2 or math.isnan(ci) else f"{head} ± {ci:.{digits}f}"


def _eval_rows(summaries: dict[tuple[str, int], dict[str, float]]) -> list[tuple[str, str, int]]:
    rows = []
    for key in sorted({k for s in summaries.values() for k in s if k.startswith("eval/")}):
        name = key[len("eval/") :]
        if name.endswith("/best"):
            rows.append((key, f"held-out {name[: -len('/best')]}, best", 3))
        elif name.endswith("/start"):
            rows.append((key, f"held-out {name[: -len('/start')]}, at step 0 (the warm start)", 3))
        else:
            rows.append((key, f"held-out {name}, final", 2 if name.endswith("tool_calls") else 3))
    return rows


def _arm_table(
    arms: Sequence[str],
    summaries: dict[tuple[str, int], dict[str, float]],
    mean_ci: Callable[..., tuple[float, float, int]],
) -> list[str]:
    seeds = {arm: sorted(s for (a, s) in summaries if a == arm) for arm in arms}
    lines = [
        "| metric | " + " | ".join(f"{arm} (n={len(seeds[arm])})" for arm in arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for key, label, digits in (*ROWS[:2], *_eval_rows(summaries), *ROWS[2:]):
        cells = [
            fmt(*mean_ci([summaries[arm, s].get(key, math.nan) for s in seeds[arm]]), digits) for arm in arms
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _paired_values(paired_arm: dict[int, dict[str, float] | None], key: str) -> list[float]:
    return [d[key] for d in paired_arm.values() if d is not None and not math.isnan(d.get(key, math.nan))]


def _paired_table(
    baseline: str,
    paired: dict[str, dict[int, dict[str, float] | None]],
    mean_ci: Callable[..., tuple[float, float, int]],
) -> list[str]:
    arms = list(paired)
    eval_keys = sorted(
        {k for p in paired.values() for d in p.values() if d for k in d if k.startswith("eval/")}
    )
    lines = [
        "| difference (arm − " + baseline + ") | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    gated = [f"{sum(d is not None for d in paired[a].values())} of {len(paired[a])}" for a in arms]
    lines.append("| seeds whose gate fired (paired) | " + " | ".join(gated) + " |")
    rows = [(k, f"{label}, mean over steps after the first gate step", d) for k, label, d in PAIRED_ROWS]
    rows += [(k, f"held-out {k[len('eval/') :]}, final", 3) for k in eval_keys]
    for key, label, digits in rows:
        cells = []
        for arm in arms:
            vals = _paired_values(paired[arm], key)
            pos = sum(v > 0 for v in vals)
            cell = fmt(*mean_ci(vals), digits, signed=True)
            cells.append(f"{cell} ({pos}/{len(vals)} > 0)" if vals else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _verdict(vals: Sequence[float], mean_ci: Callable[..., tuple[float, float, int]], digits: int) -> str:
    mean, ci, n = mean_ci(vals)
    if n == 0:
        return "not measured"
    pos = sum(v > 0 for v in vals)
    if n < 2 or math.isnan(ci):
        return f"{mean:+.{digits}f} (one seed; no confidence interval)"
    beyond = abs(mean) > ci
    word = (
        "beyond seed noise (95% CI excludes 0)"
        if beyond
        else "not distinguishable from seed noise (95% CI includes 0)"
    )
    return f"{mean:+.{digits}f} ± {ci:.{digits}f}, {pos} of {n} seeds positive: {word}"


def _findings(
    baseline: str,
    paired: dict[str, dict[int, dict[str, float] | None]],
    mean_ci: Callable[..., tuple[float, float, int]],
) -> list[str]:
    lines = []
    for arm, per_seed in paired.items():
        gated = [s for s, d in per_seed.items() if d is not None]
        if not gated:
            lines.append(
                f"- **{arm}**: the gate never fired in any of {len(per_seed)} seeds, so {arm} and "
                f"{baseline} trained identically; this run gives no comparison."
            )
            continue
        firsts = ", ".join(str(int(per_seed[s]["first_gate_step"])) for s in gated)
        lines.append(
            f"- **{arm}** vs **{baseline}**: the gate fired in {len(gated)} of {len(per_seed)} seeds "
            f"(first at steps {firsts}). After it, relative to {baseline}:"
        )
        for key, label, digits in PAIRED_ROWS:
            lines.append(f"  - {label}: {_verdict(_paired_values(per_seed, key), mean_ci, digits)}")
        eval_keys = sorted({k for d in per_seed.values() if d for k in d if k.startswith("eval/")})
        for key in eval_keys:
            lines.append(
                f"  - held-out {key[len('eval/') :]} (final): "
                f"{_verdict(_paired_values(per_seed, key), mean_ci, 3)}"
            )
    return lines or ["- Only one arm was run; there is nothing to compare."]


def _per_run_table(runs: Sequence[Any], summaries: dict[tuple[str, int], dict[str, float]]) -> list[str]:
    eval_keys = sorted(
        {
            k
            for s in summaries.values()
            for k in s
            if k.startswith("eval/") and not k.endswith(("/best", "/start"))
        }
    )
    head = [
        "arm",
        "seed",
        "steps",
        "first H < H_tgt",
        "train acc",
        *[k[len("eval/") :] for k in eval_keys],
        "entropy",
        "gate rate",
        "tool calls",
        "length",
        "wall s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        s = summaries[run.arm, run.seed]
        gate = s["first_gate_step"]
        cells = [
            run.arm,
            str(run.seed),
            f"{s['steps']:.0f}",
            "–" if math.isnan(gate) else f"{gate:.0f}",
            f"{s['train_acc_final']:.3f}",
            *[f"{s[k]:.3f}" for k in eval_keys],
            f"{s['entropy_final']:.3f}",
            f"{s['gate_rate']:.2f}",
            f"{s['tool_calls']:.2f}",
            f"{s['response_length']:.1f}",
            f"{s['wall_time_s']:.0f}",
        ]
        lines.append("| " + " | ".join(c.replace("nan", "–") for c in cells) + " |")
    return lines


def render_markdown(
    *,
    arms: Sequence[str],
    baseline: str,
    runs: Sequence[Any],
    summaries: dict[tuple[str, int], dict[str, float]],
    paired: dict[str, dict[int, dict[str, float] | None]],
    target: float | None,
    band: float,
    meta: dict[str, Any],
    figures: Sequence[str],
    mean_ci: Callable[..., tuple[float, float, int]],
) -> str:
    """The whole `report.md` text (see the module docstring)."""
    title = meta.get("title", "STARE vs DAPO")
    band_text = (
        f"H_tgt = {target:.3f} nats, band [{target * (1 - band):.3f}, {target * (1 + band):.3f}] "
        f"(±{band:.0%})"
        if target
        else "no target entropy was logged"
    )
    out = [f"# {title}", ""]
    facts = [f"arms: {', '.join(arms)}; seeds: {sorted({r.seed for r in runs})}; {band_text}."]
    facts += [f"{k}: {v}" for k, v in meta.items() if k not in ("title", "warmstart")]
    out += [f"- {f}" for f in facts] + [
        "",
        "## What to expect",
        "",
        EXPECTATION,
        "",
        "## What this run measured",
        "",
    ]
    out += _findings(baseline, paired, mean_ci) + [""]
    out += ["## Results per arm (mean ± 95% CI over seeds)", ""] + _arm_table(arms, summaries, mean_ci) + [""]
    if paired:
        out += [f"## Paired differences against {baseline}, after the first gate step (same seed)", ""]
        out += _paired_table(baseline, paired, mean_ci) + [""]
    out += ["## Every run", ""] + _per_run_table(runs, summaries) + [""]
    if figures:
        out += ["## Plots", ""] + [f"![{name}]({name})" for name in figures] + [""]
    if meta.get("warmstart"):
        out += [
            "## Warm start (shared initial checkpoint)",
            "",
            "```json",
            _json(meta["warmstart"]),
            "```",
            "",
        ]
    out += [
        "## Definitions",
        "",
        "- *final*: mean over the last 10% of training steps (per-step curves) or the last evaluation.",
        "- *in band*: share of steps whose batch entropy (sampled tokens only) lies in the target band.",
        "- *paired difference*: for each seed whose gate fired, the mean over steps s ≥ first gate step of "
        "(arm − baseline) at the same step, then mean ± 95% CI (Student t) over those seeds. Before the "
        "gate fires the two arms of a seed are identical, so earlier steps carry no information.",
        "- *avg@k*: mean accuracy of k samples per held-out problem; *pass@k*: any of the k correct.",
        "",
    ]
    return "\n".join(out)


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2, sort_keys=True, default=str)
