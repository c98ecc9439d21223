"""System descriptions (per GPU): FLOP/s per dtype, HBM, NVLink domain, inter-node network, efficiencies.

Shipped descriptions live in ``planner/systems/*.json`` (public spec sheets; see that folder's README for the sources
and why each efficiency was chosen). Loading validates the file: unknown keys and missing fields are refused by name.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pmdb.errors import PmdbError
from planner import jsonspec

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

_EFFICIENCY_SPEC: jsonspec.Spec = {
    "matrix": (float, True),           # achieved / peak tensor-core FLOP/s for large GEMMs
    "vector": (float, True),           # achieved / peak for element-wise arithmetic
    "hbm": (float, True),              # achieved / peak HBM bandwidth for streaming kernels
    "flash_attention": (float, True),  # achieved / peak tensor-core FLOP/s of a fused attention kernel
    "nvlink": (float, True),           # achieved / peak NVLink bandwidth of a ring collective
    "network": (float, True),          # achieved / peak NIC bandwidth of a ring collective
    "hbm_usable": (float, True),       # share of HBM capacity a configuration may use (context, buffers, fragments)
}

_SPEC: jsonspec.Spec = {
    "name": (str, True),
    "description": (str, False),
    "sources": (str, False),
    "matrix_tflops": (dict, True),     # dtype -> dense tensor-core TFLOP/s
    "vector_tflops": (dict, True),     # dtype -> non-tensor TFLOP/s
    "sm_count": (int, True),           # streaming multiprocessors (GEMM wave quantisation)
    "hbm_gb": (float, True),           # HBM capacity, GB (1e9 bytes)
    "hbm_gbps": (float, True),         # HBM bandwidth, GB/s
    "nvlink_gbps": (float, True),      # NVLink bandwidth per GPU and direction, GB/s
    "nvlink_domain": (int, True),      # GPUs in one NVLink/NVSwitch domain
    "nvlink_latency_us": (float, True),  # per ring step inside the domain, µs
    "nic_gbps": (float, True),         # bandwidth of one NIC, GB/s
    "nics_per_gpu": (float, True),     # NICs per GPU (NICs per node = nics_per_gpu x GPUs per node)
    "network_latency_us": (float, True),  # per ring step across domains, µs
    "op_overhead_us": (float, True),   # fixed time added to every kernel (launch and framework dispatch), µs
    "efficiency": (_EFFICIENCY_SPEC, True),
}


@dataclass(frozen=True)
class System:
    """One GPU type in a two-tier network. Rates are per second, sizes bytes (see the *_gbps / *_us fields)."""

    name: str
    matrix_tflops: dict[str, float]
    vector_tflops: dict[str, float]
    sm_count: int
    hbm_gb: float
    hbm_gbps: float
    nvlink_gbps: float
    nvlink_domain: int
    nvlink_latency_us: float
    nic_gbps: float
    nics_per_gpu: float
    network_latency_us: float
    op_overhead_us: float
    efficiency: dict[str, float]
    description: str = ""
    sources: str = ""
    provenance: dict[str, str] = field(default_factory=dict, compare=False)  # field -> where its value came from

    def matrix_flops(self, dtype: str) -> float:
        """Peak dense tensor-core FLOP/s for ``dtype``."""
        return self._rate(self.matrix_tflops, dtype, "matrix_tflops") * 1e12

    def vector_flops(self, dtype: str) -> float:
        """Peak non-tensor FLOP/s for ``dtype``."""
        return self._rate(self.vector_tflops, dtype, "vector_tflops") * 1e12

    def _rate(self, table: dict[str, float], dtype: str, what: str) -> float:
        if dtype not in table:
            raise PmdbError(f"system {self.name} has no {what} for {dtype} (it has: {', '.join(sorted(table))})")
        return float(table[dtype])

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9

    @property
    def hbm_bw(self) -> float:
        """Peak HBM bandwidth, bytes/s."""
        return self.hbm_gbps * 1e9

    @property
    def nvlink_bw(self) -> float:
        """Peak NVLink bandwidth per GPU and direction, bytes/s."""
        return self.nvlink_gbps * 1e9

    @property
    def nic_bw(self) -> float:
        """Peak network bandwidth per GPU (all its NICs), bytes/s."""
        return self.nic_gbps * self.nics_per_gpu * 1e9

    def with_domain(self, size: int) -> "System":
        """The same system with another NVLink domain size (the seed's 4 / 8 / 64 sweeps)."""
        if size < 1:
            raise PmdbError(f"NVLink domain size must be at least 1, not {size}")
        return dataclasses.replace(self, nvlink_domain=int(size), name=f"{self.name.split('@')[0]}@nvs{size}")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def from_dict(data: dict[str, Any], where: str) -> System:
    """A System from a JSON object (validated: unknown keys and missing fields are refused by name)."""
    jsonspec.check(data, _SPEC, where)
    eff = data["efficiency"]
    for key, value in eff.items():
        if value > 1:
            raise PmdbError(f"{where}.efficiency.{key} must be at most 1, not {value}")
    unknown = sorted((set(data["matrix_tflops"]) | set(data["vector_tflops"])) - set(DTYPE_BYTES))
    if unknown:
        raise PmdbError(f"{where}: unknown dtype {unknown[0]!r} (known: {', '.join(DTYPE_BYTES)})")
    values = dict(data)
    values["sm_count"] = int(values["sm_count"])
    values["nvlink_domain"] = int(values["nvlink_domain"])
    return System(**values)


def shipped() -> list[str]:
    """Names of the system descriptions shipped with pmdb."""
    return sorted(e.name[:-5] for e in resources.files("planner.systems").iterdir() if e.name.endswith(".json"))


def load(name_or_path: str) -> System:
    """A shipped system by name (a100, h100, ...) or a system JSON file."""
    entry = resources.files("planner.systems").joinpath(f"{name_or_path}.json")
    if "/" not in name_or_path and entry.is_file():
        return from_dict(json.loads(entry.read_text()), where=f"system {name_or_path}")
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        return from_dict(jsonspec.read_json(path, "system"), where=f"system file {path}")
    raise PmdbError(f"unknown system {name_or_path!r} (shipped: {', '.join(shipped())}; or a JSON file, "
                    f"or platform:NAME for a platform in the store)")
