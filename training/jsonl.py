"""JSON Lines files read back: one decoded value per non-blank line, errors naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def jsonl_lines(path: Path, error: type[ValueError] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number from 1, decoded value) for each non-blank line of `path`.

    Raises:
        error: A line is not JSON: "<path>:<n>: not valid JSON (<reason>); fix or remove the line".
    """
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{path}:{n}: not valid JSON ({err.msg}); fix or remove the line") from None
        yield n, value
