"""Every shared GPU trace imports; what is stored is counted again here straight from the JSON."""
import gzip
import hashlib
import json

import pytest

from collectors.traces.ingest import RankTraces, ingest_trace_set
from pmdb.traces.rows import load_kernels
from pmdb.traces.gc_pause import collector_paused
from pmdb import platform

CPU_SIDE = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"}
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
# How each shared pair links: simple_add's ET and Kineto trace were recorded in one pass (its Kineto events carry
# the ET rf_id as 'External id'); param_linear's and param_resnet's come from separate recordings whose small ids
# overlap but name other ops, so they link by op order.
DIRS = {"hta_alexnet": None, "hta_simple_add": "external_id", "param_linear": "op_order", "param_resnet": "op_order"}


def _json(path):
    with collector_paused():   # as the importer reads it: 3-4x faster than with collections
        return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("name", DIRS)
def test_import_stores_every_event_of_the_shared_trace(store, shared_data, name):
    folder = shared_data / "traces" / "gpu" / name
    kineto_path, et_path = folder / "kineto.json.gz", folder / "et.json.gz"
    et_path = et_path if et_path.exists() else None
    gpu = platform.ensure_named(store, "test-gpu", device_kind="cuda")
    with store.run("trace", gpu, {}) as run:
        set_id = ingest_trace_set(store, run.run_id, gpu, [RankTraces(0, kineto_path, et_path)], label=name,
                                  source="imported")

    doc = _json(kineto_path)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    cpu = [e for e in events if e.get("cat") in CPU_SIDE]
    device = [e for e in events if e.get("cat") in DEVICE]
    runtime_corr = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    launched = [e for e in device if e["args"].get("correlation") in runtime_corr]
    kineto_id, et_id = (store.scalar("SELECT trace_id FROM traces WHERE kind = ?", [k]) for k in ("kineto", "et"))
    ops = store.query("SELECT op_id, name FROM trace_ops WHERE trace_id = ?", [kineto_id])
    kernels = load_kernels(store, kineto_id)
    assert len(ops) == len(cpu)
    assert ops["name"].value_counts().to_dict() == _counts(e["name"] for e in cpu)
    assert len(kernels) == len(device)
    assert (kernels["category"] == "kernel").sum() == sum(e["cat"] == "kernel" for e in device)
    assert kernels["launch_op_id"].notna().sum() == len(launched)
    assert kernels["dur_us"].sum() == pytest.approx(sum(e["dur"] for e in device))
    steps = [e for e in cpu if e["name"].startswith("Optimizer.step#")]
    iterations = store.scalar("SELECT count(*) FROM trace_iterations WHERE trace_id = ?", [kineto_id])
    assert iterations == max(len(steps) - 1, 0)

    traces = store.query("SELECT kind, schema_version, sha256, path, size_bytes FROM traces ORDER BY kind")
    kin = traces[traces["kind"] == "kineto"].iloc[0]
    assert kin["schema_version"] == str(doc["schemaVersion"])
    raw = gzip.decompress(kineto_path.read_bytes())
    assert kin["sha256"] == hashlib.sha256(raw).hexdigest() and kin["size_bytes"] == len(raw)
    assert gzip.decompress((store.workspace.home / kin["path"]).read_bytes()) == raw
    if et_path is not None:
        et_doc = _json(et_path)
        et_ops = store.query("SELECT op_id, name, linked_op_id FROM trace_ops WHERE trace_id = ?", [et_id])
        assert len(et_ops) == len(et_doc["nodes"])
        assert set(et_ops["op_id"]) == {n["id"] for n in et_doc["nodes"]}
        et_row = traces[traces["kind"] == "et"].iloc[0]
        assert et_row["schema_version"] == et_doc["schema"]
        method, linked_ops = store.query("SELECT link_method, linked_ops FROM traces WHERE kind = 'et'").iloc[0]
        linked = et_ops.dropna(subset=["linked_op_id"])
        assert method == DIRS[name] and linked_ops == len(linked) > 0
        names = ops.set_index("op_id")["name"]
        assert (names.loc[linked["linked_op_id"].astype(int)].str.split("#").str[0].to_numpy()
                == linked["name"].str.split("#").str[0].to_numpy()).all()
        if name == "param_linear":  # one full iteration in the ET, 40 in the Kineto trace: every node links
            roots = [n for n in et_doc["nodes"] if n["name"].startswith("[pytorch|profiler|execution_")]
            assert linked_ops == len(et_doc["nodes"]) - len(roots)


def _counts(names):
    out = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return out
