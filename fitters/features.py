"""The one place that turns stored op parameters into model features, for fitting and prediction alike.

Kernel ops: each parameter (``op_measurements.params``) becomes ln(value) when every training value is positive,
else the raw value (flags, offsets); parameters constant over the training rows carry no information and are left
out (their values are kept in the spec). Two derived features follow: ln(flops + 1) and ln(bytes + 1) from
:mod:`fitters.opcost`; conv2d adds its implicit-GEMM view (:data:`CONV_DERIVED`: ln of M = B·OH·OW, N = OC,
K = IC·FH·FW, of the output tiles and of flops / bytes). Targets are ln(time in µs).

Embedding lookups: one 21-vector per table, [ln B, ln E, ln L, ln D, 17 reuse factors] (method.md section 3); the
prediction frame has one row per op instance with list columns named like ``embedding_batch_stats``:
``batch_size`` (a number or one per table), ``num_rows``, ``pooling_mean``, ``dim`` (one per table) and
``reuse_factors`` (one 17-list per table).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from fitters import opcost
from pmdb.errors import PmdbError
from pmdb.traces.state_values import OPTIONAL

DERIVED = ("ln_flops", "ln_bytes")
# op-specific derived features, appended after DERIVED (see :func:`_op_derived`)
CONV_DERIVED = ("ln_gemm_m", "ln_gemm_n", "ln_gemm_k", "ln_tiles", "ln_intensity")
OP_DERIVED = {"conv2d": CONV_DERIVED}
CONV_TILE = (128.0, 64.0)   # output rows x columns of one implicit-GEMM tile (a common cuDNN fp32 tile)
EMBEDDING_COLUMNS = ("batch_size", "num_rows", "pooling_mean", "dim", "reuse_factors")
NUM_REUSE_BINS = 17
TABLE_FEATURES = ("ln_B", "ln_E", "ln_L", "ln_D", *(f"rf{i}" for i in range(NUM_REUSE_BINS)))
_MIN_POOLING = 1e-2  # ln L of an (almost) empty table lookup stays finite


@dataclass(frozen=True)
class FeatureSpec:
    """How a kernel model's feature matrix is built from an op's parameters."""

    op: str
    pass_: str
    dtype: str
    params: tuple[str, ...]                 # parameters used, in column order
    logged: tuple[bool, ...]                # ln(value) (True) or raw value (False), per parameter
    derived: tuple[str, ...] = DERIVED      # derived features appended after the parameters
    constants: Mapping[str, float] = field(default_factory=dict)  # parameters constant over the training rows

    @property
    def names(self) -> list[str]:
        """Feature names in column order."""
        return [f"ln_{p}" if lg else p for p, lg in zip(self.params, self.logged)] + list(self.derived)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass"] = out.pop("pass_")
        out["constants"] = dict(self.constants)
        out["names"] = self.names
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FeatureSpec":
        return cls(op=data["op"], pass_=data["pass"], dtype=data["dtype"], params=tuple(data["params"]),
                   logged=tuple(bool(v) for v in data["logged"]), derived=tuple(data["derived"]),
                   constants=dict(data.get("constants") or {}))


def params_frame(values: Iterable[Any]) -> pd.DataFrame:
    """One numeric column per parameter name from stored params (JSON text or dicts)."""
    records = [json.loads(v) if isinstance(v, str) else dict(v) for v in values]
    frame = pd.DataFrame.from_records(records)
    numeric = frame.apply(pd.to_numeric, errors="coerce")
    bad = [str(c) for c in frame.columns if (numeric[c].isna() & frame[c].notna()).any()]
    if bad:
        raise PmdbError(f"op parameters must be numbers; not numeric: {', '.join(bad)}")
    return numeric.astype(float)


def with_optional(op: str, params: pd.DataFrame) -> pd.DataFrame:
    """``params`` with the parameters ``op``'s rows may lack (:data:`pmdb.traces.state_values.OPTIONAL`) filled
    in where missing, with the value a missing one means."""
    defaults = OPTIONAL.get(op)
    if not defaults or params.empty:
        return params
    out = params.copy()
    for name, value in defaults.items():
        out[name] = out[name].fillna(value) if name in out.columns else value
    return out


def build_spec(op: str, pass_: str, dtype: str, params: pd.DataFrame) -> FeatureSpec:
    """The feature spec of a training set's parameters (columns = parameter names)."""
    used, logged, constants = [], [], {}
    for name in sorted(params.columns):
        column = params[name]
        if column.isna().any():
            raise PmdbError(f"{op} {pass_}: parameter {name!r} is missing in {int(column.isna().sum())} rows")
        if column.nunique() <= 1:
            constants[name] = float(column.iloc[0])
            continue
        used.append(name)
        logged.append(bool((column > 0).all()))
    full = _with_constants(params, constants)
    names = (*DERIVED, *OP_DERIVED.get(op, ()))
    derived = tuple(d for d, values in zip(names, _derived(op, pass_, dtype, full).T) if np.ptp(values) > 0)
    return FeatureSpec(op, pass_, dtype, tuple(used), tuple(logged), derived, constants)


def _with_constants(params: pd.DataFrame, constants: Mapping[str, float]) -> pd.DataFrame:
    missing = {k: v for k, v in constants.items() if k not in params.columns}
    return params.assign(**missing) if missing else params


def _derived(op: str, pass_: str, dtype: str, params: pd.DataFrame) -> np.ndarray:
    """Columns of DERIVED and then of OP_DERIVED[op] (each row of ``params``)."""
    flops, moved = opcost.work(op, pass_, params, dtype)
    columns = [np.log1p(np.maximum(flops, 0.0)), np.log1p(np.maximum(moved, 0.0))]
    if op in OP_DERIVED:
        columns += _op_derived(op, params, flops, moved)
    return np.column_stack(columns)


def _op_col(params: pd.DataFrame, name: str, default: float) -> np.ndarray:
    if name not in params.columns:
        return np.full(len(params), default)
    return pd.to_numeric(params[name], errors="coerce").to_numpy(dtype=float)


def _op_derived(op: str, params: pd.DataFrame, flops: np.ndarray, moved: np.ndarray) -> list[np.ndarray]:
    """conv2d as the implicit GEMM cuDNN runs: M = B·OH·OW output pixels, N = OC, K = IC/groups·FH·FW; the number
    of output tiles (:data:`CONV_TILE`), whose waves over the SMs set a large conv's time; and the arithmetic
    intensity flops / bytes against the GPU's ridge point (a per-GPU constant the model learns). ln of each."""
    b, h, ic, oc = (_op_col(params, c, 1.0) for c in ("B", "H", "IC", "OC"))
    fh, fw = _op_col(params, "FH", 1.0), _op_col(params, "FW", 1.0)
    stride, dilation = _op_col(params, "stride", 1.0), _op_col(params, "dilation", 1.0)
    groups = np.where(_op_col(params, "is_depthwise", 0.0) > 0, ic, _op_col(params, "groups", 1.0))
    oh = np.maximum(np.floor((h - dilation * (fh - 1) - 1) / stride) + 1, 1)
    ow = np.maximum(np.floor((h - dilation * (fw - 1) - 1) / stride) + 1, 1)
    m, n, k = b * oh * ow, oc, ic / np.maximum(groups, 1.0) * fh * fw
    tiles = np.ceil(m / CONV_TILE[0]) * np.ceil(n / CONV_TILE[1])
    intensity = np.maximum(flops, 1.0) / np.maximum(moved, 1.0)
    return [np.log(np.maximum(v, 1e-9)) for v in (m, n, k, tiles, intensity)]


# Ops whose leading batch dimension only adds rows: [B, M, N] runs as [1, B·M, N] (layer_norm normalises over N, so
# does dropout; the kernel sees rows). A model trained with B constant (e.g. NeuSight's ln tables, imported as B = 1,
# M = rows) is given B·M rows when a trace's op has B > 1, instead of silently ignoring B.
FOLD_ROWS = {"layer_norm": ("B", "M"), "dropout": ("B", "M")}


def fold_rows(op: str, params: pd.DataFrame, constants: Mapping[str, float]) -> pd.DataFrame:
    """``params`` with the batch dimension of a :data:`FOLD_ROWS` op folded into its rows when the model saw the
    batch dimension only as a constant: M' = M · B / B_train, B' = B_train (the same rows, the same elements)."""
    fold = FOLD_ROWS.get(op)
    if fold is None or fold[0] not in constants or fold[0] not in params.columns or fold[1] not in params.columns:
        return params
    batch, rows = fold
    trained = float(constants[batch])
    values = pd.to_numeric(params[batch], errors="coerce").to_numpy(dtype=float)
    if trained <= 0 or np.all(values == trained):
        return params
    out = params.copy()
    out[rows] = pd.to_numeric(out[rows], errors="coerce").to_numpy(dtype=float) * values / trained
    out[batch] = trained
    return out


def transform(spec: FeatureSpec, params: pd.DataFrame) -> np.ndarray:
    """Feature matrix (rows x features) of ``params`` under ``spec``; a missing or bad parameter is a PmdbError."""
    params = with_optional(spec.op, fold_rows(spec.op, params, spec.constants))
    missing = [p for p in spec.params if p not in params.columns]
    if missing:
        raise PmdbError(f"the {spec.op} {spec.pass_} model needs parameters {', '.join(missing)} "
                        f"(it uses {', '.join(spec.params) or 'none'})")
    columns = []
    for name, logged in zip(spec.params, spec.logged):
        values = pd.to_numeric(params[name], errors="coerce").to_numpy(dtype=float)
        if np.isnan(values).any() or (logged and (values <= 0).any()):
            raise PmdbError(f"the {spec.op} {spec.pass_} model needs {'positive ' if logged else ''}numbers "
                            f"for parameter {name}")
        columns.append(np.log(values) if logged else values)
    full = _with_constants(params[[c for c in params.columns if c in spec.params or c in spec.constants]],
                           spec.constants).astype(float)
    derived = _derived(spec.op, spec.pass_, spec.dtype, full)
    names = [*DERIVED, *OP_DERIVED.get(spec.op, ())]
    for name in spec.derived:
        columns.append(derived[:, names.index(name)])
    return np.column_stack(columns) if columns else np.zeros((len(params), 0))


def log_target(times_us: Any) -> np.ndarray:
    """ln(time in µs), the target of every learned kernel model."""
    return np.log(np.asarray(times_us, dtype=float))


# ---- embedding lookups ---------------------------------------------------------------------------------------
def embedding_tables(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-table 21-vectors of each op instance, padded: (features [n, T_max, 21], mask [n, T_max]) as float32."""
    missing = [c for c in EMBEDDING_COLUMNS if c not in frame.columns]
    if missing:
        raise PmdbError(f"the embedding model needs columns {', '.join(missing)} (one list per op instance; "
                        f"columns: {', '.join(EMBEDDING_COLUMNS)})")
    rows = [_tables_of(row) for row in frame[list(EMBEDDING_COLUMNS)].itertuples(index=False)]
    width = max((r.shape[0] for r in rows), default=1)
    feats = np.zeros((len(rows), width, len(TABLE_FEATURES)), dtype=np.float32)
    mask = np.zeros((len(rows), width), dtype=np.float32)
    for i, tables in enumerate(rows):
        feats[i, :tables.shape[0]] = tables
        mask[i, :tables.shape[0]] = 1.0
    return feats, mask


def _tables_of(row: tuple) -> np.ndarray:
    batch, rows, pooling, dim, reuse = row
    rows, pooling, dim = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (rows, pooling, dim))
    count = rows.size
    batch = np.broadcast_to(np.atleast_1d(np.asarray(batch, dtype=float)), (count,))
    reuse = np.asarray([np.asarray(r, dtype=float) for r in reuse]) if count else np.zeros((0, NUM_REUSE_BINS))
    if count == 0 or pooling.size != count or dim.size != count or reuse.shape != (count, NUM_REUSE_BINS):
        raise PmdbError(f"embedding op instance with inconsistent tables: {count} num_rows, {pooling.size} "
                        f"pooling_mean, {dim.size} dim, reuse_factors of shape {reuse.shape} "
                        f"(want {NUM_REUSE_BINS} per table)")
    if (batch < 1).any() or (rows < 1).any() or (dim < 1).any() or (pooling < 0).any():
        raise PmdbError("embedding tables need batch_size, num_rows, dim >= 1 and pooling_mean >= 0")
    head = np.column_stack([np.log(batch), np.log(rows), np.log(np.maximum(pooling, _MIN_POOLING)), np.log(dim)])
    return np.hstack([head, reuse])
