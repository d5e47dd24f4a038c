"""The README is what a newcomer reads first: its commands and its config table must stay true."""

import pathlib
import re

from training.config_doc import markdown

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_gives_exactly_the_two_newcomer_commands_and_ci_runs_the_test_one():
    block = re.search(r"## Two commands on a fresh machine\n\n```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make bench", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_config_table_is_current():
    table = markdown()
    current = table[table.index("| key |"):]
    assert current in README, "README's config table is stale: run `python -m training.config_doc --readme`"
