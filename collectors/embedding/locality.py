"""Parser of the DLRM datasets' ``locality_stats.txt`` (facebookresearch/dlrm_datasets, embedding_bag/*/).

The file holds one block per data file::

    fbgemm_t856_bs65536_0.pt
    Locality stats after processing 1 batches of size 65536
    Avg # of indices: 468084223
    Avg # of unique cols: 61644628
    Avg col size: 7.6
    Histogram of col sizes:
    (0, 1]: 0.423
    ...
    (32768+: 0.000
    [0, 1, 2, ...]            <- bin edges and cumulative shares (ignored: they repeat the bins)
    Ratio of index distribution at different column sizes:
    (0, 1]: 0.056
    ...

"col size" is how often one unique index (column) is looked up in the batch. The histogram gives the share of unique
indices per reuse bin (the 17 reuse factors of method.md section 5, summed over all tables of the file), the ratio
section the share of lookups. Fields are recognised by their names, bins by their lower edge, never by position.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from collectors.embedding.reuse import NUM_BINS
from pmdb.errors import PmdbError

_BIN = re.compile(r"^\((\d+)(?:,\s*(\d+)\]|\+)\s*:\s*([0-9.eE+-]+)\s*$")
_BATCHES = re.compile(r"processing\s+(\d+)\s+batch(?:es)?\s+of\s+size\s+(\d+)", re.IGNORECASE)
_SCALARS = {"avg # of indices": "avg_indices", "avg # of unique cols": "avg_unique", "avg col size": "avg_col_size"}
_SECTIONS = {"histogram of col sizes": "histogram", "ratio of index distribution": "lookup_share"}


@dataclass
class LocalityEntry:
    """Statistics of one data file: counts per batch and the two 17-bin distributions."""

    name: str
    batches: int | None = None
    batch_size: int | None = None
    avg_indices: float | None = None
    avg_unique: float | None = None
    avg_col_size: float | None = None
    histogram: np.ndarray = field(default_factory=lambda: np.full(NUM_BINS, np.nan))
    lookup_share: np.ndarray = field(default_factory=lambda: np.full(NUM_BINS, np.nan))

    def target_histogram(self) -> np.ndarray:
        """The reuse histogram to reproduce (sums to 1).

        The file prints shares with three decimals, so rare hot bins read 0.000 although they hold lookups
        (e.g. 1.9% of all lookups go to indices reused more than 2^15 times). For such bins the unique share is
        recovered from the lookup share: h = lookup_share * avg_col_size / (typical count of the bin), the typical
        count being the geometric middle of the bin. Printed non-zero shares are kept as they are.
        """
        hist = np.nan_to_num(self.histogram.astype(float), nan=0.0)
        share = np.nan_to_num(self.lookup_share.astype(float), nan=0.0)
        if self.avg_col_size:
            typical = np.array([1.0] + [2.0 ** (k - 1) * np.sqrt(2.0) for k in range(1, NUM_BINS)])
            fill = (hist <= 0) & (share > 0)
            hist[fill] = share[fill] * self.avg_col_size / typical[fill]
        total = hist.sum()
        if total <= 0:
            raise PmdbError(f"locality entry {self.name!r} has an empty reuse histogram")
        return hist / total


def _bin_index(lower: int) -> int:
    if lower == 0:
        return 0
    k = int(round(np.log2(lower))) + 1
    if 2 ** (k - 1) != lower or not 1 <= k < NUM_BINS:
        raise ValueError(f"unexpected bin lower edge {lower}")
    return k


def parse_locality_stats(text: str, source: str = "<text>") -> list[LocalityEntry]:
    """All entries of a locality_stats.txt text, in file order."""
    entries: list[LocalityEntry] = []
    section: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("["):
            continue
        lower = line.lower()
        if lower.endswith(".pt") or lower.endswith(".pt.gz"):
            entries.append(LocalityEntry(name=line))
            section = None
            continue
        if not entries:
            raise PmdbError(f"{source}:{number}: expected a data file name (*.pt) before {line[:40]!r}")
        entry = entries[-1]
        if match := _BATCHES.search(line):
            entry.batches, entry.batch_size = int(match.group(1)), int(match.group(2))
            continue
        if ":" in line and (key := line.split(":", 1)[0].strip().lower()) in _SCALARS:
            setattr(entry, _SCALARS[key], float(line.split(":", 1)[1]))
            continue
        if (heading := next((v for k, v in _SECTIONS.items() if lower.startswith(k)), None)) is not None:
            section = heading
            continue
        if match := _BIN.match(line):
            if section is None:
                raise PmdbError(f"{source}:{number}: a bin line outside a histogram section")
            try:
                getattr(entry, section)[_bin_index(int(match.group(1)))] = float(match.group(3))
            except ValueError as exc:
                raise PmdbError(f"{source}:{number}: {exc}") from None
            continue
        raise PmdbError(f"{source}:{number}: unrecognised line {line[:60]!r}")
    if not entries:
        raise PmdbError(f"{source}: no locality entries found")
    return entries


@lru_cache(maxsize=8)
def load_locality_stats(path: str) -> tuple[LocalityEntry, ...]:
    """Parse a locality_stats.txt file (cached by path)."""
    file = Path(path)
    if not file.is_file():
        raise PmdbError(f"no such locality stats file: {path}")
    return tuple(parse_locality_stats(file.read_text(), str(file)))


def select_entry(entries: tuple[LocalityEntry, ...] | list[LocalityEntry], table: str | None) -> LocalityEntry:
    """The entry named ``table`` (with or without .pt) or at that position; the first one when None."""
    if table is None or table == "":
        return entries[0]
    for entry in entries:
        if entry.name == table or entry.name.removesuffix(".gz").removesuffix(".pt") == table:
            return entry
    if table.isdigit() and int(table) < len(entries):
        return entries[int(table)]
    names = ", ".join(e.name for e in entries[:4]) + (", ..." if len(entries) > 4 else "")
    raise PmdbError(f"no locality entry {table!r} (entries: {names}; or a position 0..{len(entries) - 1})")
