"""A real world-size-2 gloo sweep of every collective over a few sizes, with unequal all_to_allv splits."""
import numpy as np
import pandas as pd
import pytest

from collectors.comms.bus import bus_factor
from collectors.comms.sizes import build_plan, ladder
from collectors.comms.config import SweepConfig
from collectors.comms.sweep import curve_table, format_bytes, run_sweep
from pmdb import platform

CONFIG = SweepConfig(world_size=2, min_bytes=4, max_bytes=64 * 1024, factor=16, iters=4, warmup=1,
                     random_splits=2, seed=3)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from pmdb.config import Workspace
    from pmdb.store import Store
    ws = Workspace(tmp_path_factory.mktemp("sweep") / "ws")
    store = Store.open(ws, create=True)
    name = platform.resolve(store, None)
    outcome = run_sweep(store, CONFIG, name, progress=False)
    yield store, outcome
    store.close()


@pytest.mark.slow
def test_sweep_stores_every_step(swept):
    store, outcome = swept
    plan = CONFIG.plan()
    rows = store.query("SELECT * FROM v_collective_measurements ORDER BY collective_id")
    assert len(rows) == len(plan) * (CONFIG.world_size + 1) == outcome.summary["rows"]
    assert set(rows["collective"]) == set(CONFIG.collectives)
    assert store.scalar("SELECT status FROM collection_runs WHERE run_id = ?", [outcome.run_id]) == "completed"
    assert (rows["threads_per_rank"] == 1).all() and (rows["iterations"] == 4).all()
    assert (rows["backend"] == "gloo").all() and (rows["source"] == "measured").all()
    assert rows.loc[rows["collective"] == "all_reduce", "in_place"].all()


@pytest.mark.slow
def test_aggregate_rows_bound_the_ranks(swept):
    store, _ = swept
    rows = store.query("SELECT * FROM v_collective_measurements ORDER BY collective_id")
    n = CONFIG.world_size + 1
    for start in range(0, len(rows), n):
        group = rows.iloc[start:start + n]
        ranks, agg = group.iloc[:-1], group.iloc[-1]
        assert ranks["rank"].tolist() == [0, 1] and pd.isna(agg["rank"])
        # per iteration the slowest rank: its order statistics dominate every rank's
        assert agg["lat_p50_us"] >= ranks["lat_p50_us"].max() - 1e-9
        assert agg["lat_min_us"] >= ranks["lat_min_us"].max() - 1e-9
        assert agg["lat_max_us"] == pytest.approx(ranks["lat_max_us"].max())
        expected_algbw = agg["max_rank_bytes"] / agg["lat_p50_us"] / 1e3
        assert agg["algbw_gbps"] == pytest.approx(expected_algbw)
        assert agg["busbw_gbps"] == pytest.approx(expected_algbw * bus_factor(agg["collective"], 2))


@pytest.mark.slow
def test_unequal_splits_match_the_seeded_plan(swept):
    store, _ = swept
    rows = store.query("SELECT * FROM v_collective_measurements WHERE collective = 'all_to_allv' AND rank IS NULL "
                       "ORDER BY collective_id")
    plan = [s for s in build_plan(["all_to_allv"], 2, ladder(4, 64 * 1024, 16), 4, random_draws=2, seed=3)]
    assert len(rows) == len(plan) and (rows["split_kind"] == "random").all()
    unequal = 0
    for (_, row), step in zip(rows.iterrows(), plan):
        sent, recv = list(row["sent_bytes"]), list(row["recv_bytes"])
        assert sent == [4 * e for e in step.in_elems] and recv == [4 * e for e in step.out_elems]
        assert sum(sent) == sum(recv) == row["total_bytes"]
        assert row["max_rank_bytes"] == max(sent + recv)
        unequal += sent[0] != sent[1] or sent != recv
    assert unequal >= len(rows) - 1


@pytest.mark.slow
def test_curve_table_and_named_query(swept):
    store, outcome = swept
    table = curve_table(outcome.rows)
    assert list(table["size"]) == ["4 B", "64 B", "1 KiB", "16 KiB"]
    assert {"all_reduce us", "all_to_allv GB/s", "reduce_scatter us"} <= set(table.columns)
    agg = outcome.rows[outcome.rows["rank"].isna() & (outcome.rows["collective"] == "all_reduce")]
    assert table["all_reduce us"].tolist() == [f"{v:.1f}" for v in agg["lat_p50_us"]]
    assert table["all_to_allv us"].iloc[0] == ""  # 4 B leaves no room for random splits
    from pmdb.cli.core import named_queries
    curves = store.query(named_queries()["comm_curves"][1])
    equal = curves[(curves["collective"] == "all_reduce")]
    assert equal["max_rank_bytes"].tolist() == [4, 64, 1024, 16384]
    assert (equal["n_rows"] == 1).all() and (equal["lat_p50_us"] > 0).all()
    # the mean over iterations is stored beside the median, and is what the models are fitted on (lat_us)
    assert ((agg["lat_mean_us"] >= agg["lat_min_us"]) & (agg["lat_mean_us"] <= agg["lat_max_us"])).all()
    assert np.allclose(equal["lat_us"], agg["lat_mean_us"])



@pytest.mark.parametrize("size, text", [(4, "4 B"), (1023, "1023 B"), (1024, "1 KiB"), (7266, "7.096 KiB"),
                                        (64 * 2**20, "64 MiB"), (3 * 2**40, "3072 GiB")])
def test_format_bytes(size, text):
    assert format_bytes(size) == text
