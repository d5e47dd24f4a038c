"""The HTTP server, driven by the real `sandbox-fusion` client and by raw JSON (verl's request shape)."""

import httpx
import pytest
from sandbox_fusion import (
    RunCodeRequest,
    RunJupyterRequest,
    RunStatus,
    SummaryMapping,
    run_code,
    run_jupyter,
    summary_run_code_result,
)


def test_ping(server_url):
    assert httpx.get(f"{server_url}/v1/ping").json() == "pong"


def test_success_through_the_client(server_url):
    r = run_code(RunCodeRequest(code="print(input()[::-1])", language="python", stdin="abc\n"),
                 endpoint=server_url, max_attempts=1)
    assert r.status == RunStatus.Success and r.run_result.stdout == "cba\n" and r.run_result.return_code == 0
    assert r.compile_result is None and r.message == "" and r.files == {}
    assert summary_run_code_result(r, SummaryMapping()) == "Success"


def test_timeout_through_the_client(server_url):
    r = run_code(RunCodeRequest(code="import time; time.sleep(10)", language="python", run_timeout=0.5),
                 endpoint=server_url, max_attempts=1)
    assert r.status == RunStatus.Failed and r.run_result.status.value == "TimeLimitExceeded"
    assert r.run_result.return_code is None
    assert summary_run_code_result(r, SummaryMapping(RunTimeout="RunTimeout")) == "RunTimeout"


def test_failure_through_the_client_is_not_a_sandbox_error(server_url):
    r = run_code(RunCodeRequest(code="import sys; print('x'); sys.exit(3)", language="python"),
                 endpoint=server_url, max_attempts=1)
    assert r.status == RunStatus.Failed and r.run_result.status.value == "Finished"
    assert (r.run_result.return_code, r.run_result.stdout) == (3, "x\n")
    r = run_code(RunCodeRequest(code="1/0", language="python"), endpoint=server_url, max_attempts=1)
    assert r.status == RunStatus.Failed and "ZeroDivisionError" in r.run_result.stderr


def test_verl_shaped_request_with_extras_and_trailing_slash(server_url):
    body = {"compile_timeout": 5, "run_timeout": 5, "code": "x = bytearray(1 << 30)", "stdin": "",
            "memory_limit_MB": 128, "language": "python", "files": {}, "fetch_files": [], "unknown_field": 1}
    resp = httpx.post(f"{server_url}/run_code/", json=body, timeout=30)
    assert resp.status_code == 200
    data = resp.json()
    assert set(data) >= {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert data["status"] == "Failed" and data["sandbox_status"] == "MemoryLimitExceeded"
    assert data["run_result"]["status"] == "Finished" and data["run_result"]["return_code"] == 1
    assert data["run_result"]["stdout_truncated"] is False


def test_output_truncation_is_flagged(server_url):
    body = {"code": "print('z' * (3 << 20))", "language": "python"}
    data = httpx.post(f"{server_url}/run_code", json=body, timeout=30).json()
    assert data["status"] == "Success" and data["run_result"]["stdout_truncated"] is True


@pytest.mark.parametrize("body, needle", [({"code": "1", "language": "klingon"}, "language"),
                                          ({"code": "1", "language": "cpp"}, "not supported"),
                                          ({"language": "python"}, "code")])
def test_bad_requests_are_422(server_url, body, needle):
    resp = httpx.post(f"{server_url}/run_code", json=body, timeout=30)
    assert resp.status_code == 422 and needle in resp.text


def test_jupyter_cells_share_state(server_url):
    r = run_jupyter(RunJupyterRequest(cells=["a = 20", "print(a + 1)", "a * 2", "1/0"]), endpoint=server_url,
                    max_attempts=1)
    assert r.status == RunStatus.Success and r.driver.status.value == "Finished"
    assert [c.stdout for c in r.cells] == ["", "21\n", "40\n", ""]
    assert r.cells[3].error[0]["ename"] == "ZeroDivisionError"


def test_jupyter_cell_timeout(server_url):
    r = run_jupyter(RunJupyterRequest(cells=["import time", "time.sleep(10)"], cell_timeout=0.5),
                    endpoint=server_url, max_attempts=1)
    assert r.status == RunStatus.Failed and r.driver.status.value == "TimeLimitExceeded"
