"""Span markers (ProfilerStep#n) bound their iterations exactly: an op that starts when a step ends runs after it
(in the gap before the next step: no iteration), as do ops between steps; ops inside belong to their step."""
import numpy as np
import pandas as pd

from pmdb.traces.iterations import kineto_iterations


def _ops(rows):
    return pd.DataFrame(rows, columns=["name", "cls", "start_us", "dur_us"])


def test_ops_starting_at_a_steps_end_or_between_steps_belong_to_no_iteration():
    ops = _ops([("ProfilerStep#1", "annotation", 100.0, 50.0), ("inside", "op", 120.0, 10.0),
                ("closing_mark", "op", 150.0, 0.0),          # an instant at the end: still the step's
                ("barrier", "op", 150.0, 5.0),               # starts as the step ends: runs after it
                ("gap", "op", 160.0, 5.0),
                ("ProfilerStep#2", "annotation", 170.0, 50.0), ("zero_grad", "op", 170.0, 3.0),
                ("after", "op", 230.0, 1.0)])
    iteration, rows = kineto_iterations(ops)
    got = dict(zip(ops["name"], iteration))
    assert [got[n] for n in ("inside", "closing_mark", "zero_grad")] == [0, 0, 1]
    assert all(np.isnan(got[n]) for n in ("barrier", "gap", "after"))
    assert rows["dur_us"].tolist() == [50.0, 50.0]
