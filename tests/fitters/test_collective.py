"""The collective model (paper Eq. 2-4, continuous): continuity, recovery of known parameters, held-out error."""
import numpy as np
import pandas as pd
import pytest

from fitters import collective as coll
from fitters.split import split_collective
from pmdb import metrics
from pmdb.errors import PmdbError


def test_curve_is_continuous_at_both_turning_points(synthetic):
    truth = synthetic.collective_truth()
    mul = coll.bus_factor("all_reduce", 2)
    for boundary in (truth.m1, truth.m2):
        below, at, above = coll.curve(truth, mul, np.array([boundary * (1 - 1e-9), boundary, boundary * (1 + 1e-9)]))
        assert below == pytest.approx(at, rel=1e-6) and above == pytest.approx(at, rel=1e-6)
    # and monotone non-decreasing over sizes for this (physical) parameter set
    times = coll.curve(truth, mul, np.geomspace(4, 2 ** 28, 500))
    assert (np.diff(times) >= -1e-9).all()


def test_fit_recovers_known_parameters_from_exact_points(synthetic):
    sizes, times = synthetic.collective_points()
    split = split_collective(sizes, np.full(sizes.size, "equal"))
    model = coll.fit("all_reduce", 2, sizes[split.train], times[split.train])
    truth, got = synthetic.collective_truth(), model.params
    assert (got.m1, got.m2) == (truth.m1, truth.m2)
    for name in ("t_s", "bw_max", "k", "x0", "L", "b"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-3, abs=1e-6), name
    predicted = model.predict(pd.DataFrame({"max_rank_bytes": sizes[split.test]}))
    assert metrics.gmae(predicted, times[split.test]) < 1e-3


def test_noisy_fit_scores_on_held_out_sizes_near_the_noise(synthetic):
    sizes, times = synthetic.collective_points(world_size=4, sigma=0.03, seed=5)
    split = split_collective(sizes, np.full(sizes.size, "equal"))
    model = coll.fit("all_reduce", 4, sizes[split.train], times[split.train])
    exact = synthetic.collective_points(world_size=4)[1]
    predicted = model.predict(pd.DataFrame({"max_rank_bytes": sizes[split.test]}))
    assert metrics.gmae(predicted, exact[split.test]) < 0.03  # closer to the true curve than the noise is
    # and physical: the fitted latency does not fall as messages grow (the fit penalises a falling middle branch)
    fitted = model.predict(pd.DataFrame({"max_rank_bytes": np.geomspace(4, 2 ** 27, 400)}))
    assert (np.diff(np.log(fitted)) > -1e-3).all()


# all_to_all at world size 2 on the 2-core AMD host (gloo, a quickstart's sweep of 2026-11-30): each size's mean
# latency in µs, sizes 8 B ... 16 MiB. Spiky means (p50s were 150-260 µs up to 512 KiB) once fitted a logistic flat
# across [m1, m2], whose continuity solve failed: 1689 µs at 192 KiB, 365 at 256 KiB.
_SPIKY_MEANS_US = [633, 433, 212, 286, 402, 589, 268, 233, 159, 379, 287, 181, 268, 732, 740, 576, 420, 371, 768,
                   2202, 2980, 5730]


def test_spiky_means_fit_a_curve_without_a_jump():
    sizes = 2.0 ** np.arange(3, 3 + len(_SPIKY_MEANS_US))
    model = coll.fit("all_to_all", 2, sizes, np.array(_SPIKY_MEANS_US, dtype=float))
    assert coll.continuity_gap(model.params, model.mul) < 1e-6
    fitted = model.predict(pd.DataFrame({"max_rank_bytes": np.geomspace(8, 2 ** 24, 400)}))
    steps = np.diff(np.log(fitted))
    assert steps.min() > -1e-3 and steps.max() < 0.1   # no fall, no jump between neighbouring sizes


def test_a_flat_logistic_is_seen_as_a_jump():
    mul = coll.bus_factor("all_to_all", 2)
    flat = coll.CollectiveParams.continuous(2 ** 15, 2 ** 18, 280.0, 1.6, 5.0, 37.0, mul)   # midpoint at 128 GiB
    assert coll.continuity_gap(flat, mul) > 1.0
    fine = coll.CollectiveParams.continuous(2 ** 15, 2 ** 20, 280.0, 1.6, 0.7, 18.4, mul)
    assert coll.continuity_gap(fine, mul) < 1e-9


def test_too_few_sizes_and_bad_input_are_user_errors():
    with pytest.raises(PmdbError, match="3 distinct message sizes"):
        coll.fit("all_to_all", 2, np.array([4, 8, 16, 16]), np.array([1.0, 2.0, 3.0, 3.0]))
    params = coll.CollectiveParams.continuous(2 ** 10, 2 ** 20, 50.0, 1.0, 1.0, 15.0, 1.0)
    model = coll.CollectiveModel("all_to_all", 2, params)
    with pytest.raises(PmdbError, match="max_rank_bytes"):
        model.predict(pd.DataFrame({"bytes": [1]}))


def test_bus_factors():
    assert coll.bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert coll.bus_factor("all_to_all", 4) == pytest.approx(0.75)
    assert coll.bus_factor("broadcast", 4) == 1.0
