"""One sandbox worker seen from the host: start it, send it a run, drain its output, kill it.

A worker is a long-lived supervisor process (``_zygote.py``) inside its own bubblewrap sandbox.
Per run the host creates two pipes (stdout, stderr) and two memfds (code, stdin), passes them over a
unix socket, and drains both pipes *while the program runs* with ``epoll``, keeping at most
``output_limit`` bytes of each and discarding the rest (so a flood neither stalls nor eats memory).
The wall-clock limit is enforced here: on expiry the whole sandbox is killed (its PID namespace dies
with its PID 1) and the pool starts a new one.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from envs.sandbox.launch import WorkerSpec
from envs.sandbox.result import RunResult, RunStatus

START_TIMEOUT_S = 30.0
"""How long a new worker may take to report ready before it counts as a sandbox fault."""
DRAIN_AFTER_KILL_S = 2.0
"""How long to keep reading pipes after a kill (writers are dead, so EOF comes at once)."""


class SandboxStartError(RuntimeError):
    """A worker process could not be started (a fault of the sandbox, not of user code)."""


TAIL_BYTES = 4096
"""Bytes of each stream's end kept even past the cap (the status reads stderr's last line)."""


@dataclass
class _Capped:
    """An output buffer that keeps the first ``limit`` bytes (and the last TAIL_BYTES) and counts the rest."""

    limit: int
    data: bytearray
    total: int = 0
    tail: bytes = b""

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class Worker:
    """A started sandbox supervisor that runs one program at a time."""

    def __init__(self, spec: WorkerSpec):
        """Start the worker and wait until it reports ready.

        Raises:
            SandboxStartError: the process died or stayed silent for ``START_TIMEOUT_S``.
        """
        self.spec = spec
        self.runs = 0
        self._next_id = 1
        """Id of the next request; the supervisor echoes it in its reply."""
        self.cleanup_s = 0.0
        """Seconds the supervisor spent killing leftovers and emptying /tmp, /dev/shm, IPC after runs."""
        self._sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_r, info_w = os.pipe() if spec.isolation == "bwrap" else (None, None)
        fds = [child.fileno()] + ([info_w] if info_w is not None else [])
        try:
            self._proc = subprocess.Popen(spec.argv(child.fileno(), info_w), pass_fds=fds,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, **spec.popen_kwargs())
        finally:
            child.close()
            if info_w is not None:
                os.close(info_w)
        self._pidfd: int | None = None
        try:
            self._await_ready(info_r)
        except BaseException:
            self.kill()
            raise
        finally:
            if info_r is not None:
                os.close(info_r)

    def _await_ready(self, info_r: int | None) -> None:
        self._sock.settimeout(START_TIMEOUT_S)
        try:
            hello = self._sock.recv(1024)
        except (TimeoutError, OSError):
            hello = b""
        self._sock.settimeout(None)
        if not hello.startswith(b'{"ready"'):
            self._proc.kill()
            err = self._proc.stderr.read().decode(errors="replace")[-2000:] if self._proc.stderr else ""
            raise SandboxStartError(f"sandbox worker failed to start (exit {self._proc.wait()}): {err}")
        if info_r is not None:  # pin the sandbox's PID 1 with a pidfd: killing it kills the namespace
            info = json.loads(os.read(info_r, 4096).decode() or "{}")
            if "child-pid" in info:
                self._pidfd = os.pidfd_open(info["child-pid"])

    @property
    def alive(self) -> bool:
        """Whether the supervisor is still running."""
        return self._proc.poll() is None

    def run(self, code: str, *, stdin: str, limits: dict, timeout: float, output_limit: int,
            language: str = "python") -> RunResult:
        """Run one program; see ``LocalSandbox.run``. The worker is dead afterwards on timeout/crash.

        A run that does not complete normally (the caller is interrupted, anything raises here) kills
        the worker before the error propagates: a worker whose reply is still in flight must never
        serve another request.
        """
        self.runs += 1
        request_id, self._next_id = self._next_id, self._next_id + 1
        try:
            return self._run(request_id, code, stdin, limits, timeout, output_limit, language)
        except BaseException:
            self.kill()
            raise

    def _run(self, request_id: int, code: str, stdin: str, limits: dict, timeout: float, output_limit: int,
             language: str) -> RunResult:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sent = [_memfd("code", code.encode("utf-8", "surrogatepass")),
                _memfd("stdin", stdin.encode("utf-8", "surrogatepass")), out_w, err_w]
        start = time.monotonic()
        request = {"id": request_id, "limits": limits, "language": language}
        try:
            socket.send_fds(self._sock, [json.dumps(request).encode()], sent)
        except OSError as err:
            for fd in (*sent, out_r, err_r):
                os.close(fd)
            self.kill()
            return _fault(f"sandbox worker unreachable: {err}", time.monotonic() - start)
        for fd in sent:
            os.close(fd)
        out, err = _Capped(output_limit, bytearray()), _Capped(output_limit, bytearray())
        reply, timed_out = self._collect({out_r: out, err_r: err}, start + timeout)
        wall = time.monotonic() - start
        if reply is not None and not timed_out and reply.get("id") != request_id:
            self.kill()  # out of step: this reply belongs to another request; never report it
            return _fault(f"[sandbox] reply for request {reply.get('id')!r} arrived for request "
                          f"{request_id}; the worker was retired", wall)
        return self._result(reply, timed_out, out, err, wall)

    def _collect(self, streams: dict[int, _Capped], deadline: float) -> tuple[dict | None, bool]:
        """Drain the pipes and wait for the supervisor's reply, killing everything at ``deadline``."""
        sel = selectors.DefaultSelector()
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        sel.register(self._sock, selectors.EVENT_READ)
        reply, waiting_reply, timed_out = None, True, False
        try:
            while streams or waiting_reply:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if timed_out:  # already killed and still not at EOF: give up on the rest
                        break
                    timed_out, waiting_reply = True, False
                    self._unregister(sel, self._sock)
                    self.kill()
                    deadline = time.monotonic() + DRAIN_AFTER_KILL_S
                    continue
                for key, _ in sel.select(remaining):
                    if key.fileobj is self._sock:
                        reply = _decode_reply(self._sock.recv(65536))
                        waiting_reply = False
                        self._unregister(sel, self._sock)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        streams[key.fd].feed(chunk)
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
                        del streams[key.fd]
        finally:
            for fd in streams:
                sel.unregister(fd)
                os.close(fd)
            sel.close()
        return reply, timed_out

    @staticmethod
    def _unregister(sel: selectors.BaseSelector, obj: object) -> None:
        try:
            sel.unregister(obj)
        except (KeyError, ValueError):
            pass

    def _result(self, reply: dict | None, timed_out: bool, out: _Capped, err: _Capped,
                wall: float) -> RunResult:
        common = {"stdout": out.text(), "stdout_truncated": out.truncated,
                  "stderr_truncated": err.truncated, "wall_time": wall}
        if timed_out:
            return RunResult(status=RunStatus.TimeLimitExceeded, stderr=err.text(), return_code=None,
                             **common)
        if reply is None:  # the supervisor itself ended: code cannot do that, so it is our fault
            return self._supervisor_died(err.text(), common)
        stderr = err.text()
        self.cleanup_s += float(reply.get("cleanup_s") or 0.0)
        if reply.get("exited"):  # a session's kernel ended: the next cell starts an empty session
            self.kill()
            stderr = _join(stderr, f"[sandbox] {reply.get('note') or 'the interpreter exited'}; "
                                   "the session restarts empty.")
        if reply["signal"] == signal.SIGXCPU:
            status = RunStatus.TimeLimitExceeded
        elif _is_memory_error(reply["rc"], err.tail):
            status = RunStatus.MemoryLimitExceeded
        else:
            status = RunStatus.Finished
        return RunResult(status=status, stderr=stderr, return_code=reply["rc"], cpu_time=reply["cpu_time"],
                         **common)

    def _supervisor_died(self, stderr: str, common: dict) -> RunResult:
        """The supervisor ignores every signal the code can send it, so its death is a sandbox fault."""
        try:
            code = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        return RunResult(status=RunStatus.SandboxError, return_code=None,
                         stderr=_join(stderr, f"[sandbox] worker supervisor exited ({code})"), **common)

    def kill(self) -> None:
        """Kill the sandbox and every process in it; returns once they are gone (idempotent)."""
        if self._pidfd is not None:  # kill PID 1 of the namespace first and let bwrap reap it: killing
            try:                      # bwrap first would leave its child a zombie of the host's init
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._proc.wait()
        if self._pidfd is not None:  # the namespace's PID 1 exits only after all its processes are gone
            _wait_readable(self._pidfd, 5.0)
            os.close(self._pidfd)
            self._pidfd = None
        if self.spec.isolation != "bwrap":
            _kill_leftovers(self._proc.pid, self.spec.uid)
        self._sock.close()
        if self._proc.stderr:
            self._proc.stderr.close()


def _wait_readable(fd: int, timeout: float) -> None:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        sel.select(timeout)


def _kill_leftovers(session_id: int, uid: int | None) -> None:
    """Subprocess mode: kill what is left of a worker (same session, or the worker's private uid)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()  # noqa: SIM115
            owner = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        sid = int(stat.rsplit(")", 1)[1].split()[3])
        if sid == session_id or (uid is not None and owner == uid):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def _is_memory_error(rc: int | None, stderr_tail: bytes) -> bool:
    """An uncaught MemoryError: exit code 1 and a last stderr line starting with ``MemoryError``.

    Decided from what the run printed and how it exited (what CPython does when RLIMIT_AS refuses an
    allocation), never from a side channel the code could write to.
    """
    lines = [line for line in stderr_tail.decode("utf-8", "replace").splitlines() if line.strip()]
    return rc == 1 and bool(lines) and lines[-1].startswith("MemoryError")


def _decode_reply(message: bytes) -> dict | None:
    """The supervisor's JSON reply; None for EOF; a malformed one becomes a reply with no id (a fault)."""
    if not message:
        return None
    try:
        reply = json.loads(message)
    except ValueError:
        return {"id": None}
    return reply if isinstance(reply, dict) else {"id": None}


def _join(stderr: str, note: str) -> str:
    return f"{stderr.rstrip(chr(10))}\n{note}" if stderr else note


def _fault(message: str, wall: float) -> RunResult:
    return RunResult(status=RunStatus.SandboxError, stdout="", stderr=message, return_code=None,
                     wall_time=wall)
