"""Hostile probes, class 1: nothing survives a stateless run.

One warm worker serves every run here, so whatever a run leaves behind would be seen by the next
run (another episode of the group, another HTTP client). The next run must see exactly the
pristine file system, environment, device nodes, IPC objects and key rings.
"""

import pytest

from envs.sandbox import LocalSandbox, RunStatus

FINGERPRINT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
seen = []
for top in ('/tmp', '/dev', '/dev/shm', '/dev/mqueue'):
    for root, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            st = os.lstat(full)
            seen.append((full, st.st_mode, st.st_size if not os.path.isdir(full) else 0))
seen.append(sorted(os.environ.items()))
for kind in ('shm', 'sem', 'msg'):
    seen.append(open(f'/proc/sysvipc/{kind}').read().splitlines()[1:])
seen.append([libc.syscall(250, 11, ring, None, 0) for ring in (-3, -4, -5)])  # KEYCTL_READ: bytes of links
print(repr(seen))
"""
LITTER = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(label, fn):
    try:
        fn()
    except OSError:
        pass
attempt('dev file', lambda: open('/dev/parked', 'wb').write(b'x' * (1 << 20)))
attempt('dev stdout', lambda: (os.unlink('/dev/stdout'), os.symlink('/tmp/hijack', '/dev/stdout')))
attempt('dev fd', lambda: os.rename('/dev/fd', '/dev/fd.old'))
attempt('dev dir', lambda: os.mkdir('/dev/mydir'))
attempt('shm', lambda: open('/dev/shm/parked', 'wb').write(b'y' * 1000))
attempt('tmp', lambda: open('/tmp/parked', 'w').write('z'))
attempt('tmp dir', lambda: (os.makedirs('/tmp/a/b/c'), os.chmod('/tmp/a/b', 0o500), os.chmod('/tmp/a', 0)))
os.environ['PARKED'] = '1'
libc.mq_open(b'/parked', os.O_CREAT | os.O_RDWR, 0o600, None)
libc.shmget(1234, 4096, 0o1000 | 0o600)
libc.syscall(248, b'user', b'parked-user', b'secret', 6, -4)          # add_key to the user keyring
libc.syscall(248, b'user', b'parked-usersession', b'secret', 6, -5)   # ... and the user-session one
print('littered')
"""


@pytest.fixture(scope="module")
def one_worker():
    sandbox = LocalSandbox(isolation="bwrap", max_concurrency=1, workers=1, spare_sessions=0)
    yield sandbox
    sandbox.close()


def test_a_run_leaves_nothing_for_the_next_run(one_worker):
    before = one_worker.run(FINGERPRINT)
    assert before.status is RunStatus.Finished and before.return_code == 0, before
    assert one_worker.run(LITTER).stdout == "littered\n"
    after = one_worker.run(FINGERPRINT)
    assert after.stdout == before.stdout


def test_dev_is_read_only(one_worker):
    r = one_worker.run("try:\n    open('/dev/big', 'wb').write(b'x' * (64 << 20))\n    print('wrote')\n"
                       "except OSError as e:\n    print('refused', e.errno)")
    assert r.stdout == "refused 30\n", r   # EROFS
    r = one_worker.run("open('/dev/null', 'w').write('ok'); print(open('/dev/urandom', 'rb').read(2) != b'')")
    assert r.stdout == "True\n"


@pytest.mark.parametrize("top", ["/tmp", "/dev/shm"])
def test_an_inode_flood_is_refused(one_worker, top):
    r = one_worker.run(f"import os\nn = 0\ntry:\n    for i in range(100000):\n"
                       f"        open(f'{top}/f{{i}}', 'w').close()\n        n += 1\n"
                       f"except OSError as e:\n    print('stopped', e.errno)\nprint(n)", timeout=30)
    lines = r.stdout.split()
    assert lines[:2] == ["stopped", "28"], r          # ENOSPC
    assert int(lines[2]) <= one_worker.config.tmp_inodes
    assert one_worker.run(f"import os; print(len(os.listdir('{top}')))").stdout in ("0\n", "1\n")


def test_nested_user_namespaces_are_refused(one_worker):
    r = one_worker.run("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                       "print(libc.unshare(0x10000000), ctypes.get_errno())")   # CLONE_NEWUSER
    assert r.stdout.split()[0] == "-1", r


def test_the_code_holds_no_capability(one_worker):
    r = one_worker.run("print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')])")
    assert r.stdout == "['0000000000000000', '0000000000000000', '0000000000000000', " \
                       "'0000000000000000', '0000000000000000']\n", r


def test_a_session_keeps_its_own_files_and_nothing_else(one_worker):
    with one_worker.session() as s:
        s.run("open('/tmp/mine', 'w').write('kept')")
        assert s.run("print(open('/tmp/mine').read())").stdout == "kept\n"
    with one_worker.session() as other:
        r = other.run("import os\nprint(os.path.exists('/tmp/mine'))")
        assert r.stdout == "False\n"
