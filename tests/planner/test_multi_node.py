"""The planner past one node: what a single-node calibration may move, what only multi-node runs identify, and the
terms that price per-micro-batch costs (the framework's softmax fallback, host/device soft overlap)."""
import numpy as np
import pandas as pd
import pytest

from planner import fitting, strategies
from planner.candidates import Candidates
from planner.costs import Op
from planner.fitting import MULTI_DOMAIN, PlannerCalibration, fitted_names
from planner.model import Transformer
from planner.validate import read_runs, validate

GPT = Transformer(name="gpt", seq_len=1024, hidden=2048, heads=16, layers=4, vocab=51200)


def _runs(**overrides) -> pd.DataFrame:
    base = {"gpus": 2, "global_batch": 8, "micro_batch": 2, "hidden": 1024, "heads": 16, "layers": 12,
            "seq_len": 1024, "tp": 2, "dp": 1, "pp": 1, "measured_s": 0.1}
    base.update(overrides)
    return pd.DataFrame({k: [v] for k, v in base.items()})


def _softmax_ops(fw, t1, mb):
    costs = strategies.build(GPT, Candidates.from_columns("1d", t1=[t1], pp=[1], dp=[1], nmb=[1], mb=[mb]), fw)
    pick = {s.name: s for s in costs.fwd + costs.bwd if isinstance(s, Op) and "softmax" in s.name}
    return pick["scale_mask_softmax"], pick["scale_mask_softmax_bwd"]


@pytest.mark.parametrize("t1, mb, fused", [(8, 1, False), (8, 2, True), (4, 1, True), (16, 1, False)])
def test_megatron_softmax_falls_back_to_torch_when_batches_are_not_a_multiple_of_4(megatron_fw, t1, mb, fused):
    """Megatron's fused scale-mask-softmax needs micro-batch × local heads % 4 == 0 (16 heads: tp 8 at mb 1 has 2)."""
    fwd, bwd = _softmax_ops(megatron_fw, t1, mb)
    scores = mb * (16 / t1) * 1024 * 1024
    assert float(np.asarray(fwd.launches).ravel()[0]) == (1 if fused else 5)
    assert float(np.asarray(bwd.launches).ravel()[0]) == (1 if fused else 5)
    per_score = float(np.asarray(fwd.nbytes).ravel()[0]) / scores
    assert per_score == pytest.approx(4 if fused else 36)   # fp16 in/out, or the fp32 round trip


def test_planner_framework_never_takes_the_fallback(planner_fw):
    fused = _softmax_ops(planner_fw.__class__(flash_attention=False), 8, 1)[0]
    assert float(np.asarray(fused.launches).ravel()[0]) == 1


def test_single_node_fit_cannot_move_the_inter_node_network(a100):
    single = pd.concat([_runs(), _runs(tp=1, dp=2)], ignore_index=True)
    multi = pd.concat([single, _runs(gpus=16, tp=8, dp=2, global_batch=16)], ignore_index=True)
    assert not set(MULTI_DOMAIN) & set(fitted_names(single, a100))
    assert set(MULTI_DOMAIN) <= set(fitted_names(multi, a100))
    # a calibration without the network terms prices multi-node runs with the system file's network
    cal = PlannerCalibration({"gemm_eff": 0.7})
    assert not set(MULTI_DOMAIN) & set(cal.params)
    assert cal.system(a100).efficiency["network"] == a100.efficiency["network"]
    assert cal.system(a100).network_latency_us == a100.network_latency_us
    slower = PlannerCalibration({"gemm_eff": 0.7, "network_eff": a100.efficiency["network"] / 4})
    big = _runs(gpus=64, tp=8, dp=8, global_batch=64)
    t = [validate(big, a100, _fw(), vocab=50257, fitted=c).rows["predicted_s"][0] for c in (cal, slower)]
    assert t[1] > t[0]
    # ...and the network's efficiency never touches a run inside one node
    small = _runs()
    t = [validate(small, a100, _fw(), vocab=50257, fitted=c).rows["predicted_s"][0] for c in (cal, slower)]
    assert t[1] == pytest.approx(t[0])


def _fw():
    from planner.candidates import framework
    return framework("megatron-deepspeed")


def test_nvlink_collective_latency_is_not_charged_across_nodes(a100, megatron_fw):
    """The fitted per-step latency is NCCL's inside a node: a dp group spanning nodes pays the network's."""
    across = _runs(gpus=16, tp=1, dp=16, global_batch=32, micro_batch=2)
    inside = _runs(gpus=8, tp=1, dp=8, global_batch=16, micro_batch=2)
    base, slow = PlannerCalibration({}), PlannerCalibration({"collective_latency_us": 1000.0})
    d_across = [validate(across, a100, megatron_fw, vocab=50257, fitted=c).rows["breakdown"][0]["dp_comm"]
                for c in (base, slow)]
    d_inside = [validate(inside, a100, megatron_fw, vocab=50257, fitted=c).rows["breakdown"][0]["dp_comm"]
                for c in (base, slow)]
    assert d_across[1] == pytest.approx(d_across[0])
    default = fitting.PARAMS["collective_latency_us"][0]
    assert d_inside[1] - d_inside[0] == pytest.approx(7 * (1000.0 - default) * 1e-6)   # (n − 1) per collective


def test_soft_overlap_lies_between_the_maximum_and_the_sum(a100, megatron_fw):
    """(device^p + host^p)^(1/p): above max(device, host), below their sum; absent p: the plain maximum."""
    runs = _runs(tp=8, gpus=8, micro_batch=1, global_batch=4)
    host = {"kernel_overhead_us": 40.0, "layer_fixed_us": 0.0, "microbatch_fixed_us": 0.0}
    hard = validate(runs, a100, megatron_fw, vocab=50257, fitted=PlannerCalibration(host)).rows
    soft = validate(runs, a100, megatron_fw, vocab=50257,
                    fitted=PlannerCalibration({**host, "overlap_sharpness": 2.0})).rows
    none = validate(runs, a100, megatron_fw, vocab=50257,
                    fitted=PlannerCalibration({**host, "overlap_sharpness": 1.0})).rows
    assert hard["predicted_s"][0] < soft["predicted_s"][0] < none["predicted_s"][0]
    assert PlannerCalibration(host).overlap_sharpness == 0.0   # an old calibration keeps the plain maximum


@pytest.mark.slow
def test_one_calibration_on_single_and_multi_node_runs_beats_the_single_node_one_on_held_out_multi(
        shared_data, a100, megatron_fw):
    """Cross-validated on the shared samples (a few held-out multi-node runs): the joint calibration predicts
    held-out multi-node runs better than one fitted on single-node runs only (which leaves the network alone)."""
    single = read_runs(shared_data / "megatron_runs/a100_single_node_sample.csv").iloc[::3].reset_index(drop=True)
    multi = read_runs(shared_data / "megatron_runs/a100_multi_node_sample.csv")
    runs = pd.concat([single, multi], ignore_index=True)
    is_multi = np.arange(len(runs)) >= len(single)
    test = is_multi & (np.arange(len(runs)) % 3 == 0)
    joint = fitting.fit(runs, a100, megatron_fw, vocab=50257, test=test, max_evaluations=60)
    alone = fitting.fit(single, a100, megatron_fw, vocab=50257, seed=0, max_evaluations=60)
    assert set(MULTI_DOMAIN) <= set(joint.calibration.params) and not set(MULTI_DOMAIN) & set(alone.calibration.params)
    measured = runs["measured_s"][test].to_numpy()
    err_joint = np.abs(joint.predicted_s[test] / measured - 1).mean()
    err_alone = np.abs(fitting.predict(runs[test], a100, megatron_fw, alone.calibration, vocab=50257)
                       / measured - 1).mean()
    assert err_joint < err_alone


@pytest.mark.usefixtures("fit_workspace")   # the workspace with an empty MLflow store
def test_calibrate_fits_one_calibration_on_several_run_files(workspace, tmp_path, shared_data, capsys):
    """`pmdb plan calibrate --runs SINGLE --runs MULTI`: one version, with the network terms the multi-node file
    identifies."""
    from pmdb.cli.main import main

    files = []
    for name, rows in (("a100_single_node_sample.csv", 24), ("a100_multi_node_sample.csv", 10)):
        path = tmp_path / name
        lines = (shared_data / "megatron_runs" / name).read_text().splitlines()
        path.write_text("\n".join(lines[:rows + 1]) + "\n")
        files += ["--runs", str(path)]
    code = main(["--home", str(workspace.home), "plan", "calibrate", *files, "--max-evaluations", "3",
                 "--format", "csv"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "pmdb.a100.planner v1 (13 parameters" in captured.err
    assert "network_eff" in captured.out and "network_latency_us" in captured.out
