"""The README is what a newcomer reads first: its commands and its config table must stay true."""

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _config_doc():
    """scripts/config_doc.py (a development script, not an installed module)."""
    spec = importlib.util.spec_from_file_location("config_doc", ROOT / "scripts" / "config_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_gives_exactly_the_two_newcomer_commands_and_ci_runs_the_test_one():
    block = re.search(r"## Two commands on a fresh machine\n\n```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make bench", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_config_table_is_current():
    table = _config_doc().markdown()
    current = table[table.index("| key |"):]
    assert current in README, "README's config table is stale: run `python scripts/config_doc.py --readme`"
