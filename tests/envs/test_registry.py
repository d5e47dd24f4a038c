"""Registration: our ids, did-you-mean, and third-party `stare.envs` entry points in fresh processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium
import pytest

import envs
from envs.errors import UnknownEnvError

STARE = str(Path(sys.executable).with_name("stare"))

PLUGIN_MODULE = '''
"""A third-party env package."""
from envs import TextEnv
from envs.lookup import grade_exact
from tasks.task import Task


def echo(text: str) -> str:
    """Echo text back.

    Args:
        text: What to echo.
    """
    return text


class EchoEnv(TextEnv):
    """Echo env from a plugin: say the word back.

    ## Version History
    - v0: initial version.
    """

    def __init__(self, **kw):
        tasks = [Task("e1", "Say hello.", "hello", "tool")]
        super().__init__(dataset=tasks, tools=[echo], grader=grade_exact, **kw)
'''

HOOKS_MODULE = '''
import envs


def register():
    envs.register("acme/Shout-v1", "acme_echo:EchoEnv")


def broken():
    raise RuntimeError("plugin bug")
'''

ENTRY_POINTS = """
[stare.envs]
acme/Echo-v0 = acme_echo:EchoEnv
acme-hooks = acme_hooks:register
acme-broken = acme_hooks:broken
"""


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    """A package with a dist-info (what `pip install` leaves), importable via PYTHONPATH only."""
    (tmp_path / "acme_echo.py").write_text(PLUGIN_MODULE)
    (tmp_path / "acme_hooks.py").write_text(HOOKS_MODULE)
    dist = tmp_path / "acme_echo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-echo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return tmp_path


def run(args: list[str], path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, cwd=path)


def test_our_ids_are_registered_on_import():
    for env_id in ("stare/MathCoT-v0", "stare/PythonTool-v0", "stare/Lookup-v0"):
        assert env_id in gymnasium.registry
        assert env_id in envs.env_ids()


def test_gymnasium_make_works_for_lookup():
    env = gymnasium.make("stare/Lookup-v0", max_tool_turns=2)
    assert env.unwrapped.max_tool_turns == 2 and env.spec.id == "stare/Lookup-v0"


def test_list_envs_gives_the_first_card_line():
    summaries = dict(envs.list_envs())
    assert summaries["stare/PythonTool-v0"] == "Multi-turn math with a persistent Python interpreter."
    assert summaries["stare/MathCoT-v0"] == "Single-turn chain-of-thought math."


def test_wrong_id_suggests_the_closest():
    with pytest.raises(UnknownEnvError, match="did you mean 'stare/PythonTool-v0'"):
        envs.make("stare/PythonTools-v0")
    with pytest.raises(UnknownEnvError, match="did you mean 'stare/Lookup-v0'"):
        envs.make("stare/lookup-v0")


def test_plugin_found_in_a_fresh_process_without_importing_it(plugin_path):
    code = textwrap.dedent("""
        import sys, warnings
        warnings.simplefilter("error")  # the broken hook must warn, so catch it explicitly below
        try:
            import envs
        except Warning as w:
            print("WARNING", w)
        import envs, gymnasium
        print("imported acme_echo:", "acme_echo" in sys.modules)
        print(sorted(i for i in envs.env_ids() if i.startswith("acme/")))
        env = gymnasium.make("acme/Echo-v0")
        env.reset(seed=0)
        call = '<tool_call>{"name": "echo", "arguments": {"text": "hello"}}</tool_call>'
        print(env.step(call).messages[0]["content"])
        print(env.step("\\\\boxed{hello}").reward)
    """)
    out = run([sys.executable, "-c", code], plugin_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("WARNING stare.envs entry point 'acme-broken'") and "plugin bug" in lines[0]
    assert "imported acme_echo: False" in lines  # id entry points are registered as strings
    assert "['acme/Echo-v0', 'acme/Shout-v1']" in lines
    assert lines[-2:] == ["hello", "1.0"]


def test_stare_envs_list_and_check_see_the_plugin(plugin_path):
    listed = run([STARE, "envs", "list"], plugin_path)
    assert listed.returncode == 0, listed.stderr
    assert "acme/Echo-v0" in listed.stdout and "Echo env from a plugin: say the word back." in listed.stdout
    assert "acme/Shout-v1" in listed.stdout and "stare/PythonTool-v0" in listed.stdout
    checked = run([STARE, "envs", "check", "acme/Echo-v0"], plugin_path)
    assert checked.returncode == 0, checked.stderr
    assert "acme/Echo-v0: passed 7 checks" in checked.stdout


def test_stare_envs_check_reports_a_wrong_id_and_runs_the_checker():
    from typer.testing import CliRunner

    from training.commands.envs import app

    wrong = CliRunner().invoke(app, ["check", "stare/Lookup-v1"])
    assert wrong.exit_code == 2 and "did you mean 'stare/Lookup-v0'" in wrong.output
    good = CliRunner().invoke(app, ["check", "stare/Lookup-v0", "--seed", "3"])
    assert good.exit_code == 0 and "stare/Lookup-v0: passed 7 checks" in good.output


@pytest.mark.slow
def test_pip_installed_plugin_is_listed(tmp_path):
    """A real `pip install` (into a --target dir, so the shared venv is not mutated)."""
    src = tmp_path / "src"
    (src / "acme_pip").mkdir(parents=True)
    (src / "acme_pip" / "__init__.py").write_text(PLUGIN_MODULE)
    (src / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "acme-pip"
        version = "0.1"
        [project.entry-points."stare.envs"]
        "acme/Pip-v0" = "acme_pip:EchoEnv"
    """))
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--no-build-isolation", "--no-index", "--target", str(target), str(src)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    listed = run([STARE, "envs", "list"], target)
    assert "acme/Pip-v0" in listed.stdout and "Echo env from a plugin" in listed.stdout
    checked = run([STARE, "envs", "check", "acme/Pip-v0"], target)
    assert checked.returncode == 0, checked.stderr
