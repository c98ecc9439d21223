"""Peak numbers a roofline needs, measured on this platform: achieved GEMM FLOP/s ('gemm_flops'), streaming memory
bandwidth ('mem_bw', bytes read + written per second by a large copy) and, on CUDA, host<->device bandwidth
('h2d_bw', 'd2h_bw', pinned host memory). Each is the best repetition (the achievable peak); details keep the
median, sizes, repetitions and threads."""
from __future__ import annotations

from typing import Any, Callable

import torch

from collectors.ops.timer import TimerSettings, measure
from pmdb.store import Store

PEAK_SETTINGS = TimerSettings(warmup=1, min_reps=5, max_reps=20, min_time_us=200_000.0)


def _peak(metric: str, fn: Callable[[], Any], work: float, device: torch.device, details: dict[str, Any],
          settings: TimerSettings) -> dict[str, Any]:
    timing = measure(fn, "device" if device.type == "cuda" else "warm", settings, device, None)
    return {"metric": metric, "dtype": "float32", "value": work / (timing.min_us * 1e-6),
            "details": {**details, "best_us": timing.min_us, "median_us": timing.median_us,
                        "median_rate": work / (timing.median_us * 1e-6), "repetitions": timing.repetitions,
                        "threads": torch.get_num_threads(), "device": str(device)}}


def measure_peaks(device: torch.device, gemm_n: int = 2048, stream_bytes: int = 256 * 2 ** 20,
                  settings: TimerSettings = PEAK_SETTINGS) -> list[dict[str, Any]]:
    """Rows for platform_peaks (without platform/run_id): values in FLOP/s or bytes/s."""
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(gemm_n, gemm_n, generator=gen).to(device)
    b = torch.rand(gemm_n, gemm_n, generator=gen).to(device)
    c = torch.empty_like(a)
    rows = [_peak("gemm_flops", lambda: torch.mm(a, b, out=c), 2.0 * gemm_n ** 3, device,
                  {"op": "mm", "n": gemm_n}, settings)]
    del a, b, c
    numel = stream_bytes // 4
    src = torch.ones(numel, device=device)
    dst = torch.empty_like(src)
    rows.append(_peak("mem_bw", lambda: dst.copy_(src), 2.0 * stream_bytes, device,
                      {"op": "copy", "bytes": stream_bytes, "counted": "read + write"}, settings))
    if device.type == "cuda":
        host = torch.ones(numel, pin_memory=True)
        rows.append(_peak("h2d_bw", lambda: src.copy_(host, non_blocking=True), float(stream_bytes), device,
                          {"bytes": stream_bytes, "pinned": True}, settings))
        rows.append(_peak("d2h_bw", lambda: host.copy_(src, non_blocking=True), float(stream_bytes), device,
                          {"bytes": stream_bytes, "pinned": True}, settings))
    return rows


def store_peaks(store: Store, run_id: str, platform: str, rows: list[dict[str, Any]]) -> None:
    """Write measured peaks to platform_peaks."""
    store.insert("platform_peaks", [{**row, "platform": platform, "run_id": run_id} for row in rows])
