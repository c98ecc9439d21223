"""Traced ops (names and shapes as torch 2.13 records them on CPU) mapped to the ops collector's vocabulary."""
from __future__ import annotations

import pytest

from pmdb.traces.graph import Op
from pmdb.traces.opmap import NO_WORK, Mapped, map_op, untimed_work

BWD = "autograd::engine::evaluate_function: "


@pytest.mark.parametrize("op, expected", [
    (Op("aten::linear", input_shapes=[[64, 16], [32, 16], [32]]),
     Mapped("fully_connected", "fwd", {"B": 1, "M": 64, "N": 32, "K": 16})),
    (Op("aten::linear", input_shapes=[[4, 10, 16], [32, 16], []]),
     Mapped("fully_connected", "fwd", {"B": 1, "M": 40, "N": 32, "K": 16})),
    (Op("aten::addmm", input_shapes=[[32], [64, 16], [16, 32], [], []]),
     Mapped("fully_connected", "fwd", {"B": 1, "M": 64, "N": 32, "K": 16})),
    (Op("aten::bmm", input_shapes=[[8, 27, 16], [8, 16, 27]]),
     Mapped("bmm", "fwd", {"B": 8, "M": 27, "N": 27, "K": 16})),
    (Op("aten::matmul", input_shapes=[[2, 4, 10, 8], [2, 4, 8, 10]]),
     Mapped("bmm", "fwd", {"B": 8, "M": 10, "N": 10, "K": 8})),
    (Op("aten::relu", input_shapes=[[64, 32]]), Mapped("relu", "fwd", {"M": 64, "N": 32})),
    (Op("aten::cat", input_shapes=[[[64, 8], [64, 24]], []]),
     Mapped("concat", "fwd", {"M": 64, "N": 16, "K": 2, "dim": 1})),
    (Op("aten::index", input_shapes=[[64, 9, 9], [[36], [36]]]),
     Mapped("tril", "fwd", {"B": 64, "M": 9, "N": 9, "diag": 0})),
    (Op("aten::layer_norm", input_shapes=[[2, 128, 768], [], [768], [768], [], []]),
     Mapped("layer_norm", "fwd", {"B": 2, "M": 128, "N": 768})),
    (Op("aten::dropout", input_shapes=[[2, 128, 768], [], []], attrs={"concrete_inputs": ["", "0.1", "True"]}),
     Mapped("dropout", "fwd", {"B": 2, "M": 128, "N": 768, "p": 0.1})),
    (Op("aten::conv2d", input_shapes=[[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []],
        attrs={"scalars": {"3": [2, 2], "4": [1, 1], "5": [1, 1], "6": 1}}),
     Mapped("conv2d", "fwd", {"B": 8, "H": 34, "IC": 3, "OC": 16, "stride": 2, "dilation": 1, "FH": 3, "FW": 3,
                              "pad": 1, "is_depthwise": 0.0})),
    (Op("aten::_foreach_add_", input_shapes=[[[32, 16], [32]], [[32, 16], [32]], []]),
     Mapped("add_", "fwd", {"M": 32 * 16 + 32, "N": 1})),
    (Op("aten::binary_cross_entropy", input_shapes=[[64, 1], [64, 1], [], []]),
     Mapped("binary_cross_entropy", "fwd", {"M": 64, "N": 1})),
    # a scalar operand (a Python number or a 0-dim tensor: an empty shape) is the scalar kernel (GPT-2's 0.5 * x)
    (Op("aten::mul", input_shapes=[[1, 1024, 5120], []]), Mapped("mul_scalar", "fwd", {"M": 1024, "N": 5120})),
    (Op("aten::mul", input_shapes=[[], [4, 8]]), Mapped("mul_scalar", "fwd", {"M": 4, "N": 8})),
    (Op("aten::add", input_shapes=[[4, 8], [], []]), Mapped("add_scalar", "fwd", {"M": 4, "N": 8})),
    (Op("aten::add", input_shapes=[[2, 20, 8, 8], [2, 1, 8, 8], []]), Mapped("add", "fwd", {"M": 320, "N": 8})),
    (Op("aten::mul", input_shapes=[[], []]), Mapped("mul", "fwd", {"M": 1, "N": 1})),
    # pmdb's div is already the scalar form; in-place ops keep their own models
    (Op("aten::div", input_shapes=[[4, 8], []]), Mapped("div", "fwd", {"M": 4, "N": 8})),
    (Op("aten::mul_", input_shapes=[[4, 8], []]), Mapped("mul_", "fwd", {"M": 4, "N": 8})),
])
def test_forward_ops(op, expected):
    assert map_op(op) == expected


def test_views_and_copies():
    assert map_op(Op("aten::view", input_shapes=[[64, 8], []])) is NO_WORK
    assert map_op(Op("aten::t", input_shapes=[[8, 32]])) is NO_WORK
    assert map_op(Op("aten::to", input_shapes=[[64, 16], [], [], [], []])) is NO_WORK  # no copy happened
    # an eval-mode dropout (train False: an inference call) returns its input; in the ET's scalars or Kineto's inputs
    assert map_op(Op("aten::dropout", input_shapes=[[2, 128, 768], [], []], attrs={"scalars": {"2": False}})) \
        is NO_WORK
    assert map_op(Op("aten::dropout", input_shapes=[[2, 128, 768], [], []],
                     attrs={"concrete_inputs": ["", "0.1", "False"]})) is NO_WORK
    copied = Op("aten::to", input_shapes=[[64, 16], [], [], [], []], children=[("aten::_to_copy", [[64, 16]])])
    assert map_op(copied) == Mapped("memcpy", "fwd", {"M": 64, "N": 16})
    assert map_op(Op("aten::copy_", input_shapes=[[8, 32], [8, 32], []])) == Mapped("memcpy", "fwd",
                                                                                    {"M": 8, "N": 32})
    assert map_op(Op("MyCustomPythonOp", input_shapes=[[3]])) is None


def test_backward_nodes_read_gradient_and_nested_ops():
    addmm = Op(BWD + "AddmmBackward0", children=[
        ("AddmmBackward0", [[64, 8]]), ("aten::t", [[32, 8]]), ("aten::mm", [[64, 8], [8, 32]]),
        ("aten::t", [[64, 8]]), ("aten::mm", [[8, 64], [64, 32]]), ("aten::sum", [[64, 8], [], [], []])])
    assert map_op(addmm) == Mapped("fully_connected", "bwd", {"B": 1, "M": 64, "N": 8, "K": 32})
    # first layer: the input needs no gradient, only the weight-gradient mm is there
    first = Op(BWD + "AddmmBackward0", children=[("AddmmBackward0", [[64, 32]]), ("aten::t", [[64, 32]]),
                                                 ("aten::mm", [[32, 64], [64, 16]])])
    assert map_op(first) == Mapped("fully_connected", "fwd", {"B": 1, "M": 32, "N": 16, "K": 64})   # one GEMM
    relu = Op(BWD + "ReluBackward0", children=[("ReluBackward0", [[64, 32]]),
                                               ("aten::threshold_backward", [[64, 32], [64, 32], []])])
    assert map_op(relu) == Mapped("relu", "bwd", {"M": 64, "N": 32})
    bmm = Op(BWD + "BmmBackward0", children=[("BmmBackward0", [[8, 9, 9]]), ("aten::bmm", [[8, 9, 9], [8, 9, 16]]),
                                             ("aten::bmm", [[8, 16, 9], [8, 9, 9]])])
    assert map_op(bmm) == Mapped("bmm", "bwd", {"B": 8, "M": 9, "N": 9, "K": 16})
    # autograd may run mat2's gradient (a^T @ grad) first: K is then its first operand's rows, not the grad's N
    # (recorded: xlnet's [32, 64, 16] @ [32, 16, 128] and DLRM's interaction [256, 7, 64] @ [256, 64, 7])
    xlnet = Op(BWD + "BmmBackward0", children=[("BmmBackward0", [[32, 64, 128]]),
                                               ("aten::bmm", [[32, 16, 64], [32, 64, 128]]),
                                               ("aten::bmm", [[32, 64, 128], [32, 128, 16]])])
    assert map_op(xlnet) == Mapped("bmm", "bwd", {"B": 32, "M": 64, "N": 128, "K": 16})
    interaction = Op(BWD + "BmmBackward0", children=[("BmmBackward0", [[256, 7, 7]]),
                                                     ("aten::bmm", [[256, 64, 7], [256, 7, 7]]),
                                                     ("aten::bmm", [[256, 7, 7], [256, 7, 64]])])
    assert map_op(interaction) == Mapped("bmm", "bwd", {"B": 256, "M": 7, "N": 7, "K": 64})
    # element-wise gradients as recorded: a pass-through add is no work, a mul with one operand needing a gradient
    # is one multiplication (by a scalar: the scalar kernel), with both the two the microbenchmark's backward runs
    assert map_op(Op(BWD + "AddBackward0", children=[("AddBackward0", [[64, 8, 64]])])) is NO_WORK
    one = Op(BWD + "MulBackward0", children=[("MulBackward0", [[64, 8]]), ("aten::mul", [[64, 8], []]),
                                             ("aten::to", [[], [], []])])
    assert map_op(one) == Mapped("mul_scalar", "fwd", {"M": 64, "N": 8})
    by_tensor = Op(BWD + "MulBackward0", children=[("MulBackward0", [[64, 8]]), ("aten::mul", [[64, 8], [64, 8]])])
    assert map_op(by_tensor) == Mapped("mul", "fwd", {"M": 64, "N": 8})
    two = Op(BWD + "MulBackward0", children=[("MulBackward0", [[64, 8]]), ("aten::mul", [[64, 8], [64, 8]]),
                                             ("aten::mul", [[64, 8], [64, 8]])])
    assert map_op(two) == Mapped("mul", "bwd", {"M": 64, "N": 8})
    assert map_op(Op(BWD + "MulBackward0", input_shapes=[[64, 8]])) == Mapped("mul", "bwd", {"M": 64, "N": 8})
    only_mat2 = Op(BWD + "BmmBackward0", children=[("BmmBackward0", [[1, 1024, 64]]),
                                                   ("aten::bmm", [[1, 64, 1024], [1, 1024, 64]])])
    assert map_op(only_mat2) == Mapped("bmm", "fwd", {"B": 1, "M": 64, "N": 64, "K": 1024})
    index = Op(BWD + "IndexBackward0", children=[("IndexBackward0", [[64, 36]]), ("aten::new_zeros", [[64, 36], []]),
                                                 ("aten::index_put_", [[64, 9, 9], [[36], [36]], [64, 36], []])])
    assert map_op(index) == Mapped("tril", "bwd", {"B": 64, "M": 9, "N": 9, "diag": 0})
    assert map_op(Op(BWD + "TBackward0", children=[("TBackward0", [[32, 8]])])) is NO_WORK
    assert map_op(Op(BWD + "torch::autograd::AccumulateGrad")) is NO_WORK
    assert map_op(Op(BWD + "SomethingBackward0", children=[("SomethingBackward0", [[4]])])) is None


def test_row_gather_is_not_a_pooled_lookup():
    gather = Op("aten::embedding", input_shapes=[[50257, 256], [8, 64], [], [], []])
    assert map_op(gather) == Mapped("embedding", "fwd", {"V": 50257, "D": 256, "N": 512})
    assert map_op(Op(BWD + "EmbeddingBackward0", children=[("EmbeddingBackward0", [[8, 64, 256]])])) is None
    bag = Op(BWD + "EmbeddingBagBackward0", children=[("EmbeddingBagBackward0", [[64, 8]])])
    assert map_op(bag) == Mapped("embedding_lookup", "bwd", {})
    tbe = Op(BWD + "torch::autograd::CppNode<SplitLookupFunction_sgd_Op_pt2>")
    assert map_op(tbe) == Mapped("embedding_lookup", "bwd", {})


@pytest.mark.parametrize("op, expected", [
    # an expert's rows gathered: hidden[None, top_x] of [1, 32, 32] by 6 indices -> [6, 1, 32]... rows x columns
    (Op("aten::index", input_shapes=[[1, 32, 32], [[], [6]]]), Mapped("index", "fwd", {"M": 6.0, "N": 32.0})),
    (Op("aten::index", input_shapes=[[32, 64], [[6]]]), Mapped("index", "fwd", {"M": 6.0, "N": 64.0})),
    # the gather's backward: its values (6 x 1) scattered into zeros
    (Op("aten::index_put", input_shapes=[[32, 1, 1], [[6], [6]], [6, 1], []]),
     Mapped("index_put", "fwd", {"M": 6.0, "N": 1.0})),
    (Op("aten::new_zeros", input_shapes=[[6, 1], [[], [], []], [], [], [], []], attrs={"scalars": {"1": [32, 1, 1]}}),
     Mapped("fill_", "fwd", {"M": 32.0, "N": 1.0})),
    (Op("aten::value_selecting_reduction_backward", input_shapes=[[2, 16], [], [2, 16], [[], [], []], []],
        attrs={"scalars": {"3": [2, 16, 4]}}), Mapped("fill_", "fwd", {"M": 32.0, "N": 4.0})),
    (Op("aten::new_ones", input_shapes=[[1, 16], [], []], attrs={"scalars": {"1": []}}),   # a 0-dim tensor
     Mapped("fill_", "fwd", {"M": 1.0, "N": 1.0})),
    (Op("aten::one_hot", input_shapes=[[2, 16], []], attrs={"scalars": {"1": 4}}),
     Mapped("fill_", "fwd", {"M": 32.0, "N": 4.0})),
    # anything else: element-wise over its largest tensor input (a router's argmax over [2, 16, 4])
    (Op("aten::argmax", input_shapes=[[2, 16, 4], [], []]), Mapped("argmax", "fwd", {"M": 32.0, "N": 4.0})),
])
def test_untimed_work_of_ops_no_model_maps(op, expected):
    assert map_op(op) is None and untimed_work(op) == expected


def test_untimed_work_needs_tensors():
    assert untimed_work(Op("aten::scalar_tensor", input_shapes=[[], [], [], [], []])) is None
    assert untimed_work(Op("aten::new_zeros", input_shapes=[[6, 1], [[], []]])) is None   # size not recorded
