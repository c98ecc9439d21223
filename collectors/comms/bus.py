"""Bus factors and the message-size definitions the collective model uses (method.md section 4).

Per rank, ``sent`` is the bytes of its input buffer and ``recv`` the bytes of its output buffer (its own chunk
included). The model's message size is ``max_rank_bytes`` = max over ranks of max(sent, recv); for equal splits it
equals the 'size' PARAM and nccl-tests report, which is also the algbw numerator. Bandwidths are GB/s (1e9 B/s).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from collectors.comms.sizes import COLLECTIVES
from pmdb.errors import PmdbError


def bus_factor(collective: str, world_size: int) -> float:
    """busbw / algbw: all_reduce 2(n-1)/n; all_to_all(v), all_gather, reduce_scatter (n-1)/n."""
    n = world_size
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in COLLECTIVES:
        return (n - 1) / n
    raise PmdbError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")


def world_size_from_factor(collective: str, factor: float, tolerance: float = 0.02) -> int | None:
    """Invert :func:`bus_factor`: the world size (2..4096) whose factor is nearest to ``factor``, provided it is
    within ``tolerance`` (relative) and within a quarter of the gap to its neighbours' factors; else None."""
    sizes = range(2, 4097)
    factors = [bus_factor(collective, n) for n in sizes]
    best = min(range(len(factors)), key=lambda i: abs(factors[i] - factor))
    neighbours = [factors[i] for i in (best - 1, best + 1) if 0 <= i < len(factors)]
    gap = min(abs(f - factors[best]) for f in neighbours) / factors[best]
    error = abs(factor - factors[best]) / factors[best]
    return sizes[best] if error <= min(tolerance, gap / 4) else None


@dataclass(frozen=True)
class MessageSizes:
    """Byte counts of one collective call (see the module docstring)."""

    total_bytes: int              # sum over ranks of their input-buffer bytes
    bytes_per_rank: int | None    # per-rank input bytes when all ranks are equal, else None
    max_rank_bytes: int           # max over ranks of max(sent, recv): the model's message size
    sent_bytes: list[int]         # per rank: input-buffer bytes
    recv_bytes: list[int]         # per rank: output-buffer bytes


def from_buffers(sent: Sequence[int], recv: Sequence[int]) -> MessageSizes:
    """Message sizes from per-rank input/output buffer bytes."""
    sent, recv = [int(v) for v in sent], [int(v) for v in recv]
    if len(sent) != len(recv) or not sent:
        raise ValueError("sent and recv need one entry per rank")
    equal = len(set(sent)) == 1 and len(set(recv)) == 1
    return MessageSizes(total_bytes=sum(sent), bytes_per_rank=sent[0] if equal else None,
                        max_rank_bytes=max(max(sent), max(recv)), sent_bytes=sent, recv_bytes=recv)


def from_reported_size(collective: str, size_bytes: int, world_size: int) -> MessageSizes:
    """Message sizes of an equal-split call whose 'size' (PARAM / nccl-tests convention) is ``size_bytes``."""
    n, size = world_size, int(size_bytes)
    if collective in ("all_reduce", "all_to_all", "all_to_allv"):
        sent, recv = size, size
    elif collective == "all_gather":
        sent, recv = size // n, size
    elif collective == "reduce_scatter":
        sent, recv = size, size // n
    else:
        raise PmdbError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    return from_buffers([sent] * n, [recv] * n)


def bandwidths(collective: str, world_size: int, size_bytes: float, latency_us: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for ``size_bytes`` moved in ``latency_us`` µs."""
    if not latency_us or latency_us <= 0:
        return float("nan"), float("nan")
    algbw = size_bytes / latency_us / 1e3  # bytes/µs = 1e6 B/s; GB/s = 1e9 B/s
    return algbw, algbw * bus_factor(collective, world_size)
