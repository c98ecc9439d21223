"""Mixture-of-experts layers in a shape-only capture: which tokens each expert gets, when no data decides it.

A mixture-of-experts layer routes each token to its experts by the router's output, so how many rows each expert's
GEMMs get is data-dependent (``torch.nonzero``/``torch.where`` over the routing mask), and the ``meta`` device of
:mod:`collectors.workloads.graph_only` has no data: the capture fails there. For the expert loops pmdb knows
(:data:`ROUTED`, by ``model_type``), the capture replaces that loop by one with a stated policy, **balanced
routing**: each token goes to ``top_k`` experts (the config's ``num_experts_per_tok``; 1 for Switch Transformers)
and every expert gets the even share of those token-expert pairs,

    tokens_per_expert = ceil(tokens x top_k / num_experts)                           (no capacity), or
    tokens_per_expert = batch x min(expert_capacity, ceil(tokens per sequence x top_k / num_experts))

rows (Switch Transformers cap each expert's tokens per sequence at ``expert_capacity``; tokens over it pass the layer
unchanged). Two forms of expert loop are replaced (:class:`Routed`):

* ``modules``: a ModuleDict of experts named ``expert_<i>``, each an MLP module (Switch Transformers);
* ``fused``: the top-k experts of transformers 5 (Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE, DeepSeek-V2, DeepSeek-V3,
  GLM-4-MoE, Phi-MoE, GraniteMoE, ERNIE-4.5-MoE, and the hybrids Qwen3-Next, MiniMax and Jamba): one module holding
  every expert's weights, ``gate_up_proj`` [experts, 2 x intermediate, hidden] and ``down_proj`` [experts, hidden,
  intermediate], ``forward(hidden_states, top_k_index, top_k_weights)``, the same loop line for line. The capture
  builds these with ``experts_implementation="eager"`` (graph_only), so that this loop, not the fused ``grouped_mm``
  path, is the one replaced. A shared expert beside them (Qwen2-MoE, DeepSeek, GLM-4-MoE, ERNIE-4.5, Qwen3-Next) is
  a dense MLP of every token: captured as it is. Their routers differ (softmax or sigmoid scores, DeepSeek's and
  GLM's groups of experts, Phi-MoE's sparsemixer, a score correction bias) and run as they are; only the loop after
  them is replaced.

The replacement runs the real loop's device work per expert on those rows: the gather of the expert's rows, the
expert's MLP (fused: ``linear`` with ``gate_up_proj[e]``, ``chunk``, ``act_fn(gate) * up``, ``linear`` with
``down_proj[e]``), the scaling by the routing weight and the ``index_add_`` back. It leaves out the routing mask's
``one_hot``/``nonzero``/``where`` and the fused loop's ``item`` of each expert index (small kernels and
device-to-host syncs on a GPU).

A second policy, ``inputs`` (``--routing inputs``), routes as the recipe's own inputs do where they decide it:
with every input id 1 and nothing random between the embedding and the router, every token's hidden state is the
same (attention over equal values returns that value; the models here add no absolute position embedding to it:
Switch Transformers has a relative attention bias, the fused models rotary embeddings), so the router, which
scores each token from its own hidden state alone, sends every token to the same ``top_k`` experts, and only those
run their loop iteration:

    rows = tokens                                                                    (no capacity), or
    rows = batch x min(expert_capacity, tokens per sequence)                  (each sequence up to the capacity)

for ``top_k`` experts and none for the others. That holds in eval mode (an inference call) and in a training step
without dropout or router jitter (Mixtral's defaults); where a training step draws dropout masks or jitter (Switch
Transformers' ``dropout_rate``, ``router_jitter_noise``) the tokens differ and the policy falls back to balanced
routing, and the note says why (Phi-MoE's ``router_jitter_noise`` too). The tests compare both with real CPU runs
of tiny models. The hybrids (:data:`POSITION_MIXING`: Qwen3-Next's linear attention, a gated delta rule, and
MiniMax's lightning attention, recurrent states over the sequence; Jamba's Mamba layers, a selective scan and a
causal convolution) mix positions other than by attention over alike values, so their tokens differ at the
routers in any mode, eval included (real CPU runs of tiny models in eval mode: 0.003 to 0.18 apart at the
routers' inputs, where alike tokens are exactly equal), and the premise of ``inputs`` fails: they are routed
balanced only, ``inputs`` falling back with the reason in the note.

What the policy cannot know: which experts a real router picks. With the labels' inputs (every token id 1) the
tokens' hidden states are alike, and a top-k router without noise sends every token to the same ``top_k`` experts:
a real CPU run of the tests' tiny Mixtral computes 2 of its 4 experts on all 32 tokens per layer, where the policy
computes 4 on 16 rows each (the same rows in all, in fewer and larger GEMMs). Switch Transformers (dropout and
router jitter in training) spread tokens more and cap each expert at its capacity. Per sparse layer a real expert
computes between 0 and every token's rows (batch x capacity, with a capacity) where the policy gives each
tokens_per_expert; the capture's note says that a real router may differ.
"""
from __future__ import annotations

import contextlib
import importlib
import math
import types
from typing import Any, Callable, Iterator, NamedTuple


class Routed(NamedTuple):
    """An expert loop the capture replaces: its class (module path, class name) and form ('modules' or 'fused',
    the module docstring)."""

    module: str
    cls: str
    form: str = "fused"


def _fused(model_type: str, cls: str) -> Routed:
    """A fused experts class of transformers' ``models.<model_type>.modeling_<model_type>``."""
    return Routed(f"transformers.models.{model_type}.modeling_{model_type}", cls)


# model_type -> the expert loop the capture replaces. The fused entries' classes run Mixtral's loop line for line
# (the tests compare the source); their routers differ (softmax or sigmoid scores, DeepSeek's and GLM-4-MoE's groups
# of experts, Phi-MoE's sparsemixer, ERNIE-4.5's score correction) but all hand the loop top_k_index/top_k_weights.
# The hybrids (qwen3_next, minimax, jamba) are routed balanced only: their linear-attention or Mamba layers mix
# positions, so the tokens of --routing inputs are not alike at their routers (POSITION_MIXING, not_alike).
# Left out: experts classes with another loop or layout.
ROUTED: dict[str, Routed] = {
    "switch_transformers": Routed("transformers.models.switch_transformers.modeling_switch_transformers",
                                  "SwitchTransformersExperts", "modules"),
    "mixtral": _fused("mixtral", "MixtralExperts"),
    "qwen2_moe": _fused("qwen2_moe", "Qwen2MoeExperts"),
    "olmoe": _fused("olmoe", "OlmoeExperts"),
    "qwen3_moe": _fused("qwen3_moe", "Qwen3MoeExperts"),
    "deepseek_v2": _fused("deepseek_v2", "DeepseekV2Experts"),   # a shared expert beside them, as Qwen2-MoE
    "deepseek_v3": _fused("deepseek_v3", "DeepseekV3Experts"),   # likewise
    "glm4_moe": _fused("glm4_moe", "Glm4MoeExperts"),            # likewise
    "phimoe": _fused("phimoe", "PhimoeExperts"),                 # router jitter in training: balanced (not_alike)
    "granitemoe": _fused("granitemoe", "GraniteMoeExperts"),
    "ernie4_5_moe": _fused("ernie4_5_moe", "Ernie4_5_MoeExperts"),   # shared experts when the config has them
    "qwen3_next": _fused("qwen3_next", "Qwen3NextExperts"),      # hybrids: balanced only (POSITION_MIXING); a
    "minimax": _fused("minimax", "MiniMaxExperts"),              # shared expert beside Qwen3-Next's
    "jamba": _fused("jamba", "JambaExperts"),
}

# model_type -> (the class of its layers that mix positions other than by attention over alike values, what they
# are): where a model has one, the recipe's alike inputs differ at the routers after it, in any mode. A config of
# these types with full-attention layers only has none, and routes as the inputs do (as a real CPU run of such tiny
# models does, checked once by hand; not in the tests).
POSITION_MIXING: dict[str, tuple[str, str]] = {
    "qwen3_next": ("Qwen3NextGatedDeltaNet", "linear-attention"),
    "minimax": ("MiniMaxLightningAttention", "lightning-attention"),
    "jamba": ("JambaMambaMixer", "Mamba"),
}


def tokens_per_expert(tokens: int, batch_size: int, num_experts: int, capacity: int | None, top_k: int = 1) -> int:
    """Rows each expert gets under balanced routing of ``tokens`` tokens (``batch_size`` sequences), each sent to
    ``top_k`` of ``num_experts`` experts: the even share ceil(tokens x top_k / num_experts), at most every token;
    with a ``capacity`` (tokens per expert and sequence; None or <= 0: no cap) the share is per sequence, capped."""
    experts, batch, k = max(num_experts, 1), max(batch_size, 1), max(top_k, 1)
    if capacity is None or capacity <= 0:
        return min(tokens, math.ceil(tokens * k / experts))
    per_sequence = math.ceil(tokens / batch)
    return batch * min(int(capacity), per_sequence, math.ceil(per_sequence * k / experts))


POLICIES = ("balanced", "inputs")   # --routing: the even share, or as the recipe's all-alike tokens route


def alike_rows(tokens: int, batch_size: int, capacity: int | None) -> int:
    """Rows of each of the ``top_k`` experts that take every token when all tokens are alike: every token, or with a
    ``capacity`` (per expert and sequence) each sequence's first ``capacity`` tokens."""
    batch = max(batch_size, 1)
    if capacity is None or capacity <= 0:
        return tokens
    return batch * min(int(capacity), math.ceil(tokens / batch))


def expert_rows(tokens: int, batch_size: int, num_experts: int, capacity: int | None, top_k: int,
                alike: bool) -> tuple[int, int]:
    """(experts that run, rows each gets): under balanced routing every expert its even share
    (:func:`tokens_per_expert`); with ``alike`` tokens the first ``top_k`` experts every token (:func:`alike_rows`)."""
    if alike:
        return min(max(top_k, 1), max(num_experts, 1)), alike_rows(tokens, batch_size, capacity)
    return num_experts, tokens_per_expert(tokens, batch_size, num_experts, capacity, top_k)


def not_alike(model: Any) -> str | None:
    """Why the recipe's tokens are not all alike at the routers (None: they are): layers that mix positions
    (:data:`POSITION_MIXING`, in any mode), or a training step that draws dropout masks (a Dropout module or a config
    ``*dropout*`` above 0) or router jitter (``*jitter*`` above 0)."""
    config = getattr(model, "config", None)
    mixing = POSITION_MIXING.get(getattr(config, "model_type", ""))
    if mixing is not None and any(type(m).__name__ == mixing[0] for m in model.modules()):
        return f"its {mixing[1]} layers mix positions, so the recipe's tokens differ at the routers"
    if not getattr(model, "training", False):
        return None
    from torch import nn

    drawn = sorted({name for name, value in (vars(config).items() if config is not None else ())
                    if ("dropout" in name or "jitter" in name) and isinstance(value, (int, float))
                    and not isinstance(value, bool) and value > 0})
    if not drawn and any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()):
        drawn = ["Dropout modules"]
    return f"the training step draws random masks or noise ({', '.join(drawn)})" if drawn else None


def _modules_forward(batch_size: int, capacity: int | None, alike: bool = False) -> Callable[..., Any]:
    """The expert loop of a Switch-style experts module (``forward(hidden_states, selected_experts,
    routing_weights)``, experts named ``expert_<i>``) with every expert given its balanced share of rows (``alike``:
    the first expert every token, up to the capacity, and no other)."""
    import torch

    def forward(self: Any, hidden_states: Any, selected_experts: Any, routing_weights: Any) -> Any:
        final = torch.zeros_like(hidden_states)
        run, rows = expert_rows(hidden_states.shape[0], batch_size, self.num_experts, capacity, 1, alike)
        for expert in range(run):
            top_x = torch.arange(rows, device=hidden_states.device)   # stands in for torch.where's token indices
            choice = torch.zeros_like(top_x)
            state = hidden_states[None, top_x].reshape(-1, hidden_states.shape[-1])
            out = self[f"expert_{expert}"](state) * routing_weights[top_x, choice, None]
            final.index_add_(0, top_x, out.to(hidden_states.dtype))
        return final

    return forward


def _fused_forward(batch_size: int, alike: bool = False) -> Callable[..., Any]:
    """The expert loop of a fused top-k experts module (``forward(hidden_states, top_k_index, top_k_weights)``,
    weights ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I]) with every expert given its balanced share of
    rows: the ``top_k`` of ``top_k_index`` [tokens, top_k], no capacity (``alike``: the first ``top_k`` experts
    every token, and no other)."""
    import torch
    from torch.nn import functional

    def forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
        final = torch.zeros_like(hidden_states)
        run, rows = expert_rows(hidden_states.shape[0], batch_size, self.num_experts, None, top_k_index.shape[-1],
                                alike)
        for expert in range(run):
            token_idx = torch.arange(rows, device=hidden_states.device)   # stands in for torch.where's indices
            top_k_pos = torch.zeros_like(token_idx)
            gate, up = functional.linear(hidden_states[token_idx], self.gate_up_proj[expert]).chunk(2, dim=-1)
            out = functional.linear(self.act_fn(gate) * up, self.down_proj[expert])
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final

    return forward


def _note(layers: int, num_experts: int, top_k: int, capacity: int | None, batch_size: int, tokens: int,
          alike: bool = False, fallback: str | None = None) -> str:
    """The capture's note: the policy (experts, top-k, capacity) and the rows per expert of ``tokens`` tokens."""
    cap = f", capacity {capacity} per sequence" if capacity else ""
    run, rows = expert_rows(tokens, batch_size, num_experts, capacity, top_k, alike)
    if alike:
        return (f"{layers} mixture-of-experts layers captured as the recipe's alike tokens route ({num_experts} "
                f"experts, top-{top_k} per token{cap}): {run} expert(s) of {rows} rows each, "
                f"the others none, of {tokens} tokens (collectors/workloads/moe_routing.py)")
    why = f"; --routing inputs does not decide it: {fallback}" if fallback else ""
    return (f"{layers} mixture-of-experts layers captured with balanced routing ({num_experts} experts, top-{top_k} "
            f"per token{cap}): {rows} rows per expert of {tokens} tokens; a real router may give some experts more "
            f"and the others fewer{why} (collectors/workloads/moe_routing.py)")


@contextlib.contextmanager
def expert_routing(model: Any, batch_size: int, seq_len: int, policy: str = "balanced") -> Iterator[str | None]:
    """Within the block, every expert loop of ``model`` whose model type is in :data:`ROUTED` runs its replacement
    under ``policy`` (:data:`POLICIES`; 'inputs' where :func:`not_alike` finds the tokens alike, else balanced) for
    ``batch_size`` sequences; yields the note that says so, with the rows per expert of ``seq_len``-token
    sequences (None when the model has no such layer)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown routing policy {policy!r}: use {', '.join(POLICIES)}")
    config = getattr(model, "config", None)
    where = ROUTED.get(getattr(config, "model_type", ""))
    if where is None:
        yield None
        return
    cls = getattr(importlib.import_module(where.module), where.cls)
    experts = [m for m in model.modules() if isinstance(m, cls)]
    if not experts:
        yield None
        return
    fallback = not_alike(model) if policy == "inputs" else None
    alike = policy == "inputs" and fallback is None
    fused = where.form == "fused"
    capacity = None if fused else getattr(config, "expert_capacity", None)
    top_k = int(getattr(config, "num_experts_per_tok", 1)) if fused else 1
    forward = _fused_forward(batch_size, alike) if fused else _modules_forward(batch_size, capacity, alike)
    for module in experts:
        module.forward = types.MethodType(forward, module)
    try:
        yield _note(len(experts), experts[0].num_experts, top_k, capacity, batch_size, batch_size * seq_len, alike,
                    fallback)
    finally:
        for module in experts:
            del module.forward
