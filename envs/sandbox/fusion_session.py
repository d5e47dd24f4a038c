"""`FusionSession`: a persistent-looking session on a stateless SandboxFusion server, by replay.

SandboxFusion keeps no interpreter between requests, so each `run` sends one program that first
re-executes every earlier cell that *finished with exit code 0*, with their stdout/stderr discarded
and their original stdin, and then the new cell (whose last expression, if any, is printed as in a
notebook). What this means, honestly:

- names, imports and files made by earlier cells exist again, but side effects happen again too
  (random numbers are redrawn unless seeded, files rewritten, time spent again);
- the time and memory limits apply to the whole replay, so a session slows down as it grows;
- a cell that failed, timed out or ran out of memory is not replayed (its partial effects vanish).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Protocol

from envs.sandbox.result import RunResult, RunStatus


class Runner(Protocol):
    """What a `FusionSession` needs from its sandbox: ``run`` (a `FusionSandbox`, or any backend)."""

    def run(self, code: str, *, timeout: float = ..., memory_mb: int = ...) -> RunResult:
        """Run one program; see `LocalSandbox.run`."""
        ...

_PRELUDE = '''\
import ast as _sb_ast, io as _sb_io, os as _sb_os, sys as _sb_sys
def _sb_cell(_sb_src, _sb_name, _sb_stdin, _sb_quiet):
    import linecache
    linecache.cache[_sb_name] = (len(_sb_src), None, _sb_src.splitlines(True), _sb_name)
    _sb_tree = _sb_ast.parse(_sb_src, _sb_name)
    if not _sb_quiet and _sb_tree.body and isinstance(_sb_tree.body[-1], _sb_ast.Expr):
        _sb_last = _sb_tree.body[-1]
        _sb_call = _sb_ast.Call(_sb_ast.Name("_sb_show", _sb_ast.Load()), [_sb_last.value], [])
        _sb_tree.body[-1] = _sb_ast.copy_location(_sb_ast.Expr(_sb_call), _sb_last)
        _sb_ast.fix_missing_locations(_sb_tree)
    _sb_saved = _sb_sys.stdin, _sb_sys.stdout, _sb_sys.stderr
    _sb_sys.stdin = _sb_io.StringIO(_sb_stdin)
    if _sb_quiet:
        _sb_sys.stdout = _sb_sys.stderr = open(_sb_os.devnull, "w")
    try:
        exec(compile(_sb_tree, _sb_name, "exec"), globals())
    finally:
        _sb_sys.stdin, _sb_sys.stdout, _sb_sys.stderr = _sb_saved
def _sb_show(_sb_value):
    if _sb_value is not None:
        print(repr(_sb_value))
'''


class FusionSession:
    """Emulated persistent interpreter over `FusionSandbox` (see the module docstring)."""

    def __init__(self, sandbox: Runner):
        self._sandbox = sandbox
        self._cells: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.closed = False

    def program(self, code: str, stdin: str) -> str:
        """The single program sent for this cell: prelude, quiet replays, then the new cell."""
        lines = [_PRELUDE]
        for index, (cell, cell_stdin) in enumerate(self._cells, start=1):
            lines.append(f"_sb_cell({cell!r}, '<cell {index}>', {cell_stdin!r}, True)")
        lines.append(f"_sb_cell({code!r}, '<cell {len(self._cells) + 1}>', {stdin!r}, False)")
        return "\n".join(lines) + "\n"

    def run(self, code: str, *, timeout: float = 10.0, memory_mb: int = 1024, stdin: str = "") -> RunResult:
        """Run one cell after replaying the earlier successful ones; statuses as in `LocalSandbox.run`."""
        with self._lock:
            if self.closed:
                raise RuntimeError("this session is closed; open a new one with sandbox.session().")
            result = self._sandbox.run(self.program(code, stdin), timeout=timeout, memory_mb=memory_mb)
            if result.status is RunStatus.Finished and result.return_code == 0:
                self._cells.append((code, stdin))
            return replace(result, stderr=_strip_replay_frames(result.stderr))

    def close(self) -> None:
        """Forget the cells (idempotent)."""
        self.closed = True
        self._cells = []

    def __enter__(self) -> FusionSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _strip_replay_frames(stderr: str) -> str:
    """Drop the traceback frames of the replay wrapper so the model sees only its own cell's."""
    lines = stderr.splitlines(keepends=True)
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith('  File "'):
            j = i + 1
            while j < len(lines) and lines[j].startswith("    "):
                j += 1
            frame = "".join(lines[i:j])
            if "in _sb_cell" not in line and "_sb_cell(" not in frame:
                out.extend(lines[i:j])
            i = j
            continue
        out.append(line)
        i += 1
    return "".join(out)
