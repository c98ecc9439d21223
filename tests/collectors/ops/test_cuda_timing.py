"""CUDA device time (collectors/ops/cuda_timing.py) without a GPU: the per-call attribution of device activities,
the back-to-back arithmetic, and a CUDA config's row written by the sweep's own writer into a real store, where the
fit and the resume plan read its device time and leave out rows timed as one call between events (migration 0015).
The timing on a GPU itself is in tests/gpu/ (skipped without one)."""
from __future__ import annotations

import pytest
import torch

from collectors.ops.cuda_timing import (KERNELS, DeviceTiming, back_to_back_us, calls_for, per_call_us,
                                        profiled_calls)
from collectors.ops.sweep import Item, Sweep, SweepOptions, config_key, plan
from collectors.ops.timer import TimerSettings, Timing
from collectors.ops import catalogue
from fitters.data import kernel_groups
from pmdb import platform as platforms

GPU = "gpu-box"


def test_each_activity_belongs_to_the_last_call_started_before_it():
    calls = [(100.0, 140.0), (150.0, 190.0), (200.0, 260.0)]
    activities = [(90.0, 7.0),                 # before the first call: not the op's
                  (104.0, 3.5), (112.0, 2.5),  # call 0: two kernels
                  (141.0, 1.0),                # ends call 0's device work after its host range closed
                  (150.0, 4.0),                # starts with call 1
                  (230.0, 0.25)]               # call 2
    assert per_call_us(calls, activities) == [7.0, 4.0, 0.25]
    assert per_call_us(calls, []) == [0.0, 0.0, 0.0]  # an op that launches nothing costs the device nothing
    with pytest.raises(ValueError):
        per_call_us([(5.0, 6.0), (1.0, 2.0)], [])


def test_back_to_back_and_call_counts():
    assert back_to_back_us([600.0, 590.0, 640.0], 50) == pytest.approx(11.8)  # the H200 file's 1M add: 11.8 µs
    with pytest.raises(ValueError):
        back_to_back_us([], 50)
    assert calls_for(2.0, 5_000.0) == 50          # a 2 µs op: capped
    assert calls_for(2_700.0, 5_000.0) == 5       # a 4096³ GEMM: the floor
    assert calls_for(250.0, 5_000.0) == 20
    assert calls_for(float("nan"), 5_000.0) == 50


def test_profiled_calls_reads_ranges_and_device_events_only():
    class Range:
        def __init__(self, start, end):
            self.start, self.end = start, end

    class Event:  # the fields of torch.autograd.profiler_util.FunctionEvent that are read
        def __init__(self, name, device_type, start, end, annotation=False):
            self.name, self.device_type, self.time_range = name, device_type, Range(start, end)
            self.is_user_annotation = annotation

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    events = [Event("pmdb::device_call", cpu, 10.0, 20.0, True), Event("pmdb::device_call", cuda, 11.0, 19.0, True),
              Event("aten::add", cpu, 10.5, 12.0), Event("cudaLaunchKernel", cpu, 11.0, 11.5),
              Event("vectorized_elementwise_kernel", cuda, 12.0, 14.5), Event("Memcpy DtoD", cuda, 15.0, 15.5),
              Event("pmdb::device_call", cpu, 0.0, 9.0, True)]
    ranges, activities = profiled_calls(events)
    assert ranges == [(0.0, 9.0), (10.0, 20.0)]
    assert activities == [(12.0, 2.5), (15.0, 0.5)]
    assert per_call_us(ranges, activities) == [0.0, 3.0]


def _cuda_sweep(store, run, options: SweepOptions) -> Sweep:
    """The sweep's row writer for a CUDA platform on this CPU machine: a real Sweep of this machine's platform
    (Sweep() refuses a CUDA platform without a visible GPU) pointed at the CUDA platform and device cuda:0, so
    its own _write and _base_row write the row."""
    threads = torch.get_num_threads()
    sweep = Sweep(store, run, platforms.register_local(store)["name"], options)
    torch.set_num_threads(threads)  # Sweep() sets the sweep's threads; execute() would restore them
    sweep.platform, sweep.device, sweep.flusher = GPU, torch.device("cuda", 0), None
    return sweep


def test_cuda_rows_store_device_time_and_the_fit_and_resume_read_it(store):
    """Two relu configs on a CUDA platform: one has only a row timed as one call between events (before 0015),
    the other a row written now. The fit sees only the device time; the resume plan measures the old one again."""
    platforms.ensure_named(store, GPU, device_kind="cuda")
    spec = catalogue.get("relu")
    options = SweepOptions(ops=["relu"], passes="fwd", threads=1,
                           configs=[{"M": 64, "N": 4096}, {"M": 256, "N": 4096}],
                           cache="warm", settings=TimerSettings(min_time_us=500.0))
    old_cfg, new_cfg = (spec.check(c) for c in options.configs)
    keys = [config_key("relu", "fwd", "torch", "float32", 1, c) for c in (old_cfg, new_cfg)]
    with store.run("ops", GPU, {}) as run:
        store.insert_one("op_measurements", {
            "run_id": run.run_id, "platform": GPU, "op": "relu", "pass": "fwd", "implementation": "torch",
            "dtype": "float32", "device": "cuda:0", "cache_state": "device", "params": old_cfg,
            "config_key": keys[0], "median_us": 23.8, "threads": 1, "source": "microbenchmark",
            "device_timing": "single_call", "single_call_us": 23.8})
        calls = [(10.0 * i, 10.0 * i + 8.0) for i in range(5)]
        kernels = [(10.0 * i + 1.0, 2.0 + 0.1 * i) for i in range(5)]  # one kernel per call
        samples = per_call_us(calls, kernels)
        timed = DeviceTiming(Timing.from_samples(samples, 1), Timing.from_samples([24.1, 23.8, 23.6], 1), 11.8, 5)
        sweep = _cuda_sweep(store, run, options)
        item = Item(spec, "torch", new_cfg, {"fwd": keys[1]}, [("fwd", "device")])
        built = type("Built", (), {"params": dict(new_cfg)})()
        sweep._write(item, "fwd", "device", built, timed.kernels, None, None, timed.columns())
        sweep.writer.flush()
    row = store.query("SELECT * FROM op_measurements WHERE config_key = ?", [keys[1]]).iloc[0]
    assert row.device_timing == KERNELS and row.cache_state == "device" and row.device == "cuda:0"
    assert row.median_us == pytest.approx(2.2) and row.min_us == pytest.approx(2.0)
    assert row.single_call_us == pytest.approx(23.8) and row.back_to_back_us == pytest.approx(11.8)
    assert row.repetitions == 5
    # what the fit reads: the device time only
    groups = [g for g in kernel_groups(store, GPU, ["relu"]) if g.cache_state == "device"]
    assert len(groups) == 1
    assert groups[0].rows["config_key"].tolist() == [keys[1]]
    assert groups[0].rows["median_us"].tolist() == pytest.approx([2.2])
    # the resume plan: the config timed as one call is measured again, the one with its device time is not
    items, resumed = plan(store, GPU, options, torch.device("cuda", 0))
    assert [item.keys["fwd"] for item in items] == [keys[0]] and resumed == 1
    assert items[0].todo == [("fwd", "device")]
