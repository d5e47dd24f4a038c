"""The supervisor that runs *inside* each sandbox (stdlib only; never imports this project).

It is started once per worker as ``python3 -I -c <this source> <config json> <_zygote_os.py source>``
and then serves one request at a time over the control socket inherited as fd 3:

    host -> zygote   JSON {"id", "limits", "language"} + 4 fds [code memfd, stdin memfd, stdout, stderr]
    zygote -> host   JSON {"id", "rc", "signal", "cpu_time", "exited", "note", "cleanup_s"} once the
                     run *and its cleanup* are done ("id" echoes the request's: the host refuses any other)

User code never runs in this process and never holds the control socket, so it cannot forge a reply;
the reply says only what this supervisor observed (the wait status, the CPU time, what it killed).
This process ignores every signal it can (a namespace's PID 1 only receives signals it handles, so
code inside cannot kill, stop or interrupt it) and is non-dumpable (no ptrace, no /proc/1/fd).

Two modes:

- ``fork``: every request forks a fresh child from this warm interpreter (no interpreter start per
  run). The child drops to the request's rlimits, points fds 0/1/2 at the request's stdin/stdout/stderr
  and runs the code as ``__main__``. State never leaks between runs: each child is a new process.
- ``session``: a *kernel* process, forked once, runs every cell in one persistent namespace (a
  notebook kernel). This supervisor sets the kernel's limits from outside (``prlimit``), hands it each
  cell, stops it (SIGSTOP) as soon as the cell ends, so no thread, timer or handler of the cell runs
  between cells, kills every other process, and restarts nothing: a cell that leaves a thread alive
  ends the kernel ("exited" in the reply) and the next cell starts an empty session.

After every run every other process in the sandbox is killed and reaped, and in fork mode the
private ``/tmp`` (and ``/dev/shm``, the POSIX message queues and SysV IPC) is emptied before the reply.
"""

import ast
import json
import linecache
import os
import resource
import signal
import socket
import sys
import time
import traceback
import types

CONFIG = json.loads(sys.argv[1])
CTRL_FD = CONFIG["ctrl_fd"]
WORKDIR = CONFIG["workdir"]
RLIMITS = {
    "memory_mb": (resource.RLIMIT_AS, 1 << 20),
    "cpu_s": (resource.RLIMIT_CPU, 1),
    "nproc": (resource.RLIMIT_NPROC, 1),
    "fsize_mb": (resource.RLIMIT_FSIZE, 1 << 20),
    "nofile": (resource.RLIMIT_NOFILE, 1),
}
OS = types.ModuleType("sandbox_os")  # _zygote_os.py, passed as argv[2] (the sandbox cannot import files)
exec(compile(sys.argv[2], "_zygote_os.py", "exec"), OS.__dict__)  # noqa: S102 - our own source
SHIELDED = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD)]
ORIGINAL_HANDLERS = {}
for _name in CONFIG.get("preload", []):  # warm the modules snippets use most, once per worker
    try:
        __import__(_name)
    except Exception:  # noqa: BLE001 - a missing optional module only costs speed
        pass


def _shield():
    """Ignore the signals code could use to interrupt or kill this supervisor (remembering the handlers).

    As PID 1 of its own PID namespace (bwrap) it only receives signals it handles, so only the ones
    with a Python handler (SIGINT) need ignoring there; without that namespace every catchable one.
    """
    shielded = SHIELDED if not CONFIG["pid_namespace"] else \
        [sig for sig in SHIELDED if callable(signal.getsignal(sig))]
    for sig in shielded:
        try:
            ORIGINAL_HANDLERS[sig] = signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


def _unshield():
    """Give a process that runs user code the handlers a plain ``python3`` has."""
    for sig, handler in ORIGINAL_HANDLERS.items():
        try:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass


def _apply_limits(pid, limits, session=False, first=False):
    """Set the request's rlimits on ``pid`` (0: this process) with ``prlimit``.

    A forked run gets them as hard limits (the code cannot raise them). A session kernel keeps one
    process for all its cells: its first cell fixes the hard limits (so a cell can never lift its own
    memory cap; later cells may only ask for less), and CPU time, which accumulates, stays a soft
    limit counted from the time used so far (the wall clock is the real bound there).
    """
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    for key, (which, unit) in RLIMITS.items():
        value = limits.get(key)
        if value is None:
            continue
        value = int(value * unit)
        ceiling = resource.prlimit(pid, which)[1]
        if which == resource.RLIMIT_CPU and session:
            value += int(_cpu_seconds(pid))
        elif not session or first:
            ceiling = value
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
        resource.prlimit(pid, which, (value, ceiling))


def _cpu_seconds(pid):
    """User + system CPU seconds ``pid`` has used, read from /proc (observed, not reported by it)."""
    with open(f"/proc/{pid or os.getpid()}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _exit_code(exc):
    """The exit status CPython gives for an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _report(exc):
    """Print a traceback as CPython would (without this supervisor's frame).

    An uncaught MemoryError must end with its ``MemoryError`` line even when printing the traceback
    itself runs out of memory: the host reads that line (see ``worker._is_memory_error``).
    """
    try:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
    except BaseException:  # noqa: BLE001 - out of memory while printing
        if isinstance(exc, MemoryError):
            _flush()
            try:
                os.write(2, b"\nMemoryError\n")
            except OSError:
                pass


def _compile_cell(source, filename, display):
    """Compile ``source``; with ``display`` the last expression's repr is printed, as in a notebook."""
    tree = ast.parse(source, filename)
    if display and tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        call = ast.Call(func=ast.Name("__sandbox_display__", ast.Load()), args=[last.value], keywords=[])
        tree.body[-1] = ast.copy_location(ast.Expr(call), last)
        ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec")


def _display(value):
    if value is not None:
        print(repr(value))


def _execute(source, namespace, filename, display):
    """Run ``source`` in ``namespace`` and return the exit code CPython would give."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        exec(_compile_cell(source, filename, display), namespace)  # noqa: S102 - the sandbox's job
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        _report(exc)
        return 1


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken pipe is the program's business
            pass


def _bind_stdio(stdin_fd, out_fd, err_fd):
    """Point fds 0/1/2 and sys.std* at the request's streams."""
    os.dup2(stdin_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdin = open(0, closefd=False, encoding="utf-8", errors="replace")  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                      buffering=1)


def _fresh_cwd():
    os.makedirs(WORKDIR, exist_ok=True)
    os.chdir(WORKDIR)


def _child(request, code, fds, ctrl):
    """Forked child: drop to the limits, bind stdio, run the program, exit. Never returns."""
    rc = 1
    try:
        ctrl.close()
        os.setpgid(0, 0)
        _unshield()
        _fresh_cwd()
        bash = request.get("language") == "bash"
        path = os.path.join(WORKDIR, "main.sh" if bash else "main.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(code)
        _bind_stdio(fds[1], fds[2], fds[3])
        for fd in fds:
            os.close(fd)
        _apply_limits(0, request["limits"])
        if bash:
            os.execv("/bin/bash", ["bash", path])
        sys.argv = [path]
        sys.path.insert(0, WORKDIR)
        namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
        rc = _execute(code, namespace, path, display=False)
        _flush()
    finally:
        os._exit(rc)


def _reap_all(keep=None):
    """Reap every exited child, except ``keep`` (the session kernel: its status is read on purpose)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == keep:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


def _stat(pid):
    """(state, pgid) of ``pid`` from /proc, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2])


def _strays(keep, group):
    """Live processes a run may have left, except us and ``keep``.

    Everyone in our own PID namespace or uid; in the weak non-root subprocess mode only the members
    of process group ``group``.
    """
    me, uid, found = os.getpid(), os.getuid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, 1, keep):
            continue
        stat = _stat(entry)
        if stat is None or stat[0] in "ZX":
            continue
        if CONFIG["pid_namespace"] or (CONFIG["kill_all"] and _owner(entry) == uid) or stat[1] == group:
            found.append(int(entry))
    return found


def _owner(pid):
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _kill_strays(keep, group):
    """SIGKILL and reap every stray until none is left (5 s at most); False if some survived."""
    deadline = time.monotonic() + 5.0
    while True:
        strays = _strays(keep, group)
        if not strays:
            return True
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap_all(keep)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


def _kill_everything_else(child_pgid):
    """Kill and reap every process this run left behind, then empty the writable places (fork mode)."""
    if CONFIG["kill_all"]:  # PID 1 of our own namespace (or a uid nobody else uses)
        deadline = time.monotonic() + 5.0
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:  # nobody else left (zombies of ours still count: reap them)
                _reap_all()
                break
            _reap_all()
            if not CONFIG["pid_namespace"] or not _others() or time.monotonic() > deadline:
                break
            time.sleep(0.0005)
    elif child_pgid:
        try:
            os.killpg(child_pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _reap_all()
    _empty_writable()


def _others():
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (me, 1)]


def _empty_writable():
    OS.empty_dir(CONFIG["tmp"])
    if CONFIG["pid_namespace"]:  # our own IPC namespace, /dev/shm and key rings: nothing outlives the run
        OS.empty_dir("/dev/shm")
        OS.empty_dir("/dev/mqueue")
        OS.remove_sysv_ipc()
        OS.restore_keyrings()


def _read_memfd(fd):
    os.lseek(fd, 0, 0)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _serve_fork(request, code, fds, ctrl):
    pid = os.fork()
    if pid == 0:
        _child(request, code, fds, ctrl)
    for fd in fds:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    start = time.perf_counter()
    _kill_everything_else(pid)
    return {"status": status, "cpu_time": usage.ru_utime + usage.ru_stime,
            "cleanup_s": time.perf_counter() - start}


def _kernel_main(sock):
    """The session kernel: run each cell it is handed in one namespace. Never returns.

    Everything here is reachable by the cells (they run in this process), so nothing it sends is
    trusted: the supervisor only takes the exit code from it, and only with the cell's token.
    """
    _unshield()
    os.setpgid(0, 0)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__sandbox_display__": _display}
    _fresh_cwd()
    sys.path.insert(0, WORKDIR)
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
        if not message:
            os._exit(0)
        cell = json.loads(message)
        code = _read_memfd(fds[0]).decode("utf-8", "replace")
        _reap_all()  # children the previous cell left (the supervisor killed them)
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        _bind_stdio(fds[1], fds[2], fds[3])
        for fd in fds:
            os.close(fd)
        rc = _execute(code, namespace, f"<cell {cell['cell']}>", display=True)
        _flush()
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
        namespace["__sandbox_display__"] = _display
        sock.sendall(json.dumps({"token": cell["token"], "rc": rc}).encode())


class _Session:
    """The supervisor's side of a session: the kernel process and how to run one cell in it."""

    def __init__(self, ctrl):
        self.cells = 0
        self.status = None
        """The kernel's wait status once it has been reaped."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                ctrl.close()
                self.sock.close()
                _kernel_main(theirs)
            finally:
                os._exit(70)
        theirs.close()
        OS.quiet(os.setpgid, self.pid, self.pid)
        os.kill(self.pid, signal.SIGSTOP)  # frozen until its first cell

    def serve(self, request, code, fds):
        self.cells += 1
        token = os.urandom(16).hex()
        before = _cpu_seconds(self.pid)
        _apply_limits(self.pid, request["limits"], session=True, first=self.cells == 1)
        os.kill(self.pid, signal.SIGCONT)
        try:
            socket.send_fds(self.sock, [json.dumps({"cell": self.cells, "token": token}).encode()], fds)
        except OSError:
            pass  # the kernel is gone: _await tells how it ended
        for fd in fds:
            os.close(fd)
        rc = self._await(token)
        cpu = max(0.0, _cpu_seconds(self.pid) - before) if rc is not None else 0.0
        if rc is None:
            return self._ended(cpu)
        self._threads(settle_s=0.2)  # a thread the cell joined may still be leaving the kernel's task list
        stopped = self._freeze()
        threads = self._threads() if stopped else 0
        cleared = _kill_strays(self.pid, self.pid)
        if not stopped:
            return self._ended(cpu)
        if threads > 1 or not cleared:
            why = "left threads running" if threads > 1 else "left processes that could not be killed"
            self._kill()
            return {"status": rc << 8, "cpu_time": cpu, "exited": True,
                    "note": f"the cell {why}, so the session was ended"}
        return {"status": rc << 8, "cpu_time": cpu}

    def _await(self, token):
        """The cell's exit code from the kernel, or None when the kernel ended (EOF)."""
        while True:
            try:
                message = self.sock.recv(1 << 16)
            except OSError:
                return None
            if not message:
                return None
            try:
                reply = json.loads(message)
            except ValueError:
                continue
            if isinstance(reply, dict) and reply.get("token") == token and isinstance(reply.get("rc"), int):
                return reply["rc"] & 0xFF

    def _threads(self, settle_s=0.0):
        """Threads of the kernel (waiting up to ``settle_s`` for it to drop to one)."""
        deadline = time.monotonic() + settle_s
        while True:
            try:
                count = len(os.listdir(f"/proc/{self.pid}/task"))
            except OSError:
                return 0
            if count <= 1 or time.monotonic() >= deadline:
                return count
            time.sleep(0.001)

    def _freeze(self):
        """SIGSTOP the kernel and wait until it is stopped; False when it died instead."""
        try:
            os.kill(self.pid, signal.SIGSTOP)
            _, status = os.waitpid(self.pid, os.WUNTRACED)
        except (ProcessLookupError, ChildProcessError):
            return False
        if os.WIFSTOPPED(status):
            return True
        self.status = status
        return False

    def _kill(self):
        """SIGKILL the kernel (a no-op once it is exiting: its own status is kept) and reap it."""
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                self.status = os.waitpid(self.pid, 0)[1]
            except (ProcessLookupError, ChildProcessError):
                self.status = 1 << 8
        _kill_strays(None, self.pid)

    def _ended(self, cpu):
        """The kernel ended (os._exit, a fatal signal) or dropped its channel: report its wait status."""
        self._kill()
        return {"status": self.status, "cpu_time": cpu, "exited": True, "note": "the interpreter exited"}


def _reply(request, outcome):
    status = outcome["status"]
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    rc = -signum if signum else os.WEXITSTATUS(status)
    return {"id": request.get("id"), "rc": rc, "signal": signum, "cpu_time": outcome["cpu_time"],
            "exited": outcome.get("exited", False), "note": outcome.get("note", ""),
            "cleanup_s": outcome.get("cleanup_s", 0.0)}


def main():
    """Serve requests until the host closes the control socket."""
    ctrl = socket.socket(fileno=CTRL_FD)
    _shield()
    if CONFIG["pid_namespace"]:
        OS.private_mounts(CONFIG["mounts"])
        OS.drop_capabilities()
        OS.non_dumpable()
        OS.restore_keyrings()  # records the pristine links
    session = _Session(ctrl) if CONFIG["mode"] == "session" else None
    ctrl.sendall(b'{"ready": true}')
    while True:
        message, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 4)
        if not message:
            return
        request = json.loads(message)
        code = _read_memfd(fds[0]).decode("utf-8", "replace")
        if session:
            outcome = session.serve(request, code, fds)
        else:
            outcome = _serve_fork(request, code, fds, ctrl)
        ctrl.sendall(json.dumps(_reply(request, outcome)).encode())
        if outcome.get("exited"):
            return


main()
