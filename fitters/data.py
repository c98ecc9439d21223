"""What the fitters read from the store (completed runs only, through the ``v_*`` views), grouped per model.

Kernel groups: (op, pass, implementation, dtype, cache_state). An op whose rows carry embedding batch statistics
(``embedding_batch_stats`` by measurement id) is an embedding-lookup group: its inputs are the per-table lists, not
the params. Collective groups: (collective, world size) over the aggregate (``rank IS NULL``) rows; ``all_to_allv``
(random splits) rows belong to the ``all_to_all`` model as test points. Non-finite or non-positive times are
dropped and counted.

GPU kernel rows are fitted on ``median_us``, the kernel's device time: rows imported from single-call tables
(NeuSight) had their table's host floor removed at import (``collectors/importers/launch_floor.py``; the latency
is kept in ``single_call_us``), so the simulator's host side (T1-T5) is not counted twice. CPU backward rows are
fitted on ``node_us``, their median without the autograd engine's own cost of the benchmark's backward call (the
row's ``engine_call_us``, migration 0018): a step's node pays its own run, not a whole backward call's set-up.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from collectors import gpu_specs
from fitters import features as feats
from pmdb.store import Store

KERNEL_KEYS = ("op", "pass", "implementation", "dtype", "cache_state")
COLLECTIVE_ALIASES = {"all_to_allv": "all_to_all"}  # measured collective -> the model it is scored against


@dataclass
class KernelGroup:
    """Rows of one kernel model: ``params`` (model inputs), ``times_us``, ``config_key`` and ids, aligned."""

    op: str
    pass_: str
    implementation: str
    dtype: str
    cache_state: str
    embedding: bool
    rows: pd.DataFrame            # measurement_id, run_id, config_key, median_us
    params: pd.DataFrame          # model inputs, one row per measurement
    dropped: int = 0              # rows dropped (NaN/non-positive time, missing statistics)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.op, self.pass_, self.implementation, self.dtype, self.cache_state)

    @property
    def label(self) -> str:
        return f"{self.op} {self.pass_} ({self.implementation}, {self.dtype}, {self.cache_state})"


@dataclass
class CollectiveGroup:
    """Aggregate rows of one collective model (collective, world size): sizes, times, split kinds, run ids."""

    collective: str
    world_size: int
    backend: str
    rows: pd.DataFrame            # collective_id, run_id, collective, split_kind, max_rank_bytes, lat_us
    dropped: int = 0

    @property
    def label(self) -> str:
        return f"{self.collective} ws{self.world_size} ({self.backend})"


def _valid_time(values: pd.Series) -> np.ndarray:
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    return np.isfinite(numbers) & (numbers > 0)


def peaks(store: Store, platform: str) -> dict[str, float]:
    """Latest measured peaks of the platform: metric -> value (FLOP/s, bytes/s); float32 preferred. A GPU known from
    its spec sheet (``gpu_specs``) has its nominal FP32 rate and bandwidth where nothing was measured."""
    frame = store.query("SELECT metric, dtype, value FROM v_platform_peaks WHERE platform = ? "
                        "ORDER BY metric, (dtype = 'float32') DESC, measured_at DESC", [platform])
    measured = {metric: float(group["value"].iloc[0]) for metric, group in frame.groupby("metric", sort=False)}
    return {**gpu_specs.peaks(store, platform), **measured}


def kernel_groups(store: Store, platform: str, ops: list[str] | None = None,
                  cache_states: list[str] | None = None) -> list[KernelGroup]:
    """One group per (op, pass, implementation, dtype, cache state) with measured rows on ``platform``. Rows of
    the 'loop' state (traced embedding lookups timed in a training loop) price exactly their own shapes and are
    never fitted."""
    sql = ("SELECT measurement_id, run_id, op, pass, implementation, dtype, cache_state, config_key, threads, "
           "CAST(params AS VARCHAR) AS params, node_us AS median_us FROM v_op_measurements WHERE platform = ? "
           "AND cache_state <> 'loop'")
    args: list = [platform]
    if ops:
        sql += f" AND op IN ({', '.join('?' * len(ops))})"
        args += ops
    if cache_states:
        sql += f" AND cache_state IN ({', '.join('?' * len(cache_states))})"
        args += cache_states
    frame = store.query(sql + " ORDER BY measurement_id", args)
    if frame.empty:
        return []
    with_stats = set(store.query(
        "SELECT DISTINCT s.measurement_id FROM v_embedding_batch_stats s JOIN op_measurements m USING (measurement_id) "
        "WHERE m.platform = ?", [platform])["measurement_id"].tolist())
    groups = []
    for key, rows in frame.groupby(list(KERNEL_KEYS), sort=True):
        rows = rows.reset_index(drop=True)
        embedding = bool(rows["measurement_id"].isin(with_stats).any())
        groups.append(_embedding_group(store, key, rows, with_stats) if embedding else _kernel_group(key, rows))
    return groups


def _kernel_group(key: tuple, rows: pd.DataFrame) -> KernelGroup:
    keep = _valid_time(rows["median_us"])
    rows = rows[keep].reset_index(drop=True)
    params = feats.with_optional(key[0], feats.params_frame(rows["params"])) if len(rows) else pd.DataFrame()
    notes = []
    if rows["threads"].nunique() > 1:  # different thread counts: the count becomes a feature
        params["threads"] = rows["threads"].astype(float)
        notes.append("threads varies: used as a feature")
    return KernelGroup(*key, embedding=False, rows=rows[["measurement_id", "run_id", "config_key", "median_us"]],
                       params=params, dropped=int((~keep).sum()), notes=notes)


def _embedding_group(store: Store, key: tuple, rows: pd.DataFrame, with_stats: set) -> KernelGroup:
    keep = _valid_time(rows["median_us"]) & rows["measurement_id"].isin(with_stats).to_numpy()
    rows = rows[keep].reset_index(drop=True)
    tables = store.query(
        "SELECT measurement_id, list(batch_size ORDER BY table_index) AS batch_size, "
        "list(num_rows ORDER BY table_index) AS num_rows, list(pooling_mean ORDER BY table_index) AS pooling_mean, "
        "list(dim ORDER BY table_index) AS dim, list(reuse_factors ORDER BY table_index) AS reuse_factors "
        "FROM v_embedding_batch_stats WHERE measurement_id IN (SELECT unnest(?::BIGINT[])) GROUP BY measurement_id",
        [rows["measurement_id"].astype(int).tolist()])
    params = rows[["measurement_id"]].merge(tables, on="measurement_id", how="left")
    params = params[list(feats.EMBEDDING_COLUMNS)].reset_index(drop=True)
    return KernelGroup(*key, embedding=True, rows=rows[["measurement_id", "run_id", "config_key", "median_us"]],
                       params=params, dropped=int((~keep).sum()))


def collective_groups(store: Store, platform: str, collectives: list[str] | None = None) -> list[CollectiveGroup]:
    """One group per (model collective, world size) over the aggregate rows of ``platform``. A row's time
    (``lat_us``) is its mean over iterations where stored (a step pays every call: gloo on a small host is bimodal
    per call, and the median picks either mode), else its median (rows written before migration 0012, imports)."""
    frame = store.query(
        "SELECT collective_id, run_id, collective, backend, world_size, split_kind, max_rank_bytes, "
        "coalesce(lat_mean_us, lat_p50_us) AS lat_us FROM v_collective_measurements "
        "WHERE platform = ? AND rank IS NULL ORDER BY collective_id", [platform])
    if frame.empty:
        return []
    frame["model_collective"] = frame["collective"].map(lambda c: COLLECTIVE_ALIASES.get(c, c))
    if collectives:
        frame = frame[frame["model_collective"].isin({COLLECTIVE_ALIASES.get(c, c) for c in collectives})]
    groups = []
    for (collective, world_size), rows in frame.groupby(["model_collective", "world_size"], sort=True):
        if not (rows["split_kind"] == "equal").any():
            continue  # only random-split points: nothing to train on (they are test points of another model)
        backend = rows["backend"].mode().iloc[0]
        rows = rows[rows["backend"] == backend]
        keep = _valid_time(rows["lat_us"]) & (rows["max_rank_bytes"].to_numpy() > 0)
        groups.append(CollectiveGroup(collective, int(world_size), backend, rows[keep].reset_index(drop=True),
                                      dropped=int((~keep).sum())))
    return groups


def op_names(store: Store, platform: str) -> tuple[list[str], list[str]]:
    """(kernel op names, collective names) with rows on the platform."""
    ops = store.query("SELECT DISTINCT op FROM v_op_measurements WHERE platform = ? ORDER BY op", [platform])
    colls = store.query("SELECT DISTINCT collective FROM v_collective_measurements WHERE platform = ? "
                        "ORDER BY collective", [platform])
    return ops["op"].tolist(), colls["collective"].tolist()
