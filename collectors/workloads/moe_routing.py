"""Mixture-of-experts layers in a shape-only capture: which tokens each expert gets, when no data decides it.

A mixture-of-experts layer routes each token to an expert by the router's output, so how many rows each expert's
GEMMs get is data-dependent (``torch.nonzero``/``torch.where`` over the routing mask), and the ``meta`` device of
:mod:`collectors.workloads.graph_only` has no data: the capture fails there. For the expert loops pmdb knows
(:data:`ROUTED`, by ``model_type``), the capture replaces that loop by one with a stated policy, **balanced routing
under the router's capacity**: every expert gets

    tokens_per_expert = batch x min(expert_capacity, ceil(tokens per sequence / num_experts))

rows (Switch Transformers cap each expert's tokens per sequence at ``expert_capacity``; tokens over it pass the layer
unchanged). The replacement runs the real loop's device work per expert on those rows: the gather of the expert's
rows, the expert's MLP, the scaling by the routing weight and the ``index_add_`` back. It leaves out the routing
mask's ``nonzero``/``where`` (small kernels, each a device-to-host sync on a GPU).

What the policy cannot know: with the labels' inputs (every token id 1) the router may send most tokens of a sequence
to one expert, which then computes its capacity's rows while the others compute few. Per sparse layer the
difference is at most (num_experts - 1) x tokens_per_expert rows of the expert MLP; the capture's note says so.
"""
from __future__ import annotations

import contextlib
import math
import types
from typing import Any, Iterator

# model_type -> (module path, class name) of the expert loop the capture replaces
ROUTED: dict[str, tuple[str, str]] = {
    "switch_transformers": ("transformers.models.switch_transformers.modeling_switch_transformers",
                            "SwitchTransformersExperts"),
}


def tokens_per_expert(tokens: int, batch_size: int, num_experts: int, capacity: int | None) -> int:
    """Rows each expert gets under balanced routing: ``batch_size`` sequences of ``tokens / batch_size`` tokens each
    split evenly over ``num_experts``, at most ``capacity`` per expert and sequence (None: no cap)."""
    per_sequence = math.ceil(tokens / max(batch_size, 1))
    share = math.ceil(per_sequence / max(num_experts, 1))
    return max(batch_size, 1) * (share if capacity is None or capacity <= 0 else min(int(capacity), share))


def _balanced_forward(batch_size: int, capacity: int | None) -> Any:
    """The expert loop of a Mixtral-style experts module (``forward(hidden_states, selected_experts,
    routing_weights)``, experts named ``expert_<i>``) with every expert given its balanced share of rows."""
    import torch

    def forward(self: Any, hidden_states: Any, selected_experts: Any, routing_weights: Any) -> Any:
        final = torch.zeros_like(hidden_states)
        rows = tokens_per_expert(hidden_states.shape[0], batch_size, self.num_experts, capacity)
        for expert in range(self.num_experts):
            top_x = torch.arange(rows, device=hidden_states.device)   # stands in for torch.where's token indices
            choice = torch.zeros_like(top_x)
            state = hidden_states[None, top_x].reshape(-1, hidden_states.shape[-1])
            out = self[f"expert_{expert}"](state) * routing_weights[top_x, choice, None]
            final.index_add_(0, top_x, out.to(hidden_states.dtype))
        return final

    return forward


@contextlib.contextmanager
def balanced_routing(model: Any, batch_size: int, seq_len: int) -> Iterator[str | None]:
    """Within the block, every expert loop of ``model`` whose model type is in :data:`ROUTED` runs
    :func:`_balanced_forward` for ``batch_size`` sequences; yields the note that says so, with the rows per expert
    of ``seq_len``-token sequences (None when the model has no such layer)."""
    import importlib

    config = getattr(model, "config", None)
    where = ROUTED.get(getattr(config, "model_type", ""))
    if where is None:
        yield None
        return
    cls = getattr(importlib.import_module(where[0]), where[1])
    experts = [m for m in model.modules() if isinstance(m, cls)]
    if not experts:
        yield None
        return
    capacity = getattr(config, "expert_capacity", None)
    forward = _balanced_forward(batch_size, capacity)
    for module in experts:
        module.forward = types.MethodType(forward, module)
    try:
        num = experts[0].num_experts
        rows = tokens_per_expert(batch_size * seq_len, batch_size, num, capacity)
        cap = f", capacity {capacity} per sequence" if capacity else ""
        yield (f"{len(experts)} mixture-of-experts layers captured with balanced routing ({num} experts{cap}): "
               f"{rows} rows per expert of {batch_size * seq_len} tokens; a real router may give one expert more "
               f"and the others fewer (collectors/workloads/moe_routing.py)")
    finally:
        for module in experts:
            del module.forward
