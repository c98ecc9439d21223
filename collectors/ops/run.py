"""One ``collect ops`` or ``collect peaks`` run as a stage function: validated options in, the run's summary out.
The CLI parses flags into :class:`collectors.ops.sweep.SweepOptions` and prints what these return."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from collectors.embedding.indices import make_source
from collectors.embedding.tbe import OPTIMIZERS
from collectors.ops import catalogue
from collectors.ops.from_traces import (TracedShapes, graph_shapes, select_trace_sets, shape_counts,
                                        traced_shapes)
from collectors.ops.peaks import measure_peaks, store_peaks
from collectors.ops.sweep import Sweep, SweepOptions, device_for, plan
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store


@dataclass
class TraceSelection:
    """``--from-traces``: which stored trace sets give the op shapes (None = every trace set of the platform); or
    ``graphs`` a caller derived ((the recorded trace set they derive from, graph, rank -> tables),
    :func:`collectors.ops.from_traces.graph_shapes`: a what-if's configurations, measured before they are predicted)."""

    run_id: str | None = None
    trace_set_id: int | None = None
    graphs: list[tuple[int, Any, dict[int, list[dict[str, Any]]]]] | None = None


@dataclass
class OpsRun:
    """What an ops run did: its id, the sweep summary, and for traced shapes what was found (per op)."""

    run_id: str
    summary: dict[str, Any]
    traced: TracedShapes | None = None
    traced_counts: list[dict[str, Any]] = field(default_factory=list)


def list_ops() -> pd.DataFrame:
    """One row per op: family, model kind, passes, implementations and configs per sweep."""
    rows = []
    for name, spec in sorted(catalogue.load().items()):
        rows.append({"op": name, "family": spec.family, "model": spec.model, "passes": ",".join(spec.passes),
                     "implementations": ",".join(spec.implementations),
                     **{sweep: len(spec.configs(sweep, np.random.default_rng(0), 0))
                        for sweep in ("default", "large", "quick")}})
    return pd.DataFrame(rows)


def check_sources(specs: list[str]) -> None:
    """Every embedding index source spec is valid and its file exists (checked before any run starts)."""
    for spec in specs:
        make_source(spec, 0)


def check_options(options: SweepOptions) -> None:
    """Every option valid and every named op known (before a run row is created)."""
    if options.optimizer not in OPTIMIZERS:
        raise PmdbError(f"bad --optimizer {options.optimizer!r}: use {', '.join(OPTIMIZERS)}")
    options.validate()
    for name in options.ops or []:
        catalogue.get(name)
    if options.sources:
        check_sources(options.sources)


def run_ops(store: Store, platform: str | None, options: SweepOptions, traces: TraceSelection | None = None,
            *, peaks: bool = True, progress: bool = True,
            on_traced: Callable[[TracedShapes, list[dict[str, Any]]], None] | None = None) -> OpsRun:
    """Register this machine, then one 'ops' run: the peaks (optional) and the sweep, or exactly the op shapes of
    the selected stored traces (``on_traced`` hears what they hold before measuring starts). Resumable: configs
    already stored for the platform are skipped."""
    check_options(options)
    name = platforms.register_local(store, platform)["name"]
    args = {k: v for k, v in vars(options).items() if k not in ("settings", "targets")}
    traced, counts = None, []
    if traces is not None:
        args.update(from_traces=True, from_run=traces.run_id, from_trace_set=traces.trace_set_id)
        if traces.graphs is not None:
            args.update(from_what_if=sorted({g[0] for g in traces.graphs}))
            traced = graph_shapes(traces.graphs, options.ops, options.optimizer)
        else:
            traced = traced_shapes(store, select_trace_sets(store, name, traces.run_id, traces.trace_set_id),
                                   options.ops, options.optimizer)
        options.targets = traced.targets
        items, _ = plan(store, name, options, device_for(store, name))
        counts = shape_counts(traced, items)
        if on_traced is not None:  # told before the (long) measurements start
            on_traced(traced, counts)
    with store.run("ops", name, args) as run:
        runner = Sweep(store, run, name, options)
        if peaks:
            store_peaks(store, run.run_id, name, measure_peaks(runner.device))
        summary = runner.execute(progress=progress)
    return OpsRun(run.run_id, summary, traced, counts)


def run_peaks(store: Store, platform: str | None) -> list[dict[str, Any]]:
    """Register this machine and measure its roofline peaks in one 'peaks' run; the stored rows."""
    name = platforms.register_local(store, platform)["name"]
    with store.run("peaks", name, {}) as run:
        rows = measure_peaks(device_for(store, name))
        store_peaks(store, run.run_id, name, rows)
    return rows
