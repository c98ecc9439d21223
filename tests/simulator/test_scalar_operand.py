"""Scalar-operand element-wise ops (GPT-2's GELU: 0.5 * h, 1.0 + tanh(...)) in a real profiled CPU step (Kineto + ET,
the workload collector's passes): mapped to mul_scalar / add_scalar, priced by that op's model where the platform has
one, by the two-tensor op's where it has not (a CPU platform's predictions are then exactly those of the two-tensor
mapping), and by the 2-pass roofline where neither exists. Models: real roofline models over nominal peaks (their
times tell which model priced an op: a scalar op's roofline moves 2 tensors, a two-tensor op's 3)."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from collectors.traces.ingest import RankTraces
from collectors.workloads.profile import et_pass, kineto_pass
from fitters.roofline import uncalibrated
from pmdb import platform as platforms
from pmdb.platform import Semantics
from pmdb.traces import opmap
from pmdb.traces.from_store import load_graphs
from pmdb.traces.opmap import BACKWARD_PREFIX, Mapped, map_op
from sim_store import ingest
from simulator.engine import simulate
from simulator.model_set import ModelRef, ModelSet, Overheads
from simulator.semantics import AsyncDevice, SyncHost
from simulator.timing import ModelTiming

PEAKS = {"gemm_flops": 1e11, "mem_bw": 1e10}   # nominal FLOP/s and bytes/s of the roofline models


def _gelu_step():
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 256)
    x = torch.randn(64, 32)

    def step(_: int = 0) -> None:
        h = layer(x)
        g = 0.5 * h * (1.0 + torch.tanh(h))   # GELU's form: two scalar ops and one two-tensor mul
        (g * 0.25).sum().backward()
    return step


@pytest.fixture(scope="module")
def gelu_files(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("gelu_step")
    step = _gelu_step()
    kineto_pass(step, [0], [1, 2], out / "kineto.json")
    et_pass(step, [], [1, 2], out / "et.json")
    return out


@pytest.fixture
def graph(store, gelu_files):
    platform = platforms.resolve(store, None)
    ts = ingest(store, platform, [RankTraces(0, gelu_files / "kineto.json", gelu_files / "et.json")], "gelu",
                "captured")
    return load_graphs(store, ts, pick="best", detail=True)[0]


def _model(op: str) -> tuple[tuple[str, str, str], ModelRef]:
    return (op, "fwd", "torch"), ModelRef(f"t.{op}.fwd", 1, uncalibrated(op, "fwd", "float32", PEAKS), "roofline")


def _models(*ops: str) -> ModelSet:
    return ModelSet(kernels=dict(_model(op) for op in ops), peaks=PEAKS)


def _ops(graph, op: str, pass_: str = "fwd") -> list:
    """Top-level ops of the step that map to (``op``, ``pass_``)."""
    return [node for node in graph.ranks[0].ops
            if isinstance(m := map_op(node), Mapped) and (m.op, m.pass_) == (op, pass_)]


def _priced(graph, models: ModelSet, semantics: Semantics) -> tuple[ModelTiming, float]:
    timing = ModelTiming(models, Overheads(), semantics)
    rules = SyncHost() if semantics == Semantics.SYNC_HOST else AsyncDevice()
    return timing, simulate(timing.programs(graph), rules).predicted_us


def test_the_step_holds_scalar_and_tensor_ops(graph):
    scalar_muls, adds, muls = _ops(graph, "mul_scalar"), _ops(graph, "add_scalar"), _ops(graph, "mul")
    # 0.5 * h, g * 0.25 and the gradient of the latter (grad * 0.25); the gradient of 0.5 * h also accumulates
    # h's gradient from tanh (an add_ in the same node): it stays the two-tensor mul's backward, as before
    assert [n.name for n in scalar_muls] == ["aten::mul", "aten::mul", BACKWARD_PREFIX + "MulBackward0"]
    assert [n.name for n in adds] == ["aten::add"] and [n.name for n in muls] == ["aten::mul"]
    assert len(_ops(graph, "mul", "bwd")) == 2
    assert all(n.input_shapes[1] == [] for n in scalar_muls[:2] + adds)     # the scalar: an empty shape
    assert map_op(muls[0]) == Mapped("mul", "fwd", {"M": 64, "N": 256})


def test_a_cpu_platform_without_scalar_models_predicts_as_before(graph, monkeypatch):
    new, new_us = _priced(graph, _models("mul", "add"), Semantics.SYNC_HOST)
    for node in _ops(graph, "mul_scalar"):
        assert new.priced_by[id(node)] == "t.mul.fwd:1"                      # the two-tensor op's model
    assert new.priced_by[id(_ops(graph, "add_scalar")[0])] == "t.add.fwd:1"
    monkeypatch.setattr(opmap, "SCALAR_OPERAND", {})                         # the mapping before scalar ops
    assert not _ops(graph, "mul_scalar")
    old, old_us = _priced(graph, _models("mul", "add"), Semantics.SYNC_HOST)
    assert new_us == old_us and new._time == old._time and new.priced_by == old.priced_by
    assert new.usage.models == old.usage.models and new.usage.fallback == old.usage.fallback


@pytest.mark.parametrize("semantics", [Semantics.ASYNC_DEVICE, Semantics.SYNC_HOST])
def test_a_scalar_model_prices_scalar_ops_where_the_platform_has_one(graph, semantics):
    timing, _ = _priced(graph, _models("mul", "add", "mul_scalar", "add_scalar"), semantics)
    for node in _ops(graph, "mul_scalar"):
        assert timing.priced_by[id(node)] == "t.mul_scalar.fwd:1"
    assert timing.priced_by[id(_ops(graph, "add_scalar")[0])] == "t.add_scalar.fwd:1"
    assert timing.priced_by[id(_ops(graph, "mul")[0])] == "t.mul.fwd:1"       # the two-tensor mul keeps its own
    without, _ = _priced(graph, _models("mul", "add"), semantics)           # a GPU without the scalar tables
    for node in _ops(graph, "mul_scalar"):
        assert without.priced_by[id(node)] == "t.mul.fwd:1"
        assert timing._time[id(node)] == pytest.approx(without._time[id(node)] * 2 / 3)   # 2 of 3 passes


def test_without_any_model_the_roofline_moves_two_tensors(graph):
    timing, _ = _priced(graph, _models(), Semantics.ASYNC_DEVICE)
    node = _ops(graph, "mul_scalar")[0]
    assert timing.priced_by[id(node)] == "roofline"
    two_pass = uncalibrated("mul_scalar", "fwd", "float32", PEAKS).predict(pd.DataFrame([map_op(node).params]))
    assert timing._time[id(node)] == pytest.approx(float(two_pass[0]))
    assert timing._time[id(node)] == pytest.approx(64 * 256 * 4 * 2 / PEAKS["mem_bw"] * 1e6)   # µs
