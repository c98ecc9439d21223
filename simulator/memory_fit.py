"""Whether a shape-only capture can run on the GPU it is predicted for: its fp32 parameters, their gradients and
the optimizer's state (what the step must hold before any activation, bytes) against the GPU's memory.

A capture records no memory (the meta device allocates nothing), but it records the model's parameter count (the
'graph' run's summary) and its recipe (the workload: training or inference, optimizer). The bytes below are a lower
bound of what the step needs; a GPU with less memory cannot run it as captured, and the prediction is then of a
GPU with that sheet's speed and enough memory. A user is told so in one warning line; nothing else changes.
"""
from __future__ import annotations

import json

from collectors.workloads.graph_only import RECIPE_INFERENCE
from pmdb.store import Store

FP32_BYTES = 4
# per parameter, in fp32 words: the weights; a training step's gradients; the optimizer's state (AdamW: two moments;
# pmdb's SGD has no momentum)
STATE_WORDS = {"adamw": 2, "sgd": 0, None: 0}


def held_bytes(parameters: int, inference: bool, optimizer: str | None) -> int:
    """Bytes a step holds before any activation: weights, plus gradients and optimizer state when it trains."""
    words = 1 if inference else 2 + STATE_WORDS.get(optimizer, 0)
    return int(parameters) * words * FP32_BYTES


def memory_warning(store: Store, trace_set_id: int, target: str) -> str | None:
    """One line when the capture of ``trace_set_id`` cannot hold its parameters (and gradients, optimizer state)
    in the memory of GPU platform ``target``; None when it fits, or when the trace set is no shape-only capture or
    the target's memory is not on record."""
    row = store.conn.execute(
        "SELECT CAST(r.summary AS VARCHAR), CAST(w.config AS VARCHAR), s.memory_bytes FROM trace_sets t "
        "JOIN collection_runs r USING (run_id) LEFT JOIN workloads w ON w.workload_id = t.workload_id "
        "LEFT JOIN gpu_specs s ON s.platform = ? WHERE t.trace_set_id = ? AND r.kind = 'graph'",
        [target, int(trace_set_id)]).fetchone()
    if row is None or not row[0] or not row[2]:
        return None
    summary, config = json.loads(row[0]), json.loads(row[1]) if row[1] else {}
    parameters = summary.get("parameters")
    if not isinstance(parameters, int) or parameters <= 0:
        return None
    inference = config.get("recipe") == RECIPE_INFERENCE
    need, memory = held_bytes(parameters, inference, config.get("optimizer")), int(row[2])
    if need <= memory:
        return None
    what = "fp32 weights" if inference else "fp32 weights and gradients" + (
        " and optimizer state" if STATE_WORDS.get(config.get("optimizer"), 0) else "")
    return (f"{target} has {memory / 2**30:.3g} GiB, and this capture's {parameters / 1e9:.2f} B parameters need "
            f"{need / 2**30:.3g} GiB for their {what} alone: the step does not fit on one such GPU as captured; the "
            f"prediction is of a GPU with its speed and enough memory")
