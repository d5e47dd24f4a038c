"""Shared fixtures: one bubblewrap LocalSandbox and one HTTP server for the whole sandbox test run.

Without a usable bubblewrap the isolated tests are skipped with the reason, unless the environment
sets STARE_REQUIRE_BWRAP=1 (CI does), which turns the skip into a failure.
"""

import os

import pytest

from envs.sandbox import LocalSandbox, bwrap_problem


def _require_bwrap():
    problem = bwrap_problem()
    if problem:
        if os.environ.get("STARE_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bubblewrap required but unusable: {problem}")
        pytest.skip(f"bubblewrap unusable here: {problem}")


@pytest.fixture(scope="session")
def box():
    _require_bwrap()
    sandbox = LocalSandbox(isolation="bwrap", max_concurrency=4, workers=2)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def server_url(box):
    from envs.sandbox.server import serve_in_background

    with serve_in_background(box) as url:
        yield url
