"""Kernel-facing helpers of the sandbox supervisor (stdlib only; loaded by ``_zygote.py`` from argv[2]).

Capped tmpfs mounts, the capability drop, emptying writable directories, SysV IPC removal and key
ring restoration: everything that makes a warm worker pristine again after a run.
"""

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, CLONE_NEWNS = 2, 4, 0x00020000
KEYRINGS = (-3, -4, -5)  # KEY_SPEC_SESSION_KEYRING, _USER_KEYRING, _USER_SESSION_KEYRING
PRISTINE_KEYS = {}
_IPC = (("shm", "shmctl", 1), ("sem", "semctl", 1), ("msg", "msgctl", 1))  # (file, call, id column)


def empty_dir(path):
    """Remove everything under ``path`` (chmod first: the program may have made dirs read-only)."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            quiet(os.unlink, os.path.join(root, name))
        for name in dirs:
            full = os.path.join(root, name)
            if os.path.islink(full):
                quiet(os.unlink, full)
            else:
                quiet(os.chmod, full, 0o700)
                quiet(os.rmdir, full)
    if os.path.isdir(path) and any(os.scandir(path)):  # a read-only dir walked before its chmod: retry
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                quiet(os.chmod, os.path.join(root, name), 0o700)
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files + dirs:
                full = os.path.join(root, name)
                quiet(os.rmdir if os.path.isdir(full) and not os.path.islink(full) else os.unlink, full)


def quiet(fn, *args):
    """Call ``fn(*args)``, ignoring OSError (a file already gone, a permission the program removed)."""
    try:
        fn(*args)
    except OSError:
        pass


def remove_sysv_ipc():
    """Delete the SysV shared memory, semaphores and queues a run left in this IPC namespace."""
    for kind, call, column in _IPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                ids = [int(line.split()[column]) for line in fh.readlines()[1:] if line.strip()]
        except OSError:
            continue
        for ident in ids:
            if kind == "sem":
                LIBC.semctl(ident, 0, 0)  # IPC_RMID = 0
            else:
                getattr(LIBC, call)(ident, 0, None)


def private_mounts(mounts):
    """Mount fresh tmpfs with size *and inode* caps over /tmp and /dev/shm in a mount namespace of ours.

    bubblewrap's ``--tmpfs`` caps only bytes, so a flood of empty files would hold unbounded kernel
    memory; ``nr_inodes`` makes it fail with ENOSPC instead. Needs CAP_SYS_ADMIN in the sandbox's
    user namespace, which `drop_capabilities` gives up before any request is served.
    """
    if not mounts:
        return
    if LIBC.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) for the capped tmpfs mounts")
    for path, size, inodes in mounts:
        options = f"size={size},nr_inodes={inodes},mode=0755".encode()
        if LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
            raise OSError(ctypes.get_errno(), f"mount tmpfs {path} ({options.decode()})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    """Give up every capability (ambient, bounding, then capset to zero) and check it in /proc."""
    LIBC.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    for cap in range(64):
        LIBC.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    LIBC.syscall(126, ctypes.byref(header), data)  # SYS_capset (x86_64)
    with open("/proc/self/status") as fh:
        held = [line.split() for line in fh if line.startswith("Cap")]
    if any(int(value, 16) for _, value in held):
        raise OSError(f"the sandbox supervisor could not drop its capabilities: {held}")


def keyring_links(ring):
    """Serials linked in a key ring (keyctl READ; SYS_keyctl is 250 on x86_64)."""
    buffer = (ctypes.c_int32 * 256)()
    size = LIBC.syscall(250, 11, ring, buffer, ctypes.sizeof(buffer))
    return set(buffer[: max(0, min(size, ctypes.sizeof(buffer)) // 4)])


def restore_keyrings():
    """Unlink every key a run added to the key rings this process shares with it (they outlive runs)."""
    for ring in KEYRINGS:
        pristine = PRISTINE_KEYS.setdefault(ring, keyring_links(ring))
        for serial in keyring_links(ring) - pristine:
            LIBC.syscall(250, 9, serial, ring)  # KEYCTL_UNLINK


def non_dumpable():
    """Forbid ptrace and /proc/<pid>/fd access to this process by the code it runs (best effort)."""
    LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
