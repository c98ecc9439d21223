"""How far a prediction for a GPU known only by its spec sheet could be off: the step simulated again with its
cross-GPU priced kernels moved by the error each source GPU had when it was held out.

``pmdb fit cross-gpu`` scores a spec-only target by leave-one-GPU-out over its sources and stores with each op's
model, per held-out GPU, that GPU's measured kernel time over what the model trained without it predicted
(``logo_ratio``, :func:`fitters.cross_gpu.logo_ratios`). The level of utilisation a GPU attains is what a spec sheet
does not tell (GEMMs: 0.67-1.90 over the five NeuSight table GPUs, benchmarks/results/gpu_kernel_accuracy.md), so a
spec-only prediction carries that spread. For each source GPU g, every op priced by a model with ratios (a cross-GPU
forward model, or the backward GEMMs priced with one) gets its device time times that model's ratio for g, and
Algorithm 1 runs again on the same programs. The range is the prediction together with those steps (lowest, highest;
µs). Ops priced otherwise (rows measured on the target, its own fitted models, the roofline, traced times) keep their
time. There is no range when no op was priced by a model with ratios (a GPU with kernel tables of its own, a CPU, or
cross-GPU versions registered before the ratios were stored, or with ``--no-logo``).

How often to expect the truth inside: were a new GPU's level drawn like its n sources' (exchangeable), it would fall
within their span (n - 1) / (n + 1) of the time, 4 in 6 for NeuSight's five; a GPU newer than every source (the L4,
the H200) is not such a draw, so that is a guide, not a guarantee (`pmdb predict` says it with the range).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from simulator.model_set import ModelSet

SCALED_SUFFIX = " scaled-fwd"   # simulator.timing's label of a backward priced by its forward model
RATIO_FAMILIES = frozenset({"cross_gpu", "gemm_shapes"})   # the families whose versions may carry ratios


@dataclass
class SpecRange:
    """A prediction's steady-state step (µs) if its cross-GPU priced kernels were as far off as on each held-out
    source GPU (``per_gpu``: source GPU -> step µs); ``priced_share``: those kernels' share of the op work."""

    per_gpu: dict[str, float] = field(default_factory=dict)
    priced_share: float = 0.0
    outside: dict[str, list[float]] = field(default_factory=dict)   # the target's sheet beyond its sources' span
    lanes: dict[str, float] = field(default_factory=dict)   # op -> the lane correction its price carries

    def bounds(self, predicted_us: float) -> tuple[float, float]:
        """(low, high) µs: the prediction and every held-out GPU's step."""
        values = [float(predicted_us), *self.per_gpu.values()]
        return min(values), max(values)

    def label_ms(self, predicted_us: float) -> str:
        """'low-high' in ms, three decimals, for tables."""
        low, high = self.bounds(predicted_us)
        return f"{low / 1000:.3f}-{high / 1000:.3f}"

    def outside_text(self) -> str:
        """'' or the sheet's figures beyond its sources' span, as `pmdb fit cross-gpu` names them."""
        if not self.outside:
            return ""
        from fitters.cross_gpu import describe_outside

        return describe_outside(self.outside)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"per_gpu_us": {g: round(us, 3) for g, us in sorted(self.per_gpu.items())},
                               "priced_share": round(self.priced_share, 4)}
        if self.outside:
            out["sheet_outside"] = self.outside
        if self.lanes:
            out["lane_factor"] = {op: round(f, 4) for op, f in sorted(self.lanes.items())}
        return out

    def lanes_text(self) -> str:
        """'' or which ops' prices carry the lane correction, and by how much."""
        if not self.lanes:
            return ""
        ops = ", ".join(f"{op} x{f:.2f}" for op, f in sorted(self.lanes.items()))
        return (f"its SMs are wider than the sources', so these are priced by what wider SMs were measured to take "
                f"over the same models' price (the lane correction, pmdb/samples/lane_attainment): {ops}")


def _stored(model: Any, key: str) -> Any:
    """``info[key]`` of a cross-GPU model, or of the forward model a backward version wraps (None when absent)."""
    for candidate in (model, getattr(model, "base", None)):
        info = getattr(candidate, "info", None)
        if isinstance(info, dict) and info.get(key):
            return info[key]
    return None


def ratios_of(model: Any) -> dict[str, float] | None:
    """The held-out GPUs' measured over predicted ratios a model (or the forward model it wraps) was stored with."""
    stored = _stored(model, "logo_ratio")
    return None if stored is None else {str(g): float(r) for g, r in stored.items()}


def outside_of(model: Any) -> dict[str, list[float]]:
    """The figures of the target's sheet outside its sources' span a cross-GPU model was stored with
    (:func:`fitters.cross_gpu.sheet_outside`; {} when none, or when fitted before they were stored)."""
    stored = _stored(model, "sheet_outside")
    return {} if stored is None else {str(k): [float(x) for x in v] for k, v in stored.items()}


def lanes_of(model: Any) -> dict[str, float]:
    """{op: factor} of the lane correction a cross-GPU model bound to a GPU (or the forward model a backward
    version wraps) prices that GPU with; {} when none applies (:meth:`fitters.cross_gpu.CrossGpuModel.lane_factor`)."""
    for candidate in (model, getattr(model, "base", None)):
        target = getattr(candidate, "target", None)
        if getattr(candidate, "lanes", None) and isinstance(target, dict):
            width = target.get("cores_per_sm")
            factor = candidate.lane_factor(float("nan") if width is None else float(width))
            return {candidate.op: factor} if factor != 1.0 else {}
    return {}


def factors(models: ModelSet, priced_by: Mapping[int, str]) -> dict[str, dict[int, float]]:
    """Per held-out source GPU, {id(op): ratio} of every op a model with ratios priced (``priced_by``: id(op) ->
    'name:version', as :class:`simulator.timing.ModelTiming` labels them)."""
    refs = {f"{ref.name}:{ref.version}": ref for ref in models.kernels.values() if ref.family in RATIO_FAMILIES}
    if not refs:   # a CPU, or a GPU with models of its own only: nothing to look up op by op
        return {}
    known: dict[str, dict[str, float] | None] = {}
    out: dict[str, dict[int, float]] = {}
    for key, label in priced_by.items():
        name = label[:-len(SCALED_SUFFIX)] if label.endswith(SCALED_SUFFIX) else label
        if name not in known:
            ref = refs.get(name)
            known[name] = None if ref is None else ratios_of(ref.model)
        for gpu, ratio in (known[name] or {}).items():
            out.setdefault(gpu, {})[key] = ratio
    return out


def spec_range(models: ModelSet, priced_by: Mapping[int, str], times_us: Mapping[int, float],
               step_of: Callable[[dict[int, float]], float]) -> SpecRange | None:
    """The range of one priced graph: ``times_us`` its ops' device times (id(op) -> µs), ``step_of`` the steady
    step (µs) of its programs rebuilt with those factors; None when no op has ratios. It carries the target sheet's
    figures beyond its sources' span where its cross-GPU versions were stored with them."""
    per_gpu = factors(models, priced_by)
    if not per_gpu:
        return None
    moved = set().union(*(f.keys() for f in per_gpu.values()))
    total = sum(times_us.values())
    share = sum(times_us.get(key, 0.0) for key in moved) / total if total > 0 else 0.0
    outside: dict[str, list[float]] = {}
    lanes: dict[str, float] = {}
    for ref in models.kernels.values():
        if ref.family in RATIO_FAMILIES:
            outside = outside or outside_of(ref.model)
            lanes.update(lanes_of(ref.model))
    return SpecRange({gpu: float(step_of(f)) for gpu, f in sorted(per_gpu.items())}, float(share), outside, lanes)
