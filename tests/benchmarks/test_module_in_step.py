"""benchmarks/module_in_step.py: a real tiny bert step's leaf modules timed inside it and alone (warm, flushed), and
the tables built from those times."""
from __future__ import annotations

import math

import pytest

from harness import load_benchmark, tiny_bert_trainer


def _module():
    return load_benchmark("module_in_step")


def test_every_leaf_call_of_a_real_step_is_timed_in_every_state():
    from collectors.ops import cache_evict

    mis = _module()
    trainer, ids = tiny_bert_trainer(mis)
    calls = mis.measure(trainer, ids, 3)
    kinds = [c.kind for c in calls]
    assert "Linear" in kinds and "LayerNorm" in kinds and "Dropout" in kinds and "Embedding" in kinds
    states = mis.STATES if cache_evict.load() is not None else ("in step", "warm")
    for call in calls:
        assert all(len(call.times[s]) == 3 and all(t > 0 for t in call.times[s]) for s in states), call.name
    assert calls[0].after == "-" and all(c.after == p.kind for p, c in zip(calls, calls[1:]))
    # the hooks are gone: a step runs without adding times
    before = sum(len(c.times["in step"]) for c in calls)
    trainer.step(ids[0])
    assert sum(len(c.times["in step"]) for c in calls) == before
    totals = mis.total_lines(calls)
    assert totals[2].startswith("| GEMMs (Linear, Conv1D) | ") and math.isfinite(
        float(totals[4].split("|")[3]))        # the 'all' row's in-step sum


def test_tables_from_known_times():
    mis = _module()

    class Linear:   # noqa: D401 - a stand-in named like the module kind it stands for
        pass

    class Dropout:
        pass

    def call(name, module, after, step, warm, flushed):
        c = mis.Call(name, module, after)
        c.times = {"in step": [step], "warm": [warm], "flushed": [flushed]}
        return c
    calls = [call("drop", Dropout(), "-", 300.0, 200.0, 210.0), call("q", Linear(), "Dropout", 200.0, 100.0, 120.0),
             call("k", Linear(), "Linear", 110.0, 100.0, 120.0)]
    assert "| GEMMs (Linear, Conv1D) | 2 | 310 | 200 | 240 | x1.55 | x1.29 |" in mis.total_lines(calls)
    after = mis.after_lines(calls)
    assert after[2] == "| Dropout | 1 | 200 | 100 | x2.00 |" and after[3] == "| Linear | 1 | 110 | 100 | x1.10 |"
    top = mis.call_lines(calls, 2)
    assert [row.split(" | ")[1] for row in top[2:4]] == ["drop", "q"]   # the two largest losses, in step order


def test_a_bad_option_is_one_line(monkeypatch, tmp_path, capsys):
    mis = _module()
    monkeypatch.setattr("sys.argv", ["module_in_step.py", str(tmp_path), "--rounds", "1"])
    with pytest.raises(SystemExit) as stop:
        mis.main()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--rounds" in err
