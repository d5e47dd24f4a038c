"""The worked example of docs/envs.md (pasted in the README) runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "envs.md"


def worked_example() -> str:
    section = DOC.read_text().split("## Worked example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_worked_example_is_under_60_lines_and_runs(tmp_path):
    code = worked_example()
    assert len(code.strip().splitlines()) < 60
    script = tmp_path / "units_env.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "['spaces', 'reset', 'determinism', 'task_option', 'malformed_actions', 'turn_budget', "
        "'close_idempotent']",
        "3.11", "1.0"]
