"""What a collective sweep measures (:class:`SweepConfig`) and the launcher environment it may run in.

Free of torch, so the CLI can check a user's options before loading torch and starting ranks.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from collectors.comms.sizes import COLLECTIVES, Step, build_plan, ladder
from pmdb.errors import PmdbError

ELEMENT_BYTES = {"float32": 4}
DEFAULT_TIMEOUT_S = 300.0  # a collective that waits longer than this fails the rank


@dataclass(frozen=True)
class SweepConfig:
    """What to measure. Sizes are bytes (the message size of each collective, see sizes.py)."""

    world_size: int = 2
    collectives: tuple[str, ...] = COLLECTIVES
    min_bytes: int = 4
    max_bytes: int = 64 * 2**20
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    random_splits: int = 2          # random split draws per size for all_to_allv
    seed: int = 0                   # seeds the all_to_allv split matrices
    threads: int = 1                # torch intra-op threads per rank
    dtype: str = "float32"
    timeout_s: float = DEFAULT_TIMEOUT_S

    def validate(self) -> None:
        if self.iters < 1 or self.warmup < 1:
            raise PmdbError(f"--iters ({self.iters}) and --warmup ({self.warmup}) must be at least 1 "
                            f"(the first warm-up call validates the result)")
        if self.threads < 1:
            raise PmdbError(f"bad --threads {self.threads}: at least 1 thread per rank")
        if self.dtype not in ELEMENT_BYTES:
            raise PmdbError(f"bad dtype {self.dtype!r} (known: {', '.join(ELEMENT_BYTES)})")
        if not self.collectives:
            raise PmdbError("no collectives to measure: give --ops")

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    def sizes(self) -> list[int]:
        """The nominal message sizes (bytes) of the ladder."""
        return ladder(self.min_bytes, self.max_bytes, self.factor)

    def plan(self) -> list[Step]:
        """The steps to measure, in order (the same on every rank: the random splits are seeded)."""
        self.validate()
        return build_plan(list(self.collectives), self.world_size, self.sizes(), self.element_bytes,
                          random_draws=self.random_splits, seed=self.seed)

    def args(self) -> dict[str, Any]:
        out = asdict(self)
        out["collectives"] = list(self.collectives)
        return out


def quick_config(world_size: int = 2) -> SweepConfig:
    """A short sweep (well under a minute on 2 cores with world size 2): the fast path for `pmdb quickstart`."""
    return SweepConfig(world_size=world_size, collectives=("all_reduce", "all_to_all", "all_to_allv"),
                       max_bytes=4 * 2**20, iters=10, warmup=2, random_splits=1)


@dataclass(frozen=True)
class TorchrunEnv:
    """The rank this process plays when started by torchrun (or any launcher setting RANK/WORLD_SIZE/MASTER_*)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int = 1  # ranks on this host (LOCAL_WORLD_SIZE)


def torchrun_env(environ: Mapping[str, str] | None = None) -> TorchrunEnv | None:
    """RANK, WORLD_SIZE, LOCAL_RANK with MASTER_ADDR/MASTER_PORT, or None when not started by such a launcher."""
    env = os.environ if environ is None else environ
    if not all(key in env for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        raise PmdbError(f"bad launcher environment: RANK={env['RANK']!r} WORLD_SIZE={env['WORLD_SIZE']!r} "
                        f"LOCAL_RANK={env.get('LOCAL_RANK')!r} LOCAL_WORLD_SIZE={env.get('LOCAL_WORLD_SIZE')!r} "
                        f"must be integers") from None
    if not 0 <= rank < world:
        raise PmdbError(f"bad launcher environment: RANK {rank} is not in [0, WORLD_SIZE={world})")
    return TorchrunEnv(rank, world, local, local_world)


def usable_cores() -> int:
    """Logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def is_oversubscribed(config: SweepConfig, device_kind: str, env: TorchrunEnv | None = None) -> bool:
    """CPU ranks on this host x threads per rank exceed its usable cores."""
    ranks_here = env.local_world_size if env is not None else config.world_size
    return device_kind == "cpu" and ranks_here * config.threads > usable_cores()
