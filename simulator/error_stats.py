"""Error statistics read from the SQL views (sql/views/0002_errors.sql), grouped as the user asks.

|e| = |predicted − measured| / measured; the geomean is the GMAE of :mod:`pmdb.metrics` (with its 4e-4 epsilon),
computed in SQL so that ``pmdb sql`` and ``pmdb errors`` agree.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pmdb.errors import PmdbError
from pmdb.metrics import gmae_sql
from pmdb.rows import Rows
from pmdb.store import Store

if TYPE_CHECKING:  # a table of `pmdb errors` is plain rows (``plain=True``): no pandas
    import pandas as pd

E2E_KEYS = ("platform", "family", "workload", "world_size", "batch_size", "sharder", "mode", "model_set_id",
            "model_set", "source_platform")
E2E_DEFAULT = ("platform", "family", "world_size", "mode", "model_set_id")
KERNEL_KEYS = ("platform", "op", "pass", "family", "name", "version", "world_size", "cache_state", "aliases")
KERNEL_DEFAULT = ("platform", "op", "pass", "family", "version")


def _keys(by: str | None, allowed: tuple[str, ...], default: tuple[str, ...]) -> list[str]:
    if not by:
        return list(default)
    keys = [k.strip() for k in by.split(",") if k.strip()]
    bad = [k for k in keys if k not in allowed]
    if bad or not keys:
        raise PmdbError(f"bad --by {by!r}: choose from {', '.join(allowed)}")
    return keys


def _where(filters: dict[str, str | None]) -> tuple[str, list[str]]:
    """A WHERE clause (``column = ?`` per given filter) and its parameters."""
    given = {k: v for k, v in filters.items() if v is not None}
    return ("WHERE " + " AND ".join(f'"{k}" = ?' for k in given) if given else ""), list(given.values())


def e2e_errors(store: Store, by: str | None = None, mode: str | None = None, platform: str | None = None, *,
               plain: bool = False) -> pd.DataFrame | Rows:
    """Geomean/min/max |e| (in %) and the baseline's geomean |e| of predictions with ground truth, grouped;
    ``mode``/``platform`` (target platform) filter when given. In-sample predictions (``in_sample``: priced by a
    version trained on the run's own trace set) are left out. ``plain``: as :meth:`Store.table` gives it (plain
    rows, no pandas), else a DataFrame."""
    keys = _keys(by, E2E_KEYS, E2E_DEFAULT)
    cols = ", ".join(keys)
    where, params = _where({"mode": mode, "platform": platform})
    where += (" AND " if where else "WHERE ") + "NOT in_sample AND NOT self_priced"
    sql = f"""
        SELECT {cols}, count(*) AS n,
               round(100 * {gmae_sql('abs_error')}, 2) AS geomean_pct,
               round(100 * min(abs_error), 2) AS min_pct, round(100 * max(abs_error), 2) AS max_pct,
               round(100 * avg(rel_error), 2) AS mean_signed_pct,
               round(100 * {gmae_sql('baseline_abs_error')}, 2) AS baseline_geomean_pct
        FROM v_prediction_errors {where}
        GROUP BY {cols} ORDER BY {cols}"""
    return (store.table if plain else store.query)(sql, params or None)


def self_priced_note(store: Store, mode: str | None = None, platform: str | None = None) -> str | None:
    """One line when model-mode predictions were left out of the E2E errors because mostly their own trace priced
    them (``self_priced``: ops that kept their traced time: replay, not a model); None when none were."""
    where, params = _where({"mode": mode, "platform": platform})
    where += (" AND " if where else "WHERE ") + "self_priced AND NOT in_sample"
    count = int(store.scalar(f"SELECT count(*) FROM v_prediction_errors {where}", params or None) or 0)
    if not count:
        return None
    return (f"{count} model-mode prediction{'s' if count > 1 else ''} left out: most of the work kept the "
            f"traced time of the trace predicted (replay, not a model; fit models with `pmdb fit`)")


def kernel_errors(store: Store, by: str | None = None, champions_only: bool = False, platform: str | None = None,
                  *, plain: bool = False) -> pd.DataFrame | Rows:
    """Held-out test GMAE/MAPE (in %) of the registered kernel and collective models, grouped (of one platform
    when given); ``plain`` as for :func:`e2e_errors`."""
    keys = _keys(by, KERNEL_KEYS, KERNEL_DEFAULT)
    cols = ", ".join(f'"{k}"' for k in keys)
    where, params = _where({"platform": platform})
    if champions_only:
        where += (" AND " if where else "WHERE ") + \
            "list_contains(string_split(coalesce(aliases, ''), ','), 'champion')"
    sql = f"""
        SELECT {cols}, count(*) AS models,
               round(100 * exp(avg(ln(greatest(test_gmae, 1e-12)))), 2) AS test_gmae_pct,
               round(100 * avg(test_mape), 2) AS test_mape_pct, sum(n_test) AS n_test
        FROM v_kernel_model_errors {where}
        GROUP BY {cols} ORDER BY {cols}"""
    return (store.table if plain else store.query)(sql, params or None)


def named(store: Store, query: str, *, plain: bool = False) -> pd.DataFrame | Rows:
    """Run one of the shipped named queries (sql/queries/NAME.sql); ``plain`` as for :func:`e2e_errors`."""
    from importlib import resources

    entry = resources.files("pmdb.sql").joinpath("queries", f"{query}.sql")
    if not entry.is_file():
        raise PmdbError(f"no named query {query!r}")
    return (store.table if plain else store.query)(entry.read_text())
