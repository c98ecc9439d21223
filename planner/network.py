"""Ring collectives in a two-tier network: a fast NVLink/NVSwitch domain and a slower inter-domain network.

A group of n GPUs with f of them inside each domain uses NVLink when f >= n; otherwise NCCL runs f rings in
parallel and each crosses the network, so the inter-domain bandwidth of the group is f × (NICs per GPU × NIC
bandwidth): the transfer time is the larger of the two tiers' times, and each ring step pays the slower tier's
latency. Volume factors: all-gather and reduce-scatter (n−1)/n of the buffer, all-reduce 2(n−1)/n (the ×2 the seed
forgets inside one domain), broadcast and reduce 1 (pipelined), point-to-point 1. Times are seconds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from planner.system import System

if TYPE_CHECKING:
    from planner.stacked import Collectives

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
    volume = factor(n) * nbytes
    eff = system.efficiency
    intra = system.nvlink_bw * eff["nvlink"]
    inside = fast >= n
    if kind == "p2p":   # one link: NVLink inside a domain, this GPU's NICs across domains
        inter = np.full_like(n, system.nic_bw * eff["network"])
    else:
        inter = fast * system.nic_bw * eff["network"]
    bw = np.where(inside, intra, np.minimum(intra, inter))
    latency = np.where(inside, system.nvlink_latency_us, system.network_latency_us) * 1e-6
    time = volume / bw + steps(n) * latency
    return np.where(n > 1, time, 0.0)


def stacked_ring_time(c: "Collectives", system: System) -> np.ndarray:
    """:func:`ring_time` of stacked collectives (rows) over candidates (columns), element by element the same
    arithmetic; seconds."""
    eff = system.efficiency
    intra = system.nvlink_bw * eff["nvlink"]
    inter = np.where(c.p2p, system.nic_bw * eff["network"], c.fast * system.nic_bw * eff["network"])
    bw = np.where(c.inside, intra, np.minimum(intra, inter))
    latency = np.where(c.inside, system.nvlink_latency_us, system.network_latency_us) * 1e-6
    time = c.volume / bw + c.steps * latency
    return np.where(c.active, time, 0.0)


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
        counts = usage.setdefault(kind, {})
        active = n > 1
        counts["calibrated"] = counts.get("calibrated", 0) + int(used.sum())
        counts["ring"] = counts.get("ring", 0) + int((active & ~used).sum())
    return time
