"""The share of exact zeros in each optimizer state tensor of a rank, read between iterations (never timed).

Element-wise math can cost more on special values than on others (torch.sqrt of zeros ~4x on the AMD host), and
an optimizer's state is full of them early in training: Adam's second moment of a token embedding stays exactly
zero in the rows of tokens no batch has held yet. Traces carry shapes, not values, so the workload collector
records these shares (``optimizer_state_stats``) for the ops that read the state (:mod:`pmdb.traces.state_values`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16)


@torch.no_grad()
def state_zero_fractions(optimizer: torch.optim.Optimizer | None, step: int) -> list[dict[str, Any]]:
    """One row per state tensor shaped like its parameter: {step, param_index, state, shape, numel, zero_frac}.

    ``step`` is the number of optimizer steps taken so far. Counting runs on the host (numpy for CPU tensors,
    outside any profiler), so it adds no op to a trace."""
    if optimizer is None:
        return []
    rows: list[dict[str, Any]] = []
    index = 0
    for group in optimizer.param_groups:
        for param in group["params"]:
            for name, value in sorted(optimizer.state.get(param, {}).items()):
                if not isinstance(value, torch.Tensor) or value.shape != param.shape or value.numel() == 0:
                    continue
                if value.device.type == "cpu" and value.dtype in _NUMPY_DTYPES:
                    nonzero = int(np.count_nonzero(value.detach().contiguous().numpy()))
                else:
                    nonzero = int(torch.count_nonzero(value).item())
                rows.append({"step": int(step), "param_index": index, "state": name,
                             "shape": [int(s) for s in value.shape], "numel": int(value.numel()),
                             "zero_frac": 1.0 - nonzero / value.numel()})
            index += 1
    return rows
