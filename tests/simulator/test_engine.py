"""Hand-built programs whose critical path is worked out by hand in each test (times in µs)."""
from __future__ import annotations

import pytest

from pmdb.errors import PmdbError
from simulator.engine import TimedOp, repeat, simulate, steady_period
from simulator.semantics import COMM, COMPUTE, AsyncDevice, SyncHost


def _op(*kernels, t1=0.0, t2=0.0, t3=0.0, t5=0.0, **kw) -> TimedOp:
    """Kernels given as (stream, duration, T4); T2 before the first launch, T5 between launches (Algorithm 1)."""
    timed = tuple((s, d, t4, t2 if i == 0 else t5) for i, (s, d, t4) in enumerate(kernels))
    return TimedOp(t1=t1, t3=t3, cpu_us=t5, kernels=timed, **kw)


def test_single_rank_async_overheads_and_kernel_gap():
    ops = [_op((COMPUTE, 100.0, 4.0), t1=5, t2=3, t3=2),
           _op((COMPUTE, 50.0, 4.0), (COMPUTE, 20.0, 4.0), t1=5, t2=3, t3=2, t5=1)]
    res = simulate([ops], AsyncDevice())
    # op A: cpu 0+5+3 = 8; kernel starts max(0+1, 8+4/2) = 10, ends 110; cpu 8+4 = 12, +T3 -> 14
    # op B: cpu 14+5+3 = 22; k1 starts max(110+1, 22+2) = 111, ends 161; cpu 26, +T5 -> 27
    #       k2 starts max(161+1, 27+2) = 162, ends 182; cpu 31, +T3 -> 33
    rank = res.ranks[0]
    assert rank.cpu_us == pytest.approx(33)
    assert rank.compute_front_us == pytest.approx(182)
    assert res.predicted_us == pytest.approx(182)
    assert res.baseline_us == pytest.approx(170)
    assert res.device_active_us == pytest.approx(170)
    assert res.comm_unoverlapped_frac == 0


def test_cpu_bound_rank_ends_at_the_cpu_clock():
    ops = [_op((COMPUTE, 2.0, 4.0), t1=20, t2=10, t3=10) for _ in range(3)]
    res = simulate([ops], AsyncDevice())
    # each op: 20 + 10 + 4 + 10 = 44 µs of CPU; kernels (2 µs) always wait for their launch
    assert res.predicted_us == pytest.approx(3 * 44)
    assert res.ranks[0].compute_front_us == pytest.approx(2 * 44 + 30 + 2 + 2)
    assert res.baseline_us == pytest.approx(6)


def _late_rank_programs(wait: bool):
    def rank(compute_us: float) -> list[TimedOp]:
        return [_op((COMPUTE, compute_us, 0.0)),
                _op((COMM, 50.0, 0.0), is_collective=True),
                _op((COMPUTE, 10.0, 0.0), waits_on=(1,) if wait else ())]
    return [rank(100.0), rank(300.0)]


def test_two_ranks_late_rank_inter_rank_sync_async():
    res = simulate(_late_rank_programs(wait=True), AsyncDevice())
    # rank 0: compute 1..101; all_reduce after intra sync starts 102, ends 152
    # rank 1: compute 1..301; all_reduce 302..352  -> inter-rank sync: both comm fronts = 352
    # consumer: intra sync moves the compute front to 352, runs 353..363 on both ranks
    assert [r.comm_front_us for r in res.ranks] == pytest.approx([352, 352])
    assert [r.predicted_us for r in res.ranks] == pytest.approx([363, 363])
    assert res.predicted_us == pytest.approx(363)
    # rank 0's communication stream is occupied from 102 to 352 (waiting for rank 1)
    assert res.ranks[0].comm_busy_us == pytest.approx(250)
    assert res.baseline_us == pytest.approx(310)


def test_two_ranks_late_rank_sync_host():
    res = simulate(_late_rank_programs(wait=True), SyncHost())
    # rank 0: compute on the thread 0..100; all_reduce on the comm thread 100..150
    # rank 1: 0..300; 300..350 -> sync 350; consumer waits for it, runs 350..360
    assert [r.predicted_us for r in res.ranks] == pytest.approx([360, 360])
    assert [r.cpu_us for r in res.ranks] == pytest.approx([360, 360])


def test_collective_counts_must_match():
    progs = [[_op((COMM, 5.0, 0.0), is_collective=True)] * 2, [_op((COMM, 5.0, 0.0), is_collective=True)]]
    with pytest.raises(PmdbError, match="collective counts differ"):
        simulate(progs, AsyncDevice())


def _fig5(wait: bool, t4: float = 0.0) -> list[TimedOp]:
    return [_op((COMM, 100.0, t4), is_collective=True),
            _op((COMPUTE, 30.0, 0.0)),                               # independent of the collective
            _op((COMPUTE, 20.0, 0.0), waits_on=(0,) if wait else ()),  # consumes its output
            _op((COMPUTE, 10.0, 0.0))]


def test_intra_rank_sync_async_fig5():
    dep = simulate([_fig5(wait=True)], AsyncDevice())
    # all_reduce 1..101; independent op overlaps it: 1..31; the consumer waits for 101: 102..122; next 123..133
    assert dep.predicted_us == pytest.approx(133)
    free = simulate([_fig5(wait=False)], AsyncDevice())
    # without the dependency compute runs 1..31, 32..52, 53..63 and the collective ends at 101
    assert free.predicted_us == pytest.approx(101)
    assert dep.baseline_us == free.baseline_us == pytest.approx(100)


def test_intra_rank_sync_sync_host_and_unoverlapped_comm():
    res = simulate([_fig5(wait=True, t4=5.0)], SyncHost())
    # comm thread starts 5 µs after the launch: 5..105; independent op on the thread 0..30;
    # the consumer waits until 105: 105..125; last op 125..135
    rank = res.ranks[0]
    assert res.predicted_us == pytest.approx(135)
    assert rank.compute_busy_us == pytest.approx(60)
    assert rank.device_active_us == pytest.approx(135)
    assert rank.comm_unoverlapped_us == pytest.approx(75)  # 30..105 only the collective runs
    assert res.comm_unoverlapped_frac == pytest.approx(75 / 135)


def test_next_collective_queues_behind_previous_one_sync_host():
    ops = [_op((COMM, 100.0, 0.0), is_collective=True), _op((COMPUTE, 10.0, 0.0)),
           _op((COMM, 100.0, 0.0), is_collective=True), _op((COMPUTE, 10.0, 0.0))]
    res = simulate([ops], SyncHost())
    # comm 0..100 | thread 0..10 | the second collective is queued on the comm thread: 100..200, while the
    # calling thread goes on: 10..20 (DDP launches the next bucket's all_reduce without waiting)
    assert res.ranks[0].cpu_us == pytest.approx(20)
    assert res.predicted_us == pytest.approx(200)
    # on a GPU the new collective waits for the compute queued before it, not compute for it: comm 1..101,
    # compute 1..11; the second collective queues behind the first, 102..202; the last compute kernel runs
    # 12..22 beside them (Algorithm 1 aligned both streams here, holding compute until 102)
    res = simulate([ops], AsyncDevice())
    assert res.predicted_us == pytest.approx(202)
    assert res.ranks[0].compute_front_us == pytest.approx(22)


def test_host_sync_moves_cpu_to_stream_front():
    def prog(sync: bool) -> list[TimedOp]:
        return [_op((COMPUTE, 100.0, 4.0)),
                _op(t5=3, sync_streams=(COMPUTE,) if sync else ()),
                _op((COMPUTE, 10.0, 4.0), t1=5)]
    synced = simulate([prog(True)], AsyncDevice())
    # kernel 2..102, cpu 4; sync op: cpu 4+3 = 7 then waits to 102; next: cpu 107, kernel max(103, 109) = 109..119
    assert synced.predicted_us == pytest.approx(119)
    assert synced.ranks[0].cpu_us == pytest.approx(111)
    free = simulate([prog(False)], AsyncDevice())
    # no sync: cpu 12, kernel max(103, 14) = 103..113
    assert free.predicted_us == pytest.approx(113)


def test_eight_ranks_lockstep_takes_the_slowest_arrival():
    progs = [[_op((COMPUTE, 10.0 * (r + 1), 0.0)), _op((COMM, 5.0, 0.0), is_collective=True)]
             for r in range(8)]
    res = simulate(progs, SyncHost())
    # rank 7 arrives at 80; its collective ends 85, which every rank waits for at the end
    assert [r.predicted_us for r in res.ranks] == pytest.approx([85] * 8)
    assert [r.comm_busy_us for r in res.ranks] == pytest.approx([85 - 10 * (r + 1) for r in range(8)])


def test_steady_period_overlaps_next_iteration_with_device_backlog():
    ops = [_op((COMPUTE, 100.0, 10.0))]
    # one iteration from idle: kernel max(0+1, 0+5) = 5..105 -> T = 105
    assert simulate([ops], AsyncDevice()).predicted_us == pytest.approx(105)
    # back to back: the second launch (cpu 10) queues behind the first kernel: 106..206 -> period 206 - 105
    assert steady_period([ops], AsyncDevice()) == pytest.approx(101)


def test_repeat_shifts_dependencies_to_their_own_iteration():
    prog = _fig5(wait=True)
    doubled = repeat([prog], 2)[0]
    assert len(doubled) == 8
    assert doubled[2].waits_on == (0,) and doubled[6].waits_on == (4,)
    # copy 1 ends at 133 (see test_intra_rank_sync_async_fig5); copy 2: collective 134..234, independent op
    # 134..164, its consumer waits for 234: 235..255, last op 256..266
    assert simulate([doubled], AsyncDevice()).predicted_us == pytest.approx(266)


def test_own_collective_end_after_the_last_start_sync_host():
    def rank(compute_us: float, own_us: float) -> list[TimedOp]:
        return [_op((COMPUTE, compute_us, 0.0)),
                _op((COMM, own_us, 0.0), is_collective=True, after_last_us=own_us),
                _op((COMPUTE, 10.0, 0.0), waits_on=(1,))]
    res = simulate([rank(100.0, 80.0), rank(300.0, 40.0)], SyncHost())
    # the collective starts on the comm threads at 100 and 300: the last start is 300; each rank's own end is
    # 300 + its own duration (380 and 340), not the slowest rank's; the consumers run 380..390 and 340..350
    assert [r.comm_front_us for r in res.ranks] == pytest.approx([380, 340])
    assert [r.predicted_us for r in res.ranks] == pytest.approx([390, 350])
    # without own ends, both ranks end with the slowest: max(100 + 80, 300 + 40) = 340, consumers 340..350
    res = simulate([[TimedOp(o.t1, o.t3, o.cpu_us, o.kernels, o.is_collective, o.waits_on) for o in p]
                    for p in [rank(100.0, 80.0), rank(300.0, 40.0)]], SyncHost())
    assert [r.predicted_us for r in res.ranks] == pytest.approx([350, 350])


def test_collective_work_takes_the_callers_core_when_shared():
    ops = [_op((COMPUTE, 100.0, 0.0)), _op((COMM, 50.0, 0.0), is_collective=True), _op((COMPUTE, 30.0, 0.0))]
    # own core: the all_reduce runs 100..150 beside the compute 100..130 -> 150
    assert simulate([ops], SyncHost()).predicted_us == pytest.approx(150)
    # shared core: the thread gives it 50 µs before its next op: compute 150..180 -> 180
    res = simulate([ops], SyncHost(comm_shares_core=True))
    assert res.predicted_us == pytest.approx(180) and res.ranks[0].comm_front_us == pytest.approx(150)
