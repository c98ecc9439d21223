"""The planner's free parameters fitted to measured training runs: a small, versioned calibration.

The analytical planner (roofline GEMMs with wave quantisation, ring collectives, 1F1B, recomputation, optimizer
step) has constants that a spec sheet cannot give. :data:`PARAMS` are the 13 it may fit (a fit fits those its runs
identify, :func:`fitted_names`), each entering the prediction as follows (P = peak fp16 tensor-core FLOP/s; F =
2·M·N·K·batch FLOPs of one GEMM launch, W the same rounded up to whole waves of 128×128 tiles over the SMs):

- ``gemm_eff`` (fraction): achieved/peak tensor-core rate of a large GEMM; ``wave_weight`` (0..1): the share of
  the wave-quantisation loss that is real (cuBLAS picks other tiles); ``gemm_latency_us`` (µs): fixed time per GEMM
  launch (ramp-up and tail). One launch takes ``(F + wave_weight · (W − F)) / (P · gemm_eff) + gemm_latency``, an
  efficiency that depends on the GEMM's shape: small GEMMs are latency-bound, large ones reach ``gemm_eff``.
- ``kernel_overhead_us`` (µs): host launch and framework-dispatch cost of every kernel (the system file's
  ``op_overhead_us``).
- ``hbm_eff`` (fraction): achieved/peak HBM bandwidth of element-wise kernels (and of the optimizer step).
- ``nvlink_eff`` (fraction): achieved/peak NVLink bandwidth of a ring collective; ``collective_latency_us`` (µs):
  extra cost per ring step, ``(n − 1) · collective_latency`` for a collective over n GPUs (NCCL launch and
  synchronisation; grows with the group, hence with tensor parallelism).
- ``layer_fixed_us`` (µs): host cost per transformer layer per micro-batch (module calls, autograd bookkeeping,
  checkpoint save/restore of full recomputation), ``layers/pp`` times per micro-batch and stage.
- ``microbatch_fixed_us`` (µs): host cost per micro-batch per stage (schedule step, loss, pipeline handshakes,
  gradient-accumulation bookkeeping).
- ``collective_fixed_us`` (µs): cost of every collective call whatever its group (launch, NCCL setup).
- ``overlap_sharpness`` (exponent p): the host runs ahead of the GPU, so one stage's micro-batch takes the soft
  maximum ``(device^p + host^p)^(1/p)`` of its device time and its host time ``kernels · kernel_overhead +
  layers/pp · layer_fixed + microbatch_fixed`` (stretches where the GPU waits for the host alternate with stretches
  where the host waits: the sum of per-stretch maxima exceeds the maximum of the sums most where the two are
  equal); through the 1F1B formula this also sets the bubble. Calibrations without it take the plain maximum.
- ``network_eff`` (fraction of NIC peak) and ``network_latency_us`` (µs per ring step across nodes): the
  inter-node network. Only runs that span several NVLink domains identify them: a fit without such runs leaves
  them out (the system file's values stand), and ``collective_latency`` is charged inside a domain only, so a
  single-node fit moves nothing of the inter-node traffic.

Efficiencies and the network latency carry a weak log-normal prior centred on the system file's values
(:data:`PRIOR_WIDTH`), so a parameter the runs cannot tell apart from the additive costs stays near its
spec-sheet estimate instead of running to a bound.

The fit minimises the squared log ratio predicted/measured over the training runs (scipy least squares, bounded,
soft-L1), so every run weighs the same whatever its length. Train and test are split by configuration with a seeded
permutation; the test runs are never seen by the fit.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from fitters.model import Model
from pmdb import metrics
from pmdb.errors import PmdbError
from planner import system as systems
from planner.candidates import Framework, framework as framework_preset
from planner.system import System

if TYPE_CHECKING:
    from pmdb.store import Store
    from planner.validate import PreparedRuns

# name -> (initial value, lower bound, upper bound, unit)
PARAMS: dict[str, tuple[float, float, float, str]] = {
    "gemm_eff": (0.8, 0.2, 1.0, "fraction of peak"),
    "gemm_latency_us": (2.0, 0.0, 200.0, "µs per GEMM launch"),
    "wave_weight": (0.5, 0.0, 1.0, "share of the wave-quantisation loss"),
    "kernel_overhead_us": (10.0, 0.5, 200.0, "µs per kernel"),
    "hbm_eff": (0.85, 0.2, 1.0, "fraction of peak"),
    "nvlink_eff": (0.7, 0.05, 1.0, "fraction of peak"),
    "collective_latency_us": (10.0, 0.0, 1000.0, "µs per ring step of a collective"),
    "collective_fixed_us": (20.0, 0.0, 1000.0, "µs per collective call"),
    "layer_fixed_us": (50.0, 0.0, 10000.0, "µs per layer and micro-batch"),
    "microbatch_fixed_us": (500.0, 0.0, 100000.0, "µs per micro-batch and stage"),
    "overlap_sharpness": (4.0, 1.0, 50.0, "exponent of the host/device soft maximum"),
    "network_eff": (0.7, 0.05, 1.0, "fraction of NIC peak"),
    "network_latency_us": (5.0, 0.0, 50.0, "µs per ring step across nodes"),
}
# identified only by runs that span several NVLink domains: a fit without such runs leaves them at the system
# file's values (they are then absent from the calibration)
MULTI_DOMAIN = ("network_eff", "network_latency_us")
# absent from calibrations registered before they existed: such a calibration keeps its old behaviour
OPTIONAL = ("overlap_sharpness", "collective_fixed_us", *MULTI_DOMAIN)
# Physical prior of each efficiency and of the network latency (log-normal, centred on the system file's value,
# this width in log units; the latency as log(1 µs + value)): a run set that cannot tell them apart from the
# additive costs leaves them near the spec-sheet estimate instead of at a bound. One width weighs like PRIOR_RUNS
# runs predicted 10% off. The network latency's bound (50 µs per ring step, ten times an InfiniBand hop) keeps a
# fit whose multi-node runs have few small collectives from trading bandwidth for latency.
PRIOR_WIDTH = {"gemm_eff": 0.15, "hbm_eff": 0.25, "nvlink_eff": 0.25, "network_eff": 0.5, "network_latency_us": 1.0}
PRIOR_RUNS = 1.0
CONFIG_COLUMNS = ("hidden", "heads", "layers", "seq_len", "tp", "pp", "dp", "micro_batch", "global_batch")
FAMILY = "planner_calibration"
OP = "planner"


def model_name(system: str) -> str:
    """Registered name of a system's planner calibration: ``pmdb.<system>.planner``."""
    return f"pmdb.{system}.{OP}"


@dataclass
class PlannerCalibration:
    """Fitted values of :data:`PARAMS`, applied to a base system; ``label`` says which version when registered.

    Passed to the planner as its ``calibration``: :meth:`system` gives the system with the fitted efficiencies and
    per-kernel overhead; the ``*_s`` properties are the additive terms the timer and the evaluation read.
    """

    params: dict[str, float]
    label: str = "planner calibration (unregistered)"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.params) - set(PARAMS))
        if unknown:
            raise PmdbError(f"unknown planner calibration parameter {unknown[0]!r} (known: {', '.join(PARAMS)})")
        self.params = {k: float(self.params.get(k, PARAMS[k][0])) for k in PARAMS
                       if k in self.params or k not in OPTIONAL}

    def system(self, base: System) -> System:
        """``base`` with the fitted GEMM / HBM / NVLink efficiencies and per-kernel overhead."""
        p = self.params
        efficiency = dict(base.efficiency, matrix=p["gemm_eff"], vector=p["hbm_eff"], hbm=p["hbm_eff"],
                          nvlink=p["nvlink_eff"])
        changes: dict[str, Any] = {}
        if "network_eff" in p:
            efficiency["network"] = p["network_eff"]
        if "network_latency_us" in p:
            changes["network_latency_us"] = p["network_latency_us"]
        return dataclasses.replace(base, efficiency=efficiency, op_overhead_us=p["kernel_overhead_us"], **changes)

    @property
    def overlap_sharpness(self) -> float:
        """Exponent p of the host/device soft maximum; 0 (calibrations without it): the plain maximum."""
        return self.params.get("overlap_sharpness", 0.0)

    @property
    def host_overlap(self) -> bool:
        """The host (launches, fixed costs) runs ahead of the GPU: a stage's micro-batch takes max(device, host)."""
        return True

    @property
    def wave_weight(self) -> float:
        return self.params["wave_weight"]

    @property
    def gemm_latency_s(self) -> float:
        return self.params["gemm_latency_us"] * 1e-6

    @property
    def collective_latency_s(self) -> float:
        return self.params["collective_latency_us"] * 1e-6

    @property
    def collective_fixed_s(self) -> float:
        return self.params.get("collective_fixed_us", 0.0) * 1e-6

    @property
    def layer_fixed_s(self) -> float:
        return self.params["layer_fixed_us"] * 1e-6

    @property
    def microbatch_fixed_s(self) -> float:
        return self.params["microbatch_fixed_us"] * 1e-6


def split_runs(runs: pd.DataFrame, seed: int, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Boolean (train, test) masks: whole configurations (all rows with the same CONFIG_COLUMNS) go to one side,
    chosen by a seeded permutation; at least one configuration on each side."""
    if not 0 < test_fraction < 1:
        raise PmdbError(f"bad test fraction {test_fraction}: give a number between 0 and 1")
    keys = runs[list(CONFIG_COLUMNS)].astype(str).agg("/".join, axis=1)
    unique = np.array(sorted(keys.unique()))
    if len(unique) < 2:
        raise PmdbError(f"the runs hold {len(unique)} configuration: a train/test split needs at least 2")
    order = np.random.default_rng(seed).permutation(len(unique))
    n_test = min(len(unique) - 1, max(1, int(round(test_fraction * len(unique)))))
    test_keys = set(unique[order[:n_test]])
    test = keys.isin(test_keys).to_numpy()
    return ~test, test


def predict(runs: pd.DataFrame, base: System, fw: Framework, calibration: PlannerCalibration | None, *,
            vocab: int, recompute: str = "full", prepared: "PreparedRuns | None" = None) -> np.ndarray:
    """Predicted iteration seconds of each run with ``calibration`` applied (None: the system file's constants);
    ``prepared``: the runs already prepared (:func:`planner.validate.prepare_runs`), as a fit prices them again
    and again."""
    from planner.validate import prepare_runs
    if prepared is None:
        prepared = prepare_runs(runs, fw, vocab=vocab, recompute=recompute, domain=base.nvlink_domain)
    if calibration is None:
        return prepared.predict(base)
    return prepared.predict(calibration.system(base), calibration)


@dataclass
class FitResult:
    """A fitted calibration with its split and its train / held-out error summaries (pmdb.metrics.summary)."""

    calibration: PlannerCalibration
    train: np.ndarray
    test: np.ndarray
    predicted_s: np.ndarray
    measured_s: np.ndarray
    train_summary: dict[str, float]
    test_summary: dict[str, float]
    seed: int
    evaluations: int
    fit_seconds: float
    data_hash: str
    settings: dict[str, Any] = field(default_factory=dict)


def data_hash(runs: pd.DataFrame) -> str:
    """Hash of the runs' values (identifies the data a version was fitted on)."""
    return hashlib.sha256(pd.util.hash_pandas_object(runs, index=False).values.tobytes()).hexdigest()[:16]


def spans_domains(runs: pd.DataFrame, base: System) -> np.ndarray:
    """Boolean per run: more GPUs than one NVLink domain holds (its collectives cross the network)."""
    return runs["gpus"].to_numpy() > base.nvlink_domain


def fitted_names(runs: pd.DataFrame, base: System) -> list[str]:
    """The parameters ``runs`` can identify: all of :data:`PARAMS`, less :data:`MULTI_DOMAIN` when no run spans
    several NVLink domains (a single-node fit leaves the inter-node network at the system file's values)."""
    multi = bool(spans_domains(runs, base).any())
    return [n for n in PARAMS if multi or n not in MULTI_DOMAIN]


def _start(name: str, base: System) -> float:
    """Initial value (and prior centre) of a parameter: the system file's value where it has one."""
    from_system = {"gemm_eff": base.efficiency["matrix"], "hbm_eff": base.efficiency["hbm"],
                   "nvlink_eff": base.efficiency["nvlink"], "network_eff": base.efficiency["network"],
                   "network_latency_us": base.network_latency_us}
    low, high = PARAMS[name][1:3]
    return float(np.clip(from_system.get(name, PARAMS[name][0]), low, high))


def _log_ratio(name: str, value: float, centre: float) -> float:
    """log(value / centre); for µs parameters log((1 µs + value) / (1 µs + centre)) (they may be 0)."""
    pad = 1.0 if name.endswith("_us") else 0.0
    return float(np.log((pad + value) / (pad + centre)))


def fit(runs: pd.DataFrame, base: System, fw: Framework, *, vocab: int, seed: int = 0, recompute: str = "full",
        test_fraction: float = 0.2, max_evaluations: int = 400, test: np.ndarray | None = None) -> FitResult:
    """Fit the identifiable :data:`PARAMS` (:func:`fitted_names`) on the training split of ``runs``; predict all
    runs; summarise train and test apart. ``test`` (boolean per run) replaces the seeded split (cross-validation
    folds); efficiencies carry their weak physical prior (:data:`PRIOR_WIDTH`)."""
    from scipy.optimize import least_squares

    from planner.validate import prepare_runs

    if test is None:
        train, test = split_runs(runs, seed, test_fraction)
    else:
        test = np.asarray(test, dtype=bool)
        train = ~test
        if not train.any():
            raise PmdbError("no training runs left: the held-out runs are all of them")
    train_runs = runs[train]
    measured = np.log(train_runs["measured_s"].to_numpy())
    names = fitted_names(train_runs, base)
    start_values = np.array([_start(n, base) for n in names])
    # optimise in scaled units (value / initial, or value in 10 µs for parameters starting at 0)
    scale = np.where(start_values > 0, start_values, 10.0)
    lower = np.array([PARAMS[n][1] for n in names]) / scale
    upper = np.array([PARAMS[n][2] for n in names]) / scale
    priors = [(i, start_values[i], PRIOR_WIDTH[n]) for i, n in enumerate(names) if n in PRIOR_WIDTH]
    prior_weight = 0.1 * np.sqrt(PRIOR_RUNS)   # one prior width counts like PRIOR_RUNS runs 10% off
    evaluations = 0

    prepared = prepare_runs(train_runs, fw, vocab=vocab, recompute=recompute, domain=base.nvlink_domain)

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        evaluations += 1
        values = x * scale
        cal = PlannerCalibration(dict(zip(names, values)))
        data = np.log(predict(train_runs, base, fw, cal, vocab=vocab, recompute=recompute,
                              prepared=prepared)) - measured
        prior = [prior_weight * _log_ratio(names[i], values[i], centre) / width for i, centre, width in priors]
        return np.concatenate([data, prior])

    start = time.perf_counter()
    x0 = np.clip(start_values / scale, lower, upper)
    solution = least_squares(residuals, x0, bounds=(lower, upper), method="trf", diff_step=1e-3,
                             max_nfev=max_evaluations, loss="soft_l1", f_scale=0.1)
    elapsed = time.perf_counter() - start
    calibration = PlannerCalibration(dict(zip(names, (solution.x * scale).tolist())))
    predicted = predict(runs, base, fw, calibration, vocab=vocab, recompute=recompute)
    measured_all = runs["measured_s"].to_numpy()
    return FitResult(calibration, train, test, predicted, measured_all,
                     metrics.summary(predicted[train], measured_all[train]),
                     metrics.summary(predicted[test], measured_all[test]), seed, evaluations, elapsed,
                     data_hash(runs), {"system": base.name, "framework": fw.name, "vocab": vocab,
                                       "recompute": recompute, "test_fraction": test_fraction})


class PlannerCalibrationModel(Model):
    """A planner calibration as a registrable model: ``predict(runs) -> µs`` per iteration (columns as
    :func:`planner.validate.read_runs` makes them), with the base system, framework and vocabulary it was fitted
    with. Saved as model.json only (no weights)."""

    family: ClassVar[str] = FAMILY

    def __init__(self, calibration: PlannerCalibration, system: dict[str, Any], framework: str, vocab: int,
                 recompute: str):
        self.calibration, self.system_dict, self.framework = calibration, system, framework
        self.vocab, self.recompute = int(vocab), recompute

    @property
    def base_system(self) -> System:
        data = {k: v for k, v in self.system_dict.items() if k != "provenance"}
        return systems.from_dict(data, where=f"calibration of {self.system_dict.get('name')}")

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return predict(frame, self.base_system, framework_preset(self.framework), self.calibration,
                       vocab=self.vocab, recompute=self.recompute) * 1e6

    def config(self) -> dict[str, Any]:
        return {"params": self.calibration.params, "system": self.system_dict, "framework": self.framework,
                "vocab": self.vocab, "recompute": self.recompute, "n_params": len(self.calibration.params),
                "features": {"names": list(CONFIG_COLUMNS), "target": "iteration time"}}

    def describe(self) -> dict[str, Any]:
        return {**self.calibration.params, "n_params": len(self.calibration.params),
                "system": self.system_dict.get("name"),
                "framework": self.framework, "vocab": self.vocab, "recompute": self.recompute}

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "PlannerCalibrationModel":
        return cls(PlannerCalibration(dict(config["params"])), dict(config["system"]), config["framework"],
                   int(config["vocab"]), config["recompute"])


def read_saved(directory: Path, label: str) -> PlannerCalibrationModel:
    """A calibration saved by :meth:`PlannerCalibrationModel.save` (model.json of family planner_calibration)."""
    from fitters.model import MODEL_FILE
    path = Path(directory) / MODEL_FILE
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PmdbError(f"cannot read the planner calibration in {directory}: {exc}") from None
    if payload.get("family") != FAMILY:
        raise PmdbError(f"{directory} holds a {payload.get('family')!r} model, not a planner calibration")
    model = PlannerCalibrationModel.from_saved(payload["config"], Path(directory))
    model.calibration.label = label
    return model


def register(store: "Store", result: FitResult, model: PlannerCalibrationModel, *, fit_run_id: str | None,
             source: str) -> tuple[str, int, int | None]:
    """Log ``result`` as a new version of ``pmdb.<system>.planner`` through the fitters' Registry (MLflow run +
    registered version + DuckDB mirror + ``latest``), move ``champion`` by the registry's rule (lowest held-out GMAE
    among versions fitted on the same data). The system is recorded as an imported platform of that name.
    Returns (name, version, champion version)."""
    from fitters.evaluate import error_histogram
    from fitters.registry import Registry, VersionRecord, choose_champion
    from pmdb import platform as platforms

    system_name = result.settings["system"]
    platforms.ensure_named(store, system_name, device_kind="cuda",
                           details={"planner_system": system_name, "note": "named for planner calibrations"})
    name = model_name(system_name)
    record = VersionRecord(
        name=name, platform=system_name, op=OP, family=FAMILY, seed=result.seed, data_runs=[source],
        data_hash=result.data_hash, n_train=int(result.train.sum()), n_test=int(result.test.sum()),
        metrics={k: float(v) for k, v in result.test_summary.items() if k != "n"},
        histogram=error_histogram(result.predicted_s[result.test], result.measured_s[result.test]),
        fit_seconds=result.fit_seconds)
    registry = Registry(store.workspace)
    split = {"seed": result.seed, "test_fraction": result.settings["test_fraction"],
             "train_rows": np.flatnonzero(result.train).tolist(), "test_rows": np.flatnonzero(result.test).tolist(),
             "train_metrics": {k: float(v) for k, v in result.train_summary.items()},
             "n_params": len(result.calibration.params)}
    version = registry.log_version(store, fit_run_id, record, model, [], split)
    champion = choose_champion(store, name, fit_run_id)
    if champion is not None:
        registry.set_champion(store, name, int(champion))
    return name, version, champion


def load_registered(store: "Store", system: str, version: str) -> PlannerCalibrationModel:
    """The registered calibration of ``system`` at a version number or an alias (champion, latest); its label
    names the version ('pmdb.a100.planner v3')."""
    from fitters.registry import Registry

    if not (str(version).isdigit() or str(version) in ("champion", "latest")):
        raise PmdbError(f"bad calibration version {version!r}: give a number, champion or latest")
    name = model_name(system)
    if not store.scalar("SELECT count(*) FROM model_versions WHERE name = ?", [name]):
        raise PmdbError(f"no planner calibration registered for system {system!r} (run `pmdb plan calibrate "
                        f"--runs FILE --system {system}` first)")
    registry = Registry(store.workspace)
    number = registry.resolve_version(name, version)
    directory = registry.download(name, number)
    return read_saved(directory, f"{name} v{number}")
