"""The collectives' in-context term: how much slower (or faster) a collective runs inside a training step than the
microbenchmark curve (:mod:`fitters.collective`) says, fitted per platform, collective and world size on the
collectives of stored workload traces.

* **Rows**: every collective of every complete iteration of the platform's recorded trace sets (captured or
  imported, world size >= 2, Kineto-timed; derived sharding-study sets never). The message size is the simulator's:
  the max over ranks of the k-th collective's bytes. Its in-context time is the **min over ranks** of that rank's
  work on the communication stream (gloo's ``gloo:*`` event on a CPU, the NCCL kernels on a GPU): a rank that
  arrived first also waited for its peer, the last to arrive did not. With ``subtract_compute``, where the ranks'
  communication threads had no core of their own (``shares_core``: the simulator's core rule,
  :func:`simulator.threads.comm_shares_core`), the time the rank's own compute ops ran inside that work is taken out
  first (the simulator charges such a collective to its rank's core already). Off by default: on the 2-core host
  (two ranks, four threads) that rule fitted an all_reduce factor of 0.50 and left world-size-2 steps *more*
  under-predicted (two held-out trace sets: -19.4 / -27.2% with the plain curves, -17.2 / -25.3% subtracted, +3.7 /
  -6.4% kept): the ranks' threads do not share the cores serially, and the overlapped time is time the step loses.
* **Stalls**: a rank's work on a collective can also end long after its peers' (on the 2-core host, a forward
  all_to_all ended 4.45 ms after it started on one rank and 0.20 ms on the other, both ranks there within 25 µs:
  the data had been sent, one rank's thread got it ~4 ms later). The min over ranks leaves that out, and it delays
  the step all the same (every later collective waits for it). Its **lag** is the spread of the ranks' work end
  times: max - min over ranks (0 when they end together, as after a late arrival that the others waited for).
* **Model** (family ``in_context``): the plain curve (the champion ``<collective>.ws<N>~<platform>`` at fit
  time, stored inside the version) times a factor ``f(m) = exp(a + b (clip(log2 m, lo, hi) - c))``, plus the mean
  lag of the training rows (``stall_us``, the expected stall per call: stalls are rare and long, so the mean): ``a`` the
  typical log ratio in context / curve, ``b`` its slope over message size (0 unless the training rows hold at least
  MIN_SLOPE_SIZES sizes spanning MIN_SLOPE_OCTAVES octaves), sizes outside the trained range [lo, hi] priced at its
  edge. Robust least squares in ln(ratio) (soft-L1: one preempted collective counts linearly).
* **Held out by trace set**: the sets are split (seeded, :func:`fitters.split.split_rows`; a workload's trace sets
  together, :func:`fitters.split.workload_groups`); the version is fitted on
  the training sets only and scored on the test sets, beside the plain curve's error on the same rows and the
  replicate GMAE (each traced instance against the median of its collective over the set's iterations: the noise
  floor no model of message size can beat). Scored against the in-context time plus the lag; the size term alone
  (curve x factor, no stall) is also scored against the work without the lag (``work_gmae``, beside the plain
  curve's ``plain_work_gmae``): stalls are rare and long, so the per-call error of the whole model swings with them.

Registered as ``<collective>.ws<N>.in_context~<platform>`` (MLflow run + version, mirrored; a store that registered it
as ``pmdb.<platform>.<collective>.ws<N>.in_context`` keeps that name, :func:`fitters.registry.registered_name`); each
fit's version becomes that name's champion. Model selection prices collectives with it where one is registered, the
plain curve with ``--collectives plain`` (:mod:`simulator.model_set`). Times µs, sizes bytes.
"""
from __future__ import annotations

import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fitters.model import Model, family_class
from pmdb import metrics
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.graph import Op, RankGraph, Stream

FAMILY = "in_context"
NAME_SUFFIX = "in_context"
ROBUST_SCALE = 0.05        # ln-ratio residual beyond which a row counts linearly (soft-L1)
MIN_SLOPE_SIZES = 3        # distinct training sizes a size slope needs ...
MIN_SLOPE_OCTAVES = 2.0    # ... spanning at least this many octaves of message size
MAX_ABS_SLOPE = math.log(2.0)  # |b| bound: the factor changes at most 2x per octave of message size
SharesCore = Callable[[int, "int | None"], bool]   # (world size, intra-op threads per rank) -> no core for comm


def context_model_name(platform: str, collective: str, world_size: int) -> str:
    """``<collective>.ws<N>.in_context~<platform>``: the plain curve's name with the suffix."""
    from fitters.registry import model_name

    return model_name(platform, collective, f"ws{int(world_size)}", NAME_SUFFIX)


# ---- the model ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Factor:
    """ln f = a + b (clip(log2 m, lo, hi) - center); m in bytes."""

    a: float
    b: float = 0.0
    center: float = 0.0
    lo: float = 0.0
    hi: float = 0.0

    def __call__(self, sizes: np.ndarray) -> np.ndarray:
        x = np.log2(np.maximum(np.asarray(sizes, dtype=float), 1.0))
        return np.exp(self.a + self.b * (np.clip(x, self.lo, self.hi) - self.center))


class InContextCollectiveModel(Model):
    """The plain collective curve times the in-context factor; ``predict`` takes ``max_rank_bytes`` (bytes), µs."""

    family = FAMILY

    def __init__(self, collective: str, world_size: int, base: Model, base_version: str, factor: Factor,
                 info: dict[str, Any] | None = None, stall_us: float = 0.0):
        self.collective, self.world_size = collective, int(world_size)
        self.base, self.base_version, self.factor = base, base_version, factor
        self.info = info or {}
        self.stall_us = float(stall_us)   # expected stall per call (µs): the training rows' mean lag

    def plain(self, frame: pd.DataFrame) -> np.ndarray:
        """The plain curve's µs (what the factor multiplies)."""
        return np.asarray(self.base.predict(frame), dtype=float)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        plain = self.plain(frame)   # checks the max_rank_bytes column
        sizes = pd.to_numeric(frame["max_rank_bytes"], errors="coerce").to_numpy(dtype=float)
        return plain * self.factor(sizes) + self.stall_us

    def config(self) -> dict[str, Any]:
        return {"collective": self.collective, "world_size": self.world_size, "factor": asdict(self.factor),
                "stall_us": self.stall_us,
                "base": {"version": self.base_version, "family": self.base.family, "config": self.base.config()},
                "fit": self.info,
                "features": {"inputs": ["max_rank_bytes"], "x": "log2(max_rank_bytes)", "unit": "µs"}}

    def describe(self) -> dict[str, Any]:
        return {"collective": self.collective, "world_size": self.world_size, "base_version": self.base_version,
                **{f"factor_{k}": v for k, v in asdict(self.factor).items()}, "stall_us": self.stall_us,
                "fit": self.info}

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "InContextCollectiveModel":
        base_cfg = config["base"]
        base = family_class(base_cfg["family"]).from_saved(base_cfg["config"], directory)
        return cls(config["collective"], config["world_size"], base, base_cfg["version"],
                   Factor(**config["factor"]), config.get("fit"), float(config.get("stall_us", 0.0)))


def fit_factor(sizes: np.ndarray, ratios: np.ndarray) -> Factor:
    """The factor on training rows (message bytes, in-context / curve ratios > 0)."""
    sizes, ratios = np.asarray(sizes, dtype=float), np.asarray(ratios, dtype=float)
    keep = (sizes > 0) & np.isfinite(ratios) & (ratios > 0)
    if not keep.any():
        raise PmdbError("no in-context rows with a positive size and time to fit on")
    x, y = np.log2(sizes[keep]), np.log(ratios[keep])
    lo, hi = float(x.min()), float(x.max())
    center = float(np.median(x))
    slope = np.unique(x).size >= MIN_SLOPE_SIZES and hi - lo >= MIN_SLOPE_OCTAVES
    start = np.array([np.median(y), 0.0])

    def residuals(theta: np.ndarray) -> np.ndarray:
        return theta[0] + (theta[1] if slope else 0.0) * (x - center) - y

    result = least_squares(residuals, start, bounds=([-np.inf, -MAX_ABS_SLOPE], [np.inf, MAX_ABS_SLOPE]),
                           loss="soft_l1", f_scale=ROBUST_SCALE)
    return Factor(float(result.x[0]), float(result.x[1]) if slope else 0.0, center, lo, hi)


# ---- rows from the stored traces ---------------------------------------------------------------------------------
def work_interval(op: Op) -> tuple[float, float] | None:
    """(start, end) on the trace clock of a CPU collective's work on the communication thread, as
    :func:`pmdb.traces.from_store.make_op` encodes it (work that started during the call: ``gap_before_us`` after
    the op's start; work handed over after the call returned: ``launch_us`` after its end); None without one."""
    comm = [k for k in op.kernels if k.stream == Stream.COMM]
    if len(comm) != 1 or math.isnan(op.start_us) or math.isnan(comm[0].dur_us):
        return None
    kernel = comm[0]
    if kernel.launch_us > 0:
        start = op.start_us + op.cpu_dur_us + kernel.launch_us
    else:
        start = op.start_us + (0.0 if math.isnan(kernel.gap_before_us) else kernel.gap_before_us)
    return start, start + kernel.dur_us


def _busy_within(start: float, end: float, intervals: list[tuple[float, float]]) -> float:
    """µs of [start, end] covered by the (sorted, non-overlapping top-level) compute intervals."""
    total = 0.0
    for lo, hi in intervals:
        if lo >= end:
            break
        total += max(0.0, min(hi, end) - max(lo, start))
    return total


def rank_work(graph: RankGraph, subtract_compute: bool) -> dict[int, tuple[float, float]]:
    """Per collective (its index k among the rank's collectives): (work µs, raw work µs). The raw work is the traced
    duration on the communication stream; the work is that minus the time the rank's own compute ops ran inside it
    when ``subtract_compute`` (CPU ranks whose communication thread shares their core)."""
    compute = sorted((op.start_us, op.start_us + op.cpu_dur_us) for op in graph.ops
                     if not op.is_collective and not math.isnan(op.start_us) and not math.isnan(op.cpu_dur_us))
    out = {}
    for k, i in enumerate(graph.collectives()):
        op = graph.ops[i]
        raw = float(sum(kernel.dur_us for kernel in op.kernels if kernel.stream == Stream.COMM))
        if not op.kernels or math.isnan(raw) or raw <= 0:
            continue
        work = raw
        if subtract_compute:
            span = work_interval(op)
            if span is not None:
                work = max(raw - _busy_within(span[0], span[1], compute), 0.0)
        out[k] = (work, raw)
    return out


ROW_COLUMNS = ["trace_set_id", "run_id", "workload_id", "iteration", "index", "collective", "world_size",
               "max_rank_bytes", "traced_us", "raw_us", "lag_us", "compute_subtracted"]


def end_lag(ops: list[Op]) -> float:
    """The spread of the ranks' work end times on one collective (µs): max - min over ranks; 0 without a finite
    work interval on every rank."""
    spans = [work_interval(op) for op in ops]
    if any(span is None for span in spans):
        return 0.0
    ends = [span[1] for span in spans]
    lag = float(max(ends) - min(ends))
    return lag if math.isfinite(lag) else 0.0


def trace_sets(store: Store, platform: str, wanted: list[int] | None = None) -> pd.DataFrame:
    """The platform's recorded multi-rank trace sets with Kineto timings (trace_set_id, run_id, workload_id,
    world_size)."""
    frame = store.query(
        "SELECT s.trace_set_id, s.run_id, s.workload_id, s.world_size FROM v_trace_sets s WHERE s.platform = ? "
        "AND s.world_size >= 2 AND s.source <> 'derived' AND EXISTS (SELECT 1 FROM v_traces t "
        "WHERE t.trace_set_id = s.trace_set_id AND t.kind = 'kineto') ORDER BY s.trace_set_id", [platform])
    if wanted is not None:
        missing = sorted(set(wanted) - set(frame["trace_set_id"].astype(int)))
        if missing:
            raise PmdbError(f"trace set(s) {', '.join(map(str, missing))}: not a completed, recorded multi-rank "
                            f"trace set of {platform} with Kineto timings")
        frame = frame[frame["trace_set_id"].isin(wanted)]
    return frame.reset_index(drop=True)


def traced_collectives(store: Store, platform: str, shares_core: SharesCore,
                       wanted: list[int] | None = None, subtract_compute: bool = False) -> pd.DataFrame:
    """One row per collective instance of the platform's trace sets (:data:`ROW_COLUMNS`; µs, bytes); the rank's
    compute is taken out of its collectives' work only with ``subtract_compute`` (and where ``shares_core``)."""
    from pmdb.traces.from_store import load_graphs
    from pmdb.traces.recorded import recorded_threads

    rows = []
    for ts in trace_sets(store, platform, wanted).itertuples(index=False):
        subtract = subtract_compute and bool(shares_core(int(ts.world_size),
                                                         recorded_threads(store, int(ts.trace_set_id))))
        for graph in load_graphs(store, int(ts.trace_set_id), pick="all", shapes=True):
            per_rank = [rank_work(rg, subtract) for rg in graph.ranks]
            indices = [rg.collectives() for rg in graph.ranks]   # the same sequence on every rank (validated)
            first = graph.ranks[0]
            for k, i in enumerate(indices[0]):
                sizes = [rg.ops[at[k]].comm_bytes for rg, at in zip(graph.ranks, indices)]
                works = [w[k] for w in per_rank if k in w]
                if len(works) < len(graph.ranks) or any(math.isnan(s) for s in sizes):
                    continue
                best = min(works)
                lag = end_lag([rg.ops[at[k]] for rg, at in zip(graph.ranks, indices)])
                rows.append({"trace_set_id": int(ts.trace_set_id), "run_id": ts.run_id,
                             "workload_id": None if pd.isna(ts.workload_id) else int(ts.workload_id),
                             "iteration": first.iteration,
                             "index": k, "collective": first.ops[i].collective, "world_size": len(graph.ranks),
                             "max_rank_bytes": float(max(sizes)), "traced_us": best[0], "raw_us": best[1],
                             "lag_us": lag, "compute_subtracted": subtract})
    return pd.DataFrame(rows, columns=ROW_COLUMNS)


# ---- scoring -----------------------------------------------------------------------------------------------------
def replicate_gmae(rows: pd.DataFrame) -> float:
    """GMAE of each traced instance against the median of the same collective (trace set, index k) over the set's
    iterations: the run-to-run noise of the in-context times themselves (NaN without repeated instances)."""
    if rows.empty:
        return float("nan")
    median = rows.groupby(["trace_set_id", "index"])["traced_us"].transform("median")
    repeated = rows.groupby(["trace_set_id", "index"])["traced_us"].transform("size") > 1
    keep = repeated & (median > 0)
    if not keep.any():
        return float("nan")
    return metrics.gmae(rows.loc[keep, "traced_us"].to_numpy(), median[keep].to_numpy())


@dataclass
class ContextFit:
    """One fitted group: the model, its rows, which trace sets trained and tested it, and the test scores."""

    collective: str
    world_size: int
    model: InContextCollectiveModel
    rows: pd.DataFrame
    train_sets: list[int]
    test_sets: list[int]
    metrics: dict[str, float]


def fit_group(rows: pd.DataFrame, base: Model, base_version: str, seed: int = 0) -> ContextFit:
    """Fit one (collective, world size) group on the training trace sets and score the test sets."""
    from fitters.split import split_rows, workload_groups

    rows = rows.reset_index(drop=True)
    positive = rows["traced_us"].to_numpy(dtype=float) > 0
    rows = rows[positive].reset_index(drop=True)
    rows["target_us"] = rows["traced_us"] + rows["lag_us"]   # what the model is scored on: min-over-ranks work + lag
    if rows.empty:
        raise PmdbError("no collective instance with a positive in-context time")
    split = split_rows(workload_groups(rows["trace_set_id"], rows["workload_id"]), seed)
    frame = rows[["max_rank_bytes"]]
    plain = np.asarray(base.predict(frame), dtype=float)
    traced = rows["traced_us"].to_numpy(dtype=float)
    sizes = rows["max_rank_bytes"].to_numpy(dtype=float)
    factor = fit_factor(sizes[split.train], traced[split.train] / plain[split.train])
    lag, target = rows["lag_us"].to_numpy(dtype=float), rows["target_us"].to_numpy(dtype=float)
    stall = float(lag[split.train].mean()) if split.train.size else 0.0
    train = rows.iloc[split.train]
    info = {"train_rows": int(split.train.size), "train_sizes": int(train["max_rank_bytes"].nunique()),
            "train_median_ratio": round(float(np.median(traced[split.train] / plain[split.train])), 4),
            "median_raw_over_traced": round(float(np.median(train["raw_us"] / train["traced_us"].clip(lower=1e-9))), 4),
            "compute_subtracted": bool(train["compute_subtracted"].any()),
            "train_lag_p90_us": round(float(np.percentile(lag[split.train], 90)), 1) if split.train.size else 0.0,
            "target": "min over ranks of the collective's communication-stream work, plus the spread of the ranks' "
                      "work end times (the lag)"}
    model = InContextCollectiveModel(str(rows["collective"].iloc[0]), int(rows["world_size"].iloc[0]), base,
                                     base_version, factor, info, stall)
    test = rows.iloc[split.test]
    scores: dict[str, float] = {"n": 0}
    if split.test.size:
        predicted = model.predict(test[["max_rank_bytes"]])
        scores = metrics.summary(predicted, target[split.test])
        scores["plain_gmae"] = metrics.gmae(plain[split.test], target[split.test])
        scores["replicate_gmae"] = replicate_gmae(test)
        # the size term alone (plain curve x factor) against the work without the lag: what the factor is fitted
        # to, apart from the stalls a loaded host adds at random (one 4-6 ms stall among three 80 µs calls puts the
        # mean-stall model's per-call GMAE above even a 100x too fast curve's, and says nothing of the factor)
        scores["work_gmae"] = metrics.gmae(plain[split.test] * factor(sizes[split.test]), traced[split.test])
        scores["plain_work_gmae"] = metrics.gmae(plain[split.test], traced[split.test])
    return ContextFit(model.collective, model.world_size, model, rows,
                      sorted(train["trace_set_id"].unique().astype(int).tolist()),
                      sorted(test["trace_set_id"].unique().astype(int).tolist()), scores)


# ---- the command: fit, register -----------------------------------------------------------------------------------
@dataclass
class ContextOptions:
    """What `pmdb fit comms-context` asked for."""

    collectives: list[str] | None = None   # None: every collective the traces hold
    trace_sets: list[int] | None = None    # None: every recorded multi-rank trace set of the platform
    seed: int = 0
    subtract_compute: bool = False         # take the rank's own compute out where comm shares its core


def _plain_champion(store: Store, platform: str, collective: str, world_size: int) -> tuple[str, int] | None:
    from fitters.registry import collective_model_name, known_name

    name = known_name(store, collective_model_name(platform, collective, world_size))  # or its legacy name
    version = store.scalar("SELECT a.version FROM model_aliases a JOIN model_versions m USING (name, version) "
                           "WHERE a.name = ? AND a.alias = 'champion'", [name])
    return None if version is None else (name, int(version))


def fit_in_context(store: Store, workspace: Any, platform: str, shares_core: SharesCore,
                   options: ContextOptions = ContextOptions()) -> tuple[pd.DataFrame, list[str]]:
    """Fit and register the in-context term of every (collective, world size) of the platform's traces that has a
    plain champion curve, inside one ``fit`` run. Returns (one row per registered version, notes)."""
    from fitters import plots
    from fitters.evaluate import data_hash, error_histogram
    from fitters.load import load_model
    from fitters.registry import Registry, VersionRecord

    rows = traced_collectives(store, platform, shares_core, options.trace_sets, options.subtract_compute)
    if rows.empty:
        raise PmdbError(f"no traced collectives on {platform}: record a multi-rank workload first "
                        f"(`pmdb collect workload dlrm --world-size 2`)")
    if options.collectives:
        unknown = sorted(set(options.collectives) - set(rows["collective"]))
        if unknown:
            raise PmdbError(f"no traced {', '.join(unknown)} on {platform} (traced: "
                            f"{', '.join(sorted(rows['collective'].unique()))})")
        rows = rows[rows["collective"].isin(options.collectives)]
    notes: list[str] = []
    plan = []
    for (collective, world_size), group in rows.groupby(["collective", "world_size"], sort=True):
        base = _plain_champion(store, platform, collective, int(world_size))
        if base is None:
            notes.append(f"skipped {collective} ws{world_size}: no plain curve to scale (no champion of "
                         f"{collective} ws{world_size}: `pmdb collect comms`, then `pmdb fit --op {collective}`)")
            continue
        plan.append((collective, int(world_size), group, base))
    if not plan:
        raise PmdbError(f"nothing to fit on {platform}: " + "; ".join(notes))
    args = {"what": "comms-context", "collectives": options.collectives, "trace_sets": options.trace_sets,
            "seed": options.seed, "subtract_compute": options.subtract_compute}
    results = []
    with store.run("fit", platform, args) as run:
        registry = Registry(workspace, store)
        for collective, world_size, group, (base_name, base_version) in plan:
            started = time.monotonic()
            fitted = fit_group(group, load_model(workspace, base_name, base_version), f"{base_name}:{base_version}",
                               options.seed)
            record = VersionRecord(context_model_name(platform, collective, world_size), platform, collective,
                                   FAMILY, world_size=world_size)
            train = fitted.rows[fitted.rows["trace_set_id"].isin(fitted.train_sets)]
            record.seed, record.n_train = options.seed, len(train)
            record.n_test = len(fitted.rows) - len(train)
            record.data_runs = sorted(train["run_id"].unique().tolist())
            record.data_hash = data_hash(train["trace_set_id"] * 100_000 + train["index"],
                                         train[["max_rank_bytes", "iteration"]], train["traced_us"].to_numpy())
            record.metrics = {k: v for k, v in fitted.metrics.items() if k != "n" or fitted.test_sets}
            record.fit_seconds = round(time.monotonic() - started, 3)
            if not fitted.test_sets:
                notes.append(f"{collective} ws{world_size}: one trace set, nothing held out (no test error)")
            split = {"id_column": "trace_set_id", "train_ids": fitted.train_sets, "test_ids": fitted.test_sets,
                     "base": f"{base_name}:{base_version}"}
            test = fitted.rows[fitted.rows["trace_set_id"].isin(fitted.test_sets)]
            measured = [part["target_us"].to_numpy(dtype=float) for part in (test, train)]
            predicted = [fitted.model.predict(part[["max_rank_bytes"]]) for part in (test, train)]
            record.histogram = error_histogram(predicted[0], measured[0]) if len(test) else {}
            with tempfile.TemporaryDirectory() as tmp:
                figure = plots.scatter(Path(tmp) / f"{record.name}.{FAMILY}.scatter.png",
                                       f"{collective} ws{world_size} in context", measured[0], predicted[0],
                                       measured[1], predicted[1], record.histogram or error_histogram([], []))
                version = registry.log_version(store, run.run_id, record, fitted.model, [figure], split)
            registry.set_champion(store, record.name, version)
            results.append({"name": record.name, "collective": collective, "world_size": world_size,
                            "version": version, "base": f"{base_name}:{base_version}",
                            "factor": float(fitted.model.factor(np.array([2.0 ** fitted.model.factor.center]))[0]),
                            "slope": fitted.model.factor.b, "stall_us": fitted.model.stall_us, "n_train": record.n_train, "n_test": record.n_test,
                            "test_sets": len(fitted.test_sets), "test_gmae": fitted.metrics.get("gmae", math.nan),
                            "plain_gmae": fitted.metrics.get("plain_gmae", math.nan),
                            "replicate_gmae": fitted.metrics.get("replicate_gmae", math.nan),
                            "work_gmae": fitted.metrics.get("work_gmae", math.nan),
                            "plain_work_gmae": fitted.metrics.get("plain_work_gmae", math.nan)})
        run.summary = {"versions": len(results), "rows": int(len(rows)), "notes": notes,
                       "trace_sets": sorted(rows["trace_set_id"].unique().astype(int).tolist())}
    return pd.DataFrame(results), notes
