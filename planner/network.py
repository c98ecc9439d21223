"""Ring collectives in a two-tier network: a fast NVLink/NVSwitch domain and a slower inter-domain network.

A group of n GPUs with f of them inside each domain uses NVLink when f >= n; otherwise NCCL runs f rings in
parallel and each crosses the network, so the inter-domain bandwidth of the group is f × (NICs per GPU × NIC
bandwidth): the transfer time is the larger of the two tiers' times, and each ring step pays the slower tier's
latency. Volume factors: all-gather and reduce-scatter (n−1)/n of the buffer, all-reduce 2(n−1)/n (the ×2 the seed
forgets inside one domain), broadcast and reduce 1 (pipelined), point-to-point 1. Times are seconds.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from planner.system import System

# kind -> (volume factor, ring steps) as functions of the group size n
RING = {
    "all_gather": (lambda n: (n - 1) / n, lambda n: n - 1),
    "reduce_scatter": (lambda n: (n - 1) / n, lambda n: n - 1),
    "all_reduce": (lambda n: 2 * (n - 1) / n, lambda n: 2 * (n - 1)),
    "broadcast": (lambda n: np.ones_like(n), lambda n: n - 1),
    "reduce": (lambda n: np.ones_like(n), lambda n: n - 1),
    "p2p": (lambda n: np.ones_like(n), lambda n: np.ones_like(n)),
}


class CollectiveModel(Protocol):
    def collective_time(self, kind: str, nbytes: np.ndarray, group: np.ndarray) -> np.ndarray: ...


def ring_time(kind: str, nbytes: np.ndarray, n: np.ndarray, fast: np.ndarray, system: System) -> np.ndarray:
    """Seconds for one collective of ``nbytes`` (the full buffer) over n GPUs, f per NVLink domain."""
    n = np.asarray(n, dtype=float)
    fast = np.minimum(np.asarray(fast, dtype=float), n)
    factor, steps = RING[kind]
    return ring_seconds(factor(n) * nbytes, steps(n), fast, fast >= n, n > 1, kind == "p2p", system)


def ring_seconds(volume: np.ndarray, steps: np.ndarray, fast: np.ndarray, inside: np.ndarray, active: np.ndarray,
                 p2p: np.ndarray | bool, system: System) -> np.ndarray:
    """Seconds of ring collectives (:func:`ring_time`, or stacked ones: :class:`planner.stacked.Collectives`)
    moving ``volume`` bytes in ``steps`` steps with ``fast`` GPUs (float, at most the group's) in one NVLink
    domain, ``inside`` one domain, 0 where not ``active``; ``p2p``: over one link (NVLink inside a domain, this
    GPU's NICs across domains) instead of the domain's NICs."""
    eff = system.efficiency
    intra = system.nvlink_bw * eff["nvlink"]
    inter = np.where(p2p, system.nic_bw * eff["network"], fast * system.nic_bw * eff["network"])
    bw = np.where(inside, intra, np.minimum(intra, inter))
    latency = np.where(inside, system.nvlink_latency_us, system.network_latency_us) * 1e-6
    time = volume / bw + steps * latency
    return np.where(active, time, 0.0)


def collective_time(kind: str, nbytes: np.ndarray, n: np.ndarray, fast: np.ndarray, system: System,
                    model: CollectiveModel | None = None, usage: dict[str, dict[str, int]] | None = None
                    ) -> np.ndarray:
    """Ring formula, or a calibrated collective model for groups inside one domain where it gives a number.

    ``usage`` counts, per collective kind, how many evaluations used which source ('ring' or 'calibrated').
    """
    n = np.broadcast_to(np.asarray(n), np.shape(nbytes) or np.shape(n))
    nbytes = np.broadcast_to(np.asarray(nbytes, dtype=float), n.shape)
    fast = np.broadcast_to(np.asarray(fast), n.shape)
    time = ring_time(kind, nbytes, n, fast, system)
    used = np.zeros(n.shape, dtype=bool)
    if model is not None and kind != "p2p":
        inside = (fast >= n) & (n > 1)
        if inside.any():
            fitted = np.asarray(model.collective_time(kind, nbytes[inside], n[inside]), dtype=float)
            ok = np.isfinite(fitted)
            picked = time[inside]
            picked[ok] = fitted[ok]
            time = time.copy()
            time[inside] = picked
            used[np.flatnonzero(inside)[ok]] = True
    if usage is not None:
        count_usage(usage, kind, int(used.sum()), int(((n > 1) & ~used).sum()))
    return time


def count_usage(usage: dict[str, dict[str, int]], kind: str, calibrated: int, ring: int) -> None:
    """Add to ``usage`` (kind -> source -> evaluations) the collectives of ``kind`` a calibrated model and the ring
    formula priced."""
    counts = usage.setdefault(kind, {})
    counts["calibrated"] = counts.get("calibrated", 0) + calibrated
    counts["ring"] = counts.get("ring", 0) + ring
