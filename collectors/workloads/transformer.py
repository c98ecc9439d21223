"""Transformer training workloads built offline from a ``transformers`` config class (random weights, no downloads):
the shape and its config object come from :mod:`.transformer_shape`. Training: synthetic token batches, AdamW, DDP
across ranks.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from collectors.workloads.transformer_shape import HEADS, TransformerConfig, build_config
from pmdb.errors import PmdbError


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
