"""The host's unprofiled pace from back-to-back timings (fitters/host_pace.py) and how a trace's scale falls back
(fitters.overheads.calibrated): the rule on /work/shared/data/gpu_kernels/h200_launch_floor.csv (host-bound rows
only; its device-bound rows >= 100 µs are launch_floor's independent check, never used here), on rows made up to
break it, and the fallback to unprofiled / profiled step with its reason."""
from __future__ import annotations

import pandas as pd
import pytest

from fitters import host_pace
from fitters.host_pace import Calibration, OpPace, calibrate, host_bound, read_pace, unprofiled_pace
from fitters.overheads import CALIBRATED, NONE, STEP, HostScale, calibrated
from pmdb.errors import PmdbError


def _rows(op: str, timings: dict[int, float]) -> list[dict]:
    return [{"op": op, "shape": f"B={b} H=1024", "back_to_back_us": us} for b, us in timings.items()]


def test_the_host_bound_rows_of_the_h200_file(shared_data):
    path = shared_data / "gpu_kernels" / "h200_launch_floor.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    frame = read_pace(path)
    rows = host_bound(frame)
    assert (rows["back_to_back_us"] < host_pace.MAX_HOST_US).all()           # never a device-bound row
    assert set(rows["op"]) == {"add", "gelu", "ln", "softmax", "mulu", "linear"}
    # bmm's two fastest rows do the same work (32x512x64x512 both ways): no sign the host sets their time
    assert "bmm" not in set(rows["op"])
    assert not rows["shape"].str.contains("B=16384|B=65536|M=4096 K=4096").any()
    pace = unprofiled_pace(frame)
    assert set(pace) == {"aten::add", "aten::gelu", "aten::layer_norm", "aten::softmax", "aten::mul",
                         "aten::linear"}
    assert 11.0 < pace["aten::add"].unprofiled_us < 13.0 and pace["aten::add"].rows == 4   # ~11-13 µs per eager op
    assert 25.0 < pace["aten::layer_norm"].unprofiled_us < 32.0                            # its own dispatch: ~29


def test_the_rule_keeps_a_flat_plateau_and_drops_work_bound_or_slow_rows():
    frame = pd.DataFrame(_rows("flat", {1: 12.0, 64: 12.5, 1024: 11.8, 8192: 30.0})
                         + _rows("grows", {1024: 40.0, 2048: 44.0, 4096: 80.0})       # time follows the work
                         + _rows("slow", {1: 150.0, 512: 152.0, 1024: 151.0}))       # flat but >= 100 µs
    rows = host_bound(frame)
    assert sorted(rows["back_to_back_us"]) == [11.8, 12.0, 12.5]
    assert unprofiled_pace(frame) == {}                              # no NeuSight op name: nothing to match


def test_calibrate_is_the_median_ratio_and_needs_two_op_names():
    pace = {"aten::add": OpPace("aten::add", 12.0, 4), "aten::mul": OpPace("aten::mul", 13.0, 4),
            "aten::softmax": OpPace("aten::softmax", 11.0, 4)}
    cal = calibrate("f.csv", pace, {"aten::add": 60.0, "aten::mul": 130.0, "aten::softmax": 55.0, "aten::x": 9.0})
    assert cal.scale == pytest.approx(0.2) and cal.spread() == pytest.approx((0.1, 0.2))
    assert [o.op_name for o in cal.ops] == ["aten::add", "aten::mul", "aten::softmax"]
    record = cal.record()
    assert record["source"] == "f.csv" and record["ratio_range"] == [0.1, 0.2] and "100" in record["rule"]
    lone = calibrate("f.csv", pace, {"aten::add": 60.0})
    assert lone.scale is None and "1 op name(s)" in lone.why


def test_the_step_ratio_is_the_fallback_and_the_upper_bound():
    step = HostScale(1, 582_000.0, 168_800.0, 0.28, 0.29, STEP, "host-bound", 0.29)
    used = calibrated(step, Calibration("f.csv", 0.12, [OpPace("aten::add", 12.0, 4, 100.0, 0.12)], "median"))
    assert (used.scale, used.method, used.step_scale) == (0.12, CALIBRATED, 0.29)
    assert used.calibration["scale"] == 0.12 and "f.csv" in used.why
    capped = calibrated(step, Calibration("f.csv", 0.5, [], "median"))   # slower than the unprofiled step allows
    assert capped.scale == 0.29 and "capped" in capped.why
    fallback = calibrated(step, Calibration("f.csv", None, [], "0 op name(s) ..."))
    assert (fallback.scale, fallback.method) == (0.29, STEP) and "no back-to-back calibration" in fallback.why
    unscaled = HostScale(2, 100.0, None, 0.9, why="no unprofiled iteration time")
    assert calibrated(unscaled, Calibration("f.csv", 0.4, [], "median")).scale == 0.4   # never above 1
    assert calibrated(unscaled, Calibration("f.csv", None, [], "none")).method == NONE


def test_a_file_that_is_not_back_to_back_timings_is_one_line(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("op,shape,single_call_us\nadd,B=1 H=1024,23.6\n")
    with pytest.raises(PmdbError, match="no column back_to_back_us"):
        read_pace(bad)
    with pytest.raises(PmdbError, match="cannot read back-to-back timings"):
        read_pace(tmp_path / "missing.csv")
