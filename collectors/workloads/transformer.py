"""Transformer training workloads built offline from a ``transformers`` config class (random weights, no downloads).

Any architecture ``AutoConfig.for_model(arch)`` knows works: ``--layers/--hidden/--heads`` are applied through the
config's own attribute map (``n_layer``, ``d_model``, ... are found by the library, not by per-model code), and the
sizes that must follow them are derived by their conventional names when the config has them: per-head widths
(``d_head``, ``d_kv``, ``head_dim``) = hidden / heads, feed-forward widths (``intermediate_size``, ``d_inner``,
``ffn_dim``, ``n_inner``, ``d_ff``, ``hidden_dim``, ``encoder_ffn_dim``, ``decoder_ffn_dim``) = 4 x hidden, key/value
heads = heads, decoder/encoder layer counts = layers, position tables >= the sequence length. ``overrides`` (from
``--config FILE``) are applied last and win. Training: synthetic token batches, AdamW, DDP across ranks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

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


def build_model(cfg: TransformerConfig) -> tuple[nn.Module, str]:
    """A randomly initialised model with a training head; returns (model, head used)."""
    import transformers

    config = build_config(cfg)
    classes = {"classification": transformers.AutoModelForSequenceClassification,
               "causal-lm": transformers.AutoModelForCausalLM,
               "masked-lm": transformers.AutoModelForMaskedLM}
    if cfg.head not in HEADS:
        raise PmdbError(f"unknown head {cfg.head!r}: use {', '.join(HEADS)}")
    order = list(classes) if cfg.head == "auto" else [cfg.head]
    for head in order:
        try:
            return classes[head].from_config(config), head
        except ValueError:
            continue
    raise PmdbError(f"{cfg.arch} has no {' / '.join(order)} model class in transformers (try another --head)")


class TransformerTrainer:
    """One rank's training loop: synthetic tokens of its local batch, forward with labels, backward, AdamW."""

    def __init__(self, cfg: TransformerConfig, rank: int, world_size: int, seed: int, device: torch.device):
        if cfg.batch_size % world_size:
            raise PmdbError(f"batch size {cfg.batch_size} must be a multiple of the world size {world_size}")
        torch.manual_seed(seed)
        self.cfg, self.rank, self.world_size, self.seed, self.device = cfg, rank, world_size, seed, device
        self.local_batch = cfg.batch_size // world_size
        model, self.head = build_model(cfg)
        self.model_config = model.config
        self.model: nn.Module = model.to(device).train()
        self.frozen_unused: list[str] = []
        self.batches: dict[int, dict[str, torch.Tensor]] = {}
        self.optimizer: torch.optim.Optimizer | None = None

    def prepare(self, batch_ids: list[int]) -> None:
        """Build the batches, and (world size > 1) freeze parameters the head never uses, then wrap in DDP."""
        for k in batch_ids:
            self.batches.setdefault(k, self._batch(k))
        if self.optimizer is not None:
            return
        if self.world_size > 1:
            self._freeze_unused(self.batches[batch_ids[0]])
            self.model = nn.parallel.DistributedDataParallel(self.model)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=self.cfg.lr)

    def _batch(self, k: int) -> dict[str, torch.Tensor]:
        """Random tokens of this rank's share of batch k: no special token inside, the end-of-sequence token (when
        the model has one) last, as tokenisers produce (encoder-decoder classification heads look for it)."""
        conf = self.model_config
        vocab = int(conf.vocab_size)
        special = sorted({int(t) for t in (getattr(conf, n, None) for n in ("pad_token_id", "bos_token_id",
                                                                               "eos_token_id"))
                          if isinstance(t, int) and 0 <= t < vocab})
        rng = np.random.default_rng([self.seed, k, self.rank])
        shape = (self.local_batch, self.cfg.seq_len)
        tokens = rng.integers(0, vocab - len(special), size=shape)
        for token in special:
            tokens[tokens >= token] += 1
        eos = getattr(conf, "eos_token_id", None)
        if isinstance(eos, int) and 0 <= eos < vocab:
            tokens[:, -1] = eos
        ids = torch.from_numpy(tokens.astype(np.int64)).to(self.device)
        if self.head == "classification":
            labels = torch.from_numpy(rng.integers(0, self.model_config.num_labels, size=shape[0])).to(self.device)
        else:
            labels = ids.clone()
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    def _freeze_unused(self, batch: dict[str, torch.Tensor]) -> None:
        """DDP needs every trainable parameter to get a gradient; ones the model never uses are frozen."""
        self.model(**batch).loss.backward()
        for name, p in self.model.named_parameters():
            if p.requires_grad and p.grad is None:
                p.requires_grad_(False)
                self.frozen_unused.append(name)
        self.model.zero_grad(set_to_none=True)

    def step(self, k: int) -> None:
        assert self.optimizer is not None, "prepare() first"
        self.optimizer.zero_grad()
        self.model(**self.batches[k]).loss.backward()
        self.optimizer.step()

    def info(self) -> dict[str, Any]:
        return {"head": self.head, "model_class": type(getattr(self.model, "module", self.model)).__name__,
                "parameters": sum(p.numel() for p in self.model.parameters()),
                "frozen_unused": self.frozen_unused,
                "model_config": {k: v for k, v in self.model_config.to_diff_dict().items()
                                 if isinstance(v, (int, float, str, bool)) or v is None}}
