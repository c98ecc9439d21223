"""The optimizer's element-wise ops and the dense embedding mapped to the microbenchmarks that measure them: in-place
ops to in-place benchmarks, allocating ops to allocating ones, embedding / EmbeddingBackward0 to 'embedding'
(hand-built ops with torch 2.13's CPU names and shapes, and ops recorded by the real profiler)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from collectors.ops import catalogue
from pmdb.traces.graph import Op
from pmdb.traces.opmap import BACKWARD_PREFIX, Mapped, map_op

P = [50257, 256]  # gpt2's token embedding parameter
MN = {"M": 50257, "N": 256}


@pytest.mark.parametrize("op, expected", [
    (Op("aten::sqrt", input_shapes=[P]), Mapped("sqrt", "fwd", MN)),
    (Op("aten::div", input_shapes=[P, []]), Mapped("div", "fwd", MN)),
    (Op("aten::add_", input_shapes=[P, [], []]), Mapped("add_", "fwd", MN)),
    (Op("aten::add", input_shapes=[P, P, []]), Mapped("add", "fwd", MN)),
    (Op("aten::mul_", input_shapes=[P, []]), Mapped("mul_", "fwd", MN)),
    (Op("aten::mul", input_shapes=[P, P]), Mapped("mul", "fwd", MN)),
    (Op("aten::div_", input_shapes=[P, []]), Mapped("div_", "fwd", MN)),
    (Op("aten::lerp_", input_shapes=[P, P, []]), Mapped("lerp_", "fwd", MN)),
    (Op("aten::addcmul_", input_shapes=[P, P, P, []]), Mapped("addcmul_", "fwd", MN)),
    (Op("aten::addcdiv_", input_shapes=[P, P, P, []]), Mapped("addcdiv_", "fwd", MN)),
    (Op("aten::zero_", input_shapes=[P]), Mapped("zero_", "fwd", MN)),
    (Op("aten::fill_", input_shapes=[P, []]), Mapped("fill_", "fwd", MN)),
    # in place without an in-place benchmark: its own name (roofline), never the allocating sqrt's benchmark
    (Op("aten::sqrt_", input_shapes=[P]), Mapped("sqrt_", "fwd", MN)),
    (Op("aten::sub_", input_shapes=[P, P, []]), Mapped("sub", "fwd", MN)),  # unchanged: roofline by name
    (Op("aten::_foreach_add_", input_shapes=[[P, [256]], []]), Mapped("add_", "fwd", {"M": 50257 * 256 + 256, "N": 1})),
    (Op("aten::_foreach_sqrt", input_shapes=[[P, [256]]]), Mapped("sqrt", "fwd", {"M": 50257 * 256 + 256, "N": 1})),
    (Op("aten::_foreach_div_", input_shapes=[[[4, 4]], []]), Mapped("div_", "fwd", {"M": 16, "N": 1})),
    (Op("aten::_foreach_lerp_", input_shapes=[[[4, 4]], [[4, 4]], []]), Mapped("lerp_", "fwd", {"M": 16, "N": 1})),
    (Op("aten::_foreach_addcdiv_", input_shapes=[[[4, 4]], [[4, 4]], [[4, 4]], []]),
     Mapped("addcdiv_", "fwd", {"M": 16, "N": 1})),
    (Op("aten::_foreach_zero_", input_shapes=[[[4, 4], [8]]]), Mapped("zero_", "fwd", {"M": 24, "N": 1})),
    (Op("aten::embedding", input_shapes=[P, [8, 64], [], [], []]),
     Mapped("embedding", "fwd", {"V": 50257, "D": 256, "N": 512})),
    (Op(BACKWARD_PREFIX + "EmbeddingBackward0", children=[
        ("EmbeddingBackward0", [[8, 64, 256]]),
        ("aten::embedding_backward", [[8, 64, 256], [8, 64], [], [], [], []]),
        ("aten::embedding_dense_backward", [[8, 64, 256], [8, 64], [], [], []]),
        ("aten::zeros", [[], [], [], [], []]), ("aten::empty", [[], [], [], [], [], []]), ("aten::zero_", [P])]),
     Mapped("embedding", "bwd", {"V": 50257, "D": 256, "N": 512})),
])
def test_optimizer_and_embedding_ops(op, expected):
    mapped = map_op(op)
    assert mapped == expected
    if mapped.op not in ("sqrt_", "sub"):
        assert mapped.pass_ in catalogue.get(mapped.op).passes  # a benchmark measures exactly this


def test_embedding_backward_without_its_zeroed_gradient_is_not_guessed():
    node = Op(BACKWARD_PREFIX + "EmbeddingBackward0", children=[("EmbeddingBackward0", [[8, 64, 256]]),
                                                               ("aten::embedding_backward", [[8, 64, 256], [8, 64]])])
    assert map_op(node) is None  # V is unknown: composed from its nested ops instead


def _recorded(run) -> list:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    return list(prof.events())


def _descendants(event) -> list[tuple[str, list]]:
    out = []
    for child in event.cpu_children:
        out.append((child.name, child.input_shapes))
        out.extend(_descendants(child))
    return out


def test_a_recorded_single_tensor_adam_step_maps_to_registered_benchmarks():
    weight = torch.nn.Parameter(torch.randn(64, 16))
    opt = torch.optim.Adam([weight], lr=1e-3, foreach=False)
    weight.sum().backward()
    opt.step()
    events = _recorded(opt.step)
    step = [e for e in events if e.cpu_parent is not None and "Optimizer.step" in e.cpu_parent.name]
    mapped = [map_op(Op(e.name, input_shapes=e.input_shapes)) for e in step]
    on_weight = {m.op for m in mapped if isinstance(m, Mapped) and m.params == {"M": 64, "N": 16}}
    assert on_weight == {"lerp_", "mul_", "addcmul_", "sqrt", "div", "add_", "addcdiv_"}
    assert all(name in catalogue.load() for name in on_weight)


def test_a_recorded_embedding_backward_maps_with_its_table_size():
    weight = torch.randn(300, 12, requires_grad=True)
    indices = torch.randint(0, 300, (4, 5))
    events = _recorded(lambda: F.embedding(indices, weight).sum().backward())
    forward = next(e for e in events if e.name == "aten::embedding")
    node = next(e for e in events if e.name == BACKWARD_PREFIX + "EmbeddingBackward0")
    params = {"V": 300, "D": 12, "N": 20}
    assert map_op(Op(forward.name, input_shapes=forward.input_shapes)) == Mapped("embedding", "fwd", params)
    assert map_op(Op(node.name, children=_descendants(node))) == Mapped("embedding", "bwd", params)
