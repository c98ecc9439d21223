"""What an op's operands keep of the caches while the core is busy elsewhere for a while, on this host.

Diagnosis only: nothing here is fitted on, and no pricing rule is chosen by it. pmdb prices an op from repetitions
timed warm (back to back) or cold (its operands' lines flushed, :mod:`collectors.ops.cache_evict`); inside a training
step an op may follow milliseconds of other work, and may write its output into a block last touched long before.
Every state below is entered from the same point (the read or the op just ran on the same operands), the states'
repetitions are rotated so that a slow phase of a shared host falls on all alike, and each cell is the median of
``--reps`` with ``±`` half the interquartile range. One thread, pmdb's allocator settings. A *busy spin* is a
pure-Python loop on ``time.perf_counter_ns`` (a few bytes of data, no vector instructions); a *vector spin* is
``sigmoid`` (no op of sections C and D) on a 4 KiB tensor into a 4 KiB output in a loop (torch's dispatcher and the
vector unit kept busy on L1-sized data).

A. **Reads after a busy wait.** A float32 ``sum`` over a buffer of 256 KiB to 16 MiB read just after a read of
   itself (``t0``), after 0.25-32 ms of a busy spin, just after its lines were flushed (``F``: the data leaves every
   level, the page translations stay) and just after a 128 MiB buffer was streamed (its lines and, with 32 768
   4 KiB pages, the TLB's translations pushed out; the stream itself takes some ms, stated). ``left`` =
   ``(F - t) / (F - t0)``: the share of the warm advantage left, 1 as fast as just touched, 0 as slow as flushed;
   negative means slower than its flushed read: more than the buffer's data lines was lost (translations,
   page-table lines, or something else this benchmark does not tell apart).
B. **Translations apart from data.** The 4 MiB buffer after a 16 ms busy wait, then one line per 4 KiB page touched
   (``buf[::1024].sum()``: 1024 lines, 64 KiB, 1/64 of the data): that re-walks every page's translation but brings
   back little data, so a read falling to about ``F`` puts the beyond-flushed part on translations. Controls: the
   same touch on another 4 MiB buffer (what the touch does besides this buffer's pages), lines flushed after the
   wait, flushed then the wait, the 128 MiB stream then the touch. The touch's own µs is given where it runs.
C. **Ops after a wait.** A few of the small transformer's op shapes, each writing into a preallocated output
   (``out=``): warm; cold (inputs and output flushed); after 2 and 16 ms of a busy spin; after 16 ms of a vector
   spin; the vector spin then the flush; the vector spin then one line per page of its operands touched
   (translations re-warmed); the vector spin then the same touch on a twin's operands (control).
D. **Fresh output blocks.** The same ops writing into the output block just used, into that block with its lines
   flushed, and into one of a pool of ``N`` blocks cycled (``N`` = 8, 64; the pool is gone through once untimed,
   then once timed, back to back: each block was last touched ``N`` calls before).
E. **Its own code away.** gelu and layer_norm of 128, 1024 and 4096 rows x 256 after 0.5-16 ms of other ops on
   other data (a 256x256 ``mm``, an ``add``, a ``relu``) against the same wait spent running the op itself on a
   twin's operands: both churn L2, only the first takes the op's own code path (kernel, dispatch) away.
F. **The call's path.** gelu and layer_norm of 128 x 256 after 0.5-8 ms of the same other ops, called as section
   E calls them (``torch.ops.aten.<op>.out`` into a preallocated output) and as a training step's forward calls
   them (``torch.nn.functional`` on inputs that require grad: the output allocated, an autograd node recorded,
   what ``collect ops`` times its code path away on, :mod:`collectors.ops.after_other_work`), rotated together.

Under each section: its wall time, this thread's migrations and involuntary context switches
(``/proc/thread-self/sched``) and the steal share of all CPUs' time (``/proc/stat``), since a wait's slowdown could
also come from the thread being moved or the virtual CPU being descheduled.

    .venv/bin/python benchmarks/busy_wait_decay.py [--reps 80] [--sections ABCDEF] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import emit, host_line  # noqa: E402
from collectors.ops import cache_evict  # noqa: E402
from collectors.ops.after_other_work import other_work, timed_us  # noqa: E402
from collectors.memory_probe import busy_wait  # noqa: E402

KIB, MIB = 2 ** 10, 2 ** 20
PAGE = 4 * KIB
READ_SIZES = (256 * KIB, MIB, 4 * MIB, 16 * MIB)
WAITS_MS = (0, 0.25, 1, 2, 4, 8, 16, 32)
STREAM_BYTES = 128 * MIB
POOLS = (8, 64)
Tensors = tuple[torch.Tensor, ...]

now_ns = time.perf_counter_ns
_small_in, _small_out = torch.randn(1024), torch.empty(1024)   # the vector spin's 4 KiB operands


def spin(ms: float) -> None:
    """A busy wait on a few bytes: a Python loop on the clock (the memory probe's, which times the caches' decay)."""
    busy_wait(ms * 1e3)


def vector_spin(ms: float) -> None:
    """A busy wait that keeps torch's dispatcher and the vector unit running on L1-sized data."""
    end = now_ns() + int(ms * 1e6)
    while now_ns() < end:
        torch.ops.aten.sigmoid.out(_small_in, out=_small_out)


def page_views(tensors: Tensors) -> list[torch.Tensor]:
    """Views that hold one element in every 4 KiB of each tensor, and its last element (the last page)."""
    views = []
    for t in tensors:
        flat = t.reshape(-1)
        views += [flat[::max(1, PAGE // t.element_size())], flat[-1:]]
    return views


def touch(views: list[torch.Tensor]) -> None:
    for v in views:
        v.sum()


def stats(values: list[float]) -> tuple[float, float]:
    """(median, half the interquartile range)."""
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return float(med), float(q3 - q1) / 2


def cell(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    med, half = stats(values)
    digits = 1 if med < 20 else 0
    return f"{med:.{digits}f} ±{half:.{digits}f}"


def rotated(states: list[Any], rep: int) -> list[Any]:
    k = rep % len(states)
    return states[k:] + states[:k]


def sched_counts() -> dict[str, int]:
    """This thread's migrations and context switches so far (empty where the kernel does not say)."""
    counts = {}
    try:
        for line in Path("/proc/thread-self/sched").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("se.nr_migrations", "nr_involuntary_switches", "nr_voluntary_switches"):
                counts[key] = int(float(value))
    except OSError:
        pass
    return counts


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


class Section:
    """Wall time, migrations, switches and steal over one section."""

    def __enter__(self) -> "Section":
        self.start, self.sched, self.ticks = time.perf_counter(), sched_counts(), cpu_ticks()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.start
        after, ticks = sched_counts(), cpu_ticks()
        self.delta = {k: after[k] - self.sched.get(k, 0) for k in after}
        total = ticks[1] - self.ticks[1]
        self.steal = (ticks[0] - self.ticks[0]) / total if total > 0 else float("nan")

    def line(self) -> str:
        moved = self.delta.get("se.nr_migrations")
        switches = self.delta.get("nr_involuntary_switches")
        return (f"Section: {self.wall:.1f} s; this thread migrated {moved if moved is not None else '?'} times, "
                f"{switches if switches is not None else '?'} involuntary context switches; steal "
                f"{100 * self.steal:.1f}% of all CPUs' time; load average {os.getloadavg()[0]:.2f} at its end.")


def ranges(tensors: Tensors) -> list[tuple[int, int]]:
    return cache_evict.storage_ranges(tensors)


def rotated_samples(fn: Callable[[], Any], states: list[Any], reps: int, prepare: Callable[[Any], None],
                    warmups: int = 5) -> dict[Any, list[float]]:
    """µs of ``fn`` per state, after ``warmups`` untimed calls: each repetition goes through the states in rotated
    order, each as ``fn()`` (its operands just touched), ``prepare(state)``, then ``fn()`` timed."""
    samples: dict[Any, list[float]] = {s: [] for s in states}
    for _ in range(warmups):
        fn()
    for rep in range(reps):
        for state in rotated(states, rep):
            fn()
            prepare(state)
            samples[state].append(timed_us(fn))
    return samples


# ---------------------------------------------------------------------------------------------- A. reads after a wait
def reads_after_wait(size: int, reps: int, ev: cache_evict.Evictor | None,
                     stream: torch.Tensor) -> dict[Any, list[float]]:
    """µs of a read of a ``size``-byte buffer per state: a wait in ms, 'flushed', 'streamed'."""
    buf = torch.ones(size // 4)
    lines = ranges((buf,))
    states: list[Any] = list(WAITS_MS) + (["flushed"] if ev else []) + ["streamed"]

    def prepare(state: Any) -> None:
        if state == "flushed":
            ev.evict(lines)
        elif state == "streamed":
            stream.sum()
        elif state:
            spin(state)

    return rotated_samples(buf.sum, states, reps, prepare, warmups=3)


def share_left(t: list[float], t0: list[float], flushed: list[float] | None) -> str:
    if not flushed:
        return "n/a"
    f, w = stats(flushed)[0], stats(t0)[0]
    return f"{(f - stats(t)[0]) / (f - w):.2f}" if f - w > 1e-9 else "n/a"


def section_a(reps: int, ev: cache_evict.Evictor | None, stream: torch.Tensor) -> list[str]:
    stream_us = float(np.median([timed_us(stream.sum) for _ in range(5)]))
    with Section() as sec:
        by_size = {size: reads_after_wait(size, reps, ev, stream) for size in READ_SIZES}
    names = {size: (f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB") for size in READ_SIZES}
    lines = ["", f"## A. Reads after a busy wait (float32 `sum`, median µs ±half-IQR of {reps}; `left` = "
                 "(F - t) / (F - t0))", "",
             f"The 128 MiB stream's own read takes {stream_us / 1e3:.1f} ms (time that passes too). "
             "`left` below 0: slower than the read after a flush of its lines.", ""]
    if not ev:
        lines += ["No flush helper (" + (cache_evict.why_unavailable() or "unknown") + "): the flushed row and `left` "
                  "are skipped.", ""]
    lines += ["| state | " + " | ".join(f"{names[s]} µs | left" for s in READ_SIZES) + " |",
              "|---|" + "---|---|" * len(READ_SIZES)]
    labels = [(w, "just touched" if w == 0 else f"after {w:g} ms busy wait") for w in WAITS_MS]
    labels += [("flushed", "lines flushed (F)"), ("streamed", "after a 128 MiB stream")]
    for state, label in labels:
        cells = []
        for size in READ_SIZES:
            s = by_size[size]
            cells += [cell(s.get(state)), share_left(s[state], s[0], s.get("flushed")) if state in s else "n/a"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + ["", sec.line()]


# ------------------------------------------------------------------------------------------------ B. translations
def section_b(reps: int, ev: cache_evict.Evictor | None, stream: torch.Tensor, wait_ms: float = 16) -> list[str]:
    buf, other = torch.ones(4 * MIB // 4), torch.ones(4 * MIB // 4)
    lines_of = ranges((buf,))
    pages, other_pages = page_views((buf,)), page_views((other,))
    w = f"{wait_ms:g} ms"
    steps: dict[str, tuple[str, ...]] = {   # state: what is done, in order, between touching the buffer and its read
        "touched": (), f"wait {w}": ("wait",), f"wait {w}, its pages": ("wait", "pages"),
        f"wait {w}, another buffer's pages": ("wait", "other pages"), "stream, its pages": ("stream", "pages")}
    if ev:
        steps |= {"flushed": ("flush",), f"wait {w}, flushed": ("wait", "flush"),
                  f"flushed, wait {w}": ("flush", "wait")}
    states = list(steps)
    samples: dict[str, list[float]] = {s: [] for s in states}
    touch_us: dict[str, list[float]] = {s: [] for s in states}
    for _ in range(3):
        buf.sum()
    with Section() as sec:
        for rep in range(reps):
            for state in rotated(states, rep):
                buf.sum()
                for step in steps[state]:
                    if step == "flush":
                        ev.evict(lines_of)
                    elif step == "stream":
                        stream.sum()
                    elif step == "wait":
                        spin(wait_ms)
                    else:
                        views = pages if step == "pages" else other_pages
                        touch_us[state].append(timed_us(lambda: touch(views)))
                samples[state].append(timed_us(buf.sum))
    lines = ["", f"## B. Translations apart from data (4 MiB buffer; median µs ±half-IQR of {reps})", "",
             "`pages`: one float per 4 KiB page summed (`buf[::1024].sum()` and the last element): 1024 lines, "
             "64 KiB of the buffer's 4 MiB.", ""]
    if not ev:
        lines += ["No flush helper (" + (cache_evict.why_unavailable() or "unknown") + "): the flushed states and "
                  "`left` are skipped.", ""]
    lines += ["| state before the read | read µs | left | the touch's own µs |", "|---|---|---|---|"]
    for state in states:
        left = share_left(samples[state], samples["touched"], samples.get("flushed"))
        lines.append(f"| {state} | {cell(samples[state])} | {left} | {cell(touch_us[state]) if touch_us[state] else ''}"
                     " |")
    return lines + ["", sec.line()]


# --------------------------------------------------------------------------------------------------- the op shapes
def _addmm(m: int, k: int, n: int) -> Callable[[], tuple[Tensors, Tensors, Callable[[Tensors], Any]]]:
    def make():
        b, x, w = torch.randn(n), torch.randn(m, k), torch.randn(n, k)
        return (b, x, w), (torch.empty(m, n),), lambda o: torch.addmm(b, x, w.t(), out=o[0])
    return make


def _gelu(*shape: int):
    def make():
        x = torch.randn(*shape)
        return (x,), (torch.empty(*shape),), lambda o: torch.ops.aten.gelu.out(x, out=o[0])
    return make


def _layer_norm(m: int, n: int):
    def make():
        x, w, b = torch.randn(m, n), torch.ones(n), torch.zeros(n)
        outs = (torch.empty(m, n), torch.empty(m, 1), torch.empty(m, 1))
        return (x, w, b), outs, lambda o: torch.ops.aten.native_layer_norm.out(x, [n], w, b, 1e-5, out0=o[0],
                                                                               out1=o[1], out2=o[2])
    return make


def _add(*shape: int):
    def make():
        a, b = torch.randn(*shape), torch.randn(*shape)
        return (a, b), (torch.empty(*shape),), lambda o: torch.add(a, b, out=o[0])
    return make


def _softmax(*shape: int):
    def make():
        x = torch.randn(*shape)
        return (x,), (torch.empty(*shape),), lambda o: torch.ops.aten._softmax.out(x, -1, False, out=o[0])
    return make


OPS = {  # the small transformers' shapes: 1024 tokens, hidden 64, feed-forward 256, 2 heads of 128x128 scores
    "addmm 1024x64 -> 256": _addmm(1024, 64, 256),
    "addmm 1024x256 -> 64": _addmm(1024, 256, 64),
    "gelu 1024x256": _gelu(1024, 256),
    "layer_norm 1024x64": _layer_norm(1024, 64),
    "add 1024x64": _add(1024, 64),
    "softmax 8x2x128x128": _softmax(8, 2, 128, 128),
}


# -------------------------------------------------------------------------------------------- C. ops after a wait
C_STATES = ("warm", "cold", "spin 2", "spin 16", "vspin 16", "vspin+flush", "vspin+pages", "vspin+twin pages")
C_FLUSHED = ("cold", "vspin+flush")


def ops_after_wait(make, reps: int, ev: cache_evict.Evictor | None) -> dict[str, list[float]]:
    inputs, outs, call = make()
    twin_inputs, twin_outs, _ = make()
    operands = inputs + outs
    lines_of = ranges(operands)
    pages, twin_pages = page_views(operands), page_views(twin_inputs + twin_outs)
    states = [s for s in C_STATES if ev or s not in C_FLUSHED]

    def prepare(state: str) -> None:
        if state == "spin 2":
            spin(2)
        elif state == "spin 16":
            spin(16)
        elif state.startswith("vspin"):
            vector_spin(16)
        if state in C_FLUSHED:
            ev.evict(lines_of)
        elif state == "vspin+pages":
            touch(pages)
        elif state == "vspin+twin pages":
            touch(twin_pages)

    return rotated_samples(lambda: call(outs), states, reps, prepare)


def section_c(reps: int, ev: cache_evict.Evictor | None) -> list[str]:
    with Section() as sec:
        results = {name: ops_after_wait(make, reps, ev) for name, make in OPS.items()}
    lines = ["", f"## C. Ops after a wait (median µs ±half-IQR of {reps})", "",
             "`cold`: inputs and output flushed; `spin N`: N ms busy spin; `vspin 16`: 16 ms vector spin; then "
             "`+flush` the operands' lines flushed, `+pages` one line per page of its operands touched, `+twin "
             "pages` the same on a twin op's operands (control).", ""]
    if not ev:
        lines += ["No flush helper (" + (cache_evict.why_unavailable() or "unknown") + "): `cold` and "
                  "`vspin+flush` are skipped.", ""]
    lines += ["| op | " + " | ".join(C_STATES) + " |", "|---|" + "---|" * len(C_STATES)]
    for name, samples in results.items():
        lines.append(f"| {name} | " + " | ".join(cell(samples.get(s)) for s in C_STATES) + " |")
    return lines + ["", sec.line()]


# -------------------------------------------------------------------------------------------- D. fresh output blocks
def output_blocks(make, reps: int, ev: cache_evict.Evictor | None) -> tuple[int, dict[str, list[float]]]:
    """(output bytes, µs per state: 'same', 'flushed', 'pool N')."""
    _, outs, call = make()
    pools = {n: [make()[1] for _ in range(n)] for n in POOLS}
    for pool in pools.values():
        for block in pool:
            for t in block:
                t.fill_(1.0)
    out_lines = ranges(outs)
    states: list[Any] = ["same"] + (["flushed"] if ev else []) + list(POOLS)
    samples: dict[Any, list[float]] = {s: [] for s in states}
    for _ in range(5):
        call(outs)
    for rep in range(reps):
        for state in rotated(states, rep):
            if state in ("same", "flushed"):
                call(outs)
                if state == "flushed":
                    ev.evict(out_lines)
                samples[state].append(timed_us(lambda: call(outs)))
                continue
            pool = pools[state]
            for block in pool:   # brings the pool in: each block then last touched `state` calls before its next
                call(block)
            for block in pool:
                samples[state].append(timed_us(lambda: call(block)))
    return sum(t.numel() * t.element_size() for t in outs), samples


def section_d(reps: int, ev: cache_evict.Evictor | None) -> list[str]:
    with Section() as sec:
        results = {name: output_blocks(make, reps, ev) for name, make in OPS.items()}
    heads = ["same block", "its lines flushed"] + [f"pool of {n}" for n in POOLS]
    lines = ["", f"## D. Fresh output blocks (median µs ±half-IQR; same and flushed: {reps} calls, pool of N: "
                 f"{reps} x N calls, each into a block last touched N calls before)", "",
             "Inputs stay warm; only where the output goes changes. A pool's footprint is N x the output.", ""]
    if not ev:
        lines += ["No flush helper (" + (cache_evict.why_unavailable() or "unknown") + "): `its lines flushed` is "
                  "skipped.", ""]
    lines += ["| op | output KiB | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for name, (nbytes, samples) in results.items():
        cells = [cell(samples.get(s)) for s in ["same", "flushed", *POOLS]]
        lines.append(f"| {name} | {nbytes / KIB:.0f} | " + " | ".join(cells) + " |")
    return lines + ["", sec.line()]


# -------------------------------------------------------------------------------------------- E. its own code away
E_WAITS_MS = (0.5, 2, 8, 16)
E_OPS = {f"{kind} {rows}x256": make(rows, 256) for rows in (128, 1024, 4096)
         for kind, make in (("gelu", _gelu), ("layer_norm", _layer_norm))}
E_STATES = ["warm"] + [f"{how} {w:g}" for w in E_WAITS_MS for how in ("other", "same")]


def same_op_elsewhere(ms: float, call: Callable[[], Any]) -> None:
    """The op itself, on other operands, for ``ms`` ms: its code stays hot, its operands do not."""
    end = now_ns() + int(ms * 1e6)
    while now_ns() < end:
        call()


def op_away(make, reps: int) -> dict[str, list[float]]:
    """Per state of :data:`E_STATES`: ``other W`` after W ms of pmdb's other-work routine
    (:func:`collectors.ops.after_other_work.other_work`: a 256x256 matmul, an add and a relu on their own operands;
    neither gelu's nor layer_norm's code runs), ``same W`` after W ms of the op on a twin's operands."""
    _, outs, call = make()
    _, twin_outs, twin_call = make()

    def prepare(state: str) -> None:
        if state != "warm":
            how, wait = state.split()
            if how == "other":
                other_work(float(wait) * 1e3)
            else:
                same_op_elsewhere(float(wait), lambda: twin_call(twin_outs))

    return rotated_samples(lambda: call(outs), E_STATES, reps, prepare)


def section_e(reps: int) -> list[str]:
    with Section() as sec:
        results = {name: op_away(make, reps) for name, make in E_OPS.items()}
    states = E_STATES
    lines = ["", f"## E. An op after W ms away from its own code (median µs ±half-IQR of {reps})", "",
             "`other W`: W ms of other ops on other data (a 256x256 `mm`, an `add`, a `relu`, repeated); `same W`: W "
             "ms of the same op on a twin's operands (its code kept running, its own operands left alone). Both "
             "churn L2; only `other` takes the op's code path away.", "",
             "| op | " + " | ".join(states) + " |", "|---|" + "---|" * len(states)]
    for name, samples in results.items():
        lines.append(f"| {name} | " + " | ".join(cell(samples[s]) for s in states) + " |")
    return lines + ["", sec.line()]


# ------------------------------------------------------------------------------------------------ F. the call's path
F_WAITS_MS = (0.5, 2, 8)
F_STATES = ["warm"] + [f"other {w:g}" for w in F_WAITS_MS]


def _f_calls() -> dict[str, Callable[[], Any]]:
    import torch.nn.functional as nnf

    _, gelu_outs, gelu_out = _gelu(128, 256)()            # section E's calls, its own makers
    _, norm_outs, norm_out = _layer_norm(128, 256)()
    xg = torch.randn(128, 256, requires_grad=True)
    wg, bg = torch.ones(256, requires_grad=True), torch.zeros(256, requires_grad=True)
    return {
        "gelu 128x256, aten .out (section E)": lambda: gelu_out(gelu_outs),
        "gelu 128x256, functional with grad": lambda: nnf.gelu(xg),
        "layer_norm 128x256, aten .out (section E)": lambda: norm_out(norm_outs),
        "layer_norm 128x256, functional with grad": lambda: nnf.layer_norm(xg, [256], wg, bg),
    }


def section_f(reps: int) -> list[str]:
    def prepare(state: str) -> None:
        if state != "warm":
            other_work(float(state.split()[1]) * 1e3)

    with Section() as sec:
        results = {name: rotated_samples(call, F_STATES, reps, prepare) for name, call in _f_calls().items()}
    lines = ["", f"## F. The call's path after W ms of other ops (median µs ±half-IQR of {reps})", "",
             "| call | " + " | ".join(F_STATES) + " |", "|---|" + "---|" * len(F_STATES)]
    for name, samples in results.items():
        lines.append(f"| {name} | " + " | ".join(cell(samples[s]) for s in F_STATES) + " |")
    return lines + ["", sec.line()]


# ---------------------------------------------------------------------------------------------------------- main
def _thp() -> str:
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"
    return mode + ("; THP_MEM_ALLOC_ENABLE set" if os.environ.get("THP_MEM_ALLOC_ENABLE") else "")


def _anon_huge_kib() -> str:
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return line.split(":")[1].strip()
    except OSError:
        pass
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=80,
                        help="repetitions of each state (default 80: ~2 minutes on a 2-core AMD EPYC VM)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file, appended to (default: print "
                        "only)")
    parser.add_argument("--sections", default="ABCDEF", help="which sections to run (default ABCDEF)")
    args = parser.parse_args(argv)
    if not args.sections or set(args.sections.upper()) - set("ABCDEF"):
        print("busy_wait_decay: --sections takes letters of ABCDEF", file=sys.stderr)
        return 2
    if args.reps < 3:
        print("busy_wait_decay: --reps must be at least 3", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    from collectors.workloads.allocator import apply_in_process

    applied = apply_in_process()   # pmdb's allocator settings, as `collect ops` times with them
    load_start = os.getloadavg()
    started = time.perf_counter()
    ev = cache_evict.load()
    stream = torch.ones(STREAM_BYTES // 4)
    flush = (f"{ev.method}, {ev.line_bytes}-byte lines" if ev else
             f"none ({cache_evict.why_unavailable() or 'unknown'}): flush-dependent states skipped")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    emit("\n".join([
        f"# Cache decay on this host — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
        f"Host: {host_line()}; transparent huge pages: {_thp()}; flush helper: {flush}; one thread; pmdb's "
        f"allocator settings ({'applied' if applied else 'not applied: not glibc, or LD_PRELOAD set'}); torch "
        f"{torch.__version__}; load average {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} at "
        f"start. `benchmarks/busy_wait_decay.py --reps {args.reps}` (diagnosis only: nothing is fitted on it, no rule "
        "is chosen by it).",
    ]), args.out)
    wanted = args.sections.upper()
    sections = {"A": lambda: section_a(args.reps, ev, stream), "B": lambda: section_b(args.reps, ev, stream),
                "C": lambda: section_c(args.reps, ev), "D": lambda: section_d(args.reps, ev),
                "E": lambda: section_e(args.reps), "F": lambda: section_f(args.reps)}
    for letter, section in sections.items():
        if letter in wanted:
            emit("\n".join(section()), args.out)
    end = os.getloadavg()
    emit("\n".join(["", f"Load average {end[0]:.2f} / {end[1]:.2f} / {end[2]:.2f} at the end; the run took "
                        f"{time.perf_counter() - started:.0f} s; the process's anonymous huge pages: "
                        f"{_anon_huge_kib()}.", ""]), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
