"""Steps stacked once and timed as arrays give, bit for bit, what timing them step by step gives."""
import numpy as np
import pytest

from planner import space
from planner.calibration import Calibrations
from planner.candidates import framework
from planner.evaluate import BREAKDOWN_KEYS, evaluate, evaluate_prepared, prepare
from planner.fitting import PlannerCalibration
from planner.model import Transformer

GPT = Transformer(name="gpt", seq_len=256, hidden=512, heads=8, layers=8, vocab=5000)
FITTED = PlannerCalibration({"gemm_eff": 0.7, "wave_weight": 0.3, "gemm_latency_us": 4.0, "collective_latency_us": 12.0,
                             "collective_fixed_us": 30.0, "layer_fixed_us": 80.0, "overlap_sharpness": 3.0,
                             "network_eff": 0.4, "network_latency_us": 9.0})


@pytest.mark.parametrize("strategy", ["1d", "summa", "context"])
@pytest.mark.parametrize("fw_name", ["planner", "megatron-deepspeed"])
@pytest.mark.parametrize("fitted", [False, True])
@pytest.mark.parametrize("reuse", [False, True])   # reuse: the blocks' collectives stacked too
def test_stacked_blocks_time_what_step_by_step_timing_does(a100, unanswered, strategy, fw_name, fitted, reuse):
    fw = framework(fw_name)
    system, cal = (FITTED.system(a100), FITTED) if fitted else (a100, None)
    gpus, batch = 16, 32                       # two NVLink domains of 8: collectives inside and across nodes
    rows = space.structures(GPT, strategy, gpus, batch)
    cands = space.expand(GPT, strategy, rows, batch, space.domain_size(gpus, 8), fw)
    assert len(cands) > 100
    prepared = prepare(GPT, cands, fw, reuse=reuse)
    assert (prepared.blocks["fwd"].comms is not None) == (reuse and strategy != "summa")   # SUMMA: panel steps
    stacked = evaluate_prepared(prepared, system, cal)
    by_step = evaluate(GPT, system, cands, fw, Calibrations(unanswered, *([cal] if cal else [])))
    assert np.array_equal(stacked.time, by_step.time)
    for key in BREAKDOWN_KEYS:
        assert np.array_equal(stacked.parts[key], by_step.parts[key]), key
    assert list(stacked.usage) == list(by_step.usage)      # the kinds in step order
    for kind, counts in stacked.usage.items():
        source = "roofline" if kind == "gemm" else "ring"
        assert counts[source] == by_step.usage[kind][source] > 0 and by_step.usage[kind]["calibrated"] == 0
