"""Size ladders, per-collective buffer layouts and seeded random ``all_to_allv`` splits.

Sizes are bytes. A ladder value S is the collective's message size as PARAM and nccl-tests define it (the algbw
numerator); for equal splits it is also the max over ranks of max(bytes sent, bytes received):

- all_reduce: every rank's buffer holds S (in place);
- all_to_all / all_to_allv: every rank sends S in total (n chunks, its own included) and receives S;
- all_gather: every rank contributes S/n and receives S;
- reduce_scatter: every rank contributes S and receives S/n.

A step is one measured point: a collective, its per-rank input/output element counts and, for all_to_allv,
the seeded random split matrix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pmdb.errors import PmdbError

COLLECTIVES = ("all_reduce", "all_to_all", "all_to_allv", "all_gather", "reduce_scatter")
MAX_LADDER = 64  # ladder points at most (4 B doubling to 16 EiB is 62)

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_bytes(text: str | int) -> int:
    """'4', '64MiB', '1K', '2MB' -> bytes (K, M, G, T are powers of 1024, as PARAM and nccl-tests read them)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise PmdbError(f"bad size {text!r}: use a number of bytes with an optional K, M, G or T "
                            f"(KiB, MiB, ...; powers of 1024), e.g. 4, 256KiB, 64MiB")
        value = int(match.group(1)) * 1024 ** _POWERS[match.group(2).lower()]
    if value < 1:
        raise PmdbError(f"bad size {text!r}: must be at least 1 byte")
    return value


def ladder(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min_bytes, min_bytes*factor, ... up to max_bytes (bytes)."""
    if factor < 2:
        raise PmdbError(f"bad --factor {factor}: must be an integer of at least 2")
    if max_bytes < min_bytes:
        raise PmdbError(f"--max-bytes ({max_bytes}) is below --min-bytes ({min_bytes})")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    if len(sizes) > MAX_LADDER:
        raise PmdbError(f"{len(sizes)} sizes from {min_bytes} to {max_bytes} B: at most {MAX_LADDER}")
    return sizes


@dataclass(frozen=True)
class Step:
    """One measured point. Element counts are per rank; ``splits[i][j]`` = elements rank i sends to rank j."""

    collective: str
    size_index: int                                  # position of the ladder value it came from
    in_elems: tuple[int, ...]                        # per rank: elements of its input buffer
    out_elems: tuple[int, ...]                       # per rank: elements of its output buffer
    splits: tuple[tuple[int, ...], ...] | None = None  # all_to_allv only
    draw: int | None = None                          # random-split draw number (all_to_allv), else None

    @property
    def split_kind(self) -> str:
        return "random" if self.splits is not None else "equal"

    @property
    def world_size(self) -> int:
        return len(self.in_elems)


def equal_layout(collective: str, size: int, world_size: int, elem_size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-rank (input, output) element counts of ``collective`` at message size ``size`` bytes (rounded down to
    whole elements, at least one element per chunk)."""
    n = world_size
    if collective == "all_reduce":
        e = max(1, size // elem_size)
        return (e,) * n, (e,) * n
    chunk = max(1, size // (n * elem_size))
    if collective in ("all_to_all", "all_to_allv"):
        return (n * chunk,) * n, (n * chunk,) * n
    if collective == "all_gather":
        return (chunk,) * n, (n * chunk,) * n
    if collective == "reduce_scatter":
        return (n * chunk,) * n, (chunk,) * n
    raise PmdbError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")


def random_splits(size: int, world_size: int, elem_size: int, seed: int, size_index: int,
                  draw: int) -> np.ndarray | None:
    """A seeded random split matrix (elements, [sender, receiver]) whose chunks average size/n bytes: each
    chunk is uniform in [1, 2c-1] elements, c = size/(n*elem). None when c < 2 (no room for randomness)."""
    chunk = size // (world_size * elem_size)
    if chunk < 2:
        return None
    rng = np.random.default_rng([seed, size_index, draw])
    return rng.integers(1, 2 * chunk, size=(world_size, world_size))


def build_plan(collectives: list[str], world_size: int, sizes: list[int], elem_size: int, *,
               random_draws: int = 1, seed: int = 0) -> list[Step]:
    """Steps in measuring order: per collective, ascending sizes; equal splits except all_to_allv
    (``random_draws`` seeded random split matrices per size). Sizes that round to the same buffers are kept once."""
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise PmdbError(f"unknown collective(s) {', '.join(unknown)} (known: {', '.join(COLLECTIVES)})")
    if world_size < 2:
        raise PmdbError(f"bad world size {world_size}: collectives need at least 2 ranks")
    if "all_to_allv" in collectives and random_draws < 1:
        raise PmdbError(f"bad --random-splits {random_draws}: all_to_allv needs at least one draw per size")
    steps: list[Step] = []
    for collective in collectives:
        seen: set[tuple] = set()
        for index, size in enumerate(sizes):
            if collective == "all_to_allv":
                for draw in range(random_draws):
                    matrix = random_splits(size, world_size, elem_size, seed, index, draw)
                    if matrix is None:
                        continue
                    steps.append(Step(collective, index, tuple(int(v) for v in matrix.sum(axis=1)),
                                      tuple(int(v) for v in matrix.sum(axis=0)),
                                      tuple(tuple(int(v) for v in row) for row in matrix), draw))
                continue
            layout = equal_layout(collective, size, world_size, elem_size)
            if layout not in seen:
                seen.add(layout)
                steps.append(Step(collective, index, *layout))
    return steps
