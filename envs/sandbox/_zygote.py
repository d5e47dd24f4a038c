"""The supervisor that runs *inside* each sandbox (stdlib only; never imports this project).

It is started once per worker as ``python3 -I -c <this source> <config json>`` and then serves one
request at a time over the control socket inherited as fd 3:

    host -> zygote   JSON {"limits": {...}}  + 4 fds [code memfd, stdin memfd, stdout pipe, stderr pipe]
    zygote -> host   JSON {"rc", "signal", "memory", "cpu_time"}  once the run *and its cleanup* are done

Two modes:

- ``fork``: every request forks a fresh child from this warm interpreter (no interpreter start per
  run). The child drops to the request's rlimits, points fds 0/1/2 at the request's stdin/stdout/stderr
  and runs the code as ``__main__``. State never leaks between runs: each child is a new process.
- ``session``: the code runs in *this* process, in one persistent namespace (a notebook kernel), so a
  variable defined by one request is visible in the next.

After every run, every other process in the sandbox is killed (``kill(-1, SIGKILL)`` as PID 1 of the
sandbox's PID namespace, or the child's process group in the weaker subprocess mode) and reaped, and
the private ``/tmp`` is emptied, before the reply is sent. Under bubblewrap this process is PID 1 of
its PID namespace, so code inside cannot kill or stop it (the kernel drops such signals to a
namespace init), and it is marked non-dumpable, so code cannot ptrace it or open its fds.
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
for _name in CONFIG.get("preload", []):  # warm the modules snippets use most, once per worker
    try:
        __import__(_name)
    except Exception:  # noqa: BLE001 - a missing optional module only costs speed
        pass


def _set_limits(limits, session, first=False):
    """Apply the request's rlimits.

    A forked run gets them as hard limits (the code cannot raise them). A session keeps one process for
    all its cells: its first cell fixes the hard limits (so a cell can never lift its own memory cap;
    later cells may only ask for less), and CPU time, which accumulates, stays a soft limit counted
    from the time used so far (the wall clock is the real bound there).
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, (which, unit) in RLIMITS.items():
        value = limits.get(key)
        if value is None:
            continue
        value = int(value * unit)
        ceiling = resource.getrlimit(which)[1]
        if which == resource.RLIMIT_CPU and session:
            used = resource.getrusage(resource.RUSAGE_SELF)
            value += int(used.ru_utime + used.ru_stime)
        elif not session or first:
            ceiling = value
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
        resource.setrlimit(which, (value, ceiling))


def _exit_code(exc):
    """The exit status CPython gives for an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _report(exc, flag_fd):
    """Print a traceback as CPython would (without this supervisor's frame) and flag memory errors."""
    if isinstance(exc, MemoryError) and flag_fd is not None:
        try:
            os.write(flag_fd, b"M")
        except OSError:
            pass
    try:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
    except BaseException:  # noqa: BLE001 - out of memory while printing: the flag already says why
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


def _execute(source, namespace, filename, flag_fd, display):
    """Run ``source`` in ``namespace`` and return the exit code CPython would give."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        exec(_compile_cell(source, filename, display), namespace)  # noqa: S102 - the sandbox's job
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        _report(exc, flag_fd)
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


def _child(request, code, fds, flag_w, ctrl):
    """Forked child: drop to the limits, bind stdio, run the program, exit. Never returns."""
    rc = 1
    try:
        ctrl.close()
        os.setpgid(0, 0)
        _fresh_cwd()
        bash = request.get("language") == "bash"
        path = os.path.join(WORKDIR, "main.sh" if bash else "main.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(code)
        _bind_stdio(fds[1], fds[2], fds[3])
        for fd in fds:
            os.close(fd)
        _set_limits(request["limits"], session=False)
        if bash:
            os.execv("/bin/bash", ["bash", path])
        sys.argv = [path]
        sys.path.insert(0, WORKDIR)
        namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
        rc = _execute(code, namespace, path, flag_w, display=False)
        _flush()
    finally:
        os._exit(rc)


def _reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others():
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (me, 1)]


def _kill_everything_else(child_pgid, empty_tmp=True):
    """Kill and reap every process this run left behind, then empty the private /tmp (fork mode)."""
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
    if empty_tmp:
        _empty_dir(CONFIG["tmp"])
        if CONFIG["pid_namespace"]:  # our own IPC namespace and /dev/shm: nothing may outlive the run
            _empty_dir("/dev/shm")
            _remove_sysv_ipc()


def _empty_dir(path):
    """Remove everything under ``path`` (chmod first: the program may have made dirs read-only)."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            _quiet(os.unlink, os.path.join(root, name))
        for name in dirs:
            full = os.path.join(root, name)
            if os.path.islink(full):
                _quiet(os.unlink, full)
            else:
                _quiet(os.chmod, full, 0o700)
                _quiet(os.rmdir, full)
    if any(os.scandir(path)):  # something survived (a read-only dir walked before its chmod): retry once
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                _quiet(os.chmod, os.path.join(root, name), 0o700)
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files + dirs:
                full = os.path.join(root, name)
                _quiet(os.rmdir if os.path.isdir(full) and not os.path.islink(full) else os.unlink, full)


def _quiet(fn, *args):
    try:
        fn(*args)
    except OSError:
        pass


def _read_memfd(fd):
    os.lseek(fd, 0, 0)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _serve_fork(request, code, fds, ctrl):
    flag_r, flag_w = os.pipe()
    os.set_blocking(flag_r, False)
    pid = os.fork()
    if pid == 0:
        os.close(flag_r)
        _child(request, code, fds, flag_w, ctrl)
    for fd in fds:
        os.close(fd)
    os.close(flag_w)
    _, status, usage = os.wait4(pid, 0)
    try:
        memory = os.read(flag_r, 1) == b"M"
    except BlockingIOError:
        memory = False
    os.close(flag_r)
    _kill_everything_else(pid)
    return status, memory, usage.ru_utime + usage.ru_stime


class _Session:
    """State of the persistent interpreter in ``session`` mode."""

    def __init__(self):
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        self.cells = 0
        _fresh_cwd()
        sys.path.insert(0, WORKDIR)

    def serve(self, request, code, fds):
        self.cells += 1
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        flag_r, flag_w = os.pipe()
        os.set_blocking(flag_r, False)
        before = resource.getrusage(resource.RUSAGE_SELF)
        _bind_stdio(fds[1], fds[2], fds[3])
        for fd in fds:
            os.close(fd)
        _set_limits(request["limits"], session=True, first=self.cells == 1)
        rc = _execute(code, self.namespace, f"<cell {self.cells}>", flag_w, display=True)
        _flush()
        after = resource.getrusage(resource.RUSAGE_SELF)
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
        try:
            memory = os.read(flag_r, 1) == b"M"
        except BlockingIOError:
            memory = False
        os.close(flag_r)
        os.close(flag_w)
        self.namespace["__sandbox_display__"] = _display
        _kill_everything_else(None, empty_tmp=False)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return rc << 8, memory, cpu


_IPC = (("shm", "shmctl", 1), ("sem", "semctl", 1), ("msg", "msgctl", 1))  # (file, call, id column)


def _remove_sysv_ipc():
    """Delete the SysV shared memory, semaphores and queues a run left in this IPC namespace."""
    for kind, call, column in _IPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                ids = [int(line.split()[column]) for line in fh.readlines()[1:] if line.strip()]
        except OSError:
            continue
        if ids:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            for ident in ids:
                if kind == "sem":
                    libc.semctl(ident, 0, 0)  # IPC_RMID = 0
                else:
                    getattr(libc, call)(ident, 0, None)


def _non_dumpable():
    """Forbid ptrace and /proc/<pid>/fd access to this process by the code it runs (best effort)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001
        pass


def main():
    """Serve requests until the host closes the control socket."""
    ctrl = socket.socket(fileno=CTRL_FD)
    if CONFIG["pid_namespace"]:
        _non_dumpable()
    session = _Session() if CONFIG["mode"] == "session" else None
    if session:
        session.namespace["__sandbox_display__"] = _display
    ctrl.sendall(b'{"ready": true}')
    while True:
        message, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 4)
        if not message:
            return
        request = json.loads(message)
        code = _read_memfd(fds[0]).decode("utf-8", "replace")
        if session:
            status, memory, cpu = session.serve(request, code, fds)
        else:
            status, memory, cpu = _serve_fork(request, code, fds, ctrl)
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        rc = -signum if signum else os.WEXITSTATUS(status)
        ctrl.sendall(json.dumps({"id": request.get("id"), "rc": rc, "signal": signum, "memory": memory,
                                 "cpu_time": cpu}).encode())


main()
