"""Transformer configs built from transformers' config classes: overrides by the library's own names."""
from __future__ import annotations

import pytest
import torch

from collectors.workloads.transformer import TransformerTrainer
from collectors.workloads.transformer_shape import TransformerConfig, build_config
from pmdb.errors import PmdbError


@pytest.mark.parametrize("arch, names", [
    ("gpt2", {"n_layer": 2, "n_embd": 48, "n_head": 4}),
    ("bert", {"num_hidden_layers": 2, "hidden_size": 48, "num_attention_heads": 4, "intermediate_size": 192}),
    ("xlnet", {"n_layer": 2, "d_model": 48, "n_head": 4, "d_head": 12, "d_inner": 192}),
    ("llama", {"num_hidden_layers": 2, "hidden_size": 48, "num_attention_heads": 4, "intermediate_size": 192,
               "num_key_value_heads": 4}),
])
def test_overrides_land_on_each_architecture(arch, names):
    config = build_config(TransformerConfig(arch, layers=2, hidden=48, heads=4, seq_len=32))
    for name, value in names.items():
        assert getattr(config, name) == value, name


def test_long_sequences_grow_the_position_table_and_user_overrides_win():
    config = build_config(TransformerConfig("bert", layers=1, hidden=32, heads=2, seq_len=1024,
                                            overrides={"vocab_size": 1000}))
    assert config.max_position_embeddings == 1024 and config.vocab_size == 1000


def test_errors_are_one_line():
    with pytest.raises(PmdbError, match="unknown transformer architecture 'nope'"):
        build_config(TransformerConfig("nope"))
    with pytest.raises(PmdbError, match="multiple of the number of heads"):
        build_config(TransformerConfig("gpt2", hidden=30, heads=4))


def test_trainer_batches_avoid_special_tokens_and_training_changes_weights():
    cfg = TransformerConfig("gpt2", layers=1, hidden=32, heads=2, seq_len=8, batch_size=2)
    trainer = TransformerTrainer(cfg, 0, 1, 0, torch.device("cpu"))
    trainer.prepare([0, 1])
    ids = trainer.batches[0]["input_ids"]
    eos = trainer.model_config.eos_token_id
    assert ids.shape == (2, 8) and (ids[:, -1] == eos).all() and (ids[:, :-1] != eos).all()
    assert not torch.equal(trainer.batches[0]["input_ids"], trainer.batches[1]["input_ids"])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.step(0)
    changed = sum(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters()))
    assert changed > len(before) // 2
