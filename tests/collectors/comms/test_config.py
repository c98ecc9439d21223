"""Sweep configuration checks and the launcher environment."""
import pytest

from collectors.comms.config import (SweepConfig, TorchrunEnv, is_oversubscribed, quick_config, torchrun_env,
                                    usable_cores)
from pmdb.errors import PmdbError


def test_torchrun_env_parsing():
    assert torchrun_env({}) is None
    assert torchrun_env({"RANK": "0", "WORLD_SIZE": "2"}) is None  # no rendezvous address: not a launcher
    env = torchrun_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert env == TorchrunEnv(rank=1, world_size=4, local_rank=1, local_world_size=4)
    assert is_oversubscribed(SweepConfig(world_size=4096), "cpu", env) == (4 > usable_cores())
    with pytest.raises(PmdbError, match="RANK 4"):
        torchrun_env({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    with pytest.raises(PmdbError, match="must be integers"):
        torchrun_env({"RANK": "x", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"})


@pytest.mark.parametrize("kwargs, pattern", [(dict(iters=0), "--iters"), (dict(warmup=0), "--warmup"),
                                             (dict(threads=0), "--threads"), (dict(dtype="int4"), "dtype"),
                                             (dict(collectives=()), "--ops")])
def test_config_rejects(kwargs, pattern):
    with pytest.raises(PmdbError, match=pattern):
        SweepConfig(**kwargs).plan()


def test_default_and_quick_plans():
    default = SweepConfig().plan()
    assert {s.collective for s in default} == set(SweepConfig().collectives)
    assert max(max(s.out_elems) * 4 for s in default if s.split_kind == "equal") == 64 * 2**20
    random = [s for s in default if s.split_kind == "random"]
    assert len(random) == 2 * (len([s for s in default if s.collective == "all_to_all"]) - 1)  # 2 draws per size
    quick = quick_config()
    assert quick.world_size == 2 and len(quick.plan()) < len(default) / 2
    assert SweepConfig().args()["collectives"] == list(SweepConfig().collectives)


def test_oversubscription_depends_on_cores_and_device():
    assert is_oversubscribed(SweepConfig(world_size=4096), "cpu")
    assert not is_oversubscribed(SweepConfig(world_size=4096), "cuda")
    assert not is_oversubscribed(SweepConfig(world_size=1, threads=1), "cpu")
