"""Plain-text tables that fit the terminal: one empty-cell marker, long cells cut with '…', columns that do not fit
dropped from the right with a note naming them."""
from __future__ import annotations

import math
import shutil
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Union

from pmdb.rows import FLOAT, TIME, Rows

if TYPE_CHECKING:  # a DataFrame is read as Rows (Rows.from_frame), so that tables of plain rows cost no pandas
    import pandas as pd

    Table = Union[pd.DataFrame, Rows]

EMPTY = "-"         # None, NaN, NaT and <NA> all read like this
ELLIPSIS = "…"
GAP = "  "          # between columns (one space when the table would not fit otherwise)
MAX_CELL = 40       # characters of a text cell before it is cut, whatever the width
MIN_CELL = 12       # a text column is not cut narrower than this (nor than its header)
MIN_WIDTH = 40      # narrowest table width considered
FIRST_SHARE = 3     # a text first column is not narrowed below 1/FIRST_SHARE of the width (other columns go first)
# columns a table prints once above itself when every row holds the same value ('platform: NAME')
LIFTED = ("platform", "target_platform", "source_platform", "family", "mode")
# short headers of the named queries' tables (csv and json keep the names)
SHORT_HEADERS = {"world_size": "ws", "batch_size": "batch", "measured_ms": "meas_ms", "predicted_ms": "pred_ms",
                 "baseline_ms": "base_ms", "error_pct": "err%", "baseline_error_pct": "base_err%",
                 "cache_state": "cache", "implementation": "impl"}


def terminal_width() -> int:
    """Columns of the terminal ($COLUMNS first, 80 when unknown), at least MIN_WIDTH."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def is_empty(value: Any) -> bool:
    """True for None, NaN, NaT and pandas' NA (lists and arrays are never empty cells)."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    pd = sys.modules.get("pandas")  # NaT and NA exist only once pandas is loaded: not imported for plain rows
    return pd is not None and bool(pd.api.types.is_scalar(value) and pd.isna(value))


def as_rows(frame: Table) -> Rows:
    """A table as :class:`Rows` (a DataFrame converted; Rows as they are)."""
    return frame if isinstance(frame, Rows) else Rows.from_frame(frame)


def column_names(frame: Table) -> list[Any]:
    """The column names of a DataFrame or of :class:`Rows`."""
    return list(frame.names if isinstance(frame, Rows) else frame.columns)


def columns_last(frame: Table, last: Sequence[str]) -> Table:
    """``frame`` with the columns of ``last`` it has moved to the right end, in that order."""
    names = column_names(frame)
    moved = [c for c in last if c in names]
    order = [c for c in names if c not in moved] + moved
    return frame if order == names else frame.select(order) if isinstance(frame, Rows) else frame[order]


def ids_last(frame: Table) -> Table:
    """``frame`` with its id columns ('id', '*_id') moved to the right end: in a narrow table they are the first
    left out (named in the note), and the columns that tell the rows apart keep their room."""
    names = column_names(frame)
    ids = [c for c in names if str(c) == "id" or str(c).endswith("_id")]
    return columns_last(frame, ids) if 0 < len(ids) < len(names) else frame


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, the cut marked with '…' at the end."""
    if len(text) <= width:
        return text
    return text[:width - 1] + ELLIPSIS if width >= 1 else ""


def cut_segments(text: str, width: int, sep: str = ".") -> str:
    """``text`` in at most ``width`` characters by shortening its longest ``sep``-separated parts first, each cut
    marked with '…' (so 'embedding_lookup.fwd.torch_embedding_bag.cold' keeps its pass and cache state)."""
    parts = text.split(sep)
    while sum(map(len, parts)) + len(sep) * (len(parts) - 1) > width:
        i = max(range(len(parts)), key=lambda j: len(parts[j]))
        if len(parts[i]) <= 2:
            return cut(text, width)
        parts[i] = parts[i].rstrip(ELLIPSIS)[:-2] + ELLIPSIS
    return sep.join(parts)


def _float_cells(values: list[float]) -> list[str]:
    """Floats of one column with a common number of decimals (up to 6 significant digits); integral columns as
    integers; exponents when a value is too large or too small for that."""
    finite = [v for v in values if math.isfinite(v)]
    if finite and all(v == int(v) and abs(v) < 1e15 for v in finite):
        return [str(int(v)) if math.isfinite(v) else str(v) for v in values]
    if any(abs(v) >= 1e15 or (v != 0 and abs(v) < 1e-4) for v in finite):
        return [f"{v:.4g}" for v in values]
    decimals = 0
    for v in finite:
        text = f"{v:.6g}"
        if "." in text and "e" not in text:
            decimals = max(decimals, len(text.split(".")[1]))
    return [f"{v:.{decimals}f}" for v in values]


def column_cells(values: Sequence[Any], kind: str) -> tuple[list[str], bool]:
    """The cells of one column (its values, of :mod:`pmdb.rows` ``kind``) as text, and whether it is numeric
    (right-aligned)."""
    empty = [is_empty(v) for v in values]
    numeric = kind == FLOAT
    if kind == TIME:
        texts = [v.strftime("%Y-%m-%d %H:%M:%S") if not e else "" for v, e in zip(values, empty)]
    elif numeric:
        shown = _float_cells([float(v) for v, e in zip(values, empty) if not e])
        it = iter(shown)
        texts = [next(it) if not e else "" for e in empty]
    else:
        texts = ["" if e else " ".join(str(v.tolist() if hasattr(v, "tolist") else v).split())  # one line per cell
                 for v, e in zip(values, empty)]
        shown = [t for t, e in zip(texts, empty) if not e and t != EMPTY]
        numeric = bool(shown) and all(_is_number(t) for t in shown)  # numbers already formatted as text
    return [EMPTY if e else t for t, e in zip(texts, empty)], numeric


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


Cutter = Callable[[str, int], str]


def layout(frame: Table, width: int, *, keep: Sequence[str] = (),
           cutters: Optional[Mapping[str, Cutter]] = None, max_cell: int = MAX_CELL) -> tuple[list[str], list[str]]:
    """The lines of ``frame`` as a table at most ``width`` characters wide, and the columns left out.

    Text cells longer than ``max_cell`` are cut (not those of ``keep``, ids, nor ``cutters``). Then as many columns as
    fit at their narrowest are kept, the others dropped from the right; the widest text columns (not in ``keep``)
    are narrowed until the table fits, down to MIN_CELL or their header (a text first column, which names the row,
    down to a third of the width). ``cutters`` cut the cells of some columns
    their own way (``cut_segments`` for dotted names; the default cuts at the end)."""
    cutters = cutters or {}
    frame = as_rows(frame)
    names = list(frame.names)
    keep = set(keep) | {n for n in names if n == "id" or n.endswith("_id")}  # ids are copied: never cut
    cells, numeric = [], []
    for i, name in enumerate(names):
        texts, is_num = column_cells(frame.column(i), frame.kinds[i])
        if not is_num and name not in keep and name not in cutters:
            texts = [cut(t, max_cell) for t in texts]
        cells.append(texts)
        numeric.append(is_num)
    widths = [max([len(n)] + [len(t) for t in col]) for n, col in zip(names, cells)]
    floors = [w if (num or n in keep) else min(w, max(MIN_CELL, len(n)))
              for n, w, num in zip(names, widths, numeric)]
    if names and not numeric[0]:  # the first column names the row: it keeps a third of the width
        floors[0] = max(floors[0], min(widths[0], width // FIRST_SHARE))

    gap = GAP if sum(widths) + len(GAP) * (len(names) - 1) <= width else " "  # one space when that is tight

    def total(count: int, of: list[int]) -> int:
        return sum(of[:count]) + len(gap) * (count - 1)

    shown = len(names)  # as many columns as fit at their narrowest, then narrow the widest of them
    while shown > 1 and total(shown, floors) > width:
        shown -= 1
    while total(shown, widths) > width:
        wide = [i for i in range(shown) if widths[i] > floors[i]]
        if not wide:
            break  # a single column wider than the terminal
        i = max(wide, key=lambda j: widths[j])
        second = max([widths[j] for j in wide if j != i], default=0)
        step = max(1, min(total(shown, widths) - width, widths[i] - second))
        widths[i] = max(floors[i], widths[i] - step)
    lines = []
    rows = [[names[i] for i in range(shown)]] + [[cells[i][r] for i in range(shown)] for r in range(len(frame))]
    for row in rows:
        parts = []
        for i, text in enumerate(row):
            text = cutters.get(names[i], cut)(text, widths[i])
            parts.append(text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i]))
        lines.append(cut(gap.join(parts).rstrip(), width))  # only a lone column wider than the terminal is cut here
    return lines, names[shown:]


def dropped_note(dropped: Sequence[str], width: int) -> str:
    """'(N more columns: a, b, …; use --format csv/json)', cut to ``width``."""
    tail = "; use --format csv/json)"
    head = f"({len(dropped)} more column{'s' if len(dropped) > 1 else ''}: "
    listed = ", ".join(dropped)
    room = width - len(head) - len(tail)
    if len(listed) > room:
        listed = cut(listed, max(room, 1))
    return head + listed + tail
