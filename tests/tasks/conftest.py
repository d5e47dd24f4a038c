import pytest

from tasks.verifier import VerifierPool
from tasks.verify_worker import TEST_HOOKS_ENV


@pytest.fixture(scope="module")
def hook_pool():
    """A private one-worker pool whose worker honours the hang/crash test hooks."""
    pool = VerifierPool(1, env={TEST_HOOKS_ENV: "1"})
    yield pool
    pool.close()
