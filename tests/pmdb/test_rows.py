"""Plain rows (pmdb.rows) print as the DataFrame of the same query printed: every column type the store and its
queries hold (integers with NULLs, DECIMAL and HUGEINT as floats, booleans, JSON, timestamps, text over several
lines), at several widths; other types (lists, dates) stay DataFrames."""
from __future__ import annotations

import pytest

from pmdb.cli.common import table_lines
from pmdb.rows import FLOAT, PLAIN, TIME, Rows

TYPES = ("SELECT i AS id, [NULL, 7][i] AS n, [true, NULL][i] AS b, 1.5::DECIMAL(9, 3) * i AS d, "
         "sum(x) AS h, avg(x) AS a, NULL::DOUBLE AS nd, NULL::VARCHAR AS nv, '{\"k\": [1, 2]}'::JSON AS j, "
         "TIMESTAMP '2026-01-02 03:04:05.678' + to_seconds(i) AS t, 'two\nlines  and a long cell that is cut at "
         "forty characters' AS s, 12345678901234567890::HUGEINT AS big, 1e-7 * i AS tiny, 0.1::REAL AS r, "
         "i::UBIGINT AS u, 'inf'::DOUBLE AS inf "
         "FROM (SELECT range AS x, range % 2 + 1 AS i FROM range(5)) GROUP BY i ORDER BY i")


@pytest.mark.parametrize("width", [200, 80, 40])
def test_plain_rows_print_as_their_dataframe(store, width):
    rows = store.rows(TYPES)
    assert rows.kinds[rows.names.index("d")] == FLOAT and rows.kinds[rows.names.index("h")] == FLOAT
    assert rows.kinds[rows.names.index("t")] == TIME and rows.kinds[rows.names.index("n")] == PLAIN
    frame = store.query(TYPES)
    for options in ({}, {"lift": ("s", "nv")}, {"limit": 1}, {"legend": ("s",)}, {"keep": ("s",)}):
        assert table_lines(rows, width=width, **options) == table_lines(frame, width=width, **options), options
    one = "SELECT * FROM (" + TYPES + ") LIMIT 1"  # one wide row: a line per column
    assert table_lines(store.rows(one), width=width) == table_lines(store.query(one), width=width)


def test_other_types_and_large_results_stay_dataframes(store):
    assert isinstance(store.table("SELECT 1 AS a, 'x' AS b"), Rows)
    assert len(store.table("SELECT range AS a FROM range(5)", most=5)) == 5
    large = store.table("SELECT range AS a FROM range(5)", most=4)  # past `most` rows: pandas' frame, every row
    assert not isinstance(large, Rows) and large["a"].tolist() == [0, 1, 2, 3, 4]
    kept = store.table("SELECT DATE '2026-01-02' AS d, [1, 2] AS l")
    assert not isinstance(kept, Rows) and list(kept.columns) == ["d", "l"]
    with pytest.raises(TypeError):
        store.rows("SELECT [1, 2] AS l")


def test_rows_select_drop_and_set_columns():
    rows = Rows(("a", "b"), (PLAIN, FLOAT), [(1, 2.0), (3, None)])
    assert rows.select(["b", "a"]).rows == [(2.0, 1), (None, 3)]
    assert rows.drop(["a"]).names == ("b",) and len(rows.head(1)) == 1
    added = rows.with_column("c", ["x", "y"], at=1).with_column("a", [5, 6])
    assert added.names == ("a", "c", "b") and added.rows == [(5, "x", 2.0), (6, "y", None)]
    assert Rows(("a",), (PLAIN,), []).empty and not rows.empty
