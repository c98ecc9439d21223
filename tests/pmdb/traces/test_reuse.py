"""Reuse distances of an op's inputs (bytes of other data touched since their last use), steady state."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from pmdb.traces.reuse import reuse_distances, warm_share

MB = 2 ** 20


def _t(storage: int, nbytes: int) -> list[int]:
    """A tensor entry [arg, tensor_id, storage_id, offset, numel, itemsize] of ``nbytes`` float32 bytes."""
    return [0, storage, storage, 0, nbytes // 4, 4]


def _ops(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([{"op_id": i, "name": n, "parent_id": p, "category": "cpu_op", "input_tensors": ins,
                          "output_tensors": outs} for i, n, p, ins, outs in rows])


def test_distances_in_steady_state():
    # A reads s1 (1 MB) and writes s2 (2 MB); B reads s2, writes s3 (1 MB); C reads s1
    ops = _ops([(1, "aten::mul", None, [_t(1, MB)], [_t(2, 2 * MB)]),
                (2, "aten::relu", None, [_t(2, 2 * MB)], [_t(3, MB)]),
                (3, "aten::add", None, [_t(1, MB)], [_t(4, MB)])])
    got = reuse_distances(ops)
    # A: s1 was last read by C of the previous iteration, which then wrote s4 (1 MB)
    assert got[1] == ((1 * MB, 1 * MB),)
    assert got[2] == ((0.0, 2 * MB),)                 # B reads what A just wrote
    assert got[3] == ((3 * MB, 1 * MB),)              # A's write of s2 and B's s2, s3: distinct bytes 2 + 1 MB
    assert warm_share(got[3], 4 * MB) == 1.0 and warm_share(got[3], 3.5 * MB) == 0.5
    assert warm_share(got[3], 2 * MB) == 0.0


def test_parents_and_views_touch_nothing():
    ops = _ops([(1, "aten::linear", None, [_t(1, MB), _t(5, 8 * MB)], [_t(2, MB)]),
                (2, "aten::t", 1, [_t(5, 8 * MB)], [_t(5, 8 * MB)]),           # a view: no data touched
                (3, "aten::addmm", 1, [_t(1, MB), _t(5, 8 * MB)], [_t(2, MB)]),
                (4, "aten::relu", None, [_t(2, MB), _t(9, MB)], [_t(3, MB)])])
    got = reuse_distances(ops)
    # linear (a parent) is queried before its child addmm (storages in id order: s1, s5): since the last addmm,
    # relu touched s2, s9 and s3 (1 MB each); s1 also saw s5 (8 MB) after it
    assert got[1] == ((11 * MB, MB), (3 * MB, 8 * MB))
    assert got[3] == got[1]          # the view in between touched nothing
    # relu reads s2 just written, and s9 that only it reads: last iteration, then s3, s1, s5, s2 since
    assert got[4] == ((0.0, MB), (11 * MB, MB))
    assert math.isnan(warm_share((), MB))


def test_an_op_without_tensors_has_no_entry():
    ops = _ops([(1, "aten::empty", None, [], [_t(1, MB)]), (2, "aten::zero_", None, [_t(1, MB)], [_t(1, MB)])])
    assert set(reuse_distances(ops)) == {2}
