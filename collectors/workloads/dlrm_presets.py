"""DLRM shapes: the paper's presets scaled to a small CPU machine, and ``--config FILE`` for any other shape.

Presets keep the upstream structure (layer count, table count, pooling factor); only sizes that make a 2-core machine
take minutes per iteration are reduced. Upstream (ml_perf_model, dlrm_benchmark.sh) -> here:

- ``dlrm_default``: bottom 512-512-64, top 1024-1024-1024-1, D 64, 8 tables x 1e6 rows, L 100 fixed
  -> the same widths, 8 tables x 200 000 rows, L 100; default batch 128 (upstream 512-4096 on GPUs).
- ``dlrm_ddp``: bottom 128-128-128-128, top 512-512-512-256-1, D 128, 8 x 80 000 rows, L 10 -> unchanged; batch 256.
- ``dlrm_test``: bottom 512-64, top 1024-1, D 64, 1 table x 1e6 rows, L 10 fixed -> 1 table x 100 000 rows; batch 256.
- ``dlrm_mixed`` (pmdb's own, the main job's): dlrm_test's MLPs with 6 tables of unequal rows (120 000 ... 2 000) and
  pooling (2 ... 50), so that naive, size_greedy, lookup_greedy and size_lookup_greedy place them 4 different ways on
  2 ranks (with one table every sharder makes the same plan); batch 256.

Bottom-MLP widths start with the dense-feature count and end with D; top-MLP widths are the hidden layers and the
output (1); the top MLP's input width is D + (T+1)T/2 (dot interaction without self-interaction).
A config file is JSON with the fields of :class:`DlrmConfig` (``tables`` a list of {num_rows, pooling[, dim,
index_source]}, or the shorthand ``num_tables`` + ``num_rows`` + ``pooling``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pmdb.jsonfile import read_json
from collectors.workloads.sharders import TableSpec
from pmdb.errors import PmdbError

EMBEDDINGS = ("fbgemm_tbe", "torch_embedding_bag")


@dataclass(frozen=True)
class DlrmConfig:
    """A DLRM shape. ``index_sources[t]`` is table t's index-stream spec (collectors.embedding.indices)."""

    name: str
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    tables: tuple[TableSpec, ...]
    index_sources: tuple[str, ...]
    embedding: str = "fbgemm_tbe"
    lr: float = 0.1
    batch_size: int = 256

    @property
    def dim(self) -> int:
        return self.bottom_mlp[-1]

    def interaction_width(self) -> int:
        """Top-MLP input: D plus one dot product per pair of the T+1 vectors."""
        n = len(self.tables) + 1
        return self.dim + n * (n - 1) // 2

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tables"] = [dict(asdict(t), index_source=s) for t, s in zip(self.tables, self.index_sources)]
        data["bottom_mlp"], data["top_mlp"] = list(self.bottom_mlp), list(self.top_mlp)
        data.pop("index_sources")
        return data


def _preset(name: str, bottom: list[int], top: list[int], num_tables: int, rows: int, pooling: float,
            batch: int) -> DlrmConfig:
    tables = tuple(TableSpec(rows, bottom[-1], pooling) for _ in range(num_tables))
    return DlrmConfig(name, tuple(bottom), tuple(top), tables, ("uniform",) * num_tables, batch_size=batch)


def _mixed(name: str, rows: tuple[int, ...], pooling: tuple[float, ...]) -> DlrmConfig:
    """dlrm_test's MLPs (D 64) over tables of the given rows and pooling; batch 256."""
    tables = tuple(TableSpec(r, 64, p) for r, p in zip(rows, pooling))
    return DlrmConfig(name, (512, 64), (1024, 1), tables, ("uniform",) * len(tables), batch_size=256)


PRESETS: dict[str, DlrmConfig] = {
    "dlrm_default": _preset("dlrm_default", [512, 512, 64], [1024, 1024, 1024, 1], 8, 200_000, 100, 128),
    "dlrm_ddp": _preset("dlrm_ddp", [128, 128, 128, 128], [512, 512, 512, 256, 1], 8, 80_000, 10, 256),
    "dlrm_test": _preset("dlrm_test", [512, 64], [1024, 1], 1, 100_000, 10, 256),
    "dlrm_mixed": _mixed("dlrm_mixed", (120_000, 60_000, 40_000, 20_000, 5_000, 2_000), (2, 8, 4, 20, 30, 50)),
}

_FIELDS = {"name", "bottom_mlp", "top_mlp", "tables", "num_tables", "num_rows", "pooling", "index_source",
           "embedding", "lr", "batch_size"}
_TABLE_FIELDS = {"num_rows", "pooling", "dim", "index_source"}


def preset(name: str) -> DlrmConfig:
    if name not in PRESETS:
        raise PmdbError(f"unknown DLRM preset {name!r}: use one of {', '.join(PRESETS)} or --config FILE")
    return PRESETS[name]


def _ints(value: Any, what: str, least: int) -> tuple[int, ...]:
    if (not isinstance(value, list) or len(value) < least
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise PmdbError(f"bad {what} {value!r}: a list of at least {least} positive integers")
    return tuple(value)


def from_dict(data: dict[str, Any], source: str = "config") -> DlrmConfig:
    """A config from its JSON fields (names checked; tables given as a list or by the shorthand)."""
    if not isinstance(data, dict):
        raise PmdbError(f"{source}: a DLRM config is a JSON object")
    unknown = set(data) - _FIELDS
    if unknown:
        raise PmdbError(f"{source}: unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_FIELDS))})")
    bottom = _ints(data.get("bottom_mlp"), f"{source}: bottom_mlp", 2)
    top = _ints(data.get("top_mlp"), f"{source}: top_mlp", 1)
    if top[-1] != 1:
        raise PmdbError(f"{source}: the top MLP must end with 1 output, got {list(top)}")
    default_source = str(data.get("index_source", "uniform"))
    if "tables" in data:
        raw = data["tables"]
        if not isinstance(raw, list) or not raw or not all(isinstance(t, dict) for t in raw):
            raise PmdbError(f"{source}: tables must be a non-empty list of objects")
    else:
        if not all(k in data for k in ("num_tables", "num_rows", "pooling")):
            raise PmdbError(f"{source}: give tables, or num_tables + num_rows + pooling")
        raw = [{"num_rows": data["num_rows"], "pooling": data["pooling"]}] * int(data["num_tables"])
    tables, sources = [], []
    for t, table in enumerate(raw):
        bad = set(table) - _TABLE_FIELDS
        if bad or "num_rows" not in table or "pooling" not in table:
            raise PmdbError(f"{source}: table {t} needs num_rows and pooling (optional dim, index_source); "
                            f"unknown: {', '.join(sorted(bad)) or 'none'}")
        spec = TableSpec(int(table["num_rows"]), int(table.get("dim", bottom[-1])), float(table["pooling"]))
        if spec.num_rows < 1 or not spec.pooling > 0:
            raise PmdbError(f"{source}: table {t} needs num_rows >= 1 and pooling > 0")
        if spec.dim != bottom[-1]:
            raise PmdbError(f"{source}: table {t} has dim {spec.dim}, but the dot interaction needs every table's "
                            f"dim equal to the bottom MLP's output ({bottom[-1]})")
        tables.append(spec)
        sources.append(str(table.get("index_source", default_source)))
    embedding = data.get("embedding", "fbgemm_tbe")
    if embedding not in EMBEDDINGS:
        raise PmdbError(f"{source}: unknown embedding {embedding!r}: use {' or '.join(EMBEDDINGS)}")
    config = DlrmConfig(str(data.get("name", "dlrm_custom")), bottom, top, tuple(tables), tuple(sources),
                        embedding=embedding, lr=float(data.get("lr", 0.1)),
                        batch_size=int(data.get("batch_size", 256)))
    if not config.lr > 0 or config.batch_size < 1:
        raise PmdbError(f"{source}: lr must be > 0 and batch_size >= 1")
    return config


def load_config(path: Path) -> DlrmConfig:
    """A DLRM config from a JSON file (the name defaults to the file's stem)."""
    data = read_json(path, "config")
    if isinstance(data, dict):
        data.setdefault("name", Path(path).stem)
    return from_dict(data, f"config file {path}")


def with_overrides(config: DlrmConfig, *, index_source: str | None = None, embedding: str | None = None) -> DlrmConfig:
    """The config with every table's index source and/or the lookup implementation replaced."""
    if embedding is not None and embedding not in EMBEDDINGS:
        raise PmdbError(f"unknown embedding {embedding!r}: use {' or '.join(EMBEDDINGS)}")
    return replace(config,
                   index_sources=(index_source,) * len(config.tables) if index_source else config.index_sources,
                   embedding=embedding or config.embedding)
