"""Whether the rounds of `collect ops --from-traces` agree: the median over shapes of their range of round medians,
from real rows in a real store (the quickstart stops adding rounds when it is small)."""
from __future__ import annotations

import pytest

from collectors.ops.shape_rounds import ROUND_TOLERANCE, round_spread, rounds_settled
from pmdb import platform as platforms


def _round(store, name, times: dict[str, float], from_traces: bool = True) -> None:
    with store.run("ops", name, {"from_traces": from_traces}) as run:
        store.insert("op_measurements", [
            {"run_id": run.run_id, "platform": name, "op": "relu", "pass": "fwd", "implementation": "torch",
             "dtype": "float32", "device": "cpu", "cache_state": "cold", "params": {"B": 1}, "config_key": key,
             "median_us": us, "threads": 1} for key, us in times.items()])


def test_rounds_agree_only_when_most_shapes_do(store):
    name = platforms.register_local(store)["name"]
    assert round_spread(store) == (0, None, 0) and rounds_settled(store) is None
    _round(store, name, {"a": 100.0, "b": 10.0, "c": 50.0})
    _round(store, name, {"a": 104.0, "b": 10.2, "c": 80.0})
    _round(store, name, {"a": 99.0, "b": 11.5, "c": 20.0}, from_traces=False)  # a sweep, not a round
    rounds, spread, shapes = round_spread(store)
    assert (rounds, shapes) == (2, 3)
    # ranges / medians: a 4/102, b 0.2/10.1, c 30/65 -> the median is a's
    assert spread == pytest.approx(4 / 102)
    assert rounds_settled(store) is None  # two rounds are not enough
    _round(store, name, {"a": 101.0, "b": 10.1, "c": 60.0})
    assert rounds_settled(store).startswith("3 traced shapes measured in at least 3 rounds agree within 4.0%")
    _round(store, name, {"a": 130.0, "b": 13.0, "c": 60.0})  # a round that moves most shapes
    rounds, spread, _ = round_spread(store)
    assert rounds == 4 and spread > ROUND_TOLERANCE and rounds_settled(store) is None
