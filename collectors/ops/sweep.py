"""The resumable microbenchmark sweep behind ``pmdb collect ops``.

For every op (and implementation) the configs of the chosen sweep are planned; configs already measured on this
platform in a completed run (same config_key and cache state) are skipped unless ``force``. Configs measured by an
interrupted or failed ops run are adopted: their rows move into the new run (one transaction, so they count once,
when it completes) and are skipped too; the run's summary names the runs it resumed. Each remaining config
is built once and timed per pass and cache state (a pass's warm and cold repetitions alternated); rows go to the
store in batches as the sweep runs. A config over the memory cap, or one that runs out of memory, is stored as
skipped with its reason and the sweep goes on.
Instead of a sweep, ``SweepOptions.targets`` (``--from-traces``) gives the configs, passes and implementations;
on a CPU (and ``--cache both``, the default) the traced shapes of an op that loops (``OpSpec.loops``: embedding
lookups) are also timed in the 'loop' cache state, both passes in one training loop of the op
(:func:`collectors.ops.timer.time_loop`).
"""
from __future__ import annotations

import contextlib
import hashlib
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from collectors.ops import DEFAULT_THREADS, catalogue, memory_limit
from collectors.ops.kernels import kernel_breakdown
from collectors.ops.catalogue import BuildContext, Built, OpSpec, canonical, thin
from collectors.ops.summary import SweepSummary
from collectors.ops.timer import (LOOP, CacheFlusher, TimerSettings, Timing, measure, time_cpu_both, time_loop,
                                  timing_environment)
from collectors.ops.cuda_timing import time_device
from collectors.ops.engine_call import EngineCallCost
from collectors.ops.writer import BatchWriter, sticky_interrupts
from collectors.memory_probe import read_probe
from collectors.wake_probe import read_wake
from collectors.ops.after_other_work import away_curve
from collectors.workloads.allocator import apply_in_process
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Run, Store, StoreWriteError

if TYPE_CHECKING:
    from collectors.ops.from_traces import Target

PASSES = {"fwd": ("fwd",), "bwd": ("bwd",), "both": ("fwd", "bwd")}
CACHES = {"warm": ("warm",), "cold": ("cold",), "both": ("warm", "cold")}
DTYPES = {"float32": torch.float32}
# One intra-op thread: what each rank of a multi-rank CPU run uses (environment.md), and on a shared 2-core machine
# two threads make every parallel op wait a scheduler slice whenever the other core is busy. None keeps torch's.
_OOM = re.compile(r"out of memory|can't allocate memory|not enough memory|cannot allocate", re.IGNORECASE)


def default_memory_cap() -> int:
    """A quarter of host memory, at most 8 GiB (bytes)."""
    try:
        with open("/proc/meminfo") as fh:
            total = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        total = 16 * 2 ** 30
    return int(min(8 * 2 ** 30, total // 4))


def parse_bytes(text: str) -> int:
    """'4GiB', '512MB', '1.5G', '1000000' -> bytes (K/M/G/T/P are powers of 1000 with B, of 1024 with iB or alone)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtTpP]?)(i?)([bB]?)\s*", str(text))
    if not match:
        raise PmdbError(f"bad size {text!r}: use a number of bytes or e.g. 512MiB, 4GiB, 2GB")
    number, prefix, binary, unit = match.groups()
    power = "kmgtp".find(prefix.lower()) + 1 if prefix else 0
    base = 1000 if (unit and not binary) else 1024
    value = int(float(number) * base ** power)
    if value <= 0:
        raise PmdbError(f"bad size {text!r}: must be > 0")
    return value


@dataclass
class SweepOptions:
    """What ``pmdb collect ops`` asked for (see the command's --help for each)."""

    ops: list[str] | None = None
    passes: str = "both"
    sweep: str = "default"
    sample: int = 100
    seed: int = 0
    budget_s: float | None = None
    force: bool = False
    kernels: bool = False
    memory_cap: int = field(default_factory=default_memory_cap)
    cache: str = "both"
    max_configs: int | None = None
    threads: int | None = DEFAULT_THREADS
    sources: list[str] | None = None
    optimizer: str = "exact_sgd"
    lr: float = 0.01
    configs: list[dict[str, Any]] | None = None
    targets: list[Target] | None = None  # --from-traces: the traced shapes (collectors.ops.from_traces)
    dtype: str = "float32"
    settings: TimerSettings = field(default_factory=TimerSettings)
    flush_every_s: float = 5.0

    def validate(self) -> None:
        if self.passes not in PASSES:
            raise PmdbError(f"bad --pass {self.passes!r}: use fwd, bwd or both")
        if self.cache not in CACHES:
            raise PmdbError(f"bad --cache {self.cache!r}: use warm, cold or both")
        if self.sweep not in catalogue.SWEEPS:
            raise PmdbError(f"bad --sweep {self.sweep!r}: use {', '.join(catalogue.SWEEPS)}")
        if self.dtype not in DTYPES:
            raise PmdbError(f"bad dtype {self.dtype!r}: use {', '.join(DTYPES)}")
        for name, value in (("--sample", self.sample), ("--max-configs", self.max_configs),
                            ("--threads", self.threads)):
            if value is not None and value < 1:
                raise PmdbError(f"bad {name} {value}: must be >= 1")
        if self.budget_s is not None and self.budget_s <= 0:
            raise PmdbError("bad --budget-minutes: must be > 0")
        if self.configs and (not self.ops or len(self.ops) != 1):
            raise PmdbError("--config needs exactly one --op")
        if self.configs and self.targets is not None:
            raise PmdbError("--config and --from-traces exclude each other")


@dataclass
class Item:
    """One config of one op implementation, with the (pass, cache state) pairs still to measure."""

    spec: OpSpec
    implementation: str
    config: dict[str, Any]
    keys: dict[str, str]
    todo: list[tuple[str, str]]


def config_key(op: str, pass_: str, implementation: str, dtype: str, threads: int, config: dict[str, Any]) -> str:
    """sha256 of the canonical (op, pass, implementation, dtype, threads, config): the resume key."""
    text = canonical({"op": op, "pass": pass_, "implementation": implementation, "dtype": dtype,
                      "threads": threads, "config": config})
    return hashlib.sha256(text.encode()).hexdigest()


def device_for(store: Store, platform: str) -> torch.device:
    """The torch device a sweep of ``platform`` runs on (cuda:0 on a CUDA platform; fails where none is visible)."""
    if platforms.load(store, platform).cuda:
        if not torch.cuda.is_available():
            raise PmdbError(f"platform {platform} is a CUDA platform but no CUDA device is visible here")
        return torch.device("cuda:0")
    return torch.device("cpu")


def _op_configs(spec: OpSpec, options: SweepOptions, rng: np.random.Generator
                ) -> list[tuple[dict[str, Any], tuple[str, ...] | None, tuple[str, ...]]]:
    """(config, passes or None for all, implementations) of one op: --config, the traced targets or its sweep
    (the last two thinned to --max-configs)."""
    extra = {"sources": options.sources, "optimizer": options.optimizer} if spec.make_configs else {}
    if options.targets is not None:
        wanted = [(t.config, t.passes, t.implementations or spec.implementations) for t in options.targets
                  if t.op == spec.name]
    elif options.configs:
        return [(spec.check(c, **extra), None, spec.implementations) for c in options.configs]
    else:
        wanted = [(c, None, spec.implementations) for c in spec.configs(options.sweep, rng, options.sample, **extra)]
    return thin(wanted, options.max_configs, options.seed) if options.max_configs else wanted


def plan(store: Store, platform: str, options: SweepOptions, device: torch.device,
         run_id: str | None = None) -> tuple[list[Item], int]:
    """Items still to measure and how many configs were already measured (skipped for resume): rows of completed
    runs and of the run ``run_id`` itself (rows it adopted from interrupted runs).

    On a GPU with a time budget the ops take turns (:func:`interleaved`). On a CPU the items run largest memory
    first. With mmap on (a user's MALLOC_MMAP_MAX_; pmdb's default is off)
    glibc serves a request above its mmap threshold (32 MiB) from a free heap chunk when one is big enough, without
    page faults; small configs freed earlier coalesce into such chunks, so a big allocating op (Adam's sqrt of a
    51 MB parameter) measured 5x faster after them than in a fresh process. Largest first, every big allocation
    meets a heap that small frees have not grown yet; with mmap off the order does not matter."""
    specs = catalogue.load()
    names = options.ops or list(specs)
    if options.targets is not None:
        names = [n for n in names if any(t.op == n for t in options.targets)]
    for name in names:
        catalogue.get(name)
    caches = ("device",) if device.type == "cuda" else CACHES[options.cache]
    threads = options.threads or torch.get_num_threads()  # what the sweep will run with (it sets options.threads)
    items, resumed = [], 0
    for name in names:
        spec = specs[name]
        rng = np.random.default_rng([options.seed, zlib.crc32(name.encode())])  # per op: independent of --op order
        passes = [p for p in PASSES[options.passes] if p in spec.passes_on(device.type)]
        if not passes:
            continue
        # traced shapes of an op that loops are also timed as a training loop runs them (timer.time_loop)
        looped = spec.loops and device.type == "cpu" and options.targets is not None and options.cache == "both"
        done = set() if options.force else set(store.conn.execute(
            "SELECT DISTINCT config_key, cache_state FROM v_op_measurements WHERE platform = ? AND op = ? "
            "UNION SELECT DISTINCT config_key, cache_state FROM op_measurements WHERE run_id = ? AND platform = ? "
            "AND op = ? AND skipped IS NULL AND median_us IS NOT NULL",
            [platform, name, run_id, platform, name]).fetchall())
        for config, only, implementations in _op_configs(spec, options, rng):
            chosen = [p for p in passes if only is None or p in only]
            if not chosen:
                continue
            states = caches + (LOOP,) if looped else caches
            for implementation in implementations:
                keys = {p: config_key(name, p, implementation, options.dtype, threads, config) for p in chosen}
                todo = [(p, c) for p in chosen for c in states if (keys[p], c) not in done]
                if todo:
                    items.append(Item(spec, implementation, config, keys, todo))
                else:
                    resumed += 1
    if device.type == "cpu":
        items.sort(key=lambda item: -item.spec.memory(item.config))  # stable: the plan's order among equals
    elif options.budget_s is not None:
        items = interleaved(items)   # a budget then cuts every op's last configs, not the last ops whole
    return items, resumed


def interleaved(items: list[Item]) -> list[Item]:
    """``items`` taken one op at a time in turn (each op's own order kept): the first configs of every op come
    before the later ones of any."""
    per_op: dict[str, list[Item]] = {}
    for item in items:
        per_op.setdefault(item.spec.name, []).append(item)
    queues = list(per_op.values())
    out: list[Item] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        out += [q[depth] for q in queues if depth < len(q)]
    return out


def adopt_interrupted(store: Store, run_id: str, platform: str, options: SweepOptions,
                      device: torch.device) -> tuple[list[str], int]:
    """Move into run ``run_id`` the measured rows of this platform's interrupted or failed ops runs that its plan
    still needs (one row per config_key and cache state, the newest), with their embedding statistics, in one
    transaction. Returns the runs resumed and the rows adopted."""
    if options.force:
        return [], 0
    prior = [r for (r,) in store.conn.execute(
        "SELECT run_id FROM collection_runs WHERE kind = 'ops' AND platform = ? AND run_id <> ? "
        "AND status IN ('interrupted', 'failed')", [platform, run_id]).fetchall()]
    if not prior:
        return [], 0
    items, _ = plan(store, platform, options, device, run_id)
    wanted = {(item.keys[p], c) for item in items for p, c in item.todo}
    if not wanted:
        return [], 0
    chosen: dict[tuple[str, str], tuple[int, str]] = {}
    for measurement_id, source, key, cache in store.conn.execute(
            "SELECT measurement_id, run_id, config_key, cache_state FROM op_measurements "
            "WHERE platform = ? AND list_contains(?, run_id) AND skipped IS NULL AND median_us IS NOT NULL "
            "AND device_timing IS DISTINCT FROM 'single_call' "  # not a kernel time (migration 0015)
            "ORDER BY measurement_id DESC", [platform, prior]).fetchall():
        if (key, cache) in wanted and (key, cache) not in chosen:
            chosen[(key, cache)] = (measurement_id, source)
    if not chosen:
        return [], 0
    ids = sorted(m for m, _ in chosen.values())
    with store.transaction():
        for table in ("embedding_batch_stats", "op_measurements"):
            store.conn.execute(f"UPDATE {table} SET run_id = ? WHERE list_contains(?, measurement_id)",
                               [run_id, ids])
    return sorted({source for _, source in chosen.values()}), len(ids)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and bool(_OOM.search(str(exc))))


AWAY_MAX_BYTES = 2 ** 20   # the largest config whose forward is timed after other work (bytes)


def away_items(items: list[Item]) -> set[int]:
    """The ids of the items whose forward's code path away is timed (:mod:`collectors.ops.after_other_work`): per op
    and implementation, the config of least memory among those whose forward is timed warm, if it needs at most
    :data:`AWAY_MAX_BYTES` (a larger one's own operands decay in the wait too, which is priced apart)."""
    smallest: dict[tuple[str, str], tuple[float, Item]] = {}
    for item in items:
        if ("fwd", "warm") not in item.todo:
            continue
        key, need = (item.spec.name, item.implementation), float(item.spec.memory(item.config))
        if need > AWAY_MAX_BYTES:
            continue
        if key not in smallest or need < smallest[key][0]:
            smallest[key] = (need, item)
    return {id(item) for _, item in smallest.values()}


class Sweep:
    """Runs the planned items into the store under one collection run."""

    def __init__(self, store: Store, run: Run, platform: str, options: SweepOptions):
        options.validate()
        self._threads_before = torch.get_num_threads()
        if options.threads:
            torch.set_num_threads(options.threads)
        self.store, self.run, self.platform, self.options = store, run, platform, options
        self.device = device_for(store, platform)
        if self.device.type == "cpu":
            apply_in_process()  # the glibc malloc settings the workloads' ranks run under (timed the same way)
        self.writer = BatchWriter(store, run.run_id, options.flush_every_s)
        self._away_items: set[int] = set()   # collectors.ops.after_other_work: set when the items are planned
        self._bound: memory_limit.Bound | None = None   # the memory cap of the config being measured (CPU)
        if self.device.type == "cpu":
            memory_limit.prepare()
        self.summary = SweepSummary(options.sweep, self.device.type, timing_environment(),
                                    options.settings.as_dict(), options.memory_cap)
        needs_cold = self.device.type == "cpu" and "cold" in CACHES[options.cache]
        # the autograd engine's own cost of a backward call, stored beside each CPU backward row
        self.engine = EngineCallCost() if self.device.type == "cpu" else None
        if self.engine is not None:
            self.summary.engine_call_us = self.engine.measured   # the same list: each figure as it is taken
        llc_bytes = platforms.cache_sizes().get("llc_bytes")
        self.flusher = CacheFlusher(options.settings.flush_bytes, llc_bytes) if needs_cold else None

    def _base_row(self, item: Item, pass_: str, cache: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"platform": self.platform, "op": item.spec.name, "pass": pass_, "implementation": item.implementation,
                "dtype": self.options.dtype, "device": str(self.device), "cache_state": cache, "params": params,
                "config_key": item.keys[pass_], "threads": torch.get_num_threads()}

    def _unbounded(self) -> contextlib.AbstractContextManager[None]:
        """The memory bound of the config in progress lifted (rows go to the store outside the config's cap)."""
        return self._bound.paused() if self._bound is not None else contextlib.nullcontext()

    def _skip(self, item: Item, todo: list[tuple[str, str]], reason: str, kind: str) -> None:
        params = {k: v for k, v in item.config.items() if k not in ("sources", "optimizer")}
        for pass_, cache in todo:
            with self._unbounded():
                self.writer.add({**self._base_row(item, pass_, cache, params), "skipped": reason[:500]})
        self.summary.skipped(item.spec.name, kind, reason)

    def _measure(self, item: Item) -> None:
        ctx = BuildContext(self.device, DTYPES[self.options.dtype], self.options.seed, self.options.optimizer,
                           self.options.lr, item.implementation)
        need = item.spec.memory(item.config)
        if need > self.options.memory_cap:
            self._skip(item, item.todo, f"memory cap: needs ~{need / 2**20:.0f} MiB > cap "
                                        f"{self.options.memory_cap / 2**20:.0f} MiB", "memory_cap")
            return
        todo = list(item.todo)
        warmed: set[str] = set()
        built = twin = None
        held = contextlib.ExitStack()
        try:
            if self.device.type == "cpu":  # the cap held while the config is built and timed, not only estimated
                self._bound = held.enter_context(memory_limit.bounded(self.options.memory_cap))
            built = item.spec.build(item.config, ctx)
            if self.flusher is not None and any(c == "cold" for _, c in todo) and \
                    need <= self.options.settings.rewarm_max_bytes:
                twin = item.spec.build(item.config, ctx)  # other operands, same code path (timer.time_cpu)
            while todo:
                pass_, cache = todo[0]
                if cache == LOOP:
                    self._measure_loop(item, built, todo)
                    continue
                fn = built.fwd if pass_ == "fwd" else built.bwd
                rewarm = None if twin is None else (twin.fwd if pass_ == "fwd" else twin.bwd)
                warmup = 0 if pass_ in warmed else None
                extra: dict[str, Any] = {}  # columns of this state's rows beyond the Timing's (cuda_timing)
                if self.flusher is not None and (pass_, "cold") in todo:
                    self.flusher.target(fn, built)  # what a cold repetition of this pass evicts
                if cache == "warm" and (pass_, "cold") in todo and self.flusher is not None:
                    # both states of a pass: repetitions alternated (collectors.ops.timer.time_cpu_both)
                    timings = dict(zip(("warm", "cold"), time_cpu_both(fn, self.options.settings, self.flusher,
                                                                        warmup, rewarm)))
                elif cache == "device":  # CUDA: the kernels' device time, with single-call and back-to-back beside
                    timed = time_device(fn, self.options.settings, self.device, warmup)
                    timings, extra = {cache: timed.kernels}, timed.columns()
                else:
                    timings = {cache: measure(fn, cache, self.options.settings, self.device, self.flusher, warmup,
                                              rewarm)}
                warmed.add(pass_)
                for cache, timing in timings.items():
                    kernels = kernel_breakdown(fn, self.device) if self.options.kernels else None
                    self._write(item, pass_, cache, built, timing, kernels, built.stats, extra)
                    todo.remove((pass_, cache))
            if id(item) in self._away_items:   # its code path away, on this op's smallest config (CPU)
                self.summary.code_away[f"{item.spec.name}/{item.implementation}"] = away_curve(built.fwd)
        except StoreWriteError:
            raise  # a batch that cannot be written fails the run: never a skipped config with rows missing
        except Exception as exc:  # noqa: BLE001 - one bad config must not end a long sweep; it is recorded
            kind = "oom" if _is_oom(exc) else "error"
            capped = self._bound is not None and memory_limit.binding(self.options.memory_cap)
            held.close()   # the config's tensors are unreachable now: its rows are written unbounded
            self._bound = None
            if kind == "oom" and capped:
                self._skip(item, todo, f"memory cap: used more than the cap {self.options.memory_cap / 2**20:.0f} "
                                       f"MiB (measured; estimated ~{need / 2**20:.0f} MiB)", "memory_cap")
            else:
                self._skip(item, todo, f"{'out of memory' if kind == 'oom' else 'error'}: "
                                       f"{type(exc).__name__}: "
                                       f"{str(exc).strip().splitlines()[0] if str(exc) else ''}", kind)
        finally:
            for done in (built, twin):
                if done is not None and done.release is not None:
                    done.release()
            built = twin = done = None  # noqa: F841 - free the tensors before the next config
            held.close()
            self._bound = None

    def _write(self, item: Item, pass_: str, cache: str, built: Built, timing: Timing,
               kernels: list[dict[str, Any]] | None = None, stats: list[dict[str, Any]] | None = None,
               extra: dict[str, Any] | None = None) -> None:
        """Queue one measured row (and the config's embedding statistics, when given) and count it; ``extra``:
        more columns of the row (a CUDA row's device_timing, single_call_us, back_to_back_us)."""
        if self.engine is not None and pass_ == "bwd" and built.engine_bwd:
            extra = {**(extra or {}), "engine_call_us": self.engine.current()}
        with self._unbounded():
            self.writer.add({**self._base_row(item, pass_, cache, built.params), "median_us": timing.median_us,
                             "mean_us": timing.mean_us, "std_us": timing.std_us, "min_us": timing.min_us,
                             "repetitions": timing.repetitions, "warmup": timing.warmup, "kernels": kernels,
                             "flushed": self.flusher.flushed if cache == "cold" and self.flusher is not None else None,
                             **(extra or {})}, stats)
        self.summary.measured(item.spec.name, item.implementation, pass_, cache, timing)

    def _measure_loop(self, item: Item, built: Built, todo: list[tuple[str, str]]) -> None:
        """Both passes in the 'loop' state at once (a training loop of the op: forward, then backward); the rows of
        the passes still to do are written and leave ``todo``."""
        wanted = [p for p, c in todo if c == LOOP]
        if built.loop is None:
            self._skip(item, [(p, LOOP) for p in wanted], "no training loop for this op here", "error")
        else:
            for pass_, timing in zip(("fwd", "bwd"), time_loop(built.loop, self.options.settings)):
                if pass_ in wanted:
                    self._write(item, pass_, LOOP, built, timing)
        for pass_ in wanted:
            todo.remove((pass_, LOOP))

    def execute(self, progress: bool = True) -> dict[str, Any]:
        """Plan and run; returns the run summary (also kept in ``run.summary`` as the sweep goes)."""
        started = time.monotonic()
        runs, adopted = adopt_interrupted(self.store, self.run.run_id, self.platform, self.options, self.device)
        self.summary.resumed(runs, adopted)
        items, resumed = plan(self.store, self.platform, self.options, self.device, self.run.run_id)
        self.summary.planned(len(items), resumed)
        self._away_items = away_items(items) if self.device.type == "cpu" else set()
        if items and self.device.type == "cpu":   # the host's memory pace while these prices are taken
            with self._unbounded():
                self.summary.memory_probe.append(read_probe(curve=True, decay=True))
            self.summary.wake_probe.append(read_wake())   # on the sweep's one thread
        self.run.summary = self.summary.as_dict()
        bar = tqdm(items, total=len(items), unit="config", disable=not progress, dynamic_ncols=True,
                   desc="collect ops")
        try:
            with sticky_interrupts() as check_interrupt:
                for item in bar:
                    check_interrupt()  # an interrupt that a finalizer swallowed still stops the sweep here
                    if self.options.budget_s is not None and time.monotonic() - started > self.options.budget_s:
                        self.summary.stopped = "budget"
                        break
                    bar.set_postfix_str(f"{item.spec.name}/{item.implementation}", refresh=False)
                    self._measure(item)
                    self.summary.configs_done += 1
                    if not self.writer.pending:
                        self._sync(started)
                check_interrupt()
                if self.summary.memory_probe:
                    with self._unbounded():
                        self.summary.memory_probe.append(read_probe(curve=True))
                    self.summary.wake_probe.append(read_wake())
        except KeyboardInterrupt:
            self.summary.stopped = "interrupted"
            raise
        finally:
            bar.close()
            torch.set_num_threads(self._threads_before)
            try:
                if self.writer.failed is None:
                    self.writer.flush()  # what was measured before an interruption is kept
            finally:
                self._sync(started)
        return self.run.summary

    def _sync(self, started: float) -> None:
        self.summary.wall_s = time.monotonic() - started
        self.summary.rows_written = self.writer.rows_written
        self.summary.stats_rows_written = self.writer.stats_written
        self.run.summary = self.summary.as_dict()
