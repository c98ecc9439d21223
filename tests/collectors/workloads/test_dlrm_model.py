"""DLRM shapes (presets, config files) and model parts, single process."""
from __future__ import annotations

import pytest
import torch

from collectors.workloads.dlrm import DlrmTrainer, DotInteraction, mlp
from collectors.workloads.dlrm_presets import PRESETS, from_dict, preset, with_overrides
from collectors.workloads.sharders import rank_layout
from pmdb.errors import PmdbError


def test_presets_keep_the_paper_structure():
    default, ddp, test = PRESETS["dlrm_default"], PRESETS["dlrm_ddp"], PRESETS["dlrm_test"]
    assert (default.bottom_mlp, default.top_mlp, len(default.tables)) == ((512, 512, 64), (1024, 1024, 1024, 1), 8)
    assert {t.pooling for t in default.tables} == {100}
    assert (ddp.bottom_mlp, ddp.top_mlp, {t.num_rows for t in ddp.tables}) == (
        (128, 128, 128, 128), (512, 512, 512, 256, 1), {80_000})
    assert (test.bottom_mlp, test.top_mlp, len(test.tables)) == ((512, 64), (1024, 1), 1)
    for cfg in PRESETS.values():
        assert all(t.dim == cfg.dim for t in cfg.tables)
    with pytest.raises(PmdbError, match="unknown DLRM preset"):
        preset("dlrm_mlperf")


def test_config_shorthand_overrides_and_json_round_trip():
    cfg = from_dict({"name": "x", "bottom_mlp": [4, 8], "top_mlp": [1], "num_tables": 3, "num_rows": 50,
                     "pooling": 2.5, "index_source": "zipf:1.1"})
    assert [t.num_rows for t in cfg.tables] == [50] * 3 and cfg.index_sources == ("zipf:1.1",) * 3
    assert cfg.interaction_width() == 8 + 4 * 3 // 2
    other = with_overrides(cfg, index_source="uniform", embedding="torch_embedding_bag")
    assert other.index_sources == ("uniform",) * 3 and other.embedding == "torch_embedding_bag"
    again = from_dict({k: v for k, v in other.to_json().items()})
    assert again == other
    with pytest.raises(PmdbError, match="unknown embedding"):
        with_overrides(cfg, embedding="faiss")


def test_mlp_layers():
    layers = mlp((6, 5, 4, 1), sigmoid_last=True)
    kinds = [type(m).__name__ for m in layers]
    assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Linear", "Sigmoid"]
    assert [type(m).__name__ for m in mlp((6, 4), sigmoid_last=False)] == ["Linear"]


def test_dot_interaction_matches_pairwise_products():
    torch.manual_seed(0)
    b, d, tables = 3, 4, 3
    dense, emb = torch.randn(b, d), torch.randn(b, tables * d)
    out = DotInteraction(tables)(dense, emb)
    vectors = [dense] + list(emb.split(d, dim=1))
    pairs = [(vectors[i] * vectors[j]).sum(dim=1) for i in range(tables + 1) for j in range(i)]
    assert out.shape == (b, d + (tables + 1) * tables // 2)
    assert torch.allclose(out[:, :d], dense)
    assert torch.allclose(out[:, d:], torch.stack(pairs, dim=1), atol=1e-6)


@pytest.mark.parametrize("embedding", ["fbgemm_tbe", "torch_embedding_bag"])
def test_single_rank_training_updates_mlps_and_tables(embedding):
    cfg = from_dict({"bottom_mlp": [6, 4], "top_mlp": [8, 1], "embedding": embedding,
                     "tables": [{"num_rows": 30, "pooling": 3}, {"num_rows": 20, "pooling": 2}]})
    layout = rank_layout([0, 0], [4, 4], 1, 8)
    trainer = DlrmTrainer(cfg, layout, 0, 0, torch.device("cpu"))
    trainer.prepare([0, 1])
    lookup = trainer.model.lookup
    weights = (lookup.inner.split_embedding_weights() if embedding == "fbgemm_tbe"
               else [bag.weight for bag in lookup.inner.bags])
    before = [w.detach().clone() for w in weights] + [p.detach().clone() for p in trainer.model.mlp_parameters()]
    trainer.step(0)
    after = [w.detach() for w in weights] + [p.detach() for p in trainer.model.mlp_parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))
    assert len(trainer.stats[0]) == 2 and trainer.stats[0][1]["num_rows"] == 20
