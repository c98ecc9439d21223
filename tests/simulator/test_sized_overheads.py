"""An op priced by its own samples takes those of its input size class (RULES_VERSION 10): a real profiled CPU step
runs `torch.all` over a [16, 4, 64, 64] and an [8, 64] mask; `aten::all` reduces after its last child, so its T3
grows with the input. Priced from the step's own overhead table, the small call is priced near its own traced time,
not at the mean over both sizes (what one mean per op name gave: the big call's work on a small one)."""
from __future__ import annotations

import pytest
import torch

from collectors.traces.ingest import RankTraces
from collectors.workloads.profile import kineto_pass
from fitters.overheads import fit_overheads
from pmdb import platform as platforms
from pmdb.platform import Semantics
from pmdb.traces.from_store import load_graphs
from sim_store import ingest
from simulator.model_set import ModelSet, Overheads
from simulator.timing import ModelTiming


def _masks_step():
    big, small = torch.ones(16, 4, 64, 64) > 0, torch.ones(8, 64) > 0

    def step(_: int = 0) -> None:
        for _ in range(2):
            torch.all(big)
            torch.all(small)
    return step


@pytest.fixture(scope="module")
def masks_trace(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("masks_step") / "kineto.json"
    kineto_pass(_masks_step(), [0], [1, 2, 3], out)
    return out


def test_a_small_call_is_priced_by_its_own_size_class(store, masks_trace):
    platform = platforms.resolve(store, None)
    ts = ingest(store, platform, [RankTraces(0, masks_trace, None)], "masks", "captured")
    with store.run("overheads", platform, {}) as run:
        fit_overheads(store, run.run_id, platform)
    graph = load_graphs(store, ts, pick="best", detail=True)[0]
    calls = [op for op in graph.ranks[0].ops if op.name == "aten::all"]
    small = [op for op in calls if len(op.input_shapes[0]) == 2]
    big = [op for op in calls if len(op.input_shapes[0]) == 4]
    assert len(small) == len(big) == 2 and all(op.sub for op in calls)      # composites: priced by T2 + ... + T3
    overheads = Overheads.latest(store, platform)
    timing = ModelTiming(ModelSet(), overheads, Semantics.SYNC_HOST)
    timing.programs(graph)
    priced = {id(op): timing._op_time(op) for op in calls}
    traced_small = sum(op.cpu_dur_us for op in small) / 2
    traced_big = sum(op.cpu_dur_us for op in big) / 2
    assert traced_big > 5 * traced_small                                    # the big call's own work shows
    for op in small:
        assert priced[id(op)] < 3 * traced_small < traced_big                # its own class, not the big one's
    # the big call by its own class: far above the small one's price (x18-28 measured), and in its own traced
    # time's range (x0.70-0.84 of it, three runs alone; the one traced iteration ran 3x slow under `make test`'s two
    # workers once, so not within 3x of it)
    for op in big:
        assert priced[id(op)] > 5 * max(priced[id(s)] for s in small) and priced[id(op)] > traced_big / 10
    by_name = Overheads(overheads.version, overheads.table)                  # the same table without its classes
    mixed = ModelTiming(ModelSet(), by_name, Semantics.SYNC_HOST)
    mixed.programs(graph)
    assert all(mixed._op_time(op) > 2 * traced_small for op in small)       # one mean per name: priced as big
