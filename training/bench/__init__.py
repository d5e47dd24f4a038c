"""`stare bench`: STARE vs DAPO as an experiment (docs/bench.md).

plan      BenchPlan, the bench's budget overrides, CLI parsers
runner    warm start → probe → trunks → target entropy → branches → bench.json → report
worker    one trunk or branch run in a worker process
probe     all-episode entropy, step progress and the counterfactual updates (the trainer's hook)
heldout   per-puzzle held-out evaluation, unbiased pass@k
runs      reading run directories
stats     CIs, paired tests, bootstraps, power
analysis  the pre-registered endpoints
text      report.md
plots     the PNG figures
report    report.md + plots + summary.json of a bench directory
"""

from training.bench.plan import BENCH_DEFAULTS, BenchPlan, parse_arms, parse_seeds, run_overrides
from training.bench.report import report_from_dir
from training.bench.runner import run_bench

__all__ = [
    "BENCH_DEFAULTS",
    "BenchPlan",
    "parse_arms",
    "parse_seeds",
    "report_from_dir",
    "run_bench",
    "run_overrides",
]
