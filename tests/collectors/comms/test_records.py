"""Row building and the all-or-nothing write into the real store."""
import duckdb
import numpy as np
import pytest

from collectors.comms.bus import from_buffers
from collectors.comms.store_rows import TABLE, latency_stats, make_row, write_atomic
from pmdb import platform


def test_latency_stats_match_numpy():
    values = np.random.default_rng(0).gamma(2.0, 50.0, size=101)
    stats = latency_stats(values)
    assert stats["lat_p50_us"] == pytest.approx(np.median(values))
    assert stats["lat_mean_us"] == pytest.approx(values.mean())
    assert stats["lat_p95_us"] == pytest.approx(np.percentile(values, 95))
    assert stats["lat_min_us"] == values.min() and stats["lat_max_us"] == values.max()
    with pytest.raises(ValueError):
        latency_stats([])


def _row(store, run_id, name, **over):
    row = make_row(run_id=run_id, platform=name, collective="all_to_allv", backend="gloo", world_size=2,
                   sizes=from_buffers([400, 200], [300, 300]), split_kind="random", source="measured",
                   dtype="float32", in_place=False, latency={"lat_p50_us": 40.0, "lat_p95_us": None},
                   rank=None, iterations=5, warmup=1, threads_per_rank=1)
    row.update(over)
    return row


def test_make_row_bandwidths_and_write(store):
    name = platform.resolve(store, None)
    with store.run("comms", name) as run:
        row = _row(store, run.run_id, name)
        assert row["algbw_gbps"] == pytest.approx(400 / 40.0 / 1e3)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 0.5)
        assert write_atomic(store, [(TABLE, [row, _row(store, run.run_id, name, rank=0)])]) == {TABLE: 2}
    got = store.query("SELECT rank, sent_bytes, recv_bytes, max_rank_bytes, lat_p95_us FROM "
                      "v_collective_measurements ORDER BY rank NULLS FIRST")
    assert got["rank"].isna().tolist() == [True, False]
    assert list(got["sent_bytes"][0]) == [400, 200] and got["max_rank_bytes"].tolist() == [400, 400]
    assert got["lat_p95_us"].isna().all()


def test_write_atomic_is_all_or_nothing(store):
    name = platform.resolve(store, None)
    with store.run("comms", name) as run:
        good = _row(store, run.run_id, name)
        bad = _row(store, run.run_id, name, split_kind="sideways")  # violates the CHECK constraint
        with pytest.raises(duckdb.Error):
            write_atomic(store, [(TABLE, [good]), (TABLE, [bad])])
    assert store.scalar(f"SELECT count(*) FROM {TABLE}") == 0
