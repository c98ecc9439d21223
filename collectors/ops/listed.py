"""Sweeps over explicit config lists, for ops whose grids must reach sizes the time-bounded product grids of
``catalogue`` leave out (the bounds estimate forward time at nominal rates: a 16M-element optimizer op or the dense
gradient of a 50257 x 1024 embedding table is over the default bound, yet it is what a training step runs).

'default' is the listed configs (thinned, seeded, to the op's ``default_count``), 'quick' QUICK_COUNT of them evenly
spaced from the smallest to the largest, 'large' the large list and 'random' ``sample`` distinct draws of a
seeded sampler."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from collectors.ops.catalogue import QUICK_COUNT, OpSpec, canonical, thin

Config = dict[str, Any]


def evenly(configs: list[Config], count: int) -> list[Config]:
    """``count`` configs spread evenly over the list (first and last included), in order."""
    if len(configs) <= count:
        return list(configs)
    picks = np.unique(np.linspace(0, len(configs) - 1, count).round().astype(int))
    return [configs[i] for i in picks]


def listed_configs(default: list[Config], large: list[Config], draw: Callable[[np.random.Generator], Config]
                   ) -> Callable[..., list[Config]]:
    """An ``OpSpec.make_configs`` over fixed lists; ``draw(rng)`` gives one random config (duplicates are redrawn)."""

    def make_configs(spec: OpSpec, sweep: str, rng: np.random.Generator, sample: int, **_: Any) -> list[Config]:
        if sweep == "random":
            out, seen = [], set()
            for _attempt in range(200 * max(sample, 1)):
                if len(out) >= sample:
                    break
                config = draw(rng)
                if (key := canonical(config)) not in seen:
                    seen.add(key)
                    out.append(config)
            return out
        if sweep == "large":
            return [dict(c) for c in large]
        chosen = thin([dict(c) for c in default], spec.default_count)
        return evenly(chosen, QUICK_COUNT) if sweep == "quick" else chosen

    return make_configs
