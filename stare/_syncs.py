"""Count operations that force a device→host synchronisation (a stall on GPU), on any device.

Used by the tests and `benchmarks/bench_stare.py` to check "at most one host sync per call" on CPU,
where `torch.cuda.set_sync_debug_mode` is not available.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops whose result size or value must be read on the host.
_SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal", "bincount",
            "unique_dim", "_unique2", "unique_consecutive", "repeat_interleave", "item"}


def _bool_index(args: tuple) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
               for a in args if isinstance(a, (list, tuple)) for i in a)


@dataclass
class SyncLog:
    """What `count_host_syncs` saw."""

    ops: list[str] = field(default_factory=list)
    """Names of the syncing operations, in call order."""

    @property
    def count(self) -> int:
        """Number of host synchronisations."""
        return len(self.ops)


class _Recorder(TorchDispatchMode):
    def __init__(self, log: SyncLog) -> None:
        super().__init__()
        self.log = log
        self.quiet = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func.overloadpacket.__name__
        from_device = any(isinstance(a, torch.Tensor) and a.device.type != "cpu" for a in args[:2])
        into_host = (kwargs or {}).get("device") == torch.device("cpu") or (
            name == "copy_" and args[0].device.type == "cpu")
        to_host = name in ("_to_copy", "copy_") and from_device and into_host
        bool_index = name in ("index", "index_put", "index_put_") and _bool_index(args)
        if not self.quiet and (name in _SYNCING or to_host or bool_index):
            self.log.ops.append(name)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_host_syncs() -> Iterator[SyncLog]:
    """Record every host-synchronising op run inside the block (item, tolist, bool indexing, nonzero...).

    `Tensor.tolist()` does not dispatch on CPU, so it is counted by a wrapper (one per call, with the
    scalar reads it makes internally not double-counted).
    """
    log = SyncLog()
    recorder = _Recorder(log)
    original = torch.Tensor.tolist

    def tolist(self: torch.Tensor):  # noqa: ANN202
        log.ops.append("tolist")
        recorder.quiet += 1
        try:
            return original(self)
        finally:
            recorder.quiet -= 1

    torch.Tensor.tolist = tolist
    try:
        with recorder:
            yield log
    finally:
        torch.Tensor.tolist = original
