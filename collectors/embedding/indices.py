"""Index sources for embedding lookups: uniform, Zipf(alpha), DLRM dataset files and a synthetic generator that
follows published reuse statistics.

``make_source(spec, seed)`` parses a spec; every source has
``batch(num_rows, batch_size, pooling, rng) -> (indices, lengths)``: int64 arrays, ``lengths[b]`` lookups of sample b
(they vary around ``pooling``) and ``indices`` holding ``lengths.sum()`` row ids in [0, num_rows), sample-major.
"""
from __future__ import annotations

import gzip
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from collectors.embedding.locality import LocalityEntry, load_locality_stats, select_entry
from collectors.embedding.reuse import NUM_BINS
from pmdb.errors import PmdbError

ZIPF_HEAD = 4096  # ranks sampled exactly from the discrete Zipf law; the tail uses its continuous form


def _check(num_rows: int, batch_size: int, pooling: float) -> None:
    if num_rows < 1:
        raise PmdbError(f"bad number of rows {num_rows}: must be >= 1")
    if batch_size < 1:
        raise PmdbError(f"bad batch size {batch_size}: must be >= 1")
    if not pooling > 0:
        raise PmdbError(f"bad pooling factor {pooling}: must be > 0")


def poisson_lengths(batch_size: int, pooling: float, rng: np.random.Generator) -> np.ndarray:
    """Lookups per sample: Poisson around the pooling factor (int64)."""
    return rng.poisson(pooling, size=batch_size).astype(np.int64)


def affine_permutation(ranks: np.ndarray, num_rows: int, seed: int) -> np.ndarray:
    """Map ranks 0..num_rows-1 to scattered row ids with a bijection r -> (a*r + b) mod num_rows fixed by
    (seed, num_rows), so the same ranks land on the same rows in every batch."""
    rng = np.random.default_rng([seed, num_rows])
    a = int(rng.integers(1, max(2, num_rows)))
    while math.gcd(a, num_rows) != 1:
        a += 1
    b = int(rng.integers(0, num_rows))
    return (ranks.astype(np.int64) * a + b) % num_rows


@dataclass
class UniformSource:
    """Every row equally likely."""

    label: str = "uniform"

    def batch(self, num_rows: int, batch_size: int, pooling: float,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _check(num_rows, batch_size, pooling)
        lengths = poisson_lengths(batch_size, pooling, rng)
        return rng.integers(0, num_rows, size=int(lengths.sum()), dtype=np.int64), lengths


@dataclass
class ZipfSource:
    """Row of rank r (1-based) drawn with probability proportional to r^-alpha; ranks are scattered over the
    table by an affine permutation fixed by the seed, so hot rows are not neighbours and stay hot from batch to batch.
    The first ZIPF_HEAD ranks are exact; the tail uses the continuous power law rounded to the nearest rank (its
    density varies little there)."""

    alpha: float
    seed: int = 0
    label: str = ""

    def __post_init__(self) -> None:
        if not self.alpha > 0:
            raise PmdbError(f"bad Zipf exponent {self.alpha}: must be > 0 (e.g. zipf:1.05)")
        self.label = self.label or f"zipf:{self.alpha:g}"

    def ranks(self, num_rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` 0-based ranks in [0, num_rows)."""
        head = min(num_rows, ZIPF_HEAD)
        weights = np.arange(1, head + 1, dtype=float) ** -self.alpha
        lo, hi = head + 0.5, num_rows + 0.5
        tail_mass = 0.0 if num_rows <= head else _power_integral(lo, hi, self.alpha)
        total = weights.sum() + tail_mass
        u = rng.random(count) * total
        cdf = np.cumsum(weights)
        ranks = np.searchsorted(cdf, u, side="right").astype(np.int64)
        in_tail = ranks >= head
        if in_tail.any():
            v = (u[in_tail] - cdf[-1]) / tail_mass
            ranks[in_tail] = np.clip(np.rint(_power_inverse(lo, hi, self.alpha, v)) - 1, head, num_rows - 1)
        return ranks

    def batch(self, num_rows: int, batch_size: int, pooling: float,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _check(num_rows, batch_size, pooling)
        lengths = poisson_lengths(batch_size, pooling, rng)
        ranks = self.ranks(num_rows, int(lengths.sum()), rng)
        return affine_permutation(ranks, num_rows, self.seed), lengths


def _power_integral(lo: float, hi: float, alpha: float) -> float:
    if abs(alpha - 1.0) < 1e-12:
        return math.log(hi / lo)
    return (hi ** (1 - alpha) - lo ** (1 - alpha)) / (1 - alpha)


def _power_inverse(lo: float, hi: float, alpha: float, v: np.ndarray) -> np.ndarray:
    """x in [lo, hi) with integral(lo..x) = v * integral(lo..hi) of x^-alpha."""
    if abs(alpha - 1.0) < 1e-12:
        return lo * (hi / lo) ** v
    a, b = lo ** (1 - alpha), hi ** (1 - alpha)
    return (a + v * (b - a)) ** (1 / (1 - alpha))


@dataclass
class LocalitySource:
    """Synthetic indices whose per-batch reuse histogram follows a published locality entry.

    For a batch of N lookups, unique indices are drawn one after another: each gets a lookup count from the target
    histogram (bin by the histogram, count log-uniform inside the bin; counts larger than N are redrawn) until the
    counts add up to N (the last count is cut to fit). The unique indices are distinct random rows, and the N lookups
    are shuffled over the samples. When the table has fewer rows than the draw needs unique indices, the extra ones
    reuse rows (the table is too small for this histogram at this batch size; the measured reuse factors say so).
    """

    entry: LocalityEntry
    label: str

    def __post_init__(self) -> None:
        self.target = self.entry.target_histogram()

    def counts(self, total: int, rng: np.random.Generator) -> np.ndarray:
        """Lookup counts of the unique indices of a batch of ``total`` lookups (they sum to ``total``)."""
        if total <= 0:
            return np.zeros(0, dtype=np.int64)
        feasible = np.array([1] + [2 ** (k - 1) + 1 for k in range(1, NUM_BINS)]) <= total
        probs = np.where(feasible, self.target, 0.0)
        probs = probs / probs.sum()
        mean = float(np.dot(probs, [1] + [1.5 * 2 ** (k - 1) for k in range(1, NUM_BINS)]))
        parts, filled = [], 0
        while filled < total:
            draw = max(16, int(1.2 * (total - filled) / mean) + 16)
            bins = rng.choice(NUM_BINS, size=draw, p=probs)
            lo = np.where(bins == 0, 0, 2.0 ** (bins - 1))
            counts = np.where(bins <= 1, bins + 1, np.floor(lo * 2.0 ** rng.random(draw)) + 1).astype(np.int64)
            counts = counts[counts <= total]
            cum = filled + np.cumsum(counts)
            stop = int(np.searchsorted(cum, total, side="left"))
            if stop < counts.size:
                counts = counts[:stop + 1].copy()
                counts[-1] -= cum[stop] - total
            parts.append(counts)
            filled += int(counts.sum())
        return np.concatenate(parts)

    def batch(self, num_rows: int, batch_size: int, pooling: float,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _check(num_rows, batch_size, pooling)
        lengths = poisson_lengths(batch_size, pooling, rng)
        counts = self.counts(int(lengths.sum()), rng)
        unique = counts.size
        if unique <= num_rows:
            rows = rng.choice(num_rows, size=unique, replace=False)
        else:
            rows = np.concatenate([rng.permutation(num_rows), rng.integers(0, num_rows, unique - num_rows)])
        lookups = np.repeat(rows.astype(np.int64), counts)
        return rng.permutation(lookups), lengths


@lru_cache(maxsize=2)
def load_dataset(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices, offsets, lengths[T, B]) of a DLRM open-source data file (``torch.load(gzip.open(path))``)."""
    import torch

    file = Path(path)
    if not file.is_file():
        raise PmdbError(f"no such dataset file: {path}")
    opener = gzip.open if file.suffix == ".gz" else open
    try:
        with opener(file, "rb") as fh:
            loaded = torch.load(fh)
        indices, offsets, lengths = loaded
    except (OSError, EOFError, RuntimeError, ValueError, TypeError, AttributeError) as exc:
        raise PmdbError(f"cannot read dataset file {path}: expected (indices, offsets, lengths) tensors saved with "
                        f"torch.save (gzipped): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 2:
        raise PmdbError(f"dataset file {path}: lengths must be 2-D [tables, samples], got shape {lengths.shape}")
    indices, offsets = np.asarray(indices, dtype=np.int64), np.asarray(offsets, dtype=np.int64)
    if offsets.size != lengths.size + 1 or offsets[-1] != indices.size:
        raise PmdbError(f"dataset file {path}: offsets ({offsets.size}) must be tables*samples+1 "
                        f"({lengths.size + 1}) and end at the number of indices ({indices.size})")
    return indices, offsets, lengths


@dataclass
class DatasetSource:
    """Batches cut from a DLRM open-source data file: a run of ``batch_size`` consecutive samples of one table (the
    given table, else one chosen by the rng per call), indices folded into the table by ``% num_rows``. The data's own
    lookups per sample are used: ``pooling`` is ignored."""

    path: str
    table: int | None = None
    label: str = ""
    last_table: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        _, _, lengths = load_dataset(self.path)
        if self.table is not None and not 0 <= self.table < lengths.shape[0]:
            raise PmdbError(f"dataset {self.path} has tables 0..{lengths.shape[0] - 1}, not {self.table}")
        self.label = self.label or f"dataset:{self.path}" + ("" if self.table is None else f":{self.table}")

    def batch(self, num_rows: int, batch_size: int, pooling: float,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _check(num_rows, batch_size, 1.0)
        indices, offsets, lengths = load_dataset(self.path)
        tables, samples = lengths.shape
        if batch_size > samples:
            raise PmdbError(f"batch size {batch_size} is larger than the dataset's {samples} samples per table")
        table = self.table if self.table is not None else int(rng.integers(0, tables))
        start = int(rng.integers(0, samples - batch_size + 1))
        first = table * samples + start
        chunk = indices[offsets[first]:offsets[first + batch_size]]
        self.last_table = table
        return chunk % num_rows, lengths[table, start:start + batch_size].copy()


IndexSource = UniformSource | ZipfSource | LocalitySource | DatasetSource


def _split_selector(rest: str) -> tuple[str, str | None]:
    """'<path>[:<selector>]' -> (path, selector); a path that exists as given wins over a split."""
    if Path(rest).exists() or ":" not in rest:
        return rest, None
    path, selector = rest.rsplit(":", 1)
    return path, selector


def make_source(spec: str, seed: int = 0) -> IndexSource:
    """An index source from its spec: 'uniform', 'zipf:<alpha>', 'dataset:<path>[:<table>]' or
    'locality:<stats file>[:<entry name or position>]'. ``seed`` fixes what must stay the same from batch to batch
    (which rows are hot under Zipf); the per-batch randomness comes from the rng given to ``batch``."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "uniform" and not rest:
        return UniformSource()
    if kind == "zipf":
        try:
            return ZipfSource(float(rest), seed)
        except ValueError:
            raise PmdbError(f"bad index source {spec!r}: give the Zipf exponent, e.g. zipf:1.05") from None
    if kind == "dataset" and rest:
        path, table = _split_selector(rest)
        if table is not None and not table.isdigit():
            path, table = rest, None
        return DatasetSource(path, None if table is None else int(table))
    if kind == "locality" and rest:
        path, table = _split_selector(rest)
        entry = select_entry(load_locality_stats(str(Path(path).resolve())), table)
        return LocalitySource(entry, f"locality:{path}:{entry.name}")
    raise PmdbError(f"bad index source {spec!r}: use uniform, zipf:<alpha>, dataset:<path>[:<table>] or "
                    f"locality:<locality_stats.txt>[:<entry>]")
