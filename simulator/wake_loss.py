"""What wide-vector work loses on this host right after scalar work, from the probes its op sweeps recorded
(:mod:`collectors.wake_probe`; µs).

Not priced: no prediction rule uses it yet. It is said beside the figures (``report.summary``) where it is large,
because a step that alternates scalar work (a dropout's random draws, Python between modules) with GEMMs then runs
slower than the back-to-back prices of its ops add up to, and its prediction comes out low for a reason the model
does not know (on the 48 MiB-L3 Intel host, 16 of 18 transformer predictions of 2026-11-29 were under their truths).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from pmdb.store import Store
from simulator.memory_phase import summary_probes, sweep_summaries

SAY_SHARE = 0.25   # said where the calls after the spin lose at least this share of one back-to-back call


@dataclass(frozen=True)
class WakeLoss:
    """Medians over a platform's probes: the probed op's back-to-back time and what its calls after a spin lost."""

    op: str
    spin_us: float
    back_to_back_us: float
    lost_us: float
    probes: int

    @property
    def worth_saying(self) -> bool:
        return self.lost_us >= SAY_SHARE * self.back_to_back_us

    def sentence(self) -> str:
        return (f"vector wake-up not priced: right after {self.spin_us / 1e3:g} ms of scalar work a {self.op} "
                f"loses {self.lost_us:.0f} µs over its next calls (back to back {self.back_to_back_us:.0f} µs; "
                f"{self.probes} probes); steps with dropout may be predicted low")


def read_probes(summary: Any) -> list[dict[str, Any]]:
    """The well-formed wake probes a run summary holds (JSON text or a dict)."""
    return [p for p in summary_probes(summary, "wake_probe")
            if all(isinstance(p.get(k), (int, float)) and p[k] >= 0 for k in ("back_to_back_us", "lost_us", "spin_us"))
            and p["back_to_back_us"] > 0 and isinstance(p.get("op"), str)]


def wake_loss(store: Store, platform: str) -> WakeLoss | None:
    """The platform's wake-up loss over the probes of its completed op sweeps (the probed op most of them used),
    None where none recorded one."""
    probes = [p for summary in sweep_summaries(store, platform) for p in read_probes(summary)]
    if not probes:
        return None
    op = statistics.mode(p["op"] for p in probes)
    same = [p for p in probes if p["op"] == op]
    return WakeLoss(op, float(statistics.median(p["spin_us"] for p in same)),
                    float(statistics.median(p["back_to_back_us"] for p in same)),
                    float(statistics.median(p["lost_us"] for p in same)), len(same))


def wake_warning(store: Store, platform: str) -> str | None:
    """The sentence the summary and the report say for the platform, where its wake-up loss is worth saying."""
    loss = wake_loss(store, platform)
    return loss.sentence() if loss is not None and loss.worth_saying else None
