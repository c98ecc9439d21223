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


def test_a_parent_reads_what_its_children_read_from_outside_it():
    """An autograd node records only the gradient it is given; its children read what the forward saved (here a
    4 MB weight) and what they wrote themselves (an intermediate, not an input of the node)."""
    ops = _ops([(1, "aten::embedding_bag", None, [_t(5, 4 * MB), _t(1, MB)], [_t(2, MB)]),
                (2, "aten::relu", None, [_t(2, MB)], [_t(3, 2 * MB)]),
                (3, "autograd::engine::evaluate_function: EmbeddingBagBackward0", None, [], []),
                (4, "EmbeddingBagBackward0", 3, [_t(3, 2 * MB)], []),
                (5, "aten::mul", 4, [_t(3, 2 * MB)], [_t(7, MB)]),                    # an intermediate s7
                (6, "aten::index_add_", 4, [_t(5, 4 * MB), _t(7, MB), _t(1, MB)], [_t(5, 4 * MB)])])
    got = reuse_distances(ops)
    # the node and its evaluate_function: the indices s1 (s2, s3 since), the gradient s3 just written and the
    # weight s5 (s1 too since); never s7, made inside them
    assert got[3] == got[4] == ((3 * MB, MB), (0.0, 2 * MB), (4 * MB, 4 * MB))
    assert got[6] == ((4 * MB, MB), (5 * MB, 4 * MB), (0.0, MB))   # the leaf at its own start: s7 since
    assert warm_share(got[3], 8 * MB) == 1.0 and warm_share(got[3], 4 * MB) == pytest.approx(3 / 7)


def test_a_kernel_whose_children_only_allocate_or_copy_accesses_its_own_tensors():
    """fbgemm's lookup kernel allocates its output through aten::empty and copies its offsets with a contiguous
    child: it reads its 8 MB table itself (before RULES_VERSION 12 an op with children accessed nothing)."""
    ops = _ops([(1, "fbgemm::split_embedding_codegen_forward_cpu", None, [_t(5, 8 * MB), _t(1, MB)],
                 [_t(2, MB)]),
                (2, "aten::empty", 1, [], [_t(2, MB)]),
                (3, "aten::contiguous", 1, [_t(1, MB)], [_t(4, MB)]),   # a copy: it accesses s1 and s4
                (4, "aten::relu", None, [_t(2, MB)], [_t(3, MB)])])
    got = reuse_distances(ops)
    # the kernel's own accesses follow its children's: the copy's s1 and s4, then the kernel's s5 and s2; relu
    # reads s2 just written and writes s3
    assert got[4] == ((0.0, MB),)
    assert got[1] == ((11 * MB, MB), (2 * MB, 8 * MB))   # s1: s4, s5, s2, s3 since; s5: s2, s3
    assert got[3] == ((11 * MB, MB),)                    # the copy, at the kernel's start: nothing between


def test_links_to_a_later_op_or_to_itself_are_not_children():
    """A hand-edited or corrupt trace: op 1 names op 2 (after it) as its parent, op 3 itself. Neither is nesting
    (a parent starts before its children), so each op accesses its own tensors; nothing loops."""
    ops = _ops([(1, "aten::relu", 2, [_t(1, MB)], [_t(2, MB)]),
                (2, "aten::relu", 1, [_t(2, MB)], [_t(3, MB)]),
                (3, "aten::relu", 3, [_t(3, MB)], [_t(1, MB)])])
    got = reuse_distances(ops)
    # op 2 is op 1's child here (its parent comes first): op 1 reads s2 through it, and after it accesses s1 itself
    # (not s2: op 2 accessed it); s1 was last accessed by op 3, s2 before op 2's s3 and s1, op 3's s3 and s1
    assert got[1] == ((0.0, MB), (2 * MB, MB))
    assert got[3] == ((MB, MB),)   # s3, written by op 2, then op 1's own s1


def test_an_op_without_tensors_has_no_entry():
    ops = _ops([(1, "aten::empty", None, [], [_t(1, MB)]), (2, "aten::zero_", None, [_t(1, MB)], [_t(1, MB)])])
    assert set(reuse_distances(ops)) == {2}


def test_with_traced_times_each_entry_says_how_long_ago_its_storage_was_accessed():
    # A reads s1, writes s2; B reads s2, writes s3; C (no traced time) reads s1 and writes s4.
    # Traced (start, end) µs: A 0-100, B 150-400; C takes B's start; the iteration lasts 1000 µs
    ops = _ops([(1, "aten::mul", None, [_t(1, MB)], [_t(2, 2 * MB)]),
                (2, "aten::relu", None, [_t(2, 2 * MB)], [_t(3, MB)]),
                (3, "aten::add", None, [_t(1, MB)], [_t(4, MB)])])
    got = reuse_distances(ops, {1: (0.0, 100.0), 2: (150.0, 400.0)}, 1000.0)
    # A: s1 last accessed by C of the previous iteration (at 150 µs there): 0 + 1000 - 150
    assert got[1] == ((1 * MB, 1 * MB, 850.0),)
    assert got[2] == ((0.0, 2 * MB, 50.0),)           # B at 150 reads what A wrote when it ended, at 100
    assert got[3] == ((3 * MB, 1 * MB, 50.0),)        # C (at B's start, 150) reads s1 that A accessed until 100
    assert reuse_distances(ops) == {k: tuple(e[:2] for e in v) for k, v in got.items()}   # untimed: no elapsed
    # a period shorter than the traced span is not one: the span (0-400 µs) takes its place
    assert reuse_distances(ops, {1: (0.0, 100.0), 2: (150.0, 400.0)}, 10.0)[1] == ((1 * MB, 1 * MB, 250.0),)
    assert reuse_distances(ops, {1: (0.0, 100.0)}, 1000.0) == reuse_distances(ops)   # one timed op: no clock
    # relu reads s7 only itself: a whole iteration ago, from its end (10 µs) to its start one period on
    fresh = _ops([(1, "aten::relu", None, [_t(7, MB)], [_t(8, MB)]), (2, "aten::add", None, [_t(8, MB)], [_t(9, MB)])])
    first = reuse_distances(fresh, {1: (0.0, 10.0), 2: (20.0, 30.0)}, 100.0)
    assert first[1] == ((2 * MB, MB, 90.0),) and first[2] == ((0.0, MB, 10.0),)
