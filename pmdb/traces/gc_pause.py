"""Pausing Python's cyclic garbage collector around bulk trace work: decoding a trace's JSON (10^6 containers) and
turning its events into rows allocate containers by the hundred thousand, and every collection they trigger walks
each long-lived object of the process (pandas, torch, MLflow when loaded): on a 48 MB execution trace that costs 3-4x
the decoding itself. The containers are acyclic; reference counting still frees them."""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The block runs with the cyclic collector off; it is on again after (when it was on before)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
