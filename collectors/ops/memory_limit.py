"""The memory cap of ``collect ops`` held, not only estimated: while one config is built and timed, the process's
data segment (heap and private writable mappings, ``RLIMIT_DATA``) may grow by at most the cap. An allocation past
it fails (torch: "can't allocate memory"; numpy: MemoryError) and the sweep records the config as skipped by the
memory cap. Linux; elsewhere (no /proc/self/status) nothing is bounded."""
from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path
from typing import Iterator

_STATUS = Path("/proc/self/status")


def data_bytes() -> int | None:
    """This process's data segment now (VmData: heap and private writable mappings), bytes; None off Linux."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def prepare() -> None:
    """Do, unbounded, the lazy work torch does on a first backward (importing torch.fx's symbolic shapes, and with
    it sympy: ~35 MB): an import that fails under a config's bound would leave a module half-imported for good."""
    import torch
    import torch.fx.experimental.symbolic_shapes  # noqa: F401

    x = torch.ones(4, requires_grad=True)
    y = torch.relu(x)
    torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y))


def binding(cap_bytes: int) -> bool:
    """Whether a cap of ``cap_bytes`` binds before the machine's memory does (an allocation refused under a larger
    cap ran out of memory, not into the cap)."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return True
    return cap_bytes < physical


class Bound:
    """A data-segment bound in force (``limit`` bytes, soft RLIMIT_DATA) over the limits it replaced."""

    def __init__(self, soft: int, hard: int, limit: int):
        self.soft, self.hard, self.limit = soft, hard, limit

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Lift the bound for a block that is not the config's own work (writing its rows to the store)."""
        resource.setrlimit(resource.RLIMIT_DATA, (self.soft, self.hard))
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_DATA, (self.limit, self.hard))


@contextlib.contextmanager
def bounded(cap_bytes: int) -> Iterator[Bound | None]:
    """Inside the block the data segment may grow by at most ``cap_bytes`` over what it is now (a soft
    RLIMIT_DATA, the previous limit restored after). Yields the :class:`Bound`, or None where none can be set."""
    used = data_bytes()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    except (OSError, ValueError):
        used = None
    if used is None:
        yield None
        return
    limit = used + int(cap_bytes)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield Bound(soft, hard, limit)
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
