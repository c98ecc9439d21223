"""The steps of one transformer layer (and of the embedding and LM head) per micro-batch, for each strategy.

- 1d (Megatron tensor parallelism, with or without sequence parallelism) and context (1D tensor parallelism inside
  each of t2 sequence shards; attention gathers K and V over t2) share one builder: 1d is context with t2 = 1.
- summa: 2D SUMMA over a t1 × t2 grid (hidden split t1 ways, tokens t2 ways); each linear is nb panel steps whose
  broadcasts/reduces overlap the panel GEMMs; attention gathers K and V over the token group.
Per-element costs (FLOPs, bytes) of the element-wise kernels are stated where they are built; e = bytes per element.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.candidates import Candidates, Framework
from planner.costs import Array, Comm, Op, Step, flash, gemm, vector
from planner.model import Transformer
from planner.system import DTYPE_BYTES


@dataclass
class LayerCosts:
    """Per micro-batch steps: one layer forward/backward, the embedding (first stage), the LM head (last stage)."""

    fwd: list[Step]
    bwd: list[Step]
    emb_fwd: list[Step]
    emb_bwd: list[Step]
    head_fwd: list[Step]
    head_bwd: list[Step]
    layer_input: Array   # bytes of a layer's input: all that full recomputation keeps per layer
    p2p_bytes: Array     # bytes sent across a pipeline-stage boundary per micro-batch and direction


def padded_vocab(model: Transformer, t1: Array, fw: Framework) -> Array:
    """Vocabulary padded to a multiple of vocab_multiple × tensor group (Megatron)."""
    unit = fw.vocab_multiple * np.asarray(t1, dtype=float)
    return np.ceil(model.vocab / unit) * unit


def build(model: Transformer, c: Candidates, fw: Framework) -> LayerCosts:
    """Steps of the candidates' strategy (arrays over the candidates)."""
    return _summa(model, c, fw) if c.strategy == "summa" else _megatron(model, c, fw)


# ---- element-wise kernels shared by the strategies ------------------------------------------------------------
def _norm(name: str, elements: Array, e: int) -> Op:
    """LayerNorm: read x, write y (~8 FLOPs/element); keeps its input for backward."""
    return vector(name, elements, 8, 2 * e, saved=e * elements)


def _norm_bwd(name: str, elements: Array, e: int) -> list[Op]:
    """LayerNorm backward (read x and dy, write dx; weight-gradient kernel) and the residual-gradient add."""
    return [vector(f"{name}_bwd", elements, 8, 3 * e, launches=2), vector(f"{name}_residual_grad", elements, 1, 3 * e)]


def _dropout_add(name: str, elements: Array, e: int) -> Op:
    """Fused bias + dropout + residual add: read x and residual, write out and a 1-byte mask (kept)."""
    return vector(name, elements, 3, 3 * e + 1, saved=elements)


def _dropout_add_bwd(name: str, elements: Array, e: int) -> Op:
    """Dropout backward (read grad and mask, write grad) and the bias-gradient reduction."""
    return vector(f"{name}_bwd", elements, 2, 2 * e + 1, launches=2)


def _activation(model: Transformer, T: Array, fc1: Array, ffn: Array, e: int) -> tuple[Op, Op]:
    """GeLU (fused with its bias) or SwiGLU over the first MLP projection's output (fc1 wide, ffn out)."""
    name = "swiglu" if model.gated_mlp else "bias_gelu"
    fwd = Op(name, "vector", 20.0 * T * fc1, e * T * (fc1 + ffn), saved=e * T * fc1)
    bwd = Op(f"{name}_bwd", "vector", 20.0 * T * fc1, e * T * (ffn + 2 * fc1))
    return fwd, bwd


def _attention(model: Transformer, fw: Framework, b: Array, heads: Array, kv: Array, s_q: Array, s_k: Array,
               e: int, gather: list[Comm], scatter: list[Comm]) -> tuple[list[Step], list[Step]]:
    """Attention core for ``heads`` local query heads (``kv`` key/value heads), s_q local queries against s_k keys.

    ``gather`` brings the other sequence shards' K and V (context/SUMMA); backward gathers again and ``scatter``
    reduce-scatters dK, dV. Fused: 4·b·heads·s_q·s_k·d FLOPs forward (halved by a causal mask), 2.5× that backward
    (recomputed scores), no s×s matrix. Unfused (Megatron): baddbmm, fused scale-mask-softmax, dropout, bmm, and a
    copy back to [s, b, h] layout; the s×s scores, probabilities and mask are kept (5 bytes per score for fp16).
    """
    d = model.head_dim
    T = b * s_q
    if fw.flash_attention:
        f = 4.0 * b * heads * s_q * s_k * d * (0.5 if model.causal else 1.0)
        io = e * b * (2 * s_q * heads * d + 2 * s_k * kv * d)
        fwd = [*gather, flash("flash_attention", f, io, saved=4.0 * b * heads * s_q)]  # log-sum-exp, fp32
        bwd = [*gather, flash("flash_attention_bwd", 2.5 * f, 2 * io, launches=2), *scatter]
        return fwd, bwd
    count = b * heads
    scores = count * s_q * s_k
    softmax, softmax_bwd = _softmax(fw, count, s_q, s_k, scores, e)
    fwd = [*gather,
           gemm("attn_scores", s_q, s_k, d, e, count=count, attn_core=True),
           softmax,
           vector("attn_dropout", scores, 1, 2 * e + 1, saved=scores, attn_core=True),
           gemm("attn_context", s_q, d, s_k, e, count=count, saved=e * scores, attn_core=True),
           vector("context_copy", T * heads * d, 0, 2 * e)]
    bwd = [*gather,
           vector("context_copy_bwd", T * heads * d, 0, 2 * e),
           gemm("attn_context_dgrad", s_q, s_k, d, e, count=count),     # dP = dO·Vᵀ
           gemm("attn_context_vgrad", s_k, d, s_q, e, count=count),     # dV = Pᵀ·dO
           vector("attn_dropout_bwd", scores, 1, 2 * e + 1),
           softmax_bwd,
           gemm("attn_scores_qgrad", s_q, d, s_k, e, count=count),      # dQ = dS·K
           gemm("attn_scores_kgrad", s_k, d, s_q, e, count=count),      # dK = dSᵀ·Q
           vector("qkv_grad_concat", T * (heads + 2 * kv) * d, 0, 2 * e),
           *scatter]
    return fwd, bwd


def _softmax(fw: Framework, count: Array, s_q: Array, s_k: Array, scores: Array, e: int) -> tuple[Op, Op]:
    """Scale + causal mask + softmax over ``scores`` elements (``count`` = micro-batch × local heads matrices).

    Fused kernel: read and write e bytes per score each way. Where the framework's fused kernel does not apply
    (``Framework.softmax_fusion_batches``: count not a multiple of it, or keys outside (16, 4096]), torch runs
    it in fp32: forward cast (e + 4 bytes), scale (8), mask (8), softmax (8), cast back (4 + e), 5 kernels;
    backward the mirror (cast, masked-fill and scale gradients, softmax backward reading output and gradient,
    cast back: 2e + 36 bytes), 5 kernels."""
    unit = fw.softmax_fusion_batches
    if fw.flash_attention or not unit:
        fused = np.asarray(True)
    else:
        s_k = np.asarray(s_k, dtype=float)
        fused = ((np.asarray(count) % unit == 0) & (s_k > 16) & (s_k <= 4096)
                 & (np.asarray(s_q) % 4 == 0) & (s_k % 4 == 0))
    fwd = vector("scale_mask_softmax", scores, 5, np.where(fused, 2 * e, 2 * e + 32),
                 launches=np.where(fused, 1, 5), saved=e * scores, attn_core=True)
    bwd = vector("scale_mask_softmax_bwd", scores, 3, np.where(fused, 3 * e, 2 * e + 36),
                 launches=np.where(fused, 1, 5))
    return fwd, bwd


def _embedding(model: Transformer, fw: Framework, T: Array, t: Array, vpad: Array, e: int, sp: bool
               ) -> tuple[list[Step], list[Step]]:
    """Vocabulary-parallel embedding over t GPUs for T local tokens (+ position add, dropout), reduced over t."""
    h = model.hidden
    Tn = T / t if sp else T
    out = e * T * h
    fwd = [vector("embedding", T * h, 1, 4 * e, launches=np.where(np.asarray(t) > 1, 5, 3)),
           Comm("embedding_reduce", "reduce_scatter" if sp else "all_reduce", "tp_comm", out, "t1"),
           vector("embedding_dropout", Tn * h, 1, 2 * e + 1, saved=Tn * h)]
    bwd = [vector("embedding_dropout_bwd", Tn * h, 1, 2 * e + 1),
           *([Comm("embedding_grad_gather", "all_gather", "tp_comm", out, "t1")] if sp else []),
           Op("embedding_wgrad", "vector", T * h, e * (2 * T * h + vpad * h / t), launches=3)]
    return fwd, bwd


def _head(model: Transformer, fw: Framework, T: Array, t: Array, vpad: Array, e: int, sp: bool
          ) -> tuple[list[Step], list[Step]]:
    """Final norm, LM head (vocabulary-parallel GEMM) and fp32 cross-entropy over T local tokens.

    Cross-entropy forward passes over the logits: fp32 up-cast (read e, write 4), max (read 4), exp (read 4,
    write 4), sum (read 4), normalise (read 4, write 4): e + 28 bytes per logit; three all-reduces of T floats.
    Backward: read the fp32 softmax, write the fp16/bf16 gradient. Peak memory: logits plus their fp32 copy.
    """
    h = model.hidden
    Tn = T / t if sp else T
    vl = vpad / t
    logits = T * vl
    act = e * T * h
    gather = [Comm("head_input_gather", "all_gather", "tp_comm", act, "t1")] if sp else []
    fwd = [_norm("final_norm", Tn * h, e), *gather,
           gemm("lm_head", T, vl, h, e, saved=e * Tn * h),
           vector("cross_entropy", logits, 5, e + 28, launches=6, saved=(4 + e) * logits),
           Comm("loss_all_reduce", "all_reduce", "tp_comm", 4.0 * T, "t1", count=3)]
    bwd = [vector("cross_entropy_bwd", logits, 2, 4 + e, launches=2),
           gemm("lm_head_dgrad", T, h, vl, e), gemm("lm_head_wgrad", vl, h, T, e),
           Comm("head_grad_reduce", "reduce_scatter" if sp else "all_reduce", "tp_comm", act, "t1"),
           *_norm_bwd("final_norm", Tn * h, e)]
    return fwd, bwd


def _grad_accumulation(model: Transformer, fw: Framework, params: Array, e: int) -> list[Op]:
    """Autograd adds each micro-batch's weight gradients to the accumulated ones (read 2, write 1 per parameter)."""
    if fw.fused_grad_accumulation:
        return []
    tensors = 12 if model.bias else 6
    return [vector("grad_accumulate", params, 1, 3 * e, launches=tensors)]


# ---- 1d and context ---------------------------------------------------------------------------------------------
def _megatron(model: Transformer, c: Candidates, fw: Framework) -> LayerCosts:
    e = DTYPE_BYTES[fw.dtype]
    h, s = model.hidden, model.seq_len
    t = c.t1.astype(float)
    cp = c.t2.astype(float) if c.strategy == "context" else np.ones_like(t)
    b = c.mb.astype(float)
    sp = fw.sequence_parallel
    T = b * s / cp                       # tokens of this sequence shard
    Tn = T / t if sp else T              # tokens a norm/dropout sees
    heads, kv, d = model.heads / t, model.kv_heads / t, model.head_dim
    qkv, fc1, ffn = model.qkv_out / t, model.fc1_out / t, model.ffn_hidden / t
    act = e * T * h
    gather = [Comm("sp_all_gather", "all_gather", "tp_comm", act, "t1")] if sp else []
    reduce = Comm("tp_reduce", "reduce_scatter" if sp else "all_reduce", "tp_comm", act, "t1")
    bwd_reduce = Comm("tp_grad_reduce", "reduce_scatter" if sp else "all_reduce", "tp_comm", act, "t1")
    bwd_gather = [Comm("sp_grad_all_gather", "all_gather", "tp_comm", act, "t1")] if sp else []
    kv_full = 2.0 * e * b * s * kv * d   # K and V of the whole sequence
    cp_gather, cp_scatter = [], []
    if c.strategy == "context":
        cp_gather = [Comm("kv_all_gather", "all_gather", "cp_comm", kv_full, "t2")]
        cp_scatter = [Comm("kv_grad_reduce_scatter", "reduce_scatter", "cp_comm", kv_full, "t2")]
    attn_fwd, attn_bwd = _attention(model, fw, b, heads, kv, s / cp, float(s), e, cp_gather, cp_scatter)
    act_fwd, act_bwd = _activation(model, T, fc1, ffn, e)
    qkv_saved = e * Tn * h + e * T * (heads + 2 * kv) * d   # its input, and Q, K, V for the attention backward
    fwd: list[Step] = [
        _norm("ln1", Tn * h, e), *gather, gemm("qkv", T, qkv, h, e, saved=qkv_saved), *attn_fwd,
        gemm("attn_proj", T, h, h / t, e, saved=e * T * h / t), reduce, _dropout_add("attn_residual", Tn * h, e),
        _norm("ln2", Tn * h, e), *gather, gemm("fc1", T, fc1, h, e, saved=e * Tn * h), act_fwd,
        gemm("fc2", T, h, ffn, e, saved=e * T * ffn), reduce, _dropout_add("mlp_residual", Tn * h, e)]
    local_params = (model.layer_matrix_params() + (model.qkv_out + model.fc1_out) * model.bias) / t
    bwd: list[Step] = [
        _dropout_add_bwd("mlp_residual", Tn * h, e), *bwd_gather,
        gemm("fc2_dgrad", T, ffn, h, e), gemm("fc2_wgrad", ffn, h, T, e), act_bwd,
        gemm("fc1_dgrad", T, h, fc1, e), gemm("fc1_wgrad", h, fc1, T, e), bwd_reduce, *_norm_bwd("ln2", Tn * h, e),
        _dropout_add_bwd("attn_residual", Tn * h, e), *bwd_gather,
        gemm("attn_proj_dgrad", T, h / t, h, e), gemm("attn_proj_wgrad", h / t, h, T, e), *attn_bwd,
        gemm("qkv_dgrad", T, h, qkv, e), gemm("qkv_wgrad", h, qkv, T, e), bwd_reduce, *_norm_bwd("ln1", Tn * h, e),
        *_grad_accumulation(model, fw, local_params, e)]
    vpad = padded_vocab(model, t, fw)
    emb_fwd, emb_bwd = _embedding(model, fw, T, t, vpad, e, sp)
    head_fwd, head_bwd = _head(model, fw, T, t, vpad, e, sp)
    return LayerCosts(fwd, bwd, emb_fwd, emb_bwd, head_fwd, head_bwd, layer_input=e * Tn * h, p2p_bytes=act / t)


# ---- 2D SUMMA ---------------------------------------------------------------------------------------------------
def _summa(model: Transformer, c: Candidates, fw: Framework) -> LayerCosts:
    e = DTYPE_BYTES[fw.dtype]
    h, s = model.hidden, model.seq_len
    m1, m2 = c.t1.astype(float), c.t2.astype(float)
    nb = c.panels.astype(float)
    b = c.mb.astype(float)
    T = b * s / m2                        # local token rows
    hl = h / m1                           # local hidden columns
    heads, kv, d = model.heads / m1, model.kv_heads / m1, model.head_dim

    def linear(name: str, K: float, N: float, saved: Array) -> Op:
        """Y = X·W with X (T × K/m1) and W (K/m2 × N/m1) local: panel k broadcasts X's panel over the hidden group
        (m1) and W's panel over the token group (m2), then multiplies (T × K/nb)·(K/nb × N/m1)."""
        return gemm(name, T, N / m1, K / nb, e, launches=nb, saved=saved, panel_comms=[
            Comm(f"{name}_bcast_x", "broadcast", "summa_comm", e * T * K, "t1"),
            Comm(f"{name}_bcast_w", "broadcast", "summa_comm", e * K * N / m1, "t2")])

    def linear_bwd(name: str, K: float, N: float) -> list[Op]:
        """dX = dY·Wᵀ (broadcast W over m2, reduce partial dX over m1) and dW = Xᵀ·dY (broadcast X over m1,
        reduce partial dW over m2), panel by panel."""
        return [gemm(f"{name}_dgrad", T, K / nb, N / m1, e, launches=nb, panel_comms=[
                    Comm(f"{name}_dgrad_bcast_w", "broadcast", "summa_comm", e * K * N / m1, "t2"),
                    Comm(f"{name}_dgrad_reduce", "reduce", "summa_comm", e * T * K, "t1")]),
                gemm(f"{name}_wgrad", K / nb, N / m1, T, e, launches=nb, panel_comms=[
                    Comm(f"{name}_wgrad_bcast_x", "broadcast", "summa_comm", e * T * K, "t1"),
                    Comm(f"{name}_wgrad_reduce", "reduce", "summa_comm", e * K * N / m1, "t2")])]

    def norm(name: str) -> list[Step]:
        """LayerNorm over a hidden size split m1 ways: mean/variance all-reduced over m1 (2 fp32 per token)."""
        return [_norm(name, T * hl, e), Comm(f"{name}_stats", "all_reduce", "summa_comm", 8.0 * T, "t1")]

    def norm_bwd(name: str) -> list[Step]:
        return [*_norm_bwd(name, T * hl, e), Comm(f"{name}_grad_stats", "all_reduce", "summa_comm", 8.0 * T, "t1")]

    kv_full = 2.0 * e * b * s * kv * d
    gather = [Comm("kv_all_gather", "all_gather", "cp_comm", kv_full, "t2")]
    scatter = [Comm("kv_grad_reduce_scatter", "reduce_scatter", "cp_comm", kv_full, "t2")]
    attn_fwd, attn_bwd = _attention(model, fw, b, heads, kv, s / m2, float(s), e, gather, scatter)
    fc1, ffn = model.fc1_out, model.ffn_hidden
    act_fwd, act_bwd = _activation(model, T, fc1 / m1, ffn / m1, e)
    qkv_saved = e * T * hl + e * T * (heads + 2 * kv) * d
    fwd: list[Step] = [
        *norm("ln1"), linear("qkv", h, model.qkv_out, qkv_saved), *attn_fwd,
        linear("attn_proj", h, h, e * T * hl), _dropout_add("attn_residual", T * hl, e),
        *norm("ln2"), linear("fc1", h, fc1, e * T * hl), act_fwd,
        linear("fc2", ffn, h, e * T * ffn / m1), _dropout_add("mlp_residual", T * hl, e)]
    local_params = (model.layer_matrix_params() / m2 + (model.qkv_out + model.fc1_out) * model.bias) / m1
    bwd: list[Step] = [
        _dropout_add_bwd("mlp_residual", T * hl, e), *linear_bwd("fc2", ffn, h), act_bwd,
        *linear_bwd("fc1", h, fc1), *norm_bwd("ln2"), _dropout_add_bwd("attn_residual", T * hl, e),
        *linear_bwd("attn_proj", h, h), *attn_bwd, *linear_bwd("qkv", h, model.qkv_out), *norm_bwd("ln1"),
        *_grad_accumulation(model, fw, local_params, e)]
    vpad = padded_vocab(model, m1, fw)
    emb_fwd, emb_bwd = _embedding(model, fw, T, m1, vpad, e, sp=False)
    head_fwd, head_bwd = _head(model, fw, T, m1, vpad, e, sp=False)
    return LayerCosts(fwd, bwd, emb_fwd, emb_bwd, head_fwd, head_bwd, layer_input=e * T * hl,
                      p2p_bytes=e * T * hl)
