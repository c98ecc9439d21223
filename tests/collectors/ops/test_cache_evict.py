"""The cold cache state on this host: what a cold repetition evicts, that it really misses the last-level cache
whatever its size, the stream fallback, and what the sweep's rows record."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from collectors.ops import cache_evict
from collectors.ops.catalogue import autograd_pair
from collectors.ops.sweep import Sweep, SweepOptions
from collectors.ops.timer import DEFAULT_FLUSH_BYTES, CacheFlusher, TimerSettings, time_cpu
from pmdb import platform as platforms

EVICTOR = cache_evict.load()
needs_evictor = pytest.mark.skipif(EVICTOR is None, reason=f"no cache-line eviction helper on this machine: "
                                                           f"{cache_evict.why_unavailable()}")


def _span(ranges, tensor):
    start, size = tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes()
    return any(a == start and n == size for a, n in ranges)


def test_operands_of_a_forward_and_of_its_backward_each_once():
    a, b = torch.rand(64, 32, requires_grad=True), torch.rand(32, 16, requires_grad=True)
    view = a[:8]  # a view shares a's storage: evicted once
    built = autograd_pair(lambda: torch.mm(a, b), (a, b), {})
    fwd = cache_evict.operand_ranges(built.fwd, view)
    assert _span(fwd, a) and _span(fwd, b) and len(fwd) == len({addr for addr, _ in fwd})
    bwd = cache_evict.operand_ranges(built.bwd, built)
    out, grad = built.keep[0], built.keep[1]
    # the backward reads the output gradient and the saved operands of mm, reached through the autograd graph
    assert _span(bwd, grad) and _span(bwd, a) and _span(bwd, b) and _span(bwd, out)
    # tensors only the graph holds: layer_norm saves its mean and 1/std (the node's type is a 'builtins' one)
    x = torch.rand(8, 16, requires_grad=True)
    normed = torch.nn.functional.layer_norm(x, (16,))
    node = normed.grad_fn
    graph_only = cache_evict.operand_ranges(lambda: normed.sum())
    assert _span(graph_only, node._saved_result1) and _span(graph_only, node._saved_result2)
    module = torch.nn.Linear(8, 4)
    ranges = cache_evict.operand_ranges(lambda: module(torch.ones(2, 8)))
    assert _span(ranges, module.weight) and _span(ranges, module.bias)


def _buffer_bytes() -> int:
    """Bigger than L2 (so a touched read is served by the LLC), well inside the LLC (so it stays there)."""
    sizes = platforms.cache_sizes()
    l2, llc = sizes.get("l2_bytes", 2 ** 20), sizes.get("llc_bytes", 32 * 2 ** 20)
    return int(min(llc // 2, max(4 * l2, 8 * 2 ** 20)))


def _lines(nbytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A buffer and a random order of its cache lines: a gather in that order waits on each line's latency (no
    prefetcher guesses it), LLC latency when cached, memory latency when not."""
    x = torch.ones(nbytes // 4)
    order = torch.randperm(x.numel() // 16, generator=torch.Generator().manual_seed(0)) * 16
    return x, order


def _read_us(x: torch.Tensor, order: torch.Tensor) -> float:
    start = time.perf_counter_ns()
    x[order]
    return (time.perf_counter_ns() - start) / 1e3


def _touched_and_flushed(nbytes: int) -> tuple[torch.Tensor, torch.Tensor, CacheFlusher, float, float]:
    """(buffer, line order, its flusher, median µs of the read just touched, just flushed), 9 of each."""
    x, order = _lines(nbytes)
    flusher = CacheFlusher()
    flusher.target(lambda: x[order])
    assert flusher.evicting and flusher.flushed == \
        f"{EVICTOR.method}:{x.untyped_storage().nbytes() + order.untyped_storage().nbytes()}"
    touched, flushed = [], []
    for _ in range(9):
        x.sum()
        touched.append(_read_us(x, order))
        flusher.flush()
        flushed.append(_read_us(x, order))
    return x, order, flusher, float(np.median(touched)), float(np.median(flushed))


@needs_evictor
def test_a_cold_repetition_misses_the_last_level_cache():
    """A read of a buffer just flushed against the same read just after touching it: the flushed read must come from
    memory (slower by a clear margin), on this host's LLC whatever its size. First at the LLC's scale; where the
    host's LLC serves a process no faster than memory there, at half the L2, a cache it does serve from (the flush
    evicts every level, so a flushed read comes from memory either way; a flush that evicted nothing would leave
    both reads equal at every size). Measured: on the 480 MiB-L3 Xeon, 8 MiB: 828 µs touched, 6943 flushed, 1614
    after the 64 MiB stream cold used to be; on the 48 MiB-L3 Xeon guest (2026-11-29), 8 MiB: 4460 touched, 5062
    flushed (random lines at 34 ns touched), half the L2: served from the L2."""
    torch.set_num_threads(1)
    l2 = platforms.cache_sizes().get("l2_bytes", 2 ** 20)
    tried = []
    for nbytes in (_buffer_bytes(), max(l2 // 2, 64 * 1024)):
        x, order, flusher, touched, flushed = _touched_and_flushed(nbytes)
        tried.append(f"{nbytes >> 10} KiB: {flushed:.0f} µs flushed against {touched:.0f} µs touched")
        if flushed > 1.5 * touched:
            break
    else:
        pytest.fail(f"the eviction did not reach memory: {'; '.join(tried)}")
    # the timer's cold state is the same thing: a cold repetition of the read comes from memory, clearly slower
    # than the read just touched. Not against the timer's warm repetitions: those share the LLC with whatever else
    # runs (make test's other worker), and on the 32 MiB-L3 AMD host (2026-11-30) they took 2587-3437 µs against
    # 1463-1756 just touched, in three tries running
    settings = TimerSettings(warmup=1, min_reps=7, max_reps=7, min_time_us=0, cold_min_reps=7, cold_max_reps=7)
    for _ in range(3):
        cold = time_cpu(lambda: x[order], settings, flusher)
        tried.append(f"timer: {cold.median_us:.0f} µs cold against {touched:.0f} µs touched")
        if cold.median_us > 1.5 * touched:
            break
    else:
        pytest.fail(f"a cold repetition was not clearly slower than a touched read: {'; '.join(tried)}")


def test_without_a_target_or_a_helper_it_streams_twice_the_llc():
    flusher = CacheFlusher(nbytes=4 * 2 ** 20, llc_bytes=3 * 2 ** 20, evict=False)
    assert not flusher.evicting and flusher.flushed == f"stream:{6 * 2 ** 20}"
    flusher.flush()
    assert flusher.buffer is not None and flusher.buffer.nbytes == 6 * 2 ** 20
    small = CacheFlusher(llc_bytes=2 ** 20, evict=False)
    assert small.stream_bytes == DEFAULT_FLUSH_BYTES
    untargeted = CacheFlusher()
    assert not untargeted.evicting and untargeted.flushed.startswith("stream:")


def test_the_helper_is_built_once_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("PMDB_CACHE_DIR", str(tmp_path))
    cache_evict.load.cache_clear()
    try:
        loaded = cache_evict.load()
        if loaded is None:
            pytest.skip(f"no C compiler or eviction instruction here: {cache_evict.why_unavailable()}")
        built = list(tmp_path.glob("cache_evict-*.so"))
        assert len(built) == 1 and not list(tmp_path.glob("*.tmp"))
        x = np.ones(1 << 16, dtype=np.float32)
        loaded.evict([(x.ctypes.data, x.nbytes)])
        assert float(x.sum()) == 1 << 16  # eviction writes lines back: nothing is lost
        monkeypatch.setenv("CC", "/nonexistent-compiler")  # a second load finds the library and compiles nothing
        cache_evict.load.cache_clear()
        assert cache_evict.load() is not None
    finally:
        cache_evict.load.cache_clear()


def test_cold_rows_say_what_was_flushed_and_runs_the_caches(store):
    name = platforms.register_local(store)["name"]
    settings = TimerSettings(warmup=1, min_reps=2, max_reps=2, min_time_us=0, cold_min_reps=2, cold_max_reps=2)
    options = SweepOptions(settings=settings, ops=["fully_connected"], configs=[{"M": 16, "N": 8, "K": 32}])
    with store.run("ops", name, {}) as run:
        summary = Sweep(store, run, name, options).execute(progress=False)
    rows = store.query("SELECT pass, cache_state, flushed FROM op_measurements WHERE run_id = ?", [run.run_id])
    cold, warm = rows[rows.cache_state == "cold"], rows[rows.cache_state == "warm"]
    assert len(cold) == 2 and warm.flushed.isna().all()
    # fwd: M x K input, N x K weight, N bias (fp32); the backward holds at least those and the output gradient
    fwd_bytes = (16 * 32 + 8 * 32 + 8) * 4
    for pass_, flushed in zip(cold["pass"], cold.flushed):
        method, nbytes = flushed.split(":")
        if EVICTOR is None:
            assert method == "stream"
        else:
            assert method == EVICTOR.method and int(nbytes) >= fwd_bytes, (pass_, flushed)
    caches = summary["timing_environment"]["caches"]  # the host's caches, stored with the run
    assert caches["line_bytes"] in (32, 64, 128, 256)
    assert caches == {**platforms.cache_sizes(), "line_bytes": cache_evict.line_bytes()}
    assert summary["timing_environment"]["cold_flush"] == (EVICTOR.method if EVICTOR else
                                                           summary["timing_environment"]["cold_flush"])


def test_storage_ranges_hold_exactly_the_given_tensors_storages():
    a, b = torch.randn(64, 64), torch.randn(8)
    view = a[:8]
    ranges = cache_evict.storage_ranges([a, view, b])
    expected = sorted((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in (a, b))
    assert ranges == expected                          # a view is its base's storage, counted once
    assert cache_evict.storage_ranges([]) == []
