"""ET <-> Kineto linking on traces recorded here: a joint pass (rf_id), separate Kineto-only and ET-only passes,
and op-order linking checked against the rf_id link of the joint pass."""
import json

import pandas as pd
import pytest

from collectors.traces import link as link_mod
from collectors.traces.et import parse_et
from collectors.traces.files import read_trace_file
from collectors.traces.ingest import RankTraces, ingest_trace_set
from collectors.traces.kineto import parse_kineto
from pmdb.traces.rows import load_trace_set
from pmdb import platform


def _parsed(kineto_path, et_path):
    return (parse_kineto(read_trace_file(kineto_path).doc, str(kineto_path)),
            parse_et(read_trace_file(et_path).doc, str(et_path)))


def _et_ops_in_iterations(et):
    nodes = et.nodes
    return nodes[nodes["iteration"].notna() & (nodes["category"] != "et_root")]


def test_joint_pass_links_every_node_by_record_function_id(cpu_passes):
    kineto, et = _parsed(cpu_passes["joint_kineto"], cpu_passes["joint_et"])
    found = link_mod.link(et.nodes, kineto.ops, kineto.iterations)
    assert found.method == "rf_id"
    raw_k = json.loads(cpu_passes["joint_kineto"].read_text())["traceEvents"]
    by_rf = {e["args"]["Record function id"]: e for e in raw_k
             if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")}
    raw_e = json.loads(cpu_passes["joint_et"].read_text())["nodes"]
    nodes = [n for n in raw_e if not n["name"].startswith("[pytorch|profiler|execution_")]
    assert len(found.et_to_kineto) == len(nodes) == len(by_rf)
    k = kineto.ops.set_index("op_id")
    for node in nodes:
        rf = {a["name"]: a["value"] for a in node["attrs"]}["rf_id"]
        twin = k.loc[found.et_to_kineto[node["id"]]]
        assert twin["name"] == node["name"] == by_rf[rf]["name"]
        assert twin["start_us"] == pytest.approx(by_rf[rf]["ts"])


def test_op_order_link_agrees_with_rf_id_link(cpu_passes):
    kineto, et = _parsed(cpu_passes["joint_kineto"], cpu_passes["joint_et"])
    truth = link_mod.link(et.nodes, kineto.ops, kineto.iterations).et_to_kineto
    by_order = link_mod._by_order(et.nodes, kineto.ops, kineto.iterations)
    assert len(by_order) == len(truth) > 100
    assert by_order == truth


def test_separate_passes_link_completely_by_name_and_iteration(cpu_passes):
    kineto, et = _parsed(cpu_passes["kineto"], cpu_passes["et"])
    found = link_mod.link(et.nodes, kineto.ops, kineto.iterations)
    inside = _et_ops_in_iterations(et)
    assert len(inside) > 100 and len(kineto.iterations) == et.iterations == 3
    assert set(found.et_to_kineto) == set(inside["op_id"])
    k = kineto.ops.set_index("op_id")
    for node_id, name, iteration in zip(inside["op_id"], inside["name"], inside["iteration"]):
        twin = k.loc[found.et_to_kineto[node_id]]
        assert (twin["name"], twin["iteration"]) == (name, iteration)
    order = link_mod._by_order(et.nodes, kineto.ops, kineto.iterations)
    assert set(order) == set(inside["op_id"])


def test_stored_et_rows_carry_kineto_timing(store, cpu_passes):
    name = platform.resolve(store, None)
    with store.run("trace", name, {}) as run:
        set_id = ingest_trace_set(store, run.run_id, name, [
            RankTraces(0, cpu_passes["kineto"], cpu_passes["et"])])
    frames = load_trace_set(store, set_id)[0]
    et_rows, k_rows = frames.ops, frames.kineto_ops.set_index("op_id")
    linked = et_rows.dropna(subset=["linked_op_id"])
    assert len(linked) == len(_et_ops_in_iterations(_parsed(cpu_passes["kineto"], cpu_passes["et"])[1]))
    twins = k_rows.loc[linked["linked_op_id"].astype(int)]
    assert (twins["name"].to_numpy() == linked["name"].to_numpy()).all()
    assert (twins["dur_us"].to_numpy() == linked["dur_us"].to_numpy()).all()
    assert (twins["thread"].to_numpy() == linked["thread"].to_numpy()).all()
    back = k_rows.loc[linked["linked_op_id"].astype(int), "linked_op_id"].to_numpy()
    assert (back == linked["op_id"].to_numpy()).all()
    traces = store.query("SELECT kind, link_method, linked_ops FROM traces ORDER BY kind")
    assert traces["kind"].tolist() == ["et", "kineto"] and traces.at[0, "linked_ops"] == len(linked)
    assert pd.isna(traces.at[1, "link_method"])
