"""Parameters and memory held per GPU: weights, gradients, optimizer state and activations (bytes).

Mixed-precision Adam: weights and gradients in the training dtype, optimizer state 12 bytes per parameter
(fp32 master weights, first and second moments; 8 when training in fp32), sharded over the data-parallel group
(and the sequence group, whose replicas hold the same weights) by the distributed optimizer.
Activations per layer and micro-batch are what the forward ops keep (planner/strategies.py); 1F1B keeps
min(pp, micro-batches) micro-batches in flight on the first stage and one on the last.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.candidates import Candidates, Framework
from planner.costs import saved_bytes
from planner.model import Transformer
from planner.strategies import LayerCosts, padded_vocab
from planner.system import DTYPE_BYTES
from planner.timing import expand

OPTIMIZER_STATE_BYTES = 12  # per parameter, mixed precision: fp32 master weight + Adam m + v


@dataclass
class StageParams:
    """Parameters held by one GPU of the first, a middle and the last pipeline stage."""

    first: np.ndarray
    middle: np.ndarray
    last: np.ndarray
    layer: np.ndarray         # one layer's parameters on one GPU

    @property
    def most(self) -> np.ndarray:
        return np.maximum(np.maximum(self.first, self.last), self.middle)


def layer_params(model: Transformer, c: Candidates) -> np.ndarray:
    """One layer's parameters on one GPU. 1d/context: linears and column-parallel biases split over t1, norms and
    row-parallel biases replicated. SUMMA: weights split over t1 × t2, biases and norms over t1."""
    t1, t2 = c.t1.astype(float), c.t2.astype(float)
    col_bias = (model.qkv_out + model.fc1_out) if model.bias else 0
    row_bias = 2 * model.hidden if model.bias else 0
    norms = 2 * model.norm_params
    if c.strategy == "summa":
        return model.layer_matrix_params() / (t1 * t2) + (col_bias + row_bias + norms) / t1
    return (model.layer_matrix_params() + col_bias) / t1 + row_bias + norms


def stage_params(model: Transformer, c: Candidates, fw: Framework) -> StageParams:
    """Per-GPU parameters of each stage: the first holds the embedding, the last the final norm and the LM head
    (a copy of the tied embedding when pp > 1, as Megatron keeps it)."""
    layers = (model.layers // c.pp).astype(float)
    per_layer = layer_params(model, c)
    word = padded_vocab(model, c.t1, fw) * model.hidden / c.t1
    embedding = word + (model.seq_len * model.hidden if model.learned_positions else 0)
    single = c.pp == 1
    head = np.where(single & model.tied_embeddings, 0.0, word) + model.norm_params
    body = layers * per_layer
    first = body + embedding + np.where(single, head, 0.0)
    last = np.where(single, first, body + head)
    middle = np.where(c.pp > 2, body, first)
    return StageParams(first, middle, last, per_layer)


def optimizer_shards(c: Candidates) -> np.ndarray:
    """GPUs sharing one copy of the optimizer state (1 without the distributed optimizer)."""
    group = c.dp * (c.t2 if c.strategy == "context" else 1)
    return np.where(c.dist_opt > 0, group, 1).astype(float)


def memory_per_gpu(model: Transformer, c: Candidates, fw: Framework, costs: LayerCosts, inv: np.ndarray,
                   params: StageParams) -> dict[str, np.ndarray]:
    """Bytes per GPU of the fullest stage: 'weights', 'gradients', 'optimizer', 'activations' and 'total'."""
    n = len(c)
    e = DTYPE_BYTES[fw.dtype]
    everything = expand(saved_bytes(costs.fwd), inv, n)
    non_core = expand(saved_bytes(costs.fwd, attn_core=False), inv, n)
    layer_input = expand(costs.layer_input, inv, n)
    per_layer = np.select([c.recompute == 0, c.recompute == 1], [everything, non_core], layer_input)
    working = np.where(c.recompute > 0, everything, 0.0)   # one layer rebuilt during its backward
    layers = (model.layers // c.pp).astype(float)
    in_flight = np.minimum(c.pp, c.nmb).astype(float)
    emb = expand(saved_bytes(costs.emb_fwd), inv, n)
    head = expand(saved_bytes(costs.head_fwd), inv, n)
    single = c.pp == 1
    act_first = (layers * per_layer + emb) * in_flight + working + np.where(single, head, 0.0)
    act_last = np.where(single, act_first, layers * per_layer + head + working)
    state = e + e + (OPTIMIZER_STATE_BYTES if e < 4 else 8) / optimizer_shards(c)   # per parameter
    total_first = state * params.first + act_first
    total_last = state * params.last + act_last
    first_worse = total_first >= total_last
    p = np.where(first_worse, params.first, params.last)
    out = {"weights": e * p, "gradients": e * p, "optimizer": (state - 2 * e) * p,
           "activations": np.where(first_worse, act_first, act_last)}
    out["total"] = np.maximum(total_first, total_last)
    return out
