"""The sweep against a real store: rows and statistics, resume, force, memory cap, out-of-memory, budget stop,
interruption, and the CLI's errors."""
from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from collectors.ops.sweep import Sweep, SweepOptions, parse_bytes
from collectors.ops.timer import TimerSettings
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.errors import PmdbError

FAST = TimerSettings(warmup=1, min_reps=2, max_reps=3, min_time_us=0, cold_min_reps=2, cold_max_reps=2,
                     flush_bytes=4 * 2 ** 20)
FC = [{"M": 4, "N": 8, "K": 8}, {"M": 16, "N": 8, "K": 32}]


def _sweep(store, **kwargs):
    name = platforms.register_local(store)["name"]
    options = SweepOptions(settings=FAST, **kwargs)
    with store.run("ops", name, {}) as run:
        summary = Sweep(store, run, name, options).execute(progress=False)
    return run.run_id, summary


def test_rows_resume_and_force(store):
    run_id, summary = _sweep(store, ops=["fully_connected"], configs=FC)
    rows = store.query("SELECT * FROM v_op_measurements WHERE run_id = ?", [run_id])
    assert len(rows) == 2 * 2 * 2  # configs x passes x cache states
    assert set(rows.cache_state) == {"warm", "cold"} and set(rows["pass"]) == {"fwd", "bwd"}
    assert (rows.median_us > 0).all() and (rows.min_us <= rows.median_us).all() and (rows.repetitions >= 2).all()
    assert rows.groupby("config_key").size().eq(2).all()  # warm and cold share the key
    assert summary["configs_done"] == 2 and {p["op"] for p in summary["per_op"]} == {"fully_connected"}
    # each backward row carries the engine's own cost of its autograd.grad call; node_us is the row without it
    bwd, fwd = rows[rows["pass"] == "bwd"], rows[rows["pass"] == "fwd"]
    assert (bwd["engine_call_us"] > 0).all() and fwd["engine_call_us"].isna().all()
    assert summary["engine_call_us"] and set(bwd["engine_call_us"]) <= set(summary["engine_call_us"])
    expected = (bwd["median_us"] - bwd["engine_call_us"]).clip(lower=0.1 * bwd["median_us"])
    assert bwd["node_us"].tolist() == pytest.approx(expected.tolist())
    assert (fwd["node_us"] == fwd["median_us"]).all()
    assert all(p["cv_median"] >= 0 for p in summary["per_op"])
    # the host's memory pace when the sweep started and when it ended (collectors.memory_probe), kept with the run
    assert [p["bytes"] for p in summary["memory_probe"]] == [64 * 2 ** 20] * 2
    assert all(p["read_us"] > 0 for p in summary["memory_probe"])
    stored = json.loads(store.scalar("SELECT summary FROM collection_runs WHERE run_id = ?", [run_id]))
    assert stored["memory_probe"] == summary["memory_probe"]
    assert [p["op"] for p in summary["wake_probe"]] == ["linear 512x64->256"] * 2      # at the start and the end
    assert stored["wake_probe"] == summary["wake_probe"]
    # its forward's code path away, timed once per op and implementation, on its smallest config
    (key,) = summary["code_away"]
    away = summary["code_away"][key]
    assert key.startswith("fully_connected/") and away["waits_us"] == [500, 2000, 8000]
    assert away["warm_us"] > 0 and len(away["after_us"]) == 3 and all(t > 0 for t in away["after_us"])
    assert stored["code_away"] == summary["code_away"]
    # again: everything is already there
    _, again = _sweep(store, ops=["fully_connected"], configs=FC)
    assert again["configs_resumed"] == 2 and again["rows_written"] == 0 and again["code_away"] == {}
    # a new cache state is measured for the same configs; --force measures everything again
    _, forced = _sweep(store, ops=["fully_connected"], configs=FC, force=True, cache="warm")
    assert forced["rows_written"] == 4
    assert store.scalar("SELECT count(*) FROM v_op_measurements") == 12


def test_embedding_rows_carry_their_table_statistics(store):
    run_id, _ = _sweep(store, ops=["embedding_lookup"], cache="cold", passes="fwd",
                       configs=[{"B": 16, "E": [100, 40, 70], "D": [4, 8, 4], "L": [5, 2, 30],
                                 "sources": ["uniform", "zipf:1.05", "uniform"]}])
    frame = store.query("SELECT m.implementation, m.params, s.table_index, s.pooling_mean, s.reuse_factors, "
                        "s.index_source, s.optimizer FROM op_measurements m JOIN v_embedding_batch_stats s "
                        "USING (measurement_id) WHERE m.run_id = ? ORDER BY m.implementation, s.table_index",
                        [run_id])
    assert list(frame.implementation.unique()) == ["fbgemm_tbe", "torch_embedding_bag"]
    assert len(frame) == 6 and list(frame.table_index[:3]) == [0, 1, 2]
    assert list(frame.index_source[:3]) == ["uniform", "zipf:1.05", "uniform"]
    assert all(abs(sum(rf) - 1) < 1e-9 for rf in frame.reuse_factors) and set(frame.optimizer) == {"exact_sgd"}
    params = store.query("SELECT params->>'$.T' AS t, params->'$.L' AS l FROM op_measurements WHERE run_id = ?",
                         [run_id])
    assert set(params.t) == {"3"}


def test_memory_cap_and_out_of_memory_are_skipped_not_fatal(store):
    run_id, summary = _sweep(store, ops=["fully_connected"], cache="warm", memory_cap=parse_bytes("1MiB"),
                             configs=[{"M": 8, "N": 8, "K": 8}, {"M": 1024, "N": 1024, "K": 1024}])
    assert summary["skipped"] == {"memory_cap": 1} and summary["configs_done"] == 2
    skipped = store.query("SELECT skipped, median_us FROM op_measurements WHERE run_id = ? AND skipped IS NOT NULL",
                          [run_id])
    assert len(skipped) == 2 and skipped.skipped.str.startswith("memory cap").all() and skipped.median_us.isna().all()
    # a config whose estimate passes a huge cap but whose allocation fails: recorded as out of memory
    run_id, summary = _sweep(store, ops=["bmm"], cache="warm", passes="fwd", memory_cap=parse_bytes("100PiB"),
                             configs=[{"B": 1_000_000, "M": 100_000, "N": 4, "K": 100_000}, {"B": 1, "M": 4, "N": 4, "K": 4}])
    assert summary["skipped"] == {"oom": 1}
    reasons = store.query("SELECT skipped FROM op_measurements WHERE run_id = ? AND skipped IS NOT NULL", [run_id])
    assert reasons.skipped[0].startswith("out of memory")
    assert store.scalar("SELECT count(*) FROM v_op_measurements WHERE run_id = ?", [run_id]) == 1


def test_budget_stops_cleanly(store):
    run_id, summary = _sweep(store, ops=["relu"], sweep="quick", budget_s=1e-9, cache="warm")
    assert summary["stopped"] == "budget" and summary["configs_done"] < summary["configs_planned"]
    assert store.scalar("SELECT status FROM collection_runs WHERE run_id = ?", [run_id]) == "completed"


def test_a_budget_on_a_gpu_lets_the_ops_take_turns(store):
    """Planned for a CUDA device with a budget, the ops alternate (a budget cuts each op's last configs, not the
    ops listed last); without a budget they stay op by op. Planning touches no device."""
    import torch

    from collectors.ops.sweep import plan

    name = platforms.register_local(store)["name"]
    ops = ["relu", "add", "layer_norm"]

    def planned(budget_s):
        options = SweepOptions(ops=ops, sweep="quick", passes="fwd", settings=FAST, budget_s=budget_s)
        return [item.spec.name for item in plan(store, name, options, torch.device("cuda"))[0]]

    whole = planned(None)
    assert whole == sorted(whole, key=ops.index) and set(whole) == set(ops)   # op by op
    turns = planned(60.0)
    assert sorted(turns) == sorted(whole) and turns[:3] == ops and turns[3:6] == ops


def test_interrupted_sweep_keeps_its_rows(store, interactive_sigint):
    name = platforms.register_local(store)["name"]
    options = SweepOptions(ops=["layer_norm"], sweep="default", cache="warm", settings=FAST, flush_every_s=0.0)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        with store.run("ops", name, {}) as run:
            timer.start()
            Sweep(store, run, name, options).execute(progress=False)
    timer.cancel()
    status, stopped = store.conn.execute("SELECT status, summary->>'$.stopped' FROM collection_runs "
                                         "WHERE run_id = ?", [run.run_id]).fetchone()
    kept = store.scalar("SELECT count(*) FROM op_measurements WHERE run_id = ?", [run.run_id])
    assert status == "interrupted" and stopped == "interrupted"
    assert 0 < kept < 2 * 360
    assert store.scalar("SELECT count(*) FROM v_op_measurements WHERE run_id = ?", [run.run_id]) == 0


def test_kernels_breakdown_is_stored(store):
    run_id, _ = _sweep(store, ops=["layer_norm"], cache="warm", passes="bwd", kernels=True,
                       configs=[{"B": 2, "M": 4, "N": 16}])
    kernels = store.scalar("SELECT kernels FROM op_measurements WHERE run_id = ?", [run_id])
    assert "native_layer_norm_backward" in kernels


@pytest.mark.parametrize("text, value", [("4GiB", 4 * 2 ** 30), ("512MB", 512 * 10 ** 6), ("1.5G", int(1.5 * 2 ** 30)),
                                         ("1000", 1000)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


def test_bad_options():
    for kwargs, message in (({"passes": "sideways"}, "--pass"), ({"cache": "hot"}, "--cache"),
                            ({"sweep": "huge"}, "--sweep"), ({"configs": [{}]}, "exactly one --op")):
        with pytest.raises(PmdbError, match=message):
            SweepOptions(**kwargs).validate()
    with pytest.raises(PmdbError, match="bad size"):
        parse_bytes("lots")


@pytest.mark.parametrize("args, message", [
    (["--op", "convolution"], "unknown op 'convolution'"),
    (["--op", "bmm", "--config", '{"B": 2, "M": 0, "N": 4, "K": 4}'], "bad value 0 for M"),
    (["--op", "bmm", "--config", "{not json"], "not JSON"),
    (["--sample", "5"], "--sample applies to --sweep random"),
    (["--op", "embedding_lookup", "--index-source", "zipf:abc"], "Zipf exponent"),
    (["--memory-cap", "huge"], "bad size"),
])
def test_cli_errors_are_one_line(workspace, capsys, args, message):
    code = main(["--home", str(workspace.home), "collect", "ops", "--no-peaks", "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("pmdb: error:") and message in err and "\n" not in err


def test_cli_measures_and_reports(workspace, capsys):
    code = main(["--home", str(workspace.home), "collect", "ops", "--no-peaks", "--no-progress", "--op", "tril",
                 "--sweep", "quick", "--max-configs", "2", "--cache", "warm", "--threads", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "2 configs measured" in out and "tril" in out


def test_random_sweep_is_seeded_per_op(store):
    import torch

    from collectors.ops.sweep import plan

    name = platforms.register_local(store)["name"]
    cpu = torch.device("cpu")

    def bmm_configs(ops, seed):
        items, _ = plan(store, name, SweepOptions(ops=ops, sweep="random", sample=5, seed=seed), cpu)
        return [i.config for i in items if i.spec.name == "bmm"]

    alone = bmm_configs(["bmm"], 3)
    assert len(alone) == 5 and alone == bmm_configs(["relu", "bmm"], 3) and alone != bmm_configs(["bmm"], 4)


def test_the_code_path_away_is_timed_on_each_op_s_smallest_config_with_a_warm_forward():
    from collectors.ops.catalogue import get
    from collectors.ops.sweep import Item, away_items

    fc, relu = get("fully_connected"), get("relu")

    def item(spec, config, todo):
        return Item(spec, "torch", spec.check(config), {}, todo)

    big, small = item(fc, FC[1], [("fwd", "warm")]), item(fc, FC[0], [("fwd", "warm"), ("bwd", "cold")])
    cold_only = item(relu, {"M": 1, "N": 4}, [("fwd", "cold")])                # no warm forward: not timed
    tiny = item(relu, {"M": 1, "N": 16}, [("bwd", "warm")])
    assert away_items([big, small, cold_only, tiny]) == {id(small)}
    huge = item(relu, {"M": 1024, "N": 1024}, [("fwd", "warm")])               # 8 MiB: its own data decays too
    assert relu.memory(huge.config) > 2 ** 20 and away_items([huge, small]) == {id(small)}
