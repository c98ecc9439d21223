"""Candidate parallel configurations (arrays, one entry per configuration) and the framework settings."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from pmdb.errors import PmdbError

STRATEGIES = ("1d", "summa", "context")
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Framework:
    """How the training framework runs a configuration (fixed for a study, not searched)."""

    name: str = "planner"
    dtype: str = "bf16"                   # activations, weights and GEMM inputs
    sequence_parallel: bool = True        # 1d/context: norms and dropouts sharded over the tensor group (Megatron SP)
    flash_attention: bool = True          # fused attention; False: baddbmm + softmax + dropout + bmm (s×s in HBM)
    overlap_dp: bool = True               # gradient reduction / parameter gather overlapped with per-layer compute
    overlap_p2p: bool = True              # pipeline send/recv overlapped with the stage's compute
    fused_grad_accumulation: bool = True  # weight-gradient GEMMs accumulate in place (no add per micro-batch)
    vocab_multiple: int = 128             # vocabulary padded to a multiple of this times the tensor group
    softmax_fusion_batches: int = 0       # unfused attention: the fused scale-mask-softmax kernel runs only when
    #                                       micro-batch × local heads is a multiple of this (0: always fused)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


FRAMEWORKS: dict[str, Framework] = {
    # What a current Megatron-Core run does and the seed assumes: SP, fused attention, overlapped DP and PP traffic.
    "planner": Framework(),
    # Megatron-DeepSpeed as run for the vTrain ground truth (published configs and model code): fp16, no sequence
    # parallelism, unfused attention with the fused scale-mask-softmax kernel, DP all-reduce after the backward
    # pass (no gradient bucketing), blocking pipeline send/recv, gradients accumulated by autograd. Megatron's
    # FusedScaleMaskSoftmax.is_kernel_available takes the fused kernel only when b × local heads is a multiple of
    # the kernel's batches per CUDA block (4 for keys longer than 128) and 16 < keys <= 4096; otherwise it runs the
    # softmax in torch (fp32 cast, scale, mask, softmax, cast back: five kernels each way).
    "megatron-deepspeed": Framework(name="megatron-deepspeed", dtype="fp16", sequence_parallel=False,
                                    flash_attention=False, overlap_dp=False, overlap_p2p=False,
                                    fused_grad_accumulation=False, softmax_fusion_batches=4),
}


def framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise PmdbError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORKS)})")
    return FRAMEWORKS[name]


_INT_FIELDS = ("t1", "t2", "pp", "dp", "mb", "nmb", "panels", "recompute", "dist_opt", "f_t1", "f_t2", "f_pp", "f_dp")


@dataclass
class Candidates:
    """Configurations of one strategy as int64 arrays of equal length.

    t1, t2: tensor dimensions (1d: t1 = tensor parallel, t2 = 1; summa: t1 splits the hidden size, t2 the tokens;
    context: t1 = tensor parallel, t2 = sequence shards); pp pipeline stages; dp data-parallel replicas; mb micro-batch
    size (sequences); nmb micro-batches per iteration; panels SUMMA panel steps (1 otherwise); recompute index into
    RECOMPUTE; dist_opt distributed optimizer (0/1); f_* GPUs of that dimension inside one NVLink domain.
    """

    strategy: str
    t1: np.ndarray
    t2: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    mb: np.ndarray
    nmb: np.ndarray
    panels: np.ndarray
    recompute: np.ndarray
    dist_opt: np.ndarray
    f_t1: np.ndarray
    f_t2: np.ndarray
    f_pp: np.ndarray
    f_dp: np.ndarray

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise PmdbError(f"unknown strategy {self.strategy!r} (known: {', '.join(STRATEGIES)})")
        n = None
        for name in _INT_FIELDS:
            value = np.atleast_1d(np.asarray(getattr(self, name), dtype=np.int64))
            setattr(self, name, value)
            n = len(value) if n is None else n
            if len(value) != n:
                raise ValueError(f"candidate field {name} has {len(value)} entries, expected {n}")

    @classmethod
    def from_columns(cls, strategy: str, **columns: Any) -> "Candidates":
        """Candidates from keyword arrays; missing fields default to t2 = panels = 1, recompute none, no dist-opt,
        and every dimension wholly inside the NVLink domain (f_x = x)."""
        t1 = np.atleast_1d(np.asarray(columns["t1"], dtype=np.int64))
        ones = np.ones_like(t1)
        values = {"t2": ones, "panels": ones, "recompute": 0 * ones, "dist_opt": 0 * ones}
        values.update({k: np.broadcast_to(np.asarray(v, dtype=np.int64), t1.shape) for k, v in columns.items()})
        for dim in ("t1", "t2", "pp", "dp"):
            values.setdefault(f"f_{dim}", values[dim])
        return cls(strategy, **values)

    def __len__(self) -> int:
        return len(self.t1)

    def take(self, index: np.ndarray) -> "Candidates":
        return replace(self, **{name: getattr(self, name)[index] for name in _INT_FIELDS})

    @staticmethod
    def concat(parts: list["Candidates"]) -> "Candidates":
        """Candidates of one strategy, one after the other."""
        return replace(parts[0], **{name: np.concatenate([getattr(p, name) for p in parts]) for name in _INT_FIELDS})

    def group(self, dim: str) -> tuple[np.ndarray, np.ndarray]:
        """(group size, GPUs of the group inside one NVLink domain) of a communication dimension."""
        if dim == "dp_t2":  # context parallelism: gradients are reduced over the data and sequence groups
            if self.strategy == "context":
                return self.dp * self.t2, self.f_dp * self.f_t2
            return self.dp, self.f_dp
        return getattr(self, dim), getattr(self, f"f_{dim}")

    def frame(self) -> pd.DataFrame:
        """One row per candidate, with readable column names."""
        names = {"1d": ("tp", "t2"), "summa": ("summa_hidden", "summa_tokens"), "context": ("tp", "cp")}[self.strategy]
        out = pd.DataFrame({"strategy": self.strategy, names[0]: self.t1, names[1]: self.t2, "pp": self.pp,
                            "dp": self.dp, "micro_batch": self.mb, "micro_batches": self.nmb})
        if self.strategy == "1d":
            out = out.drop(columns=["t2"])
        if self.strategy == "summa":
            out["panels"] = self.panels
        out["recompute"] = np.asarray(RECOMPUTE)[self.recompute]
        out["dist_opt"] = self.dist_opt.astype(bool)
        for dim, label in (("t1", names[0]), ("t2", names[1]), ("pp", "pp"), ("dp", "dp")):
            if label in out:
                out[f"nvlink_{label}"] = getattr(self, f"f_{dim}")
        return out
