"""Per-kernel breakdown of one op call from the PyTorch profiler (``--kernels``).

CPU: the ops the call runs (ATen ops, autograd nodes, FBGEMM kernels) with their self CPU time, so the entries add
up to the call. CUDA: the device kernels with their device time. Times are µs per call, averaged over ``calls``.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile


def kernel_breakdown(fn: Callable[[], Any], device: torch.device, calls: int = 3) -> list[dict[str, Any]]:
    """[{"name", "us", "calls"}] per distinct kernel/op name, slowest first (µs and calls per call of ``fn``)."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    fn()  # warm
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize(device)
    rows = []
    for event in prof.key_averages():
        if cuda:
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
            total = event.self_device_time_total
        else:
            total = event.self_cpu_time_total
        if total > 0:
            rows.append({"name": event.key, "us": round(total / calls, 3), "calls": event.count / calls})
    return sorted(rows, key=lambda r: -r["us"])
