"""What an SM of 128 FP32 lanes attains of its sheet's FP32 rate on GEMMs, against what the cross-GPU models learn
from GPUs of 64-lane SMs (every NeuSight table GPU), shipped: measured on an NVIDIA H200 by GEMMs timed back to back
(``../shared/data/gpu_kernels/h200_launch_floor.csv``) and priced by the cross-GPU model of the five table GPUs.
:mod:`fitters.cross_gpu` multiplies the priced time of the listed ops on a GPU with SMs wider than its sources' by
this factor. See README.md beside this file for the provenance; ``benchmarks/make_lane_sample.py`` rebuilds it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
TABLE = FOLDER / "sm128_gemm.json"


@dataclass(frozen=True)
class LaneAttainment:
    """Measured over priced time of ``ops`` on SMs of ``lanes_per_sm`` FP32 lanes, priced by models trained on SMs of
    ``source_lanes_per_sm`` lanes (a time multiplier, > 1: the wide SM attains less of its nominal rate)."""

    lanes_per_sm: int
    source_lanes_per_sm: int
    ops: tuple[str, ...]
    time_factor: float
    source: str

    def factor(self, lanes: float) -> float:
        """The multiplier of an SM of ``lanes`` FP32 lanes: 1 up to the sources' width, the full factor from
        :attr:`lanes_per_sm` up, geometric in between; 1 where the lane count is unknown (NaN or <= 0)."""
        if not math.isfinite(lanes) or lanes <= self.source_lanes_per_sm:
            return 1.0
        if lanes >= self.lanes_per_sm:
            return self.time_factor
        share = math.log(lanes / self.source_lanes_per_sm) / math.log(self.lanes_per_sm / self.source_lanes_per_sm)
        return self.time_factor ** share

    def as_dict(self) -> dict[str, Any]:
        return {"lanes_per_sm": self.lanes_per_sm, "source_lanes_per_sm": self.source_lanes_per_sm,
                "ops": list(self.ops), "time_factor": self.time_factor, "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LaneAttainment":
        return cls(int(data["lanes_per_sm"]), int(data["source_lanes_per_sm"]), tuple(data["ops"]),
                   float(data["time_factor"]), str(data.get("source", "")))


def load(path: Path = TABLE) -> LaneAttainment:
    """The shipped sample (or another file written by ``benchmarks/make_lane_sample.py``)."""
    return LaneAttainment.from_dict(json.loads(Path(path).read_text()))
