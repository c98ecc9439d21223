"""Host waits for work outside a rank's trace (other ranks, other threads): replay keeps the part of a traced wait
that the rank's own work does not explain, names it and draws it; model mode prices it by that traced wait."""
from __future__ import annotations

import pytest

from pmdb.platform import Semantics
from pmdb.traces.graph import Kernel, Op, RankGraph, Stream
from simulator import chrome_trace
from simulator.engine import EXTERNAL_MIN_US, TimedOp, Timeline, simulate
from simulator.predict import predict_trace_set
from simulator.replay import one_launch, replay_rank, traced_wait_us
from simulator.semantics import COMPUTE, AsyncDevice


def _blocking(traced: float | None = None, external: float = 0.0) -> list[TimedOp]:
    """A 100 µs kernel, then an op whose 2 µs copy blocks the host (it waits for the compute stream), then T1."""
    return [TimedOp(kernels=((COMPUTE, 100.0, 0.0, 0.0),)),
            TimedOp(kernels=((COMPUTE, 2.0, 0.0, 0.0),), sync_streams=(COMPUTE,), traced_wait_us=traced,
                    external_us=external),
            TimedOp(t1=10.0)]


def test_the_traced_wait_beyond_the_simulated_one_stays_and_is_recorded():
    # kernel 1..101; the copy 102..104, the host waits until 104 (its own work); traced: 500 µs of waiting
    own = simulate([_blocking()], AsyncDevice())
    assert own.predicted_us == pytest.approx(114) and own.ranks[0].external_waits == 0
    timeline = Timeline()
    kept = simulate([_blocking(traced=500.0)], AsyncDevice(), timeline)
    assert kept.predicted_us == pytest.approx(510)
    assert (kept.ranks[0].external_wait_us, kept.ranks[0].external_waits) == (pytest.approx(396), 1)
    assert timeline.ranks[0][1].host_waits == [(0.0, 104.0)]
    assert timeline.ranks[0][1].external_waits == [(104.0, 500.0)]
    # a traced wait the rank's own work explains (within the clocks' disagreement) adds nothing
    near = simulate([_blocking(traced=104.0 + EXTERNAL_MIN_US - 1)], AsyncDevice())
    assert near.predicted_us == pytest.approx(114) and near.ranks[0].external_waits == 0


def test_model_mode_adds_a_priced_external_wait_after_the_ops_own_wait():
    priced = simulate([_blocking(external=250.0)], AsyncDevice())
    assert priced.predicted_us == pytest.approx(114 + 250)
    assert priced.ranks[0].external_wait_us == pytest.approx(250)


def test_a_cuda_graph_launch_is_paid_once_and_the_traced_wait_is_what_the_op_did_not_do_itself():
    graph_kernels = [Kernel(Stream.COMPUTE, 10.0, f"k{i}", launch_us=200.0, launch_name="cudaGraphLaunch",
                            gap_before_us=5.0 if i == 0 else 0.0) for i in range(3)]
    op = Op("CompiledFunction", kernels=graph_kernels, start_us=0.0, cpu_dur_us=210.0, tail_us=5.0)
    assert one_launch(op) == [False, True, True]
    (timed, _) = replay_rank(RankGraph(0, [op]), Semantics.ASYNC_DEVICE)
    assert [k[2] for k in timed.kernels] == [200.0, 0.0, 0.0]
    assert traced_wait_us(op) is None   # it waits for nothing
    copy = Op("aten::to", kernels=[Kernel(Stream.COMPUTE, 2.0, "Memcpy DtoH", launch_us=6.0,
                                          launch_name="cudaMemcpyAsync", gap_before_us=4.0)],
              sync_streams=(Stream.COMPUTE,), start_us=0.0, cpu_dur_us=1000.0, tail_us=3.0)
    assert traced_wait_us(copy) == pytest.approx(987.0)


def test_a_rank_of_a_16_rank_job_replays_within_3_percent_with_its_waits_for_peers(store, gpu_trace):
    """rank 0 of a 16-rank NCCL job: each step's blocking copy waits ~147 ms for other ranks and threads."""
    set_id = gpu_trace("hta_a100_16rank_rank0", "a100-sxm4", et=False)
    pred = predict_trace_set(store, set_id, mode="replay", timeline=True)
    error = (pred.predicted_us - pred.measured_us) / pred.measured_us
    assert abs(error) < 0.03, f"replay error {100 * error:+.2f}% (target < 3%)"
    rank = pred.result.ranks[0]
    assert rank.external_waits >= 1 and rank.external_wait_us > 100_000   # the ~147 ms copy, most of it external
    events = chrome_trace.chrome_trace(pred)["traceEvents"]
    external = [e for e in events if e["name"] == "external wait"]
    assert external and sum(e["dur"] for e in external) == pytest.approx(rank.external_wait_us, rel=1e-3)
    assert all(e["cat"] == "wait" and "trace" in e["args"]["priced_by"] for e in external)
    # model mode prices the same waits by their traced time and says so
    model = predict_trace_set(store, set_id, mode="model")
    assert model.result.ranks[0].external_wait_us > 100_000
    assert any("outside the trace" in note and "priced by the traced wait" in note for note in model.defaults)
