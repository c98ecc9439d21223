"""From a traced op (ATen name, input shapes, nested ops) to the ops collector's vocabulary: (op, pass, params).

The parameter names are those of ``collectors/ops`` (method.md section 3): fully_connected/bmm B, M, N, K (bmm
also AT / BT, an operand the execution trace recorded as stored transposed: :mod:`pmdb.traces.layout`);
conv2d B, H (input side + 2·pad), IC, OC, stride, dilation, FH, FW, is_depthwise, pad; conv1d B, L, IC, OC, groups,
FW; batch_norm B, H, C; layer_norm B, M, N; element-wise ops M, N (sqrt also Z, the share of exact zeros it
reads, when recorded: :mod:`pmdb.traces.state_values`; a mul or add with a scalar operand is mul_scalar / add_scalar,
:data:`SCALAR_OPERAND`); dropout B, M, N, p; concat M, N, K; memcpy M, N;
tril B, M, N, diag; embedding_lookup B, T (per-table statistics come from the store); embedding (dense) V, D, N.
Backward ops are autograd nodes (``autograd::engine::evaluate_function: XBackward0``) whose sizes are read from the
gradient and the nested ops.

:func:`map_op` returns a :class:`Mapped`, :data:`NO_WORK` for views and metadata ops (no device work: their cost is
CPU overhead only), or None for an op pmdb cannot model; :func:`untimed_work` then gives such an op's device work
where no trace timed it (a shape-only capture on a GPU), for the roofline.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from pmdb.traces.graph import Op
from pmdb.traces.layout import backward_layout, layout_params
from pmdb.traces.oparg import arg_index, scalar_at
from pmdb.traces.state_values import ZERO_SHARE

BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
# names of batched (FBGEMM TBE) and torch embedding lookups, forward and backward
EMBEDDING_MARKERS = ("embedding", "splitlookup", "split_embedding")
BATCHED_MARKERS = ("fbgemm", "split_embedding", "splitlookup", "tbe")  # one lookup covers every table of its rank


@dataclass(frozen=True)
class Mapped:
    """An op in the collector's vocabulary, with its parameters (numbers)."""

    op: str
    pass_: str
    params: dict[str, float]


class _NoWork:
    def __repr__(self) -> str:
        return "NO_WORK"


NO_WORK = _NoWork()

VIEW_OPS = frozenset("""view reshape _reshape_alias t transpose permute expand expand_as slice select narrow split
split_with_sizes chunk unsqueeze squeeze as_strided detach detach_ alias empty empty_like empty_strided resize_
_unsafe_view unbind lift_fresh set_ result_type size stride new_empty view_as flatten unflatten movedim numpy_T
_has_compatible_shallow_copy_type record_stream is_same_size _local_scalar_dense item requires_grad_ retain_grad
clamp_max_ is_nonzero _to_copy_noop contiguous to type_as output_nr""".split())
VIEW_BACKWARDS = frozenset("""TBackward0 ViewBackward0 TransposeBackward0 TransposeBackward1 PermuteBackward0
UnsafeViewBackward0 ReshapeAliasBackward0 ExpandBackward0 SqueezeBackward0 SqueezeBackward1 UnsqueezeBackward0
AliasBackward0 DetachBackward0 AsStridedBackward0 SplitBackward0 SplitWithSizesBackward0 UnbindBackward0
torch::autograd::AccumulateGrad CloneBackward0 ToCopyBackward0""".split())
# traced name -> registered microbenchmark: in-place ops to the in-place ones, allocating ops to allocating ones
# (an allocating op above glibc's mmap threshold pays page faults an in-place op never does)
ELEMENTWISE = {"relu": "relu", "relu_": "relu", "gelu": "gelu", "tanh": "tanh", "sigmoid": "sigmoid",
               "add": "add", "add_": "add_", "mul": "mul", "mul_": "mul_", "softmax": "softmax",
               "_softmax": "softmax", "log_softmax": "softmax", "_log_softmax": "softmax", "clamp_min": "relu",
               "threshold": "relu", "sqrt": "sqrt", "div": "div", "div_": "div_", "lerp_": "lerp_",
               "addcmul_": "addcmul_", "addcdiv_": "addcdiv_", "zero_": "zero_", "fill_": "fill_",
               "sqrt_": "sqrt_"}   # in place: not the allocating sqrt's benchmark; roofline by its own name
# element-wise ops without a registered model: roofline by their own name (fitters.opcost knows their cost)
OTHER_ELEMENTWISE = frozenset("""sub sub_ div div_ pow neg exp log sum mean sqrt rsqrt abs sign clamp clamp_
fill_ zero_ zeros zeros_like ones ones_like full full_like fill fill_ binary_cross_entropy mse_loss nll_loss
nll_loss_nd nll_loss_forward cross_entropy_loss maximum minimum where masked_fill masked_fill_ addcmul_ addcdiv_
lerp_ sqrt_ div_ mul_ add_ copy_ clone _foreach_add_ _foreach_mul_ _foreach_addcmul_ _foreach_addcdiv_
_foreach_lerp_ _foreach_sqrt _foreach_div_ _foreach_zero_ rand randn normal_ uniform_ random_ randint arange bernoulli_
index_select gather scatter_add_ index_add_ cumsum eq ne gt lt ge le tril_indices""".split())
COPY_OPS = frozenset({"copy_", "clone", "_to_copy", "contiguous", "to"})
# a binary op with a Python-scalar or 0-dim operand runs the scalar kernel: it reads one tensor and writes one (2
# passes, NeuSight's addu/mulu tables), not two and one. pmdb's div and pow already mean the scalar forms (divu, powu);
# in-place ops keep their own (in-place) models. A platform without the scalar op's model prices it by FALLBACK's.
SCALAR_OPERAND = {"add": "add_scalar", "mul": "mul_scalar"}
FALLBACK = {scalar: op for op, scalar in SCALAR_OPERAND.items()}


def _dims(shape: Any) -> list[int] | None:
    """A tensor shape as a list of ints (None for scalars, lists of tensors and missing shapes)."""
    if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape):
        return shape
    return None


def _tensors(shapes: list[Any]) -> list[list[int]]:
    return [d for d in (_dims(s) for s in shapes) if d is not None]


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 1


def tensor_elements(shapes: Any) -> int | None:
    """Elements of an op's tensor inputs (its recorded input shapes), summed; None when it records no tensor."""
    tensors = _tensors(shapes) if isinstance(shapes, list) else []
    return sum(_numel(t) for t in tensors) if tensors else None


def _scalar_operand(shapes: list[Any]) -> bool:
    """Whether a binary op's two operands are one tensor and one scalar (a Python number or a 0-dim tensor: both
    record an empty shape)."""
    if len(shapes) < 2:
        return False
    first, second = shapes[0], shapes[1]
    return (first == [] and _dims(second) is not None) or (_dims(first) is not None and second == [])


def fallback(mapped: Mapped) -> Mapped | None:
    """The op whose model prices ``mapped`` where the platform has none of its own (a scalar-operand add or mul: the
    two-tensor op's), or None."""
    op = FALLBACK.get(mapped.op)
    return None if op is None else Mapped(op, mapped.pass_, mapped.params)


def _rows_cols(shape: list[int]) -> dict[str, float]:
    """Element-wise op parameters: N = last dimension, M = the rest."""
    n = shape[-1] if shape else 1
    return {"M": float(max(_numel(shape) // max(n, 1), 1)), "N": float(max(n, 1))}


def _scalar(op: Op, index: int, default: Any = None) -> Any:
    """A non-tensor input of the op: ET scalars (by argument index) or Kineto concrete inputs."""
    value = scalar_at(op, index)
    return default if value is None else value


def _first(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else default
    return int(value) if isinstance(value, (int, float)) else default


def _gemm(m: int, n: int, k: int, b: int = 1) -> dict[str, float]:
    return {"B": float(b), "M": float(m), "N": float(n), "K": float(k)}


def _linear(op: Op) -> Mapped | None:
    x, w = (_tensors(op.input_shapes) + [None, None])[:2]
    if not x or not w or len(w) != 2:
        return None
    return Mapped("fully_connected", "fwd", _gemm(_numel(x[:-1]), w[0], x[-1]))


def _addmm(op: Op) -> Mapped | None:
    shapes = [_dims(s) for s in op.input_shapes]
    a, b = (shapes[1], shapes[2]) if op.name.endswith("addmm") else (shapes[0], shapes[1])
    if not a or not b or len(a) != 2 or len(b) != 2:
        return None
    return Mapped("fully_connected", "fwd", _gemm(a[0], b[1], a[1]))


def _matmul(op: Op) -> Mapped | None:
    a, b = (_tensors(op.input_shapes) + [None, None])[:2]
    if not a or not b:
        return None
    if len(b) == 2:
        return Mapped("fully_connected", "fwd", _gemm(_numel(a[:-1]), b[1], a[-1]))
    if len(a) >= 3 and len(b) >= 3:
        return Mapped("bmm", "fwd", {**_gemm(a[-2], b[-1], a[-1], _numel(a[:-2])),
                                     **layout_params(op.attrs.get("input_strides"), op.input_shapes, (0, 1))})
    return None


def _bmm(op: Op) -> Mapped | None:
    shapes = _tensors(op.input_shapes)
    baddbmm = op.name.endswith("baddbmm")   # baddbmm(self, batch1, batch2, ...): the GEMM's operands come second
    a, b = (shapes[-2], shapes[-1]) if baddbmm else (shapes[0], shapes[1])
    if len(a) != 3 or len(b) != 3:
        return None
    layout = layout_params(op.attrs.get("input_strides"), op.input_shapes, (1, 2) if baddbmm else (0, 1))
    return Mapped("bmm", "fwd", {**_gemm(a[1], b[2], a[2], a[0]), **layout})


def _conv(op: Op, pass_: str = "fwd", x: list[int] | None = None, w: list[int] | None = None,
          arg0: int = 3) -> Mapped | None:
    if x is None:
        x, w = (_tensors(op.input_shapes) + [None, None])[:2]
    if not x or not w:
        return None
    stride = _first(_scalar(op, arg0, 1), 1)
    pad = _first(_scalar(op, arg0 + 1, 0), 0)
    dilation = _first(_scalar(op, arg0 + 2, 1), 1)
    groups = int(_scalar(op, arg0 + 5 if "convolution" in op.name else arg0 + 3, 1) or 1)
    if len(x) == 4:
        return Mapped("conv2d", pass_, {"B": x[0], "H": x[2] + 2 * pad, "IC": x[1], "OC": w[0], "stride": stride,
                                        "dilation": dilation, "FH": w[2], "FW": w[3], "pad": pad,
                                        "is_depthwise": float(groups > 1 and groups == x[1])})
    if len(x) == 3:
        return Mapped("conv1d", pass_, {"B": x[0], "L": x[2], "IC": x[1], "OC": w[0], "groups": groups,
                                        "FW": w[2]})
    return None


def _batch_norm(op: Op, pass_: str = "fwd", x: list[int] | None = None) -> Mapped | None:
    x = x or (_tensors(op.input_shapes) or [None])[0]
    if not x or len(x) < 2:
        return None
    return Mapped("batch_norm", pass_, {"B": x[0], "C": x[1], "H": x[2] if len(x) > 2 else 1})


def _bmn(shape: list[int]) -> dict[str, float]:
    """B, M, N of a tensor normalised/dropped over its last dimension."""
    if len(shape) >= 3:
        return {"B": _numel(shape[:-2]), "M": shape[-2], "N": shape[-1]}
    return {"B": 1, "M": shape[0] if len(shape) == 2 else 1, "N": shape[-1]}


def _layer_norm(op: Op, pass_: str = "fwd", x: list[int] | None = None) -> Mapped | None:
    x = x or (_tensors(op.input_shapes) or [None])[0]
    return Mapped("layer_norm", pass_, _bmn(x)) if x else None


def _dropout(op: Op, pass_: str = "fwd", x: list[int] | None = None) -> Mapped | _NoWork | None:
    """A dropout; in eval mode (``train`` False: an inference call) it returns its input: no device work."""
    if pass_ == "fwd" and _scalar(op, 2, True) is False:
        return NO_WORK
    x = x or (_tensors(op.input_shapes) or [None])[0]
    if not x:
        return None
    p = _scalar(op, 1, 0.5)
    return Mapped("dropout", pass_, {**_bmn(x), "p": float(p) if isinstance(p, (int, float)) else 0.5})


def _cat(op: Op) -> Mapped | None:
    parts = op.input_shapes[0] if op.input_shapes and isinstance(op.input_shapes[0], list) else []
    parts = [d for d in (_dims(p) for p in parts) if d]
    if not parts:
        return None
    widths = [p[-1] for p in parts]
    return Mapped("concat", "fwd", {"M": _numel(parts[0][:-1]), "N": sum(widths) / len(widths), "K": len(parts),
                                    "dim": 1})


def _index(op: Op) -> Mapped | None:
    """DLRM's interaction index z[:, li, lj] (the tril op)."""
    shapes = op.input_shapes
    z = _dims(shapes[0]) if shapes else None
    idx = shapes[1] if len(shapes) > 1 and isinstance(shapes[1], list) else []
    idx = [d for d in (_dims(i) for i in idx) if d]
    if not z or len(z) != 3 or len(idx) != 2 or z[1] != z[2]:
        return None
    count, m = idx[0][0], z[1]
    diag = 1 if count == m * (m + 1) // 2 else 0
    return Mapped("tril", "fwd", {"B": z[0], "M": m, "N": m, "diag": diag})


def _copy(op: Op) -> Mapped | object:
    child_names = {_short(n) for n, _ in op.children}
    if op.name in ("aten::to", "aten::contiguous") and not child_names & {"_to_copy", "copy_", "clone"}:
        return NO_WORK
    shapes = _tensors(op.input_shapes)
    src = shapes[1] if op.name.endswith("copy_") and len(shapes) > 1 else (shapes[0] if shapes else None)
    return Mapped("memcpy", "fwd", _rows_cols(src)) if src else NO_WORK


def _dense_embedding(v: int, d: int, indices: list[int], pass_: str) -> Mapped:
    return Mapped("embedding", pass_, {"V": float(v), "D": float(d), "N": float(max(_numel(indices), 1))})


def _gather(op: Op) -> Mapped | None:
    """aten::embedding(W[V, D], indices) (a row gather, not a pooled lookup): the dense embedding, N = #indices."""
    weight, indices = (_tensors(op.input_shapes) + [None, None])[:2]
    if not weight or indices is None or len(weight) != 2:
        return None
    return _dense_embedding(weight[0], weight[1], indices, "fwd")


def _gather_backward(op: Op) -> Mapped | None:
    """EmbeddingBackward0: the dense gradient of W[V, D]. V comes from the zeroed gradient (``aten::zero_`` below
    ``embedding_dense_backward``; the node's shapes hold only the output gradient and the indices)."""
    grad = _grad(op)
    backward = _tensors(_child(op, ("embedding_dense_backward", "embedding_backward")) or [])
    zeroed = _tensors(_child(op, ("zero_",)) or [])
    if grad is None or len(backward) < 2 or not zeroed or len(zeroed[0]) != 2:
        return None
    return _dense_embedding(zeroed[0][0], grad[-1], backward[1], "bwd")


def _embedding(op: Op, pass_: str = "fwd") -> Mapped:
    return Mapped("embedding_lookup", pass_, {})


FORWARD: dict[str, Callable[[Op], Any]] = {
    "linear": _linear, "addmm": _addmm, "mm": _addmm, "matmul": _matmul, "bmm": _bmm, "baddbmm": _bmm,
    "conv2d": _conv, "conv1d": _conv, "convolution": _conv, "_convolution": _conv,
    "batch_norm": _batch_norm, "native_batch_norm": _batch_norm, "_batch_norm_impl_index": _batch_norm,
    "layer_norm": _layer_norm, "native_layer_norm": _layer_norm, "dropout": _dropout, "native_dropout": _dropout,
    "feature_dropout": _dropout, "cat": _cat, "concat": _cat, "index": _index, "embedding_bag": _embedding,
    "_embedding_bag": _embedding, "embedding": _gather, **{name: _copy for name in ("copy_", "clone", "_to_copy", "contiguous", "to")},
}


def _short(name: str) -> str:
    return name.split("::", 1)[1] if "::" in name else name


def _child(op: Op, names: tuple[str, ...]) -> list[Any] | None:
    """Input shapes of the first nested op called like ``names[0]``, else ``names[1]``, ..."""
    for wanted in names:
        for name, shapes in op.children:
            if _short(name) == wanted:
                return shapes
    return None


def _grad(op: Op) -> list[int] | None:
    """The output gradient a backward node receives (its node's first input)."""
    node = op.name[len(BACKWARD_PREFIX):]
    shapes = _child(op, (node,))
    if shapes is None:
        shapes = op.input_shapes
    tensors = _tensors(shapes or [])
    return tensors[0] if tensors else None


def _single_gemm(op: Op, base: str) -> Mapped | None:
    """A GEMM's backward that computes one gradient only (the first layer's input needs none: only the weight's
    gradient runs) is one forward-shaped GEMM, priced as that: the nested mm a[P, Q] @ b[Q, R] as fully_connected
    M=P, K=Q, N=R (bmm: its batch too). None when the node holds two GEMMs or its nested ops are unknown."""
    name = "bmm" if base in ("Bmm", "Baddbmm") else "mm"
    gemms = [_tensors(shapes)[:2] for child, shapes in op.children if _short(child) == name]
    if len(gemms) != 1 or len(gemms[0]) != 2:
        return None
    a, b = gemms[0]
    if name == "mm" and len(a) == 2 and len(b) == 2:
        return Mapped("fully_connected", "fwd", _gemm(a[0], b[1], a[1]))
    if name == "bmm" and len(a) == 3 and len(b) == 3:
        nested = _nested_gemms(op, "aten::bmm")
        layout = layout_params(nested[0][1], nested[0][0], (0, 1)) if len(nested) == 1 else {}
        return Mapped("bmm", "fwd", {**_gemm(a[1], b[2], a[2], a[0]), **layout})
    return None


NESTED_LAYOUT_NODES = ("Bmm", "Baddbmm")   # backward nodes whose operand layout is read from their nested GEMMs


def needs_nested_ops(name: str) -> bool:
    """Whether mapping an op named ``name`` reads its nested ops' strides (``Op.sub``): a bmm's backward node, whose
    operands' layout comes from the gradient GEMMs it ran (:func:`pmdb.traces.layout.backward_layout`). A graph
    loaded without detail still builds these (:func:`pmdb.traces.from_store.load_graphs`), so a GPU prediction prices
    the layout that `pmdb collect mine-traces` (which loads with detail) recorded for the same op."""
    return name.startswith(BACKWARD_PREFIX) and _node_base(name[len(BACKWARD_PREFIX):]) in NESTED_LAYOUT_NODES


def _node_base(node: str) -> str:
    """An autograd node's name without its Backward suffix: 'BmmBackward0' -> 'Bmm'."""
    return re.sub(r"Backward\d*$", "", node)


def _nested_gemms(op: Op, name: str) -> list[tuple[list[Any], Any]]:
    """(input shapes, input strides) of every ``name`` op below ``op`` in execution order (depth first), from its
    child Ops (loaded with detail; empty without)."""
    out: list[tuple[list[Any], Any]] = []
    for child in op.sub:
        if child.name == name:
            out.append((child.input_shapes, child.attrs.get("input_strides")))
        out.extend(_nested_gemms(child, name))
    return out


def _reduced_dim(op: Op, name: str, m: int, n: int) -> int | None:
    """K of the forward GEMM (out[M, N] = a[M, K] @ b[K, N]) from the gradient GEMMs nested in its backward node,
    whatever order autograd runs them in: grad @ b^T ([M, N] @ [N, K]), a^T @ grad ([K, M] @ [M, N]) or, for a
    weight kept transposed, grad^T @ a ([N, M] @ [M, K]); M and N are the output gradient's."""
    for child, shapes in op.children:
        if _short(child) != name:
            continue
        operands = _tensors(shapes)[:2]
        if len(operands) < 2 or not operands[0] or not operands[1]:
            continue
        x, y = operands
        if x[-2:] in ([m, n], [n, m]):   # grad @ b^T, or grad^T @ a: K is y's last dimension
            return y[-1]
        if y[-2:] == [m, n] and len(x) >= 2:   # a^T @ grad: K is x's rows
            return x[-2]
    return None


def _backward(op: Op) -> Mapped | object | None:
    node = op.name[len(BACKWARD_PREFIX):]
    if node in VIEW_BACKWARDS:
        return NO_WORK
    if node.startswith("EmbeddingBackward"):   # a gather's dense gradient (zeroed table + rows), not a lookup
        return _gather_backward(op)
    if any(marker in node.lower() for marker in EMBEDDING_MARKERS):
        return _embedding(op, "bwd")
    grad = _grad(op)
    if grad is None:
        return None
    base = _node_base(node)
    if base in ("Addmm", "Mm", "Linear", "Bmm", "Baddbmm") and (single := _single_gemm(op, base)) is not None:
        return single
    if base in ("Addmm", "Mm", "Linear"):
        k = _reduced_dim(op, "mm", _numel(grad[:-1]), grad[-1])
        return Mapped("fully_connected", "bwd", _gemm(_numel(grad[:-1]), grad[-1], k)) if k else None
    if base in NESTED_LAYOUT_NODES:
        k = _reduced_dim(op, "bmm", grad[-2], grad[-1]) if len(grad) >= 2 else None
        if not k:
            return None
        # its nested GEMMs are there with or without detail (needs_nested_ops)
        layout = backward_layout(_nested_gemms(op, "aten::bmm"), grad[-2], grad[-1])
        return Mapped("bmm", "bwd", {**_gemm(grad[-2], grad[-1], k, _numel(grad[:-2])), **layout})
    if base in ("Convolution", "CudnnConvolution", "MkldnnConvolution"):
        shapes = _tensors(_child(op, ("convolution_backward",)) or [])
        return _conv(op, "bwd", shapes[1], shapes[2]) if len(shapes) >= 3 else None
    if base in ("NativeBatchNorm", "CudnnBatchNorm", "NativeBatchNormLegit"):
        return _batch_norm(op, "bwd", grad)
    if base in ("NativeLayerNorm", "LayerNorm"):
        return _layer_norm(op, "bwd", grad)
    if base in ("NativeDropout", "Dropout", "FusedDropout"):
        return _dropout(op, "bwd", grad)
    if base == "Cat":
        parts = sum(1 for name, _ in op.children if _short(name) in ("narrow", "slice"))
        return Mapped("concat", "bwd", {"M": _numel(grad[:-1]), "N": grad[-1] / max(parts, 1),
                                        "K": max(parts, 1), "dim": 1})
    if base == "Index":
        z = _tensors(_child(op, ("index_put_", "_index_put_impl_")) or [])
        if z and len(z[0]) == 3 and len(grad) == 2:
            m = z[0][1]
            return Mapped("tril", "bwd", {"B": z[0][0], "M": m, "N": m,
                                          "diag": 1 if grad[1] == m * (m + 1) // 2 else 0})
        return None
    if base in ("Add", "Sub", "Mul") and op.children:
        work = [name for name, shapes in op.children if _short(name) != node and _tensors(shapes)]
        if not work:   # the gradient passes through unchanged: no kernel, only the node's own overhead
            return NO_WORK
        if base == "Mul" and [_short(name) for name in work] == ["mul"]:   # one operand needs a gradient
            scalar = _scalar_operand(_child(op, ("mul",)) or [])   # grad times a scalar: the scalar kernel
            return Mapped(SCALAR_OPERAND.get("mul", "mul") if scalar else "mul", "fwd", _rows_cols(grad))
    lowered = {"Threshold": "relu", "Relu": "relu", "Gelu": "gelu", "Tanh": "tanh", "Sigmoid": "sigmoid",
               "Softmax": "softmax", "LogSoftmax": "softmax", "Add": "add", "Mul": "mul"}
    if base in lowered:
        return Mapped(lowered[base], "bwd", _rows_cols(grad))
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    if name in OTHER_ELEMENTWISE or name in ("binary_cross_entropy", "pow", "mean", "sum", "div", "sub"):
        return Mapped(name, "bwd", _rows_cols(grad))
    return None


def _first_tensor(op: Op) -> list[int] | None:
    tensors = _tensors(op.input_shapes)
    return tensors[0] if tensors else None


def _dense_embedding_backward(op: Op) -> Mapped | None:
    """aten::embedding_(dense_)backward(grad_output[..., D], indices, num_weights, ...): the dense gradient of
    W[num_weights, D], N = #indices (the table size is the ``num_weights`` argument, read by name)."""
    tensors = _tensors(op.input_shapes)
    index = arg_index(op, "num_weights")
    rows = scalar_at(op, 2 if index is None else index)
    if len(tensors) < 2 or not isinstance(rows, (int, float)) or rows <= 0:
        return None
    return _dense_embedding(int(rows), tensors[0][-1], tensors[1], "bwd")


def _elementwise_backward(name: str) -> Callable[[Op], Mapped | None]:
    def handler(op: Op) -> Mapped | None:
        grad = _first_tensor(op)
        return Mapped(name, "bwd", _rows_cols(grad)) if grad else None
    return handler


# ATen backward kernels called directly: what an execution trace without Kineto times (a shape-only capture) shows
# inside the autograd nodes, which it records as annotations. Sizes from the output gradient (the first input).
ATEN_BACKWARD: dict[str, Callable[[Op], Any]] = {
    "native_layer_norm_backward": lambda op: _layer_norm(op, "bwd", _first_tensor(op)),
    "native_dropout_backward": lambda op: _dropout(op, "bwd", _first_tensor(op)),
    "embedding_dense_backward": _dense_embedding_backward, "embedding_backward": _dense_embedding_backward,
    # nll_loss_backward(grad_output[], self[N, C], target[N], ...): writes a gradient of self's shape
    "nll_loss_backward": lambda op: (Mapped("nll_loss", "bwd", _rows_cols(_tensors(op.input_shapes)[1]))
                                     if len(_tensors(op.input_shapes)) > 1 else None),
    **{name: _elementwise_backward(target) for name, target in (
        ("gelu_backward", "gelu"), ("threshold_backward", "relu"), ("tanh_backward", "tanh"),
        ("sigmoid_backward", "sigmoid"), ("_softmax_backward_data", "softmax"),
        ("_log_softmax_backward_data", "softmax"))},
}


def map_op(op: Op) -> Mapped | object | None:
    """The (op, pass, params) of a traced top-level op, NO_WORK, or None when pmdb cannot model it."""
    if op.name.startswith(BACKWARD_PREFIX):
        return _backward(op)
    if _short(op.name) in ATEN_BACKWARD:
        return ATEN_BACKWARD[_short(op.name)](op)
    short = _short(op.name)
    if short in VIEW_OPS and short not in COPY_OPS:
        return NO_WORK
    if op.name.startswith("fbgemm::") and any(marker in op.name.lower() for marker in EMBEDDING_MARKERS):
        return _embedding(op)
    handler = FORWARD.get(short)
    if handler is not None:
        return handler(op)
    if short in ELEMENTWISE or short in OTHER_ELEMENTWISE:
        tensors = _tensors(op.input_shapes)
        if short.startswith("_foreach"):
            first = op.input_shapes[0] if op.input_shapes and isinstance(op.input_shapes[0], list) else []
            total = sum(_numel(t) for t in _tensors(first)) or 1
            single = short[len("_foreach_"):]   # _foreach_add_ -> add_ (in place), _foreach_sqrt -> sqrt
            return Mapped(ELEMENTWISE.get(single, single), "fwd", {"M": float(total), "N": 1.0})
        shape = max(tensors, key=_numel) if tensors else [1]
        params = _rows_cols(shape)
        if op.zero_frac > 0:  # a value-sensitive op given its share (pmdb.traces.state_values.annotate)
            params[ZERO_SHARE] = op.zero_frac
        name = ELEMENTWISE.get(short, short.rstrip("_"))
        if short in SCALAR_OPERAND and _scalar_operand(op.input_shapes):
            name = SCALAR_OPERAND[short]
        return Mapped(name, "fwd", params)
    return None


def _int_list(value: Any) -> list[int] | None:
    """A size argument (a list of ints; empty: a 0-dim tensor of one element) as recorded, else None."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [int(v) for v in value]
    return None


def _gathered(op: Op) -> list[int] | None:
    """The output shape of an advanced-indexing gather ``self[i0, i1, ...]``: the indexed dimensions (those with an
    index tensor) replaced by the index's shape (the largest where several broadcast)."""
    shapes = op.input_shapes
    base = _dims(shapes[0]) if shapes else None
    indices = shapes[1] if len(shapes) > 1 and isinstance(shapes[1], list) else []
    if not base:
        return None
    picked = [_dims(i) for i in indices]
    index = max((i for i in picked if i), key=_numel, default=None)
    if index is None:
        return None
    kept = [d for pos, d in enumerate(base) if pos >= len(picked) or not picked[pos]]
    return list(index) + kept


def untimed_work(op: Op) -> Mapped | None:
    """The device work of a top-level op that :func:`map_op` cannot model, for a graph that recorded no kernel time
    of it (a shape-only capture predicted on a GPU), priced by the roofline of the target's peaks instead of
    nothing: gathers and scatters by the rows they move (``index``, ``index_put``), allocations that fill by their
    size (``new_zeros``, ``one_hot``, the scatter of a ``max`` backward), anything else as element-wise over its
    largest tensor input (reductions such as ``argmax``, ``max``; logical ops). None without tensor inputs."""
    short = _short(op.name)
    if short == "index":
        out = _gathered(op)
        return Mapped("index", "fwd", _rows_cols(out)) if out else None
    if short in ("index_put", "index_put_", "_index_put_impl_"):
        values = _dims(op.input_shapes[2]) if len(op.input_shapes) > 2 else None
        return Mapped("index_put", "fwd", _rows_cols(values)) if values else None
    if short in ("new_zeros", "new_ones", "new_full"):
        size = _int_list(_scalar(op, 1))
        return Mapped("fill_", "fwd", _rows_cols(size)) if size is not None else None
    if short == "value_selecting_reduction_backward":
        size = _int_list(_scalar(op, 3))
        return Mapped("fill_", "fwd", _rows_cols(size)) if size is not None else None
    tensors = _tensors(op.input_shapes)
    if not tensors:
        return None
    largest = max(tensors, key=_numel)
    if short == "one_hot":
        classes = _scalar(op, 1)
        width = int(classes) if isinstance(classes, int) and classes > 0 else 1
        return Mapped("fill_", "fwd", {"M": float(_numel(largest)), "N": float(width)})
    return Mapped(short, "fwd", _rows_cols(largest))


def implementation(node: Op, mapped: Mapped) -> str | None:
    """Which measured implementation an op instance is: FBGEMM's TBE or torch EmbeddingBag for lookups."""
    if mapped.op != "embedding_lookup":
        return None
    return "fbgemm_tbe" if any(m in node.name.lower() for m in BATCHED_MARKERS) else "torch_embedding_bag"
