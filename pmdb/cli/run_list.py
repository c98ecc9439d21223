"""Collection runs as ``pmdb runs`` and ``pmdb status`` show them: what each run measured (from its arguments and, for
workload runs, its workload), its duration, quickstart's marker runs left out unless asked for."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from pmdb.cli.text_table import cut, is_empty
from pmdb.rows import Rows
from pmdb.store import RUN_ID_SHOWN, Store

if TYPE_CHECKING:  # the table view is plain rows; pandas only for csv and json
    import pandas as pd

MARKER_KIND = "quickstart"  # one short run per quickstart step, recording that the step completed
STATUSES = ("running", "completed", "failed", "interrupted")
TABLE_COLUMNS = ("run_id", "kind", "what", "platform", "status", "took")
LIFTED = ("platform", "kind", "status")  # printed above the table when every shown run shares one


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _listed(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def describe(kind: str, args: dict[str, Any], workload: Optional[dict[str, Any]] = None) -> str:
    """A few words on what a run measured or did: 'dlrm_test ws2 size_greedy', 'sweep quick', 'gloo ws2', ..."""
    given = {k: v for k, v in args.items() if not is_empty(v) and v is not False and v != []}
    if kind == "workload" or workload:
        name = (workload or {}).get("name") or given.get("preset") or given.get("arch") or given.get("family", "")
        size = (workload or {}).get("world_size") or given.get("world_size")
        sharder = (workload or {}).get("sharder") or given.get("sharder")
        words = [str(name), f"ws{size}" if size else "", str(sharder) if sharder else "",
                 "graph-only" if given.get("graph_only") else ""]
        return " ".join(w for w in words if w)
    if kind == "ops":
        source = ("what-if shapes of set " + ",".join(map(str, given["from_what_if"])) if given.get("from_what_if")
                  else "from traces" if given.get("from_traces") else f"sweep {given.get('sweep', 'default')}")
        return source + (f" {_listed(given['ops'])}" if "ops" in given else "")
    if kind == "comms":
        return " ".join(w for w in (str(given.get("backend", "")), f"ws{given['world_size']}"
                                    if "world_size" in given else "") if w)
    if kind == MARKER_KIND:
        return f"step {given.get('step', '?')}"
    if kind == "fit":
        return " ".join(w for w in (str(given.get("family", "")), _listed(given["ops"]) if "ops" in given else "")
                        if w)
    if kind == "predict":
        if given.get("all"):
            return f"all, {given.get('mode', 'model')}"
        target = f"run {given['run_id']}" if "run_id" in given else f"trace set {given.get('trace_set', '?')}"
        return f"{target}, {given.get('mode', 'model')}"
    skip = {"seed", "threads", "platform", "force", "progress", "timeout", "timeout_s"}
    return " ".join(f"{k}={_listed(v)}" for k, v in list((k, v) for k, v in given.items() if k not in skip)[:3])


def took(seconds: Any) -> str:
    """'3ms', '4.4s', '42s', '2m39s', '1h05m'; '-' without an end."""
    if is_empty(seconds):
        return "-"
    s = float(seconds)
    if s < 1:
        return f"{1000 * s:.0f}ms"
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _query(kind: Optional[str], status: Optional[str], markers: bool,
           limit: Optional[int]) -> tuple[str, str, list[Any]]:
    """The SQL counting the runs asked for, the SQL listing them newest first (at most ``limit``, its last
    parameter), and the parameters of their filters."""
    where, params = [], []
    if kind:
        where.append("c.kind = ?"), params.append(kind)
    elif not markers:
        where.append("c.kind <> ?"), params.append(MARKER_KIND)
    if status:
        where.append("c.status = ?"), params.append(status)
    clause = " WHERE " + " AND ".join(where) if where else ""
    sql = ("SELECT c.run_id, c.kind, c.args, c.platform, c.status, c.started_at, c.finished_at, "
           "date_diff('millisecond', c.started_at, c.finished_at) / 1000.0 AS duration_s, c.error, "
           "w.name AS workload, w.world_size AS workload_world_size, w.sharder AS workload_sharder "
           "FROM collection_runs c LEFT JOIN workload_runs r ON r.run_id = c.run_id "
           "LEFT JOIN workloads w ON w.workload_id = r.workload_id"
           f"{clause} ORDER BY c.started_at DESC" + (" LIMIT ?" if limit else ""))
    return f"SELECT count(*) AS n FROM collection_runs c{clause}", sql, params


_JOINED = ("args", "workload", "workload_world_size", "workload_sharder")  # read for 'what', then dropped


def _what(kind: str, args: Any, workload: Any, world_size: Any, sharder: Any) -> Optional[str]:
    """'what' of one listed run (None when nothing is known) from its kind, args and workload columns."""
    known = None if is_empty(workload) else {k: None if is_empty(v) else v for k, v in (
        ("name", workload), ("world_size", world_size), ("sharder", sharder))}
    return describe(kind, _args(args), known) or None


def runs_rows(store: Store, *, kind: Optional[str] = None, status: Optional[str] = None, markers: bool = False,
              limit: Optional[int] = None) -> tuple[Rows, int]:
    """Runs newest first (at most ``limit``) as plain rows: run_id, kind, what, platform, status, started_at,
    finished_at, duration_s (s, to the ms), error; and how many matched in all. Quickstart markers only with
    ``markers`` or when ``kind`` asks for them."""
    count_sql, sql, params = _query(kind, status, markers, limit)
    total = int(store.scalar(count_sql, params))
    rows = store.rows(sql, params + ([limit] if limit else []) or None)
    at = {name: i for i, name in enumerate(rows.names)}
    what = [_what(*(row[at[n]] for n in ("kind",) + _JOINED)) for row in rows.rows]
    durations = [None if is_empty(d) else round(d, 3) for d in rows.column("duration_s")]
    rows = rows.with_column("what", what, at=2).with_column("duration_s", durations, rows.kinds[at["duration_s"]])
    return rows.drop(_JOINED), total


def runs_frame(store: Store, *, kind: Optional[str] = None, status: Optional[str] = None, markers: bool = False,
               limit: Optional[int] = None) -> tuple[pd.DataFrame, int]:
    """:func:`runs_rows` as a DataFrame (for csv and json; pandas' types, as a query's frame has them)."""
    count_sql, sql, params = _query(kind, status, markers, limit)
    total = int(store.scalar(count_sql, params))
    frame = store.query(sql, params + ([limit] if limit else []) or None)
    frame.insert(2, "what", [_what(row.kind, row.args, row.workload, row.workload_world_size, row.workload_sharder)
                             for row in frame.itertuples(index=False)])
    frame["duration_s"] = frame["duration_s"].round(3)
    return frame.drop(columns=list(_JOINED)), total


def hidden_markers(store: Store, status: Optional[str] = None) -> int:
    """How many quickstart marker runs (of ``status``, when given) the default listing leaves out."""
    sql = "SELECT count(*) AS n FROM collection_runs WHERE kind = ?" + (" AND status = ?" if status else "")
    return int(store.scalar(sql, [MARKER_KIND] + ([status] if status else [])))


def runs_table(runs: Rows) -> Rows:
    """The table view of :func:`runs_rows`: duration as 'took', run ids shortened, no timestamps (csv and json keep
    them)."""
    shown = runs.with_column("took", [took(d) for d in runs.column("duration_s")])
    shown = shown.with_column("run_id", [r[:RUN_ID_SHOWN] for r in runs.column("run_id")])
    return shown.select(TABLE_COLUMNS)


def error_lines(runs: Rows, width: int) -> list[str]:
    """'<run id>: <error>' per listed run that failed or was interrupted, cut to ``width``."""
    return [cut(f"{run_id}: {error}", width) for run_id, error in zip(runs.column("run_id"), runs.column("error"))
            if not is_empty(error)]
