"""The quickstart's calibration runs are workloads of their own: no two draw one plan, none is a judged run's."""
from __future__ import annotations

from collectors.workloads import sharders
from collectors.workloads.dlrm_presets import preset
from pmdb.cli import quickstart


def _canonical(plan: list[int]) -> tuple[int, ...]:
    """A two-rank plan up to swapping the ranks (the ranks are alike: a plan and its mirror are one workload)."""
    return tuple(plan) if plan[0] == 0 else tuple(1 - r for r in plan)


def test_calibration_seeds_draw_distinct_plans_none_of_them_judged():
    tables = preset("dlrm_mixed").tables
    steps = [s.args for s in quickstart.steps("reports")]
    judged = [a[a.index("--sharder") + 1] for a in steps
              if "--sharder" in a and "--world-size" in a and a[a.index("--world-size") + 1] == "2"
              and a[a.index("--sharder") + 1] != "random"]
    assert len(judged) == 4
    calibration = [_canonical(sharders.shard("random", tables, 2, seed)) for seed in quickstart.CALIBRATION_SEEDS]
    assert len(set(calibration)) == len(calibration) == len(quickstart.calibration_steps())
    assert not set(calibration) & {_canonical(sharders.shard(name, tables, 2)) for name in judged}
    # the seeds the steps pass are the ones checked
    passed = [int(a[a.index("--seed") + 1]) for a in (s.args for s in quickstart.calibration_steps())]
    assert passed == list(quickstart.CALIBRATION_SEEDS)
