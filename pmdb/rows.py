"""Query results as plain Python rows: column names, how each column reads in a table, rows of values. What
`pmdb status`, `runs` and `sql` print needs no pandas (a third of a second to import); a DataFrame becomes one of
these for the same table code (:meth:`Rows.from_frame`), so both print alike."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    import pandas as pd

# How a column reads in a table (pmdb.cli.text_table.column_cells):
FLOAT = "float"    # numbers with a common number of decimals, right-aligned
TIME = "time"      # timestamps to the second
PLAIN = "plain"    # each value as text; right-aligned when every value reads as a number (integers)

# DuckDB column types held as plain values, and how they read: the kinds pandas' dtypes give them (a DECIMAL or
# HUGEINT becomes a float64 column in ``.df()``); any other type (lists, dates, intervals, ...) is left to pandas.
_KINDS = {**dict.fromkeys(("DOUBLE", "FLOAT", "HUGEINT", "UHUGEINT"), FLOAT), "TIMESTAMP": TIME,
          **dict.fromkeys(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER",
                           "UBIGINT", "BOOLEAN", "VARCHAR", "JSON"), PLAIN)}


def kind_of(duckdb_type: str) -> Optional[str]:
    """The kind of a DuckDB column type (its name as ``cursor.description`` gives it); None when not held."""
    return FLOAT if duckdb_type.startswith("DECIMAL(") else _KINDS.get(duckdb_type)


def plain(description: Optional[Sequence[Sequence[Any]]]) -> bool:
    """Whether a result with this ``cursor.description`` is held as :class:`Rows` (every column's type is)."""
    return description is not None and all(kind_of(str(column[1])) is not None for column in description)


@dataclass(frozen=True)
class Rows:
    """A table of plain values: ``names`` of the columns, ``kinds`` (FLOAT, TIME, PLAIN), ``rows`` of values."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    @classmethod
    def of(cls, result: Any, rows: Optional[list[tuple[Any, ...]]] = None) -> "Rows":
        """The rows of an executed DuckDB query: ``rows`` when fetched already, else every row (fetched here);
        TypeError when a column's type is not held (check :func:`plain` first)."""
        names = tuple(str(column[0]) for column in result.description)
        kinds = tuple(kind_of(str(column[1])) for column in result.description)
        if None in kinds:
            raise TypeError(f"no plain rows for column types {[str(c[1]) for c in result.description]}")
        rows = result.fetchall() if rows is None else rows
        exact = [i for i, column in enumerate(result.description) if kinds[i] == FLOAT
                 and str(column[1]) not in ("DOUBLE", "FLOAT")]
        if exact and rows:  # DECIMAL and HUGEINT values read as the floats pandas makes of them
            rows = [tuple(float(v) if i in exact and isinstance(v, (Decimal, int)) else v for i, v in enumerate(row))
                    for row in rows]
        return cls(names, kinds, rows)  # type: ignore[arg-type]

    @classmethod
    def from_frame(cls, frame: "pd.DataFrame") -> "Rows":
        """A DataFrame's columns (by position) with the kinds its dtypes give them."""
        import pandas as pd

        kinds, columns = [], []
        for i in range(frame.shape[1]):
            series = frame.iloc[:, i]
            dtype = series.dtype
            if pd.api.types.is_datetime64_any_dtype(dtype):
                kinds.append(TIME)
            elif (pd.api.types.is_float_dtype(dtype) and pd.api.types.is_numeric_dtype(dtype)
                  and not pd.api.types.is_bool_dtype(dtype)):
                kinds.append(FLOAT)
            else:
                kinds.append(PLAIN)
            columns.append(series.tolist())
        return cls(tuple(str(c) for c in frame.columns), tuple(kinds), list(zip(*columns)) if columns else
                   [() for _ in range(len(frame))])

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def empty(self) -> bool:
        """No rows or no columns (as ``DataFrame.empty``)."""
        return not self.rows or not self.names

    def column(self, name: str | int) -> list[Any]:
        """The values of one column (by name or position)."""
        i = name if isinstance(name, int) else self.names.index(name)
        return [row[i] for row in self.rows]

    def select(self, names: Iterable[str]) -> "Rows":
        """These columns, in this order."""
        index = [self.names.index(n) for n in names]
        return Rows(tuple(self.names[i] for i in index), tuple(self.kinds[i] for i in index),
                    [tuple(row[i] for i in index) for row in self.rows])

    def drop(self, names: Iterable[str]) -> "Rows":
        gone = set(names)
        return self.select([n for n in self.names if n not in gone])

    def head(self, count: int) -> "Rows":
        return replace(self, rows=self.rows[:count])

    def rename(self, labels: Mapping[str, str]) -> "Rows":
        return replace(self, names=tuple(labels.get(n, n) for n in self.names))

    def with_column(self, name: str, values: Sequence[Any], kind: str = PLAIN, at: Optional[int] = None) -> "Rows":
        """Column ``name`` set to ``values`` (in place when there, else inserted at ``at`` or appended)."""
        names, kinds = list(self.names), list(self.kinds)
        if name in names:
            i = names.index(name)
            kinds[i] = kind
            rows = [row[:i] + (v,) + row[i + 1:] for row, v in zip(self.rows, values)]
        else:
            i = len(names) if at is None else at
            names.insert(i, name)
            kinds.insert(i, kind)
            rows = [row[:i] + (v,) + row[i:] for row, v in zip(self.rows, values)]
        return Rows(tuple(names), tuple(kinds), rows)
