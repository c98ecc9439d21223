"""collectors.workloads.trainers: a trainer rebuilt from the config a run stores is the one the run trained (the
sharded DLRM ranks that `collect workload` builds with it are tested through their runs, tests/collectors/workloads)."""
import torch

from collectors.workloads.dlrm_presets import preset
from collectors.workloads.trainers import make_trainer, stored_config
from collectors.workloads.transformer_shape import TransformerConfig


def test_stored_configs_rebuild_the_same_config():
    dlrm = preset("dlrm_mixed")
    assert stored_config("dlrm", dlrm.to_json(), dlrm.batch_size) == dlrm
    bert = TransformerConfig(arch="bert", layers=1, hidden=32, heads=2, seq_len=16, batch_size=8)
    stored = dict(bert.to_json(), model_config={"hidden_act": "gelu"})   # a key the config does not know
    assert stored_config("transformer", stored, 4) == TransformerConfig(arch="bert", layers=1, hidden=32, heads=2,
                                                                       seq_len=16, batch_size=4)


def test_single_rank_trainers_step_with_every_table_on_rank_0():
    cpu = torch.device("cpu")
    dlrm = preset("dlrm_mixed")
    whole = make_trainer("dlrm", dlrm, cpu)
    whole.prepare([0])
    whole.step(0)
    assert whole.model.layout.tables == (tuple(range(len(dlrm.tables))),) and whole.model.world_size == 1
    bert = make_trainer("transformer", TransformerConfig(arch="bert", layers=1, hidden=32, heads=2, seq_len=16,
                                                         batch_size=2), cpu)
    bert.prepare([0])
    bert.step(0)
