"""The shape of a transformer workload and its ``transformers`` config object, without torch: what the parent of a
`collect workload` run needs to check and describe the run (its ranks build the model, :mod:`.transformer`).

Any architecture ``AutoConfig.for_model(arch)`` knows works: ``--layers/--hidden/--heads`` are applied through the
config's own attribute map (``n_layer``, ``d_model``, ... are found by the library, not by per-model code), and the
sizes that must follow them are derived by their conventional names when the config has them: per-head widths
(``d_head``, ``d_kv``, ``head_dim``) = hidden / heads, feed-forward widths (``intermediate_size``, ``d_inner``,
``ffn_dim``, ``n_inner``, ``d_ff``, ``hidden_dim``, ``encoder_ffn_dim``, ``decoder_ffn_dim``) = 4 x hidden, key/value
heads = heads, decoder/encoder layer counts = layers, position tables >= the sequence length. ``overrides`` (from
``--config FILE``) are applied last and win.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pmdb.jsonfile import read_json
from pmdb.errors import PmdbError

HEADS = ("auto", "classification", "causal-lm", "masked-lm")
_HEAD_DIM = ("d_head", "d_kv", "head_dim")
_FFN = ("intermediate_size", "d_inner", "ffn_dim", "n_inner", "d_ff", "hidden_dim", "encoder_ffn_dim",
        "decoder_ffn_dim")
_KV_HEADS = ("num_key_value_heads",)
_EXTRA_LAYERS = ("num_decoder_layers", "decoder_layers", "encoder_layers")
_POSITIONS = ("max_position_embeddings", "n_positions")


@dataclass(frozen=True)
class TransformerConfig:
    """A transformer workload shape; None keeps the architecture's default."""

    arch: str
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    seq_len: int = 64
    head: str = "auto"
    lr: float = 1e-4
    batch_size: int = 8
    overrides: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "layers": self.layers, "hidden": self.hidden, "heads": self.heads,
                "seq_len": self.seq_len, "head": self.head, "lr": self.lr, "overrides": dict(self.overrides)}


def load_overrides(path: Path) -> dict[str, Any]:
    """Config-class keyword arguments from a JSON object file (e.g. {"vocab_size": 1000})."""
    data = read_json(path, "config")
    if not isinstance(data, dict):
        raise PmdbError(f"config file {path}: expected a JSON object of config-class arguments")
    return data


def build_config(cfg: TransformerConfig) -> Any:
    """The ``transformers`` config object of the shape (errors as one-line PmdbError)."""
    from transformers import AutoConfig

    try:
        base = AutoConfig.for_model(cfg.arch)
    except (ValueError, KeyError):
        from transformers import CONFIG_MAPPING
        known = ", ".join(sorted(k for k in CONFIG_MAPPING.keys() if k in ("gpt2", "bert", "xlnet", "opt", "llama",
                                                                          "t5", "distilbert", "mistral")))
        raise PmdbError(f"unknown transformer architecture {cfg.arch!r} (e.g. {known}; any model type "
                        f"transformers.AutoConfig knows)") from None
    present = set(base.to_dict())
    alias = dict(getattr(base, "attribute_map", {}) or {})
    kwargs: dict[str, Any] = {}
    hidden = cfg.hidden or getattr(base, "hidden_size", None)
    heads = cfg.heads or getattr(base, "num_attention_heads", None)
    for canonical, value in (("num_hidden_layers", cfg.layers), ("hidden_size", cfg.hidden),
                             ("num_attention_heads", cfg.heads)):
        if value is not None:
            if value < 1:
                raise PmdbError(f"bad {canonical} {value}: must be >= 1")
            kwargs[alias.get(canonical, canonical)] = value
    if (cfg.hidden or cfg.heads) and hidden and heads:
        if hidden % heads:
            raise PmdbError(f"hidden size {hidden} must be a multiple of the number of heads {heads}")
        hidden_name = alias.get("hidden_size", "hidden_size")
        kwargs.update({n: hidden // heads for n in _HEAD_DIM if n in present})
        kwargs.update({n: 4 * hidden for n in _FFN if n in present and n != hidden_name})
        kwargs.update({n: heads for n in _KV_HEADS if n in present})
    if cfg.layers:
        kwargs.update({n: cfg.layers for n in _EXTRA_LAYERS if n in present and getattr(base, n) is not None})
    kwargs.update({n: cfg.seq_len for n in _POSITIONS if n in present and (getattr(base, n) or 0) < cfg.seq_len})
    if "pad_token_id" in present and getattr(base, "pad_token_id", None) is None:
        kwargs["pad_token_id"] = 0
    if "use_cache" in present:
        kwargs["use_cache"] = False
    if getattr(base, "is_encoder_decoder", False) and getattr(base, "decoder_start_token_id", None) is None:
        kwargs["decoder_start_token_id"] = kwargs.get("pad_token_id", getattr(base, "pad_token_id", None) or 0)
    kwargs.update(cfg.overrides)
    try:
        return AutoConfig.for_model(cfg.arch, **kwargs)
    except (ValueError, TypeError) as exc:
        raise PmdbError(f"{cfg.arch}: invalid configuration {kwargs}: {str(exc).strip().splitlines()[-1]}") from None
