"""Operand layouts from recorded strides (pmdb.traces.layout), read through the op mapping."""
from __future__ import annotations

import torch

from pmdb.traces.graph import Op
from pmdb.traces.layout import layout_params, transposed
from pmdb.traces.opmap import Mapped, map_op


def _strides(t: torch.Tensor) -> list[int]:
    return list(t.stride())


def test_transposed_reads_real_tensor_strides():
    z = torch.randn(16, 4, 8)
    assert not transposed(list(z.shape), _strides(z))
    zt = z.transpose(1, 2)                                 # [16, 8, 4], strides [32, 1, 8]
    assert transposed(list(zt.shape), _strides(zt))
    assert not transposed(list(zt.contiguous().shape), _strides(zt.contiguous()))
    w = torch.randn(32, 16)
    assert transposed(list(w.t().shape), _strides(w.t()))  # 2-d: the last two dimensions decide
    one_col = torch.randn(4, 8, 1).transpose(1, 2)          # one row: nothing to tell
    assert not transposed(list(one_col.shape), _strides(one_col))
    assert not transposed([4, 8], None) and not transposed([4, 8], [8]) and not transposed([4, 8], [1.5, 4])


def test_layout_params_name_the_transposed_operands():
    a, b = torch.randn(2, 5, 3).transpose(1, 2), torch.randn(2, 5, 7)
    shapes, strides = [list(a.shape), list(b.shape)], [_strides(a), _strides(b)]
    assert layout_params(strides, shapes, (0, 1)) == {"AT": 1.0}
    assert layout_params(None, shapes, (0, 1)) == {}                        # not recorded: row-major
    assert layout_params("bad", shapes, (0, 1)) == {}


def test_bmm_matmul_and_baddbmm_carry_the_layout_the_trace_recorded():
    z = torch.randn(256, 7, 64)
    zt = z.transpose(1, 2)
    op = Op("aten::bmm", input_shapes=[list(z.shape), list(zt.shape)],
            attrs={"input_strides": [_strides(z), _strides(zt)]})
    assert map_op(op) == Mapped("bmm", "fwd", {"B": 256.0, "M": 7.0, "N": 7.0, "K": 64.0, "BT": 1.0})
    plain = Op("aten::bmm", input_shapes=[list(z.shape), [256, 64, 7]])   # no strides recorded (Kineto only)
    assert map_op(plain) == Mapped("bmm", "fwd", {"B": 256.0, "M": 7.0, "N": 7.0, "K": 64.0})
    q, k = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4).transpose(-1, -2)   # attention's q · k^T
    mm = Op("aten::matmul", input_shapes=[list(q.shape), list(k.shape)],
            attrs={"input_strides": [_strides(q), _strides(k)]})
    assert map_op(mm) == Mapped("bmm", "fwd", {"B": 6.0, "M": 5.0, "N": 5.0, "K": 4.0, "BT": 1.0})
    bias, x = torch.randn(2, 5, 5), torch.randn(2, 4, 5).transpose(1, 2)
    baddbmm = Op("aten::baddbmm", input_shapes=[list(bias.shape), list(x.shape), [2, 4, 5], [], []],
                 attrs={"input_strides": [_strides(bias), _strides(x), [20, 5, 1], [], []]})
    assert map_op(baddbmm) == Mapped("bmm", "fwd", {"B": 2.0, "M": 5.0, "N": 5.0, "K": 4.0, "AT": 1.0})


def _gemm(x: torch.Tensor, y: torch.Tensor) -> tuple[list, list]:
    return [list(x.shape), list(y.shape)], [_strides(x), _strides(y)]


def test_backward_layout_reads_the_forward_layout_from_the_gradient_gemms():
    """bmm's backward runs grad · mat2^T and self^T · grad (in either order): a forward operand stored transposed
    runs row-major there. Real tensors' strides, as the execution trace records them."""
    from pmdb.traces.layout import backward_layout

    z = torch.randn(256, 7, 64)
    a, b = z, z.transpose(1, 2)                  # DLRM's interaction: z · z^T, out [256, 7, 7]
    grad = torch.randn(256, 7, 7)
    gemms = [_gemm(a.transpose(1, 2), grad), _gemm(grad, b.transpose(1, 2))]
    assert backward_layout(gemms, 7, 7) == {"BT": 1.0}
    assert backward_layout(gemms[::-1], 7, 7) == {"BT": 1.0}
    rowmajor_b = torch.randn(256, 64, 7)
    assert backward_layout([_gemm(a.transpose(1, 2), grad), _gemm(grad, rowmajor_b.transpose(1, 2))], 7, 7) == {}
    at = torch.randn(256, 64, 7).transpose(1, 2)  # first operand stored transposed
    assert backward_layout([_gemm(at.transpose(1, 2), grad), _gemm(grad, rowmajor_b.transpose(1, 2))], 7, 7) == \
        {"AT": 1.0}
    square, g = torch.randn(4, 5, 5).transpose(1, 2), torch.randn(4, 5, 5)   # every operand looks like the grad
    assert backward_layout([_gemm(square.transpose(1, 2), g), _gemm(g, square.transpose(1, 2))], 5, 5) == {}
    assert backward_layout([([[256, 64, 7], [256, 7, 7]], None)], 7, 7) == {}   # strides not recorded

