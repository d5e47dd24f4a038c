"""Procedural problem families shipped with the package (offline, seeded, exact answers).

- `tool`: computations that are slow and error-prone by hand (multi-digit products, modular powers,
  power sums, base conversion, gcd, digit sums), difficulty 1..3;
- `short_cot`: two- or three-step word problems;
- `long_cot`: harder counting / number-theory problems that need a longer argument.

Each generator is `fn(rng, level) -> (prompt, answer, kind)`; `generate_split` draws a deduplicated
stream and cuts disjoint splits from it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

from tasks.task import Family, Task

Generator = Callable[[random.Random, int], tuple[str, str, str]]

NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Jo", "Kofi", "Lena")
ITEMS = ("pencils", "stickers", "apples", "marbles", "cards", "stamps", "beads", "cookies")


# ---- tool family: computations ---------------------------------------------------------------

def product(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Product of two (level+2)-digit numbers."""
    a, b = (rng.randrange(10 ** (level + 1), 10 ** (level + 2)) for _ in range(2))
    return f"What is {a} × {b}?", str(a * b), "product"


def modular_power(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Remainder of a large power, base^exp mod m."""
    base = rng.randrange(2, 10**level * 5)
    exp = rng.randrange(10 ** (level + 1), 10 ** (level + 2))
    mod = rng.randrange(7, 10 ** (level + 1) + 7)
    prompt = f"What is the remainder when {base}^{{{exp}}} is divided by {mod}?"
    return prompt, str(pow(base, exp, mod)), "modpow"


def power_sum(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Sum of k^p for k = 1..n."""
    p, n = rng.randint(1, level + 1), rng.randrange(10 * level, 10 ** (level + 1))
    total = sum(k**p for k in range(1, n + 1))
    return f"What is the sum of k^{{{p}}} for k = 1, 2, ..., {n}?", str(total), "power_sum"


def base_conversion(rng: random.Random, level: int) -> tuple[str, str, str]:
    """A decimal number written in base 2..9."""
    n, base = rng.randrange(10 ** (level + 1), 10 ** (level + 3)), rng.randint(2, 9)
    digits, rest = "", n
    while rest:
        digits, rest = str(rest % base) + digits, rest // base
    return f"Write the decimal number {n} in base {base} (digits only).", digits, "base_conversion"


def gcd_pair(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Greatest common divisor of two numbers with a planted common factor."""
    g = rng.randrange(2, 10 ** (level + 1))
    a, b = g * rng.randrange(10, 10 ** (level + 1)), g * rng.randrange(10, 10 ** (level + 1))
    return f"What is the greatest common divisor of {a} and {b}?", str(math.gcd(a, b)), "gcd"


def digit_sum_of_power(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Sum of the digits of a power with dozens to hundreds of digits."""
    base, exp = rng.randint(2, 9), rng.randrange(20 * level, 100 * level)
    digit_sum = sum(map(int, str(base**exp)))
    return f"What is the sum of the digits of {base}^{{{exp}}}?", str(digit_sum), "digit_sum"


# ---- short chain of thought: word problems ----------------------------------------------------

def packs_left(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Packs times size, minus what is given away."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, 4 + 3 * level), rng.randint(3, 12)
    c = rng.randint(1, a * b - 1)
    return (f"{name} buys {a} packs of {item} with {b} in each pack and gives away {c}. "
            f"How many {item} does {name} have left?", str(a * b - c), "packs_left")


def change_due(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Change from a bill after buying several items."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    price, count = rng.randint(2, 9 * level), rng.randint(2, 6)
    bill = next(b for b in (10, 20, 50, 100, 200, 500) if b > price * count)
    return (f"A shop sells {item} for ${price} each. {name} buys {count} of them and pays with a ${bill} "
            f"bill. How many dollars of change does {name} get?", str(bill - price * count), "change")


def reading_left(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Pages left after two days of reading."""
    name, a, k = rng.choice(NAMES), rng.randint(5, 20 * level), rng.randint(2, 3)
    total = a * (1 + k) + rng.randint(1, 100 * level)
    times = {2: "twice", 3: "three times"}[k]
    return (f"{name} reads {a} pages on Monday and {times} as many on Tuesday. The book has {total} "
            f"pages. How many pages are left to read?", str(total - a * (1 + k)), "reading")


def two_legs(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Distance over two legs at different speeds."""
    v, h, w, g = rng.randint(40, 120), rng.randint(1, 2 + level), rng.randint(30, 90), rng.randint(1, 3)
    return (f"A train travels at {v} km/h for {h} hours and then at {w} km/h for {g} hours. "
            f"How many kilometres does it travel in total?", str(v * h + w * g), "distance")


def equal_share(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Two collections pooled and shared equally."""
    first, second = rng.sample(NAMES, 2)
    k, each = rng.randint(2, 5 + level), rng.randint(3, 10 * level)
    a = rng.randint(1, k * each - 1)
    return (f"{first} has {a} marbles and {second} has {k * each - a} marbles. They put them together "
            f"and share them equally among {k} friends. How many marbles does each friend get?",
            str(each), "share")


# ---- long chain of thought: harder problems ---------------------------------------------------

def divisible_or(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Inclusion-exclusion count of integers divisible by a or b but not c."""
    n = rng.randrange(100 * level, 1000 * level)
    a, b, c = rng.sample([2, 3, 4, 5, 6, 7, 9, 11], 3)
    count = sum(1 for k in range(1, n + 1) if (k % a == 0 or k % b == 0) and k % c != 0)
    return (f"How many integers from 1 to {n} are divisible by {a} or {b} but not by {c}?", str(count),
            "inclusion_exclusion")


def divisor_count(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Number of divisors from a prime factorization."""
    primes = rng.sample([2, 3, 5, 7, 11, 13], 1 + level)
    powers = [rng.randint(1, 4) for _ in primes]
    n = math.prod(p**e for p, e in zip(primes, powers, strict=True))
    count = math.prod(e + 1 for e in powers)
    return f"How many positive divisors does {n} have?", str(count), "divisors"


def lattice_paths(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Monotone lattice paths avoiding one point."""
    a, b = rng.randint(3, 4 + 2 * level), rng.randint(3, 4 + 2 * level)
    c, d = rng.randint(1, a - 1), rng.randint(1, b - 1)
    count = math.comb(a + b, a) - math.comb(c + d, c) * math.comb(a + b - c - d, a - c)
    return (f"A path goes from (0, 0) to ({a}, {b}) in unit steps right or up. How many such paths "
            f"avoid the point ({c}, {d})?", str(count), "lattice_paths")


def dice_probability(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Probability that several dice sum to a target, as a reduced fraction."""
    faces, dice = rng.choice((4, 6, 8, 10, 12)), 1 + level
    target = rng.randint(dice + 1, dice * faces - 1)
    ways = _count_sums(faces, dice, target)
    p = Fraction(ways, faces**dice)
    return (f"{dice} fair dice with faces 1 to {faces} are rolled. What is the probability that the sum "
            f"is {target}? Give the answer as a fraction in lowest terms.",
            f"\\frac{{{p.numerator}}}{{{p.denominator}}}", "dice")


def _count_sums(faces: int, dice: int, target: int) -> int:
    """Ways for `dice` dice with `faces` faces to sum to `target` (convolution of counts)."""
    counts = {0: 1}
    for _ in range(dice):
        nxt: dict[int, int] = {}
        for s, w in counts.items():
            for f in range(1, faces + 1):
                nxt[s + f] = nxt.get(s + f, 0) + w
        counts = nxt
    return counts.get(target, 0)


def digit_sum_count(rng: random.Random, level: int) -> tuple[str, str, str]:
    """Count of d-digit numbers with a given digit sum."""
    digits = 1 + level
    s = rng.randint(3, 9 * digits - 3)
    count = sum(1 for k in range(10 ** (digits - 1), 10**digits) if sum(map(int, str(k))) == s)
    return f"How many {digits}-digit positive integers have digits that sum to {s}?", str(count), "digit_sums"


FAMILY_GENERATORS: dict[str, tuple[Generator, ...]] = {
    "tool": (product, modular_power, power_sum, base_conversion, gcd_pair, digit_sum_of_power),
    "short_cot": (packs_left, change_due, reading_left, two_legs, equal_share),
    "long_cot": (divisible_or, divisor_count, lattice_paths, dice_probability, digit_sum_count),
}


def generate_split(family: Family, split: str, sizes: dict[str, int], *, seed: int = 0,
                   prefix: str | None = None) -> list[Task]:
    """Draw `split` of a family's shipped set; splits are disjoint (no prompt appears in two).

    One seeded stream of unique prompts is cut in the order of `sizes` (e.g. eval first, then
    train), so a split's content does not depend on the sizes of later splits. Problem `i` uses
    generator `i mod G` and difficulty level `1 + (i // G) mod 3`.

    Args:
        family: "tool", "short_cot" or "long_cot".
        split: A key of `sizes`.
        sizes: Split name -> number of problems, in stream order.
        seed: Stream seed.
        prefix: Id prefix (default: the family name).
    """
    if split not in sizes:
        raise ValueError(f"unknown split {split!r} for family {family!r}; choose one of {list(sizes)}")
    generators = FAMILY_GENERATORS[family]
    rng = random.Random(f"{family}:{seed}")
    seen: set[str] = set()
    start = sum(n for name, n in list(sizes.items())[: list(sizes).index(split)])
    tasks: list[Task] = []
    i = 0
    while len(seen) < start + sizes[split]:
        level = 1 + (i // len(generators)) % 3
        prompt, answer, kind = generators[i % len(generators)](rng, level)
        i += 1
        if prompt in seen:
            continue
        seen.add(prompt)
        if len(seen) > start:
            index = len(seen) - start - 1
            tasks.append(Task(id=f"{prefix or family}-{split}-{index:05d}", prompt=prompt, answer=answer,
                              family=family,
                              meta={"kind": kind, "difficulty": level, "source": "generated"}))
    return tasks
