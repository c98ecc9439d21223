"""The optimizer state's zero shares: counted exactly on a real AdamW, recorded by a real transformer run at the
start and the end of its timed iterations, and given to the optimizer step's sqrt ops of its traces, in parameter
order (a position embedding and a projection of the same size keep their own shares), so that the microbenchmark
of the traced shape is built with as many zero rows."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from collectors.ops import catalogue
from collectors.ops.catalogue import BuildContext
from collectors.ops.from_traces import traced_shapes
from collectors.workloads.collect import collect_workload
from collectors.workloads.optimizer_state import state_zero_fractions
from collectors.workloads.requests import transformer_request
from pmdb.errors import PmdbError
from pmdb.traces.from_store import load_graphs
from pmdb.traces.oparg import walk
from pmdb.traces.opmap import map_op
from pmdb.traces.state_values import ZERO_SHARE, rounded


def test_zero_shares_of_adam_state_are_the_rows_no_batch_reached():
    torch.manual_seed(0)
    table, head = torch.nn.Embedding(500, 8), torch.nn.Linear(8, 3)
    optimizer = torch.optim.AdamW([*table.parameters(), *head.parameters()], lr=1e-3)
    assert state_zero_fractions(optimizer, 0) == []              # no step yet: no state
    rng = np.random.default_rng(1)
    seen: set[int] = set()
    for _ in range(3):
        tokens = rng.integers(0, 500, size=40)
        seen |= set(tokens.tolist())
        optimizer.zero_grad()
        head(table(torch.from_numpy(tokens))).sum().backward()
        optimizer.step()
    rows = {(r["param_index"], r["state"]): r for r in state_zero_fractions(optimizer, 3)}
    second = rows[(0, "exp_avg_sq")]
    assert second["step"] == 3 and second["shape"] == [500, 8] and second["numel"] == 4000
    assert second["zero_frac"] == pytest.approx(1 - len(seen) / 500)          # exactly the unseen rows
    assert rows[(1, "exp_avg_sq")]["zero_frac"] == 0.0                        # the head's dense gradient
    assert not any(state == "step" for _, state in rows)                      # scalars are not states of a shape


def test_sqrt_configs_carry_the_zero_share_as_whole_rows():
    spec = catalogue.load()["sqrt"]
    assert spec.check({"M": 10, "N": 4, "Z": 0.0}) == {"M": 10, "N": 4}      # 0: the key of a plain config
    assert spec.check({"M": 10, "N": 4, "Z": 0.304}) == {"M": 10, "N": 4, "Z": 0.3}
    for bad in (1.5, -0.1, "x"):
        with pytest.raises(PmdbError, match="bad value .* for Z"):
            spec.check({"M": 10, "N": 4, "Z": bad})
    built = spec.build({"M": 10, "N": 4, "Z": 0.3}, BuildContext(torch.device("cpu"), seed=3))
    x = built.keep[0]
    assert int((x == 0).all(dim=1).sum()) == 3 and int((x == 0).sum()) == 12   # 3 whole rows, nothing else
    assert built.params[ZERO_SHARE] == pytest.approx(0.3)
    assert torch.equal(built.fwd(), torch.sqrt(x))
    zeros = [c for c in spec.configs("default", np.random.default_rng(0), 0) if ZERO_SHARE in c]
    assert {c[ZERO_SHARE] for c in zeros} == {0.5, 0.9, 1.0} and max(c["M"] * c["N"] for c in zeros) == 2 ** 24


@pytest.mark.slow
def test_a_run_records_shares_and_its_traced_sqrt_reads_them(store, local_platform):
    opts = {"arch": "gpt2", "layers": 1, "hidden": 256, "heads": 4, "seq_len": 16, "batch_size": 4, "iters": 3,
            "warmup": 2, "trace_iters": 2, "timeout_s": 180, "threads": 1}
    summary = collect_workload(store, local_platform, transformer_request(opts), {"arch": "gpt2"})
    rows = store.query("SELECT step, param_index, shape, zero_frac FROM optimizer_state_stats WHERE workload_id = ? "
                       "AND state = 'exp_avg_sq' ORDER BY step, param_index", [summary["workload_id"]])
    assert sorted(set(rows["step"])) == [2, 5]                              # after the warm-up, after the timed
    vocab = rows[rows["param_index"] == 0]
    assert list(vocab["shape"].iloc[0]) == [50257, 256]
    start, end = vocab["zero_frac"].tolist()
    # 4 x 16 tokens a step, uniform over the vocabulary, the last one always the end-of-text token
    assert 0.99 < end < start < 1.0
    positions = rows[(rows["param_index"] == 1)]["zero_frac"].tolist()
    assert positions == [pytest.approx(1 - 16 / 1024)] * 2               # 16 of 1024 positions used
    graph = load_graphs(store, int(summary["trace_set_id"]), pick="best", detail=True)[0]
    roots = [n for op in graph.ranks[0].ops if op.phase == "optimizer" for n in walk(op) if n.name == "aten::sqrt"]
    assert len(roots) == store.scalar("SELECT count(DISTINCT param_index) FROM optimizer_state_stats "
                                      "WHERE workload_id = ? AND state = 'exp_avg_sq'", [summary["workload_id"]])
    assert roots[0].input_shapes[0] == [50257, 256] and roots[0].zero_frac == rounded((start + end) / 2)
    assert roots[1].input_shapes[0] == [1024, 256] and roots[1].zero_frac == rounded(1 - 16 / 1024)
    same_size = [r for r in roots[2:] if math.prod(r.input_shapes[0]) == 1024 * 256]   # the MLP's projections
    assert same_size and all(r.zero_frac == 0.0 for r in roots[2:])    # keep their own share: 0
    assert map_op(roots[0]).params == {"M": 50257.0, "N": 256.0, ZERO_SHARE: roots[0].zero_frac}
    targets = [t for t in traced_shapes(store, [int(summary["trace_set_id"])], ops=["sqrt"]).targets
               if ZERO_SHARE in t.config]
    assert sorted(t.config[ZERO_SHARE] for t in targets) == sorted([roots[0].zero_frac, roots[1].zero_frac])
