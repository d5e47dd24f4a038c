"""How a sandbox worker process is started: isolation detection and the bubblewrap command line."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import subprocess
from dataclasses import dataclass, field

ISOLATIONS = ("auto", "bwrap", "subprocess")
SANDBOX_TMP = "/tmp"
"""The private writable directory inside a bubblewrap sandbox (a fresh tmpfs per worker)."""
SHM_SIZE_MB = 64
"""Size cap of the sandbox's private /dev/shm tmpfs (POSIX shared memory, multiprocessing locks)."""
SHM_INODES = 1024
"""Files (inodes) the private /dev/shm holds at most."""
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": SANDBOX_TMP,
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "MALLOC_ARENA_MAX": "2",  # RLIMIT_AS counts reserved arenas; 64 MB per thread would eat the limit
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The whole environment the code sees: the host's is cleared, so no secret can leak in."""
INSTALL_HINT = (
    "bubblewrap (`bwrap`) is needed for the isolated code sandbox. Install it with "
    "`sudo apt-get update && sudo apt-get install -y bubblewrap` (Debian/Ubuntu; `dnf install bubblewrap` "
    "on Fedora), or opt in to the weaker, unisolated mode with LocalSandbox(isolation=\"subprocess\")."
)
_ZYGOTE = pathlib.Path(__file__).with_name("_zygote.py")
_ZYGOTE_OS = pathlib.Path(__file__).with_name("_zygote_os.py")


class IsolationUnavailable(RuntimeError):
    """The requested isolation cannot be provided on this machine."""


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot isolate code here, or None when it can (probed once per process)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "`bwrap` is not on PATH."
    probe = [exe, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-add", "CAP_SYS_ADMIN",
             "--die-with-parent", "--ro-bind", "/usr", "/usr",
             *_usr_merge_links(), "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20,
                              **_as_user(_probe_uid()))
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`bwrap` failed to start: {err}"
    if done.returncode != 0:  # e.g. bubblewrap < 0.8 has no --disable-userns
        return f"`bwrap` cannot create the sandbox's namespaces here (bubblewrap >= 0.8 needed): " \
               f"{done.stderr.strip()}"
    return None


def resolve_isolation(isolation: str) -> str:
    """Map the user's choice to the mode used: "bwrap" or "subprocess".

    Raises:
        ValueError: unknown name.
        IsolationUnavailable: "auto"/"bwrap" asked for and bubblewrap is unusable.
    """
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation={isolation!r}: expected one of {ISOLATIONS}.")
    if isolation == "subprocess":
        return "subprocess"
    problem = bwrap_problem()
    if problem:
        raise IsolationUnavailable(f"{problem} {INSTALL_HINT}")
    return "bwrap"


def _probe_uid() -> int | None:
    return 65534 if os.geteuid() == 0 else None


def _as_user(uid: int | None) -> dict:
    """Popen kwargs that start the process as ``uid`` (only root may; others keep their own uid)."""
    if uid is None:
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


def _usr_merge_links() -> list[str]:
    """Recreate /bin, /lib, ... inside the sandbox: symlinks on merged-/usr systems, binds otherwise."""
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = pathlib.Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """Everything needed to start one worker process."""

    isolation: str
    """"bwrap" or "subprocess" (already resolved)."""
    mode: str
    """"fork" (a fresh process per run) or "session" (one persistent interpreter)."""
    python: str
    """Interpreter that runs user code; it must be readable by the sandbox uid."""
    uid: int | None
    """Host uid the worker runs as (root hosts give each worker its own unused uid); None keeps ours."""
    tmp_size_mb: int
    """Size cap of the private /tmp tmpfs (bwrap)."""
    tmp_inodes: int = 8192
    """Files and directories the private /tmp holds at most (bwrap): an inode flood is refused (ENOSPC)."""
    workdir: str
    """The private writable directory; the code's cwd is a fresh ``work`` directory inside it."""
    ro_binds: tuple[str, ...] = ()
    """Extra host paths made visible read-only (e.g. the prefix of a non-system interpreter)."""
    preload: tuple[str, ...] = field(default_factory=tuple)
    """Modules imported once per worker so that runs do not pay for them."""

    def config_json(self, ctrl_fd: int) -> str:
        """The JSON the zygote reads from argv[1]."""
        return json.dumps({
            "mode": self.mode, "workdir": f"{self.workdir}/work", "tmp": self.workdir,
            "ctrl_fd": ctrl_fd, "preload": list(self.preload),
            "pid_namespace": self.isolation == "bwrap",
            "kill_all": self.isolation == "bwrap" or self.uid is not None,
            "mounts": [[SANDBOX_TMP, self.tmp_size_mb << 20, self.tmp_inodes],
                       ["/dev/shm", SHM_SIZE_MB << 20, SHM_INODES]] if self.isolation == "bwrap" else [],
        })

    def argv(self, ctrl_fd: int, info_fd: int | None) -> list[str]:
        """Command line of the worker; ``info_fd`` receives bwrap's JSON with the sandbox's pid."""
        interp = [self.python, "-I", "-c", _ZYGOTE.read_text(), self.config_json(ctrl_fd),
                  _ZYGOTE_OS.read_text()]
        if self.isolation != "bwrap":
            return interp
        binds: list[str] = []
        for path in ("/usr", *self.ro_binds):
            binds += ["--ro-bind", path, path]
        for path in ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime"):
            binds += ["--ro-bind-try", path, path]
        env: list[str] = []
        for key, value in SANDBOX_ENV.items():
            env += ["--setenv", key, value]
        info = ["--info-fd", str(info_fd)] if info_fd is not None else []
        # The supervisor mounts its own size- and inode-capped tmpfs over /tmp and /dev/shm (bwrap cannot
        # cap inodes) with CAP_SYS_ADMIN in the sandbox's user namespace, then drops every capability
        # (CAP_SETPCAP empties the bounding set) before it serves a request; /dev is read-only; no
        # nested user namespace can be created.
        return [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
                "--die-with-parent", "--new-session", "--as-pid-1",
                "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",
                *binds, *_usr_merge_links(),
                "--size", str(self.tmp_size_mb << 20), "--tmpfs", SANDBOX_TMP,
                "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_SIZE_MB << 20), "--tmpfs", "/dev/shm",
                "--mqueue", "/dev/mqueue", "--remount-ro", "/dev",
                "--chdir", SANDBOX_TMP, "--clearenv", *env,
                "--hostname", "sandbox", "--remount-ro", "/", *info, *interp]

    def popen_kwargs(self) -> dict:
        """Keyword arguments for ``subprocess.Popen`` besides argv and pass_fds."""
        env = dict(SANDBOX_ENV, HOME=self.workdir) if self.isolation != "bwrap" else {}
        return {"env": env, "cwd": "/", "start_new_session": True, **_as_user(self.uid)}
