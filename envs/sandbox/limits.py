"""The accepted range of a run's limits, checked once for every backend and the HTTP server.

A caller's bad value is a `ValueError` naming the field (HTTP 422 on the server), never a run: a
timeout such as 3e6 s used to overflow the host's poll deep inside a request and leave its worker
out of step with the pool.
"""

from __future__ import annotations

import math
import numbers

MAX_TIMEOUT_S = 3600.0
"""Longest wall-clock limit of one run or cell (an hour; RL tool calls take seconds)."""
MIN_MEMORY_MB = 16
"""Smallest memory limit: the interpreter itself needs about 10 MB of address space."""
MAX_MEMORY_MB = 65536
"""Largest memory limit (64 GiB of address space); beyond this RLIMIT_AS is no limit at all."""


def check_timeout(timeout: object, field: str = "timeout") -> float:
    """Return ``timeout`` as a float in (0, MAX_TIMEOUT_S] seconds.

    Raises:
        ValueError: not a real number, NaN, infinite, <= 0 or above the bound; names ``field``.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) \
            or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ValueError(f"{field}={timeout!r} must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}].")
    return float(timeout)


def check_memory(memory_mb: object, field: str = "memory_mb") -> int:
    """Return ``memory_mb`` as an int in [MIN_MEMORY_MB, MAX_MEMORY_MB] MiB.

    Raises:
        ValueError: not an integer (bools and floats are refused) or out of range; names ``field``.
    """
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, numbers.Integral) \
            or not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:
        raise ValueError(f"{field}={memory_mb!r} must be an integer number of MiB in "
                         f"[{MIN_MEMORY_MB}, {MAX_MEMORY_MB}] (the interpreter itself needs ~10 MB).")
    return int(memory_mb)
