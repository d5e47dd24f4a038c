"""The shipped datasets, registered by name on `import tasks` (loading happens on first use)."""

from __future__ import annotations

import functools
import pathlib

from tasks.adapters import champ_tasks, reasoning_gym_tasks
from tasks.countdown import countdown_splits
from tasks.generators import generate_split
from tasks.loaders import load_path
from tasks.registry import register_dataset
from tasks.task import Task

FIXTURES = pathlib.Path(__file__).with_name("data") / "fixtures"

GENERATED: dict[str, tuple[str, dict[str, int], str]] = {
    "arith-tool": ("tool", {"eval": 200, "train": 2000},
                   "computations that need a tool: products, modular powers, power sums, base conversion"),
    "word-short": ("short_cot", {"eval": 200, "train": 1000}, "two- and three-step word problems"),
    "word-long": ("long_cot", {"eval": 100, "train": 500},
                  "counting and number theory: inclusion-exclusion, divisors, lattice paths, dice"),
}
"""Generated families: name -> (family, split sizes in stream order, description)."""

COUNTDOWN = {
    "train": (615, "Countdown with a tool, 461 easy + 154 hard (CPU preset training data)"),
    "eval": (256, "Countdown held-out, 128 hard + 128 easy, disjoint from train"),
    "eval-hard": (128, "Countdown held-out, hard puzzles only (<= 4 solving expressions)"),
}


@functools.cache
def _generated(name: str, split: str) -> tuple[Task, ...]:
    family, sizes, _ = GENERATED[name]
    return tuple(generate_split(family, split, sizes, prefix=name))  # type: ignore[arg-type]


@functools.cache
def _gsm_symbolic(split: str) -> tuple[Task, ...]:
    eval_tasks = reasoning_gym_tasks("gsm_symbolic", size=200, seed=1)
    if split == "eval":
        return tuple(eval_tasks)
    return tuple(reasoning_gym_tasks("gsm_symbolic", size=1000, seed=0,
                                     exclude=frozenset(t.prompt for t in eval_tasks)))


def _register_all() -> None:
    for name, (family, sizes, description) in GENERATED.items():
        for split, size in sizes.items():
            register_dataset(f"{name}-{split}", functools.partial(_generated, name, split),
                             description=description, size=size, family=family)
    for split, (size, description) in COUNTDOWN.items():
        register_dataset(f"countdown-{split}", lambda split=split: countdown_splits(0)[split],
                         description=description, size=size, family="tool")
    for split, size in (("train", None), ("eval", 200)):
        register_dataset(f"gsm-symbolic-{split}", functools.partial(_gsm_symbolic, split), size=size,
                         description="reasoning-gym gsm_symbolic GSM8K templates (extra [reasoning-gym])",
                         family="short_cot")
    register_dataset("champ-eval", champ_tasks, size=270, family="long_cot",
                     description="CHAMP competition problems, held-out eval (extra [champ])")
    register_dataset("sample-gsm8k", lambda: load_path(FIXTURES / "gsm8k.jsonl"), size=8, family="short_cot",
                     description="a few hand-written GSM8K-format problems (loader fixture)")
    register_dataset("sample-math", lambda: load_path(FIXTURES / "math.jsonl"), size=8, family="short_cot",
                     description="a few hand-written MATH-format problems (loader fixture)")


_register_all()
