"""The op shapes of stored workload traces, as configs of the ops collector (``pmdb collect ops --from-traces``).

Only the shapes are taken from a trace, never its timings. Each iteration the simulator would use (the best-linked
one per trace set) is read with :func:`pmdb.traces.from_store.load_graphs`; every top-level op is mapped with
:func:`pmdb.traces.opmap.map_op` to (op, pass, params), and, like model mode on a CPU, an op that maps to nothing the
catalogue measures is replaced by its nested ops. The params become the catalogue config: integer axes are
rounded, and the spec's ``check()`` must accept the result *and* reproduce every traced parameter it derives (a
conv2d whose padding is not the spec's "same" padding, or a conv1d whose kernel is not 3 wide, cannot be built and
is skipped with that reason). Embedding lookups carry no shape in the trace: their tables come from the workload's
stored per-rank statistics (``v_embedding_batch_stats``: batch size, rows, dim, mean pooling, index source), one
config of all the rank's tables for a batched FBGEMM lookup and one per table for torch EmbeddingBag lookups.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from collectors.ops import catalogue
from collectors.ops.catalogue import OpSpec, canonical
from collectors.workloads.graph_only import KIND as GRAPH_KIND
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import Op, TraceGraph
from pmdb.traces.opmap import Mapped, fallback, map_op
from pmdb.traces.opmap import implementation as traced_implementation
from pmdb.traces.state_values import OPTIONAL


@dataclass(frozen=True)
class Target:
    """One config to measure for a traced shape: the passes the traces hold and, for embedding lookups, the
    implementation the workload used (None: every implementation of the op)."""

    op: str
    config: dict[str, Any]
    passes: tuple[str, ...]
    implementations: tuple[str, ...] | None = None


@dataclass
class TracedShapes:
    """Targets per op, found shapes per op, and why shapes were skipped (reason -> count)."""

    targets: list[Target] = field(default_factory=list)
    found: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    trace_sets: list[int] = field(default_factory=list)


def select_trace_sets(store: Store, platform: str, run_id: str | None = None,
                      trace_set_id: int | None = None) -> list[int]:
    """Completed trace sets to read: the platform's captured ones by default (not shape-only captures, made to
    predict another platform); ``run_id`` / ``trace_set_id``
    restrict to the sets that run wrote / that one set (any platform or source: only shapes are used)."""
    where, params = ["r.status = 'completed'"], []
    if trace_set_id is not None:
        where.append("s.trace_set_id = ?")
        params.append(int(trace_set_id))
    if run_id is not None:
        where.append("s.run_id = ?")
        params.append(run_id)
    if trace_set_id is None and run_id is None:  # shape-only captures (`--graph-only`) are for other platforms
        where += ["s.platform = ?", "s.source = 'captured'", f"r.kind <> '{GRAPH_KIND}'"]
        params.append(platform)
    ids = store.query(f"SELECT s.trace_set_id FROM trace_sets s JOIN collection_runs r USING (run_id) "
                      f"WHERE {' AND '.join(where)} ORDER BY s.trace_set_id", params)["trace_set_id"].tolist()
    if not ids:
        chosen = (f"trace set {trace_set_id}" if trace_set_id is not None
                  else f"run {run_id}" if run_id is not None else f"platform {platform}")
        raise PmdbError(f"no completed trace set for {chosen} (see `pmdb collect trace` / `pmdb collect workload`)")
    return [int(i) for i in ids]


def to_config(spec: OpSpec, params: dict[str, float]) -> dict[str, Any]:
    """The catalogue config of traced ``params``; PmdbError when the spec cannot build exactly that shape."""
    integral = {a.name for a in spec.axes if a.kind != "float"} | {k for k, v in spec.fixed.items()
                                                                    if isinstance(v, int)}
    names = {a.name for a in spec.axes} | set(spec.fixed) | set(OPTIONAL.get(spec.name, {}))
    wanted = {k: int(round(v)) if k in integral else float(v) for k, v in params.items()}
    config = spec.check({k: v for k, v in wanted.items() if k in names})
    differs = [f"{k}={v} (built: {config.get(k, 'none')})" for k, v in wanted.items()
               if k not in config or config[k] != v]
    if differs:
        raise PmdbError(f"{spec.name}: cannot build {', '.join(differs)}")
    return config


def _leaves(node: Op, specs: dict[str, OpSpec]) -> Iterator[tuple[Op, Mapped | None]]:
    """(op, mapping) of the ops a CPU prediction times: the op when it maps to a measured op, else its nested ops
    (depth first); leaves that map to nothing measurable come with their mapping or None."""
    mapped = map_op(node)
    if isinstance(mapped, Mapped) and mapped.op not in specs and (other := fallback(mapped)) and other.op in specs:
        mapped = other   # a scalar-operand mul without a catalogue op of its own: the two-tensor one
    if isinstance(mapped, Mapped) and mapped.op in specs:
        yield node, mapped
    elif node.sub:
        for child in node.sub:
            yield from _leaves(child, specs)
    elif isinstance(mapped, Mapped) or mapped is None:
        yield node, mapped


def stored_tables(store: Store, trace_set_id: int) -> dict[int, list[dict[str, Any]]]:
    """rank -> its tables {E, D, B, L, source} from the workload's stored batch statistics (empty if none)."""
    workload = store.scalar("SELECT workload_id FROM trace_sets WHERE trace_set_id = ?", [trace_set_id])
    return {} if workload is None else workload_tables(store, int(workload))


def workload_tables(store: Store, workload_id: int) -> dict[int, list[dict[str, Any]]]:
    """rank -> its tables {table, E, D, B, L, source} of a workload (its stored batch statistics; L the mean
    pooling over the stored iterations, rounded as the microbenchmark config takes it)."""
    frame = store.query(
        "SELECT b.rank, b.table_index, any_value(b.batch_size) AS B, any_value(b.num_rows) AS E, "
        "any_value(b.dim) AS D, avg(b.pooling_mean) AS L, any_value(b.index_source) AS source "
        "FROM v_embedding_batch_stats b WHERE b.workload_id = ? "
        "AND b.rank IS NOT NULL GROUP BY b.rank, b.table_index ORDER BY b.rank, b.table_index", [workload_id])
    out: dict[int, list[dict[str, Any]]] = {}
    for row in frame.itertuples(index=False):
        out.setdefault(int(row.rank), []).append({"table": int(row.table_index), "E": int(row.E), "D": int(row.D),
                                                  "B": int(row.B),
                                                  "L": max(round(float(row.L), 2), 0.01), "source": row.source})
    return out


def embedding_config(spec: OpSpec, tables: list[dict[str, Any]], optimizer: str) -> dict[str, Any]:
    """The microbenchmark config of one lookup over ``tables`` ({E, D, B, L, source} each), as
    ``collect ops --from-traces`` measures it."""
    from collectors.embedding.indices import make_source

    sources = []
    for t in tables:
        try:
            make_source(str(t["source"]), 0)
            sources.append(str(t["source"]))
        except (PmdbError, OSError, ValueError):
            sources.append("uniform")  # a dataset file no longer present: the same sizes, uniform indices
    return spec.check({"B": tables[0]["B"], "E": [t["E"] for t in tables], "D": [t["D"] for t in tables],
                       "L": [t["L"] for t in tables], "sources": sources}, optimizer=optimizer)


class _Collector:
    """Accumulates (op, implementation, config) -> passes over the traces."""

    def __init__(self, ops: list[str] | None, optimizer: str):
        self.specs = catalogue.load()
        self.ops = set(ops) if ops else None
        self.optimizer = optimizer
        self.out = TracedShapes()
        self._passes: dict[tuple[str, tuple[str, ...] | None, str], set[str]] = {}
        self._configs: dict[str, dict[str, Any]] = {}

    def add(self, op: str, pass_: str, config: dict[str, Any], implementations: tuple[str, ...] | None) -> None:
        key = (op, implementations, canonical(config))
        if key not in self._passes:
            self.out.found[op] += 1
            self._configs[key[2]] = config
        self._passes.setdefault(key, set()).add(pass_)

    def skip(self, reason: str) -> None:
        self.out.skipped[reason] += 1

    def rank(self, ops: list[Op], tables: list[dict[str, Any]] | None) -> None:
        for node, mapped in (pair for top in ops for pair in _leaves(top, self.specs)):
            if mapped is None:
                continue  # pmdb has no model for it at all (composed from overheads or the trace)
            if self.ops is not None and mapped.op not in self.ops:
                continue
            spec = self.specs.get(mapped.op)
            if spec is None:
                self.skip(f"no microbenchmark for op {mapped.op}")
            elif mapped.pass_ not in spec.passes:
                self.skip(f"{mapped.op} has no {mapped.pass_} pass")
            elif mapped.op == "embedding_lookup":
                self._embedding(spec, node, mapped, tables)
            else:
                try:
                    self.add(mapped.op, mapped.pass_, to_config(spec, mapped.params), None)
                except PmdbError as exc:
                    self.skip(str(exc))

    def graph(self, trace_set_id: int, graph: TraceGraph, tables: dict[int, list[dict[str, Any]]]) -> None:
        """Every rank of one graph (of ``trace_set_id``), each with its tables (rank -> {E, D, B, L, source})."""
        self.out.trace_sets.append(trace_set_id)
        for rank_graph in graph.ranks:
            self.rank(rank_graph.ops, tables.get(rank_graph.rank))

    def _embedding(self, spec: OpSpec, node: Op, mapped: Mapped, tables: list[dict[str, Any]] | None) -> None:
        if not tables:
            self.skip("embedding_lookup: the workload has no stored table statistics")
            return
        impl = traced_implementation(node, mapped)
        groups = [tables] if impl == "fbgemm_tbe" else [[t] for t in tables]
        for group in groups:
            self.add(mapped.op, mapped.pass_, embedding_config(spec, group, self.optimizer), (impl,))

    def result(self) -> TracedShapes:
        for (op, impls, key), passes in self._passes.items():
            self.out.targets.append(Target(op, self._configs[key], tuple(p for p in ("fwd", "bwd") if p in passes),
                                           impls))
        return self.out


def graph_shapes(graphs: list[tuple[int, TraceGraph, dict[int, list[dict[str, Any]]]]], ops: list[str] | None = None,
                 optimizer: str = "exact_sgd") -> TracedShapes:
    """The distinct (op, pass, config) of graphs a caller built (a what-if's derived configurations: (the recorded
    trace set it derives from, its graph, rank -> tables {E, D, B, L, source})), ready for the sweep."""
    collector = _Collector(ops, optimizer)
    for trace_set_id, graph, tables in graphs:
        collector.graph(trace_set_id, graph, tables)
    return collector.result()


def traced_shapes(store: Store, trace_set_ids: list[int], ops: list[str] | None = None,
                  optimizer: str = "exact_sgd") -> TracedShapes:
    """The distinct (op, pass, config) of the trace sets' best-linked iteration, ready for the sweep."""
    collector = _Collector(ops, optimizer)
    for trace_set_id in trace_set_ids:
        try:
            graph = load_graphs(store, trace_set_id, pick="best", detail=True, shapes=True)[0]
        except PmdbError as exc:
            collector.skip(f"trace set {trace_set_id} unreadable: {exc}")
            continue
        collector.graph(trace_set_id, graph, stored_tables(store, trace_set_id))
    return collector.result()


def shape_counts(shapes: TracedShapes, items: list[Any]) -> list[dict[str, Any]]:
    """Per op: distinct traced shapes, how many still need measuring (``items`` of the sweep's plan), how many
    are already in the store."""
    new = Counter(item.spec.name for item in items)
    return [{"op": op, "shapes": found, "new": new[op], "already_measured": found - new[op]}
            for op, found in sorted(shapes.found.items())]
