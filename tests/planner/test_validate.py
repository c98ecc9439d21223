"""Validation against measured runs: parsing by header names, the predictions and their scores."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from pmdb import metrics
from pmdb.errors import PmdbError
from planner.fitting import PlannerCalibration
from planner.validate import prepare_runs, read_runs, validate

SAMPLE = "megatron_runs/a100_single_node_sample.csv"


def test_header_names_not_positions(tmp_path, shared_data, a100, megatron_fw):
    original = pd.read_csv(shared_data / SAMPLE).head(8)
    renamed = original.rename(columns={"# GPUs": "num_gpus", "tensor parallelism": "tensor_parallel_size",
                                       "micro batch": "Micro Batch Size", "iteration time (ms)": "Iteration time (ms)"})
    shuffled = renamed[list(reversed(renamed.columns))]
    (tmp_path / "a.csv").write_text(original.to_csv(index=False))
    (tmp_path / "b.csv").write_text(shuffled.to_csv(index=False))
    a = validate(read_runs(tmp_path / "a.csv"), a100, megatron_fw, vocab=50257)
    b = validate(read_runs(tmp_path / "b.csv"), a100, megatron_fw, vocab=50257)
    assert np.array_equal(a.rows["predicted_s"], b.rows["predicted_s"])
    assert a.rows["measured_s"].tolist() == pytest.approx((original["iteration time (ms)"] / 1e3).tolist())


def test_scores_are_pmdb_metrics(tmp_path, shared_data, a100, megatron_fw):
    runs = read_runs(shared_data / SAMPLE).head(20)
    result = validate(runs, a100, megatron_fw, vocab=50257)
    assert result.summary == metrics.summary(result.rows["predicted_s"], result.rows["measured_s"])
    worst = result.worst(3)
    assert worst["rel_error"].abs().tolist() == sorted(result.rows["rel_error"].abs(), reverse=True)[:3]
    parts = pd.DataFrame(list(result.rows["breakdown"]))
    assert np.allclose(parts.sum(axis=1), result.rows["predicted_s"])


def test_more_micro_batches_take_longer(a100, megatron_fw):
    runs = pd.DataFrame({"gpus": [4, 4], "global_batch": [8, 16], "micro_batch": [2, 2], "hidden": [1024] * 2,
                         "heads": [16] * 2, "layers": [12] * 2, "seq_len": [1024] * 2, "tp": [2] * 2, "dp": [1] * 2,
                         "pp": [2] * 2, "measured_s": [0.1, 0.2]})
    result = validate(runs, a100, megatron_fw, vocab=50257)
    short, long = result.rows["predicted_s"]
    # 1F1B over 2 stages with m = 4 and m = 8 micro-batches: m·T_max + T_min, so the ratio is 9/5 with equal stages,
    # a little more when the stages differ (embedding, LM head), a little less from the per-iteration parts
    assert 1.7 < long / short < 2
    without_recompute = validate(runs, a100, megatron_fw, vocab=50257, recompute="none")
    assert (without_recompute.rows["predicted_s"] < result.rows["predicted_s"]).all()


@pytest.mark.parametrize("csv, pattern", [
    ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
     "data parallelism,pipeline parallelism,iteration time (ms)\n8,8,1,1024,16,12,1024,2,2,1,100\n",
     "tensor × data × pipeline parallelism is not the number of GPUs"),
    ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
     "data parallelism,pipeline parallelism\n8,8,1,1024,16,12,1024,2,2,2\n", "no iteration-time column"),
    ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
     "data parallelism,pipeline parallelism,iteration time (ms)\n8,8,1,1024,16,12,1024,2,2,2,fast\n",
     "row 2 has a missing, non-numeric"),
])
def test_bad_files(tmp_path, csv, pattern):
    path = tmp_path / "runs.csv"
    path.write_text(csv)
    with pytest.raises(PmdbError, match=pattern):
        read_runs(path)


def test_runs_beyond_one_domain_are_priced_with_the_network(a100, megatron_fw):
    runs = pd.DataFrame({"gpus": [16], "global_batch": [16], "micro_batch": [1], "hidden": [1024], "heads": [16],
                         "layers": [12], "seq_len": [1024], "tp": [2], "dp": [8], "pp": [1], "measured_s": [0.1]})
    two_nodes = validate(runs, a100, megatron_fw, vocab=50257)
    one_domain = validate(runs, dataclasses.replace(a100, nvlink_domain=16), megatron_fw, vocab=50257)
    # the data-parallel all-reduce crosses the NICs (4 rings × 25 GB/s per node) instead of 300 GB/s NVLink
    slow, fast = two_nodes.rows["breakdown"][0], one_domain.rows["breakdown"][0]
    assert slow["dp_comm"] > 2 * fast["dp_comm"] > 0
    assert slow["compute"] == pytest.approx(fast["compute"])
    assert two_nodes.rows["predicted_s"][0] > one_domain.rows["predicted_s"][0]


def _runs_of_several_shapes() -> pd.DataFrame:
    rows = [(8, 16, 2, 1024, 16, 12, 1024, 2, 4, 1), (8, 8, 1, 1024, 16, 12, 1024, 8, 1, 1),
            (16, 32, 1, 2048, 16, 8, 1024, 8, 2, 1), (32, 64, 2, 2048, 16, 8, 2048, 4, 2, 4),
            (4, 8, 4, 512, 8, 4, 512, 1, 4, 1), (4, 16, 1, 1024, 16, 12, 1024, 2, 1, 2)]
    names = ["gpus", "global_batch", "micro_batch", "hidden", "heads", "layers", "seq_len", "tp", "dp", "pp"]
    runs = pd.DataFrame(rows, columns=names)
    runs["measured_s"] = 0.1
    return runs


def test_runs_prepared_once_price_as_each_shape_on_its_own(a100, megatron_fw, unanswered):
    """A fit prices the same runs hundreds of times: prepared once (stacked, all shapes merged), each
    calibration's predictions are bit for bit those of pricing every shape op by op."""
    runs = _runs_of_several_shapes()
    prepared = prepare_runs(runs, megatron_fw, vocab=50257, domain=a100.nvlink_domain)
    assert prepared.merged is not None and len(prepared.groups) == 4
    fits = [None, PlannerCalibration({"overlap_sharpness": 2.0, "network_eff": 0.3}), PlannerCalibration({})]
    for fitted in fits + fits[::-1]:                      # again, in another order: nothing prepared is changed
        system = fitted.system(a100) if fitted else a100
        once = prepared.predict(system, fitted)
        by_shape = validate(runs, a100, megatron_fw, vocab=50257, calibration=unanswered, fitted=fitted)
        assert np.array_equal(once, by_shape.rows["predicted_s"].to_numpy())
        fresh = validate(runs, a100, megatron_fw, vocab=50257, fitted=fitted, prepared=prepared)
        assert fresh.rows["breakdown"].tolist() == by_shape.rows["breakdown"].tolist()
