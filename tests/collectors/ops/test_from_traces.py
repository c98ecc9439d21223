"""`pmdb collect ops --from-traces`: the op shapes of a real tiny DLRM run's stored traces, measured in isolation."""
from __future__ import annotations

import json
import shutil

import pytest

from collectors.ops import catalogue
from collectors.ops.from_traces import select_trace_sets, to_config, traced_shapes
from collectors.workloads.collect import collect_workload
from collectors.workloads.requests import dlrm_request
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

pytestmark = pytest.mark.slow

# bottom MLP 16 -> 32 -> 8 (so linear shapes [B, 16] x [32, 16]^T), 3 tables of dim 8, batch 16
TINY = {"name": "tiny_ops", "bottom_mlp": [16, 32, 8], "top_mlp": [16, 1], "batch_size": 16,
        "tables": [{"num_rows": 1500, "pooling": 3}, {"num_rows": 400, "pooling": 1},
                   {"num_rows": 3000, "pooling": 6, "index_source": "zipf:1.05"}]}


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[Workspace, str]:
    """A workspace holding one real world-size-1 DLRM run with its Kineto and execution traces (FBGEMM tables)."""
    root = tmp_path_factory.mktemp("from_traces")
    (root / "tiny.json").write_text(json.dumps(TINY))
    ws = Workspace(root / "ws")
    with Store.open(ws, create=True) as store:
        platform = platforms.resolve(store, None)
        request = dlrm_request(store, {"config": root / "tiny.json", "iters": 2, "warmup": 1, "trace_iters": 2,
                                       "timeout_s": 180, "threads": 1})
        collect_workload(store, platform, request, {})
        run_id = store.scalar("SELECT run_id FROM trace_sets ORDER BY trace_set_id DESC LIMIT 1")
    return ws, run_id


@pytest.fixture
def traced_copy(traced, tmp_path) -> tuple[Workspace, str]:
    """A private copy of the traced workspace (each test may write its own measurements)."""
    ws, run_id = traced
    shutil.copytree(ws.home, tmp_path / "ws")
    return Workspace(tmp_path / "ws"), run_id


def test_traced_shapes_of_a_dlrm_step(traced):
    ws, run_id = traced
    with Store.open(ws) as store:
        platform = platforms.resolve(store, None)
        ids = select_trace_sets(store, platform)
        assert ids == select_trace_sets(store, platform, run_id=run_id)
        shapes = traced_shapes(store, ids)
    pairs = {(t.op, p) for t in shapes.targets for p in t.passes}
    assert {("fully_connected", "fwd"), ("fully_connected", "bwd"), ("embedding_lookup", "fwd"),
            ("embedding_lookup", "bwd"), ("bmm", "fwd"), ("bmm", "bwd"), ("relu", "fwd")} <= pairs
    fc = [t.config for t in shapes.targets if t.op == "fully_connected"]
    assert {"B": 1, "M": 16, "N": 32, "K": 16} in fc and {"B": 1, "M": 16, "N": 8, "K": 32} in fc
    embedding = [t for t in shapes.targets if t.op == "embedding_lookup"]
    assert len(embedding) == 1 and embedding[0].implementations == ("fbgemm_tbe",)
    config = embedding[0].config
    assert config["B"] == 16 and config["E"] == [1500, 400, 3000] and config["D"] == [8, 8, 8]
    assert config["sources"][2] == "zipf:1.05" and all(v > 0 for v in config["L"])
    assert set(embedding[0].passes) == {"fwd", "bwd"}
    assert shapes.found["fully_connected"] == len(fc)
    # the interaction's z · z^T: the ET recorded z^T as a transposed view, and the shape says so
    bmm = [t.config for t in shapes.targets if t.op == "bmm" and "fwd" in t.passes]
    assert {"B": 16, "M": 4, "N": 4, "K": 8, "BT": 1} in bmm
    assert all(c.get("AT", 0) in (0, 1) and c.get("BT", 0) in (0, 1) for c in bmm)


def test_a_graph_without_detail_maps_backward_bmm_layouts_as_the_miner_does(traced):
    """A GPU prediction loads its graph without every nested op; `collect mine-traces` and `--from-traces` load it
    with them. A bmm's backward node reads its layout from its nested gradient GEMMs, so those are built either way
    (rule 15): the interaction's backward maps to the same parameters, BT included, with or without detail."""
    from pmdb.traces.from_store import load_graphs
    from pmdb.traces.opmap import map_op, needs_nested_ops

    ws, _run_id = traced
    with Store.open(ws, read_only=True) as store:
        set_id = int(store.scalar("SELECT max(trace_set_id) FROM trace_sets"))
        plain, full = (load_graphs(store, set_id, pick="best", detail=d)[0] for d in (False, True))

    def bmm_backwards(graph) -> list:
        return [map_op(op) for rank in graph.ranks for op in rank.ops if needs_nested_ops(op.name)]

    mapped = bmm_backwards(plain)
    assert mapped and mapped == bmm_backwards(full)
    assert any(m.op == "bmm" and m.params.get("BT") == 1.0 for m in mapped)
    assert not needs_nested_ops("aten::bmm") and needs_nested_ops("autograd::engine::evaluate_function: BmmBackward0")


def test_the_transposed_bmm_is_built_transposed_and_measured(traced_copy):
    """`collect ops --from-traces --op bmm` times the interaction's bmm with its second operand stored transposed,
    under its own key (BT = 1), forward and backward: the autograd node's layout is read from the gradient GEMMs
    it ran. The same shape row-major, which the step never ran, is not measured."""
    ws, run_id = traced_copy
    assert main(["--home", str(ws.home), "collect", "ops", "--from-run", run_id, "--no-progress", "--no-peaks",
                 "--cache", "warm", "--op", "bmm"]) == 0
    with Store.open(ws) as store:
        rows = store.query("SELECT pass, params, median_us FROM op_measurements WHERE skipped IS NULL "
                           "AND op = 'bmm'")
    measured = {(p, json.dumps(json.loads(c), sort_keys=True)) for p, c in zip(rows["pass"], rows["params"])}
    shape = {"B": 16, "M": 4, "N": 4, "K": 8}
    assert measured == {(p, json.dumps({**shape, "BT": 1}, sort_keys=True)) for p in ("fwd", "bwd")}
    assert (rows["median_us"] > 0).all()


def test_to_config_rounds_and_refuses_what_the_spec_cannot_build():
    assert to_config(catalogue.get("concat"), {"M": 16.0, "N": 7.6, "K": 3.0, "dim": 1}) == \
        {"M": 16, "N": 8, "K": 3, "dim": 1}
    conv = {"B": 2, "H": 10, "IC": 3, "OC": 4, "stride": 1, "dilation": 1, "FH": 3, "FW": 3, "pad": 0,
            "is_depthwise": 0.0}
    with pytest.raises(PmdbError, match="pad=0"):
        to_config(catalogue.get("conv2d"), conv)
    assert to_config(catalogue.get("conv2d"), {**conv, "pad": 1})["pad"] == 1
    with pytest.raises(PmdbError, match="missing"):
        to_config(catalogue.get("bmm"), {"M": 4.0, "N": 4.0})


def test_a_scalar_operand_mul_is_measured_as_the_catalogue_mul():
    """The catalogue has no mul_scalar: a traced 0.5 * x is measured by the two-tensor mul's benchmark, as before."""
    from collectors.ops.from_traces import _leaves
    from pmdb.traces.graph import Op
    from pmdb.traces.opmap import Mapped

    specs = catalogue.load()
    assert "mul_scalar" not in specs
    node = Op("aten::mul", input_shapes=[[64, 8], []])
    assert list(_leaves(node, specs)) == [(node, Mapped("mul", "fwd", {"M": 64, "N": 8}))]


def test_cli_measures_the_traced_shapes_once(traced_copy, capsys):
    ws, run_id = traced_copy
    home = ["--home", str(ws.home), "collect", "ops", "--from-run", run_id, "--no-progress", "--no-peaks",
            "--cache", "warm", "--op", "fully_connected", "--op", "relu", "--op", "embedding_lookup"]
    assert main(home) == 0
    out = capsys.readouterr().out
    assert "distinct op shapes" in out and "embedding_lookup" in out
    with Store.open(ws) as store:
        rows = store.query("SELECT op, pass, implementation, params, median_us FROM op_measurements "
                           "WHERE skipped IS NULL")
        first = len(rows)
        assert set(zip(rows["op"], rows["pass"])) == {(o, p) for o in ("fully_connected", "relu",
                                                                         "embedding_lookup")
                                                      for p in ("fwd", "bwd")}
        assert set(rows.loc[rows["op"] == "embedding_lookup", "implementation"]) == {"fbgemm_tbe"}
        fc = [json.loads(p) for p in rows.loc[rows["op"] == "fully_connected", "params"]]
        assert {"B": 1, "M": 16, "N": 32, "K": 16} in fc and (rows["median_us"] > 0).all()
    assert main(home) == 0
    out = capsys.readouterr().out
    assert ", 0 new," in out and "0 configs measured" in out
    with Store.open(ws) as store:
        assert store.scalar("SELECT count(*) FROM op_measurements WHERE skipped IS NULL") == first


def test_cli_errors_are_one_line(traced_copy, capsys):
    ws, _ = traced_copy
    home = ["--home", str(ws.home), "collect", "ops", "--no-progress", "--no-peaks"]
    assert main([*home, "--from-trace-set", "999"]) == 2
    assert "no completed trace set for trace set 999" in capsys.readouterr().err
    assert main([*home, "--from-traces", "--sweep", "large"]) == 2
    assert "--sweep does not apply" in capsys.readouterr().err
    assert main([*home, "--from-traces", "--op", "bmm", "--config", '{"B":1,"M":2,"N":2,"K":2}']) == 2
    assert "exclude each other" in capsys.readouterr().err


def test_a_lookup_whose_tables_were_measured_is_priced_by_the_measurement(traced_copy):
    """The simulator side (simulator/measured_shapes.py): the rank's stored tables key the same config that
    `collect ops --from-traces` measured, so the traced FBGEMM lookup is priced by its stored median."""
    from pmdb.traces.from_store import load_graphs
    from pmdb.traces.opmap import Mapped, map_op
    from simulator.embedding_stats import EmbeddingStats
    from simulator.measured_shapes import ShapeMedians
    from simulator.model_set import ModelSelection, ModelSet, Overheads
    from simulator.timing import ModelTiming

    ws, run_id = traced_copy
    assert main(["--home", str(ws.home), "collect", "ops", "--from-run", run_id, "--no-progress", "--no-peaks",
                 "--cache", "cold", "--op", "embedding_lookup"]) == 0
    with Store.open(ws) as store:
        platform = platforms.resolve(store, None)
        ts, workload = store.query("SELECT trace_set_id, workload_id FROM trace_sets WHERE run_id = ?",
                                   [run_id]).iloc[0]
        # a backward row prices its node without the engine's own cost of the benchmark's call (node_us)
        stored = store.query("SELECT pass, node_us FROM v_op_measurements WHERE op = 'embedding_lookup' "
                             "AND cache_state = 'cold'")
        assert (stored.loc[stored["pass"] == "bwd", "node_us"] > 0).all()
        measured = ShapeMedians.load(store, platform)
        graph = load_graphs(store, int(ts), pick="best", detail=True)[0]
        stats = EmbeddingStats.from_store(store, int(workload))
        assert all("source" in t and "L" in t for t in stats.per_rank[0])   # zipf:1.05 and uniform, as stored
        timing = ModelTiming(ModelSet(selection=ModelSelection("t", "default", "0")), Overheads(), "sync_host",
                             stats, measured=measured, threads=1)
        timing.programs(graph)
        def walk(op):
            yield op
            for child in op.sub:
                yield from walk(child)

        lookups = [(op, map_op(op)) for rank in graph.ranks for top in rank.ops for op in walk(top)
                   if id(op) in timing.priced_by and isinstance(map_op(op), Mapped)
                   and map_op(op).op == "embedding_lookup"]
        assert {m.pass_ for _, m in lookups} == {"fwd", "bwd"}
        for op, mapped in lookups:
            assert timing.priced_by[id(op)] == "measured"
            expected = stored.loc[stored["pass"] == mapped.pass_, "node_us"].median()
            assert timing._time[id(op)] == pytest.approx(expected)
        unknown = ModelTiming(ModelSet(selection=ModelSelection("t", "default", "0")), Overheads(), "sync_host",
                              EmbeddingStats(), measured=measured, threads=1)   # no stored tables: not matched
        unknown.programs(graph)
        assert not any(unknown.priced_by.get(id(op)) == "measured" for rank in graph.ranks for top in rank.ops
                       for op in walk(top) if isinstance(map_op(op), Mapped) and map_op(op).op == "embedding_lookup")


def test_the_lookup_and_its_backward_read_their_tables_in_the_reuse_distances(traced):
    """A real FBGEMM run's execution trace (RULES_VERSION 12): the lookup's kernels, whose children only allocate or
    copy, access their tables (4900 rows x 8 floats, one storage); the backward's autograd node, priced whole,
    reads them through its kernel, at the distance of what ran since the forward."""
    from pmdb.traces.from_store import load_graphs

    ws, run_id = traced
    tables = 4 * 8 * (1500 + 400 + 3000)
    with Store.open(ws) as store:
        ts = int(store.scalar("SELECT trace_set_id FROM trace_sets WHERE run_id = ?", [run_id]))
        graph = load_graphs(store, ts, pick="best", detail=True, reuse=True)[0]
    tops = {op.name: op for op in graph.ranks[0].ops}
    forward = next(op for name, op in tops.items() if "split_embedding_codegen_lookup" in name)
    backward = next(op for name, op in tops.items() if name.startswith("autograd::engine::evaluate_function:")
                    and "SplitLookupFunction" in name)
    assert [d for d, size, *_ in forward.reuse if size == tables]          # last touched by the previous update
    (distance,) = [d for d, size, *_ in backward.reuse if size == tables]
    assert 0 < distance < float("inf")   # the forward's lookup read them; the rest of the step since


def test_traced_lookups_are_also_timed_in_a_training_loop_and_priced_by_it(traced_copy, capsys):
    """With the default --cache both, every traced FBGEMM lookup is also timed in the 'loop' state (both passes,
    the same config keys as its warm and cold rows; nothing else loops); a CPU prediction without a chosen cache
    state prices the lookup's forward by it and its backward by its other rows (here cold), ``--cache-state cold``
    both passes by the cold rows; the fitters never fit it."""
    from fitters.data import kernel_groups
    from pmdb.traces.from_store import load_graphs
    from pmdb.traces.opmap import Mapped, map_op
    from simulator.embedding_stats import EmbeddingStats
    from simulator.measured_shapes import ShapeMedians
    from simulator.model_set import ModelSelection, ModelSet, Overheads
    from simulator.timing import ModelTiming

    ws, run_id = traced_copy
    home = ["--home", str(ws.home), "collect", "ops", "--from-run", run_id, "--no-progress", "--no-peaks",
            "--op", "embedding_lookup", "--op", "relu"]
    assert main(home) == 0
    assert "loop" in capsys.readouterr().out
    with Store.open(ws) as store:
        rows = store.query("SELECT op, pass, cache_state, config_key, median_us, node_us, engine_call_us, "
                           "repetitions FROM v_op_measurements")
        loop = rows[rows["cache_state"] == "loop"]
        assert set(loop["op"]) == {"embedding_lookup"} and set(loop["pass"]) == {"fwd", "bwd"}
        backward = loop[loop["pass"] == "bwd"]   # the loop's .backward() is one engine call too
        assert (backward["engine_call_us"] > 0).all() and (backward["node_us"] < backward["median_us"]).all()
        cold = rows[(rows["cache_state"] == "cold") & (rows["op"] == "embedding_lookup")]
        assert set(loop["config_key"]) == set(cold["config_key"])
        assert (loop["median_us"] > 0).all() and (loop["repetitions"] >= 7).all()
        assert "loop" not in {g.cache_state for g in kernel_groups(store, platforms.resolve(store, None))}
    assert main(home) == 0
    assert "0 configs measured" in capsys.readouterr().out
    with Store.open(ws) as store:
        platform = platforms.resolve(store, None)
        ts, workload = store.query("SELECT trace_set_id, workload_id FROM trace_sets WHERE run_id = ?",
                                   [run_id]).iloc[0]
        graph = load_graphs(store, int(ts), pick="best", detail=True)[0]
        measured = ShapeMedians.load(store, platform)

        def walk(op):
            yield op
            for child in op.sub:
                yield from walk(child)

        for state, label, table in (("default", "measured-loop", loop), ("cold", "measured", cold)):
            timing = ModelTiming(ModelSet(selection=ModelSelection("t", state, "0")), Overheads(), "sync_host",
                                 EmbeddingStats.from_store(store, int(workload)), measured=measured, threads=1)
            timing.programs(graph)
            lookups = [(op, map_op(op)) for rank in graph.ranks for top in rank.ops for op in walk(top)
                       if isinstance(map_op(op), Mapped) and map_op(op).op == "embedding_lookup"
                       and id(op) in timing.priced_by]
            assert {m.pass_ for _, m in lookups} == {"fwd", "bwd"}
            for op, mapped in lookups:
                # the loop prices a lookup's forward only (RULES_VERSION 11): the backward as any op, here cold
                looped = state == "default" and mapped.pass_ == "fwd"
                assert timing.priced_by[id(op)] == (label if looped else "measured")
                passes = rows.loc[rows["config_key"].isin(table["config_key"]) & (rows["pass"] == mapped.pass_)
                                  & (rows["cache_state"] == ("loop" if looped else "cold")), "node_us"]
                assert timing._time[id(op)] == pytest.approx(passes.median())
