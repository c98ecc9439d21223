"""`pmdb collect mine-traces`: the GPU kernels of imported traces become kernel measurements of their ops.

The shared PARAM traces (RTX 2080 Ti, Kineto + execution trace of a 21-layer MLP and of a ResNet) are imported with
the real `pmdb collect trace` and mined once per module; shapes are checked against the raw execution-trace JSON
and times against the trace's kernel rows, summed over each op's subtree in SQL. Small hand-written Kineto traces
cover Kineto Input Dims, the refusals, and a run that fails half-way.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from collectors.traces import kernel_rows
from collectors.traces.kernel_rows import mine_traces
from pmdb import platform as platforms
from pmdb.cli import collect_mine
from pmdb.cli.collect import collect_app
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store
from pmdb.traces.gc_pause import collector_paused

GPU = "rtx2080ti"
WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _cli(home: Path, *args: str) -> int:
    """``pmdb --home HOME ARGS`` in process (mine-traces registered if collect.py does not list it yet)."""
    if "mine-traces" not in {c.name for c in collect_app.registered_commands}:
        collect_mine.register(collect_app)
    return main(["--home", str(home), *args])


@pytest.fixture(scope="module")
def _cache() -> dict:
    return {}


@pytest.fixture
def mined(shared_data, _cache, tmp_path_factory, mlflow_template) -> tuple[Workspace, dict[str, int], Path]:
    """(workspace, trace set per trace name, GPU trace folder): param_linear and param_resnet imported with
    `pmdb collect trace` on one platform and mined with `pmdb collect mine-traces` (built once per module), in a
    new workspace with an empty MLflow store (a copy of the run's template) for the fit below."""
    if "mined" not in _cache:
        from harness import copy_workspace

        folder = shared_data / "traces" / "gpu"
        ws = Workspace(copy_workspace(mlflow_template.home, tmp_path_factory.mktemp("mine") / "ws"))
        sets = {}
        for number, name in enumerate(("param_linear", "param_resnet"), start=1):
            assert _cli(ws.home, "collect", "trace", "--kineto", str(folder / name / "kineto.json.gz"),
                        "--et", str(folder / name / "et.json.gz"), "--platform", GPU, "--workload", name) == 0
            sets[name] = number
        assert _cli(ws.home, "collect", "mine-traces", "--trace-set", "1", "--trace-set", "2") == 0
        _cache["mined"] = (ws, sets, folder)
    return _cache["mined"]


def _et_nodes(path: Path) -> dict[int, dict]:
    with collector_paused():   # as the importer reads it: 3-4x faster than with collections
        return {n["id"]: n for n in json.loads(gzip.decompress(path.read_bytes()))["nodes"]}


def _shapes_and_values(node: dict) -> tuple[list, list]:
    """(input shapes, input values) of a raw ET node, schema 1.0.1 (flat) or chakra (inputs.shapes/values)."""
    if isinstance(node.get("inputs"), dict):
        return node["inputs"]["shapes"], node["inputs"]["values"]
    return node["input_shapes"], node["inputs"]


def _rows(store: Store, trace_set: int, op: str, pass_: str):
    """Mined rows of one op of a trace set, with the ET node id their Kineto op is linked to."""
    return store.query(
        "SELECT m.*, CAST(m.params AS VARCHAR) AS p, o.linked_op_id AS et_id FROM v_op_measurements m "
        "JOIN traces t ON t.trace_id = m.trace_id JOIN trace_ops o ON o.trace_id = m.trace_id "
        "AND o.op_id = m.trace_op_id WHERE t.trace_set_id = ? AND m.op = ? AND m.pass = ? "
        "ORDER BY m.trace_op_id", [trace_set, op, pass_])


def test_gemm_rows_carry_the_execution_trace_shapes(mined):
    ws, sets, folder = mined
    with Store.open(ws) as store:
        linear = _rows(store, sets["param_linear"], "fully_connected", "fwd")
        conv = _rows(store, sets["param_resnet"], "conv2d", "fwd")
        backward = _rows(store, sets["param_linear"], "fully_connected", "bwd")
    # param_linear: 21 linear layers x[512, 1024] @ W[1024, 1024]^T in the one iteration its ET holds; the first
    # layer's input needs no gradient, so its backward is one GEMM, grad^T[1024, 512] @ x[512, 1024], mined as that
    # forward-shaped GEMM (pmdb.traces.opmap: a single-gradient GEMM backward); the other 20 are full backwards
    assert len(linear) == 22 and len(backward) == 20
    assert sorted(json.dumps(json.loads(p), sort_keys=True) for p in linear["p"]) == sorted(
        [json.dumps({"B": 1, "K": 1024, "M": 512, "N": 1024}, sort_keys=True)] * 21
        + [json.dumps({"B": 1, "K": 512, "M": 1024, "N": 1024}, sort_keys=True)])
    assert all(json.loads(p) == {"B": 1, "M": 512, "N": 1024, "K": 1024} for p in backward["p"])
    nodes = _et_nodes(folder / "param_linear" / "et.json.gz")
    linear = linear[[json.loads(p)["M"] == 512 for p in linear["p"]]]   # the 21 aten::linear nodes
    for et_id, params in zip(linear["et_id"], linear["p"]):
        (x, w, _), _ = _shapes_and_values(nodes[int(et_id)])
        assert nodes[int(et_id)]["name"] == "aten::linear"
        assert json.loads(params) == {"B": 1, "M": math.prod(x[:-1]), "N": w[0], "K": x[-1]}
    # param_resnet: every mined conv2d against its raw ET node (input, weight, stride, padding, dilation)
    nodes = _et_nodes(folder / "param_resnet" / "et.json.gz")
    assert len(conv) >= 50 and conv["config_key"].nunique() >= 10
    for et_id, params in zip(conv["et_id"], conv["p"]):
        shapes, values = _shapes_and_values(nodes[int(et_id)])
        (b, c, h, _), (oc, _, fh, fw) = shapes[0], shapes[1]
        stride, pad, dilation = values[3][0], values[4][0], values[5][0]
        got = json.loads(params)
        assert {k: got[k] for k in ("B", "IC", "H", "OC", "FH", "FW", "stride", "pad", "dilation")} == \
            {"B": b, "IC": c, "H": h + 2 * pad, "OC": oc, "FH": fh, "FW": fw, "stride": stride, "pad": pad,
             "dilation": dilation}
    stem = {"B": 32, "H": 230, "IC": 3, "OC": 64, "stride": 2, "dilation": 1, "FH": 7, "FW": 7, "pad": 3,
            "is_depthwise": 0}   # conv1: x[32, 3, 224, 224], W[64, 3, 7, 7], stride 2, padding 3
    assert stem in [json.loads(p) for p in conv["p"]]
    assert {"B": 32, "H": 58, "IC": 64, "OC": 64, "stride": 1, "dilation": 1, "FH": 3, "FW": 3, "pad": 1,
            "is_depthwise": 0} in [json.loads(p) for p in conv["p"]]   # a 3x3 conv of layer1 at 56x56


def test_times_are_the_summed_kernels_of_each_op(mined):
    ws, _, _ = mined
    with Store.open(ws) as store:
        rows = store.query("SELECT trace_id, trace_op_id, median_us, CAST(kernels AS VARCHAR) AS kernels, "
                           "cache_state, source, device, dtype, repetitions FROM v_op_measurements")
        # every device event (kernels, copies, memsets) launched inside the op's Kineto subtree, not collectives
        truth = store.query(
            "WITH RECURSIVE sub(trace_id, root, op_id) AS ("
            " SELECT trace_id, trace_op_id, trace_op_id FROM v_op_measurements"
            " UNION ALL SELECT o.trace_id, s.root, o.op_id FROM trace_ops o"
            " JOIN sub s ON o.trace_id = s.trace_id AND o.parent_id = s.op_id) "
            "SELECT s.trace_id, s.root AS trace_op_id, sum(k.dur_us) AS us, count(*) AS n, "
            "list(k.name ORDER BY k.launch_start_us, k.kernel_index) AS names FROM sub s JOIN trace_kernels k "
            "ON k.trace_id = s.trace_id AND k.op_id = s.op_id WHERE k.category IN (SELECT unnest(?::VARCHAR[])) "
            "AND NOT k.is_collective GROUP BY 1, 2", [list(WORK)])
        runs = store.query("SELECT kind, status FROM collection_runs WHERE kind = 'mine-traces'")
    assert len(rows) > 500 and len(rows) == len(truth)
    merged = rows.merge(truth, on=["trace_id", "trace_op_id"], validate="one_to_one")
    assert len(merged) == len(rows)
    assert merged["median_us"].to_numpy() == pytest.approx(merged["us"].to_numpy(), rel=1e-12)
    kernels = [json.loads(k) for k in merged["kernels"]]
    assert [len(k) for k in kernels] == merged["n"].tolist()
    assert [[e["name"] for e in k] for k in kernels] == [list(n) for n in merged["names"]]
    assert [sum(e["us"] for e in k) for k in kernels] == pytest.approx(merged["median_us"].tolist(), rel=1e-12)
    assert set(rows["cache_state"]) == {"device"} and set(rows["source"]) == {"trace"}
    assert set(rows["device"]) == {"cuda:0"} and set(rows["dtype"]) == {"float32"}
    assert set(rows["repetitions"]) == {1}
    assert runs.to_dict("records") == [{"kind": "mine-traces", "status": "completed"}]   # one run, both sets


def test_mining_again_adds_nothing(mined, capsys):
    ws, sets, _ = mined
    with Store.open(ws) as store:
        before = store.scalar("SELECT count(*) FROM op_measurements")
        report = mine_traces(store, [sets["param_linear"]])
        assert report.runs == {} and report.rows_written == 0 and len(report.sets[0].rows) == 175
    capsys.readouterr()
    assert _cli(ws.home, "collect", "mine-traces", "--all") == 0
    assert "nothing new" in capsys.readouterr().out
    with Store.open(ws) as store:
        assert store.scalar("SELECT count(*) FROM op_measurements") == before
        assert store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'mine-traces'") == 1


def test_kernel_groups_see_the_device_rows(mined):
    from fitters.data import kernel_groups

    ws, _, _ = mined
    with Store.open(ws) as store:
        groups = {(g.op, g.pass_): g for g in kernel_groups(store, GPU, ["conv2d", "fully_connected"])}
        counts = store.query("SELECT op, pass, count(*) AS n FROM v_op_measurements GROUP BY 1, 2")
    expected = {(o, p): n for o, p, n in counts.itertuples(index=False) if o in ("conv2d", "fully_connected")}
    assert set(groups) == {("conv2d", "fwd"), ("conv2d", "bwd"), ("fully_connected", "fwd"),
                           ("fully_connected", "bwd")}
    for key, group in groups.items():
        assert group.cache_state == "device" and group.implementation == "torch" and not group.embedding
        assert len(group.rows) == expected[key] and group.dropped == 0
    assert set(groups["conv2d", "fwd"].params.columns) >= {"B", "H", "IC", "OC", "FH", "FW", "stride"}


def test_fit_runs_on_mined_conv2d(mined, capsys):
    ws, _, _ = mined
    assert _cli(ws.home, "fit", "--platform", GPU, "--op", "conv2d", "--family", "gbdt",
                "--budget-minutes", "0.05") == 0
    with Store.open(ws) as store:
        names = set(store.query("SELECT name FROM model_versions")["name"])
    assert {f"conv2d.fwd.device~{GPU}", f"conv2d.bwd.device~{GPU}"} <= names


# ---- small hand-written traces ---------------------------------------------------------------------------------

def _event(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _gpu_trace(tmp_path: Path, dims: bool = True) -> Path:
    """aten::mm [4, 8] x [8, 16] launching two kernels (30 + 12 µs) and a memset, then an aten::relu launching one;
    Input Dims only when ``dims``; an NCCL kernel inside the mm is communication and never counted."""
    mm_args = {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]} if dims else {}
    events = [_event("cpu_op", "aten::mm", 0, 100, **mm_args),
              _event("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
              _event("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=2),
              _event("cuda_runtime", "cudaMemsetAsync", 30, 5, correlation=3),
              _event("cuda_runtime", "cudaLaunchKernel", 40, 5, correlation=4),
              _event("kernel", "sgemm_128x64", 50, 30, pid=0, tid=7, correlation=1, device=0, stream=7),
              _event("kernel", "splitk_reduce", 81, 12, pid=0, tid=7, correlation=2, device=0, stream=7),
              _event("gpu_memset", "Memset (Device)", 94, 1, pid=0, tid=7, correlation=3, device=0, stream=7),
              _event("kernel", "ncclDevKernel_AllReduce", 96, 50, pid=0, tid=9, correlation=4, device=0, stream=9),
              _event("cpu_op", "aten::relu", 200, 20),
              _event("cuda_runtime", "cudaLaunchKernel", 205, 5, correlation=5),
              _event("kernel", "relu_kernel", 211, 4, pid=0, tid=7, correlation=5, device=0, stream=7)]
    path = tmp_path / ("gpu.json" if dims else "gpu_nodims.json")
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _one_line_error(capsys, pattern: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pmdb: error: ") and re.search(pattern, err[0]), err


def test_kineto_input_dims_give_rows_without_an_execution_trace(workspace, tmp_path, capsys):
    assert _cli(workspace.home, "collect", "trace", "--kineto", str(_gpu_trace(tmp_path)), "--platform", "g1") == 0
    capsys.readouterr()
    assert _cli(workspace.home, "collect", "mine-traces", "--trace-set", "1") == 0
    out = capsys.readouterr().out
    assert "1 new rows" in out and "no shapes" in out   # the relu has no Input Dims: not mined, reported
    with Store.open(workspace) as store:
        rows = store.query("SELECT op, pass, CAST(params AS VARCHAR) AS params, median_us, dtype, cache_state, "
                           "config_key, CAST(kernels AS VARCHAR) AS kernels FROM v_op_measurements")
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["op"], row["pass"], row["dtype"], row["cache_state"]) == ("fully_connected", "fwd", "float32",
                                                                          "device")
    assert json.loads(row["params"]) == {"B": 1, "M": 4, "N": 16, "K": 8}
    assert row["median_us"] == 30 + 12 + 1   # both kernels and the memset; the NCCL kernel is not the op's work
    assert [k["name"] for k in json.loads(row["kernels"])] == ["sgemm_128x64", "splitk_reduce", "Memset (Device)"]
    from collectors.ops.catalogue import canonical   # the ops collector's key of a GPU timing (threads: null)

    text = canonical({"op": "fully_connected", "pass": "fwd", "implementation": "torch", "dtype": "float32",
                      "threads": None, "config": {"B": 1, "M": 4, "N": 16, "K": 8}})
    assert row["config_key"] == hashlib.sha256(text.encode()).hexdigest()


def test_gemms_inside_an_unmapped_backward_node_are_not_mined_as_forward_calls(workspace, tmp_path, capsys):
    """An MmBackward0 without recorded sizes runs two aten::mm (dX, dW: other layouts than a forward): they are not
    forward rows; an element-wise op nested there runs the forward's kernel and is mined; a top-level mm is."""
    dims = {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}
    launch = [("aten::mm", 0, dims, "sgemm_tn", 30), ("autograd::engine::evaluate_function: MmBackward0", 200, {},
                                                      None, 0),
              ("aten::mm", 210, {"Input Dims": [[4, 16], [16, 8]], "Input type": ["float", "float"]}, "sgemm_nn", 25),
              ("aten::mm", 260, {"Input Dims": [[8, 4], [4, 16]], "Input type": ["float", "float"]}, "sgemm_nt", 27),
              ("aten::add_", 320, {"Input Dims": [[8, 16], [8, 16]], "Input type": ["float", "float"]}, "add_k", 3)]
    events, corr = [], 0
    for name, ts, args, kernel, us in launch:
        events.append(_event("cpu_op", name, ts, 200 if "Backward" in name else 40, **args))
        if kernel:
            corr += 1
            events += [_event("cuda_runtime", "cudaLaunchKernel", ts + 5, 5, correlation=corr),
                       _event("kernel", kernel, 1000 + ts, us, pid=0, tid=7, correlation=corr, device=0, stream=7)]
    path = tmp_path / "backward.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    assert _cli(workspace.home, "collect", "trace", "--kineto", str(path), "--platform", "g1") == 0
    capsys.readouterr()
    assert _cli(workspace.home, "collect", "mine-traces", "--trace-set", "1") == 0
    out = capsys.readouterr().out
    assert "fully_connected fwd inside MmBackward0" in out
    with Store.open(workspace) as store:
        rows = store.query("SELECT op, pass, median_us FROM v_op_measurements ORDER BY trace_op_id")
    # neither backward GEMM (25, 27 µs) passes for a forward call
    assert rows.values.tolist() == [["fully_connected", "fwd", 30.0], ["add_", "fwd", 3.0]]


def test_a_run_that_fails_half_way_counts_for_nothing(workspace, tmp_path, monkeypatch):
    assert _cli(workspace.home, "collect", "trace", "--kineto", str(_gpu_trace(tmp_path)), "--platform", "g1") == 0
    real = kernel_rows.write_atomic

    def write_then_die(store, tables):
        real(store, tables)
        raise RuntimeError("disk full")

    monkeypatch.setattr(kernel_rows, "write_atomic", write_then_die)
    with Store.open(workspace) as store:
        with pytest.raises(RuntimeError):
            mine_traces(store, [1])
        assert store.scalar("SELECT status FROM collection_runs WHERE kind = 'mine-traces'") == "failed"
        assert store.scalar("SELECT count(*) FROM v_op_measurements") == 0
        monkeypatch.setattr(kernel_rows, "write_atomic", real)
        report = mine_traces(store, [1])
        assert report.rows_written == 1 and store.scalar("SELECT count(*) FROM v_op_measurements") == 1


@pytest.mark.parametrize("args, pattern", [
    ([], r"give --trace-set ID \(repeatable\) or --all"),
    (["--all", "--trace-set", "1"], r"give --trace-set ID \(repeatable\) or --all"),
    (["--trace-set", "99"], r"no completed trace set 99"),
    (["--trace-set", "{cpu}"], r"is on cpu-box, a cpu platform: kernel rows are mined from GPU traces only"),
    (["--trace-set", "{empty}"], r"trace set \d+ holds no GPU kernels"),
    (["--trace-set", "{nodims}"], r"no op with a model and recorded shapes launched a GPU kernel.*--et"),
])
def test_refusals_are_one_line_exit_2_and_start_no_run(workspace, tmp_path, capsys, args, pattern):
    with Store.open(workspace) as store:
        ids = {}
        for label, kind in (("cpu", "cpu"), ("empty", "cuda")):
            name = platforms.ensure_named(store, f"{label}-box", device_kind=kind)
            with store.run("trace", name, {}) as run:
                ids[label] = store.insert_one("trace_sets", {"run_id": run.run_id, "platform": name,
                                                             "world_size": 1, "source": "imported"},
                                              returning="trace_set_id")
    assert _cli(workspace.home, "collect", "trace", "--kineto", str(_gpu_trace(tmp_path, dims=False)),
                "--platform", "g1") == 0
    with Store.open(workspace) as store:
        ids["nodims"] = store.scalar("SELECT max(trace_set_id) FROM trace_sets")
    capsys.readouterr()
    assert _cli(workspace.home, "collect", "mine-traces", *[a.format(**ids) for a in args]) == 2
    _one_line_error(capsys, pattern)
    with Store.open(workspace) as store:
        assert store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'mine-traces'") == 0
        assert store.scalar("SELECT count(*) FROM op_measurements") == 0


def test_migration_0004_marks_existing_rows(tmp_path):
    """Rows written before 0004 get their source from the run kind; embedding statistics keep pointing at them."""
    import duckdb

    from pmdb import migrator

    conn = duckdb.connect(str(tmp_path / "old.duckdb"))
    migrator.migrate(conn, migrator.available()[:3])
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('g', 'cuda', 'async_device')")
    for run_id, kind in (("r1", "import-ops"), ("r2", "ops")):
        conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                     "VALUES (?, ?, 'g', '0', 'completed')", [run_id, kind])
        conn.execute("INSERT INTO op_measurements (run_id, platform, op, pass, implementation, dtype, device, "
                     "cache_state, params, config_key, median_us) VALUES (?, 'g', 'relu', 'fwd', 'torch', "
                     "'float32', 'cuda:0', 'device', '{}', 'k', 1.0)", [run_id])
    conn.execute("INSERT INTO embedding_batch_stats (run_id, measurement_id, table_index, batch_size, num_rows, dim, "
                 "pooling_mean, reuse_factors) VALUES ('r2', 2, 0, 1, 1, 1, 1.0, [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0])")
    assert [m.version for m in migrator.migrate(conn)][:1] == [4]
    assert conn.execute("SELECT measurement_id, source, trace_id, trace_op_id FROM op_measurements ORDER BY 1"
                        ).fetchall() == [(1, "import", None, None), (2, "microbenchmark", None, None)]
