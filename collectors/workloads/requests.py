"""Turn the options of ``pmdb collect workload`` into a :class:`WorkloadRequest` (every mistake a PmdbError)."""
from __future__ import annotations

import glob
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.ops import DEFAULT_THREADS
from collectors.workloads import dlrm_presets, sharders
from collectors.workloads.collect import WorkloadRequest
from collectors.workloads.dlrm_presets import DlrmConfig
from collectors.workloads.tasks import memory_bytes
from collectors.workloads.transformer_shape import HEADS, TransformerConfig, build_config, load_overrides
from pmdb.errors import PmdbError
from pmdb.store import Store

if TYPE_CHECKING:
    from collectors.workloads.graph_only import GraphRequest

MEMORY_SHARE = 0.8  # a DLRM's tables may use at most this share of host memory
DEFAULT_SHARDER = "size_lookup_greedy"  # the paper's choice for its E2E tests
TASK_MLP_PRESET = "dlrm_test"
# what a GPU torch could use leaves on the host: NVIDIA's driver, ROCm's, WSL's
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def default_threads() -> int:
    """Intra-op threads per rank: one, like the kernel microbenchmarks (``collect ops --threads``, default 1).

    On a CPU platform the "device" of a rank is one core, so that the kernel models fitted on one-thread
    microbenchmarks describe the ops of every world size; a run with another thread count is predicted with models of
    the wrong device (``pmdb predict`` warns)."""
    return DEFAULT_THREADS or 1


def task_config(store: Store, task_id: int, mlp_preset: str) -> tuple[DlrmConfig, int]:
    """A DLRM config holding a stored task's tables with the MLPs of ``mlp_preset`` (bottom output = the task's
    dim); returns it and the task's world size."""
    row = store.query("SELECT tables, world_size FROM tasks WHERE task_id = ?", [task_id])
    if row.empty:
        raise PmdbError(f"no task {task_id} (create tasks with `pmdb collect tasks`)")
    tables = json.loads(row["tables"].iloc[0])
    base = dlrm_presets.preset(mlp_preset)
    config = dlrm_presets.from_dict({
        "name": f"task{task_id}", "bottom_mlp": [*base.bottom_mlp[:-1], int(tables[0]["dim"])],
        "top_mlp": list(base.top_mlp), "batch_size": base.batch_size,
        "tables": [{"num_rows": t["num_rows"], "pooling": t["pooling"], "dim": t["dim"],
                    "index_source": t["source"]} for t in tables]}, f"task {task_id}")
    return config, int(row["world_size"].iloc[0])


def place_tables(config: DlrmConfig, world_size: int, batch_size: int, sharder: str,
                 sharding_file: Path | None, seed: int) -> tuple[str, tuple[int, ...]]:
    """(sharder label, plan) from ``--sharding FILE`` (label 'file') or a Table III sharder; checks the batch
    splits evenly and the tables fit in memory."""
    if sharding_file is not None:
        label, plan = "file", sharders.load_plan(sharding_file, len(config.tables), world_size)
    else:
        label, plan = sharder, sharders.shard(sharder, config.tables, world_size, seed)
    sharders.rank_layout(plan, [t.dim for t in config.tables], world_size, batch_size)
    need = sum(t.num_rows * t.dim * 4 for t in config.tables)
    memory = memory_bytes()
    if memory and need > MEMORY_SHARE * memory:
        raise PmdbError(f"the tables need {need / 2**30:.1f} GiB, more than {MEMORY_SHARE:.0%} of this machine's "
                        f"{memory / 2**30:.1f} GiB: use smaller tables")
    return label, tuple(plan)


INT32_MAX = 2**31 - 1   # counts and sizes are stored as INTEGER columns
_COUNTS = ("batch_size", "seq_len", "iters", "warmup", "world_size", "trace_iters", "repeats", "min_repeats",
           "layers", "hidden", "heads", "threads", "task", "seed")


def check_counts(opts: dict[str, Any]) -> None:
    """Refuse a count or size no store column can hold (more than INT32_MAX), before anything runs."""
    for key in _COUNTS:
        value = opts.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT32_MAX:
            raise PmdbError(f"--{key.replace('_', '-')} {value} is too large (at most {INT32_MAX:,})")


def _common(opts: dict[str, Any], world_size: int) -> dict[str, Any]:
    for key in ("iters", "world_size", "repeats", "min_repeats"):
        if opts.get(key) is not None and opts[key] < 1:
            raise PmdbError(f"--{key.replace('_', '-')} must be >= 1")
    for key in ("warmup", "trace_iters"):
        if opts.get(key) is not None and opts[key] < 0:
            raise PmdbError(f"--{key.replace('_', '-')} must be >= 0")
    if opts.get("min_repeats") is not None and opts["min_repeats"] > (opts.get("repeats") or 1):
        raise PmdbError("--min-repeats must not exceed --repeats")
    if opts.get("threads") is not None and opts["threads"] < 1:
        raise PmdbError("--threads must be >= 1")
    trace_iters = 0 if opts.get("no_trace") else min(opts.get("trace_iters", 3), opts.get("iters", 30))
    return {"iters": opts.get("iters", 30), "warmup": opts.get("warmup", 5), "seed": opts.get("seed", 0),
            "threads": opts.get("threads") or default_threads(), "trace_iters": trace_iters,
            "timeout_s": opts.get("timeout_s"), "device": device_for(opts.get("local_ranks") or world_size),
            "repeats": opts.get("repeats") or 1, "min_repeats": opts.get("min_repeats")}


def device_for(world_size: int) -> str:
    """'cuda' (one GPU per rank, NCCL) when CUDA is available, else 'cpu' (gloo). ``world_size``: the ranks on
    this host (a torchrun job's LOCAL_WORLD_SIZE, set as opts['local_ranks']). A host without a GPU driver's device
    files is answered without importing torch (seconds the ranks' fork server spends anyway)."""
    if not any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES):
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    if world_size > torch.cuda.device_count():
        raise PmdbError(f"{world_size} ranks need {world_size} GPUs; {torch.cuda.device_count()} are visible")
    return "cuda"


def check_sources(config: DlrmConfig) -> None:
    """Reject bad index-source specs before any rank starts. Dataset files are only checked to exist: the rank
    holding the table loads them."""
    from collectors.embedding.indices import make_source

    for spec in sorted(set(config.index_sources)):
        kind, _, rest = spec.partition(":")
        if kind.strip().lower() == "dataset" and rest:
            candidates = [Path(rest), Path(rest.rsplit(":", 1)[0])]
            if not any(c.is_file() for c in candidates):
                raise PmdbError(f"index source {spec!r}: no such dataset file")
        else:
            make_source(spec, 0)


def _refuse(opts: dict[str, Any], names: tuple[str, ...], family: str) -> None:
    given = [n for n in names if opts.get(n) not in (None, False)]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise PmdbError(f"not an option of {family} workloads: {flags}")


def workload_request(store: Store, family: str | None, opts: dict[str, Any]) -> WorkloadRequest:
    """The request of ``pmdb collect workload FAMILY`` with these options (dlrm or transformer)."""
    if family == "dlrm":
        return dlrm_request(store, opts)
    if family == "transformer":
        return transformer_request(opts)
    raise PmdbError(f"unknown workload family {family!r}: use dlrm or transformer")


def dlrm_request(store: Store, opts: dict[str, Any]) -> WorkloadRequest:
    """DLRM: ``--preset`` | ``--config FILE`` | ``--task ID`` (+ batch size, world size, sharder or sharding file,
    index source, embedding implementation)."""
    check_counts(opts)
    _refuse(opts, ("arch", "layers", "hidden", "heads", "seq_len", "head", "graph_only", "optimizer", "inference",
                   "routing"), "dlrm")
    chosen = [n for n in ("preset", "config", "task") if opts.get(n) is not None]
    if len(chosen) > 1:
        raise PmdbError(f"give one of --preset, --config, --task (got {', '.join('--' + c for c in chosen)})")
    world_size = opts.get("world_size")
    if opts.get("task") is not None:
        config, task_world = task_config(store, opts["task"], opts.get("mlp_preset") or TASK_MLP_PRESET)
        world_size = world_size or task_world
    elif opts.get("config") is not None:
        config = dlrm_presets.load_config(opts["config"])
    else:
        config = dlrm_presets.preset(opts.get("preset") or "dlrm_test")
    config = dlrm_presets.with_overrides(config, index_source=opts.get("index_source"),
                                         embedding=opts.get("embedding"))
    check_sources(config)
    world_size = world_size or 1
    batch_size = opts.get("batch_size") or config.batch_size
    if batch_size < 1:
        raise PmdbError("--batch-size must be >= 1")
    common = _common(opts, world_size)
    label, plan = place_tables(config, world_size, batch_size, opts.get("sharder") or DEFAULT_SHARDER,
                               opts.get("sharding"), common["seed"])
    return WorkloadRequest("dlrm", replace(config, batch_size=batch_size), batch_size, world_size, sharder=label,
                           plan=plan, task_id=opts.get("task"), **common)


def transformer_request(opts: dict[str, Any]) -> WorkloadRequest:
    """Transformer: ``--arch`` (+ --layers/--hidden/--heads/--seq-len/--head, ``--config FILE`` of config-class
    arguments)."""
    check_counts(opts)
    _refuse(opts, ("preset", "task", "sharder", "sharding", "index_source", "embedding"), "transformer")
    if opts.get("optimizer") is not None:
        raise PmdbError("--optimizer goes with --graph-only (a measured transformer run always steps AdamW)")
    if opts.get("inference"):
        raise PmdbError("--inference goes with --graph-only (a measured transformer run times training steps)")
    if opts.get("routing"):
        raise PmdbError("--routing goes with --graph-only (a measured run routes its experts by its data)")
    if not opts.get("arch"):
        raise PmdbError("give --arch (gpt2, bert, xlnet, or any model type transformers knows)")
    if (opts.get("head") or "auto") not in HEADS:
        raise PmdbError(f"unknown --head {opts['head']!r}: use {', '.join(HEADS)}")
    for key in ("layers", "hidden", "heads", "seq_len"):
        if opts.get(key) is not None and opts[key] < 1:
            raise PmdbError(f"--{key.replace('_', '-')} must be >= 1")
    world_size = opts.get("world_size") or 1
    batch_size = opts.get("batch_size") or 8
    if batch_size < world_size or batch_size % world_size:
        raise PmdbError(f"batch size {batch_size} must be a multiple of the world size {world_size}")
    overrides = load_overrides(opts["config"]) if opts.get("config") is not None else {}
    cfg = TransformerConfig(opts["arch"], layers=opts.get("layers"), hidden=opts.get("hidden"),
                            heads=opts.get("heads"), seq_len=opts.get("seq_len") or 64,
                            head=opts.get("head") or "auto", batch_size=batch_size, overrides=overrides)
    build_config(cfg)  # a bad architecture or shape fails here, in one line, before any rank starts
    return WorkloadRequest("transformer", cfg, batch_size, world_size, **_common(opts, world_size))


# what a shape-only capture does not take: it runs nothing (no timing, no ranks, no values)
GRAPH_REFUSED = ("preset", "task", "sharder", "sharding", "index_source", "embedding", "mlp_preset", "iters", "warmup",
                 "threads", "seed", "no_trace", "trace_iters", "layers", "hidden", "heads", "timeout_s", "repeats",
                 "min_repeats", "exchange_dir")


def graph_request(opts: dict[str, Any], given: set[str] | frozenset[str] = frozenset()) -> "GraphRequest":
    """Transformer ``--graph-only``: the model config (``--config FILE``, a transformers config JSON with its
    ``model_type``, and/or ``--arch``), ``--batch-size`` (default 8), ``--seq-len`` (default 64), ``--head``,
    ``--optimizer``, ``--inference`` (the model call alone, :data:`graph_only.MODES`), ``--routing`` (mixture-of-experts
    layers, :data:`moe_routing.POLICIES`). ``given``: the options set on the command line (their defaults are not
    refused)."""
    check_counts(opts)
    from collectors.workloads.moe_routing import POLICIES
    from collectors.workloads.graph_only import HEADS as GRAPH_HEADS, OPTIMIZERS, GraphRequest, build_config, \
        check_sizes, load_model_config, resolve_head

    refused = [n for n in GRAPH_REFUSED if n in given and opts.get(n) not in (None, False)]
    if "world_size" in given and opts.get("world_size") not in (None, 1):
        refused.append("world_size")
    if refused:
        flags = ", ".join("--" + {"timeout_s": "timeout"}.get(n, n).replace("_", "-") for n in refused)
        raise PmdbError(f"not an option of --graph-only captures: {flags} (a shape-only capture runs nothing: one "
                        f"rank, no timing; give the model's shape as --config FILE)")
    arch, path = opts.get("arch"), opts.get("config")
    if path is None and not arch:
        raise PmdbError("--graph-only needs the model: --config FILE (a transformers config JSON, e.g. "
                        "../shared/data/gpu_e2e/neusight_labels/model_configs/gpt3_27.json) or --arch")
    model_config = load_model_config(Path(path)) if path is not None else {"model_type": arch}
    if arch and model_config.get("model_type") != arch:
        raise PmdbError(f"--arch {arch} but the model config {path} is a {model_config['model_type']!r} model")
    for key in ("batch_size", "seq_len"):
        if opts.get(key) is not None and opts[key] < 1:
            raise PmdbError(f"--{key.replace('_', '-')} must be >= 1")
    head = opts.get("head") or "auto"
    if head not in GRAPH_HEADS:
        raise PmdbError(f"unknown --head {head!r} for --graph-only: use {', '.join(GRAPH_HEADS)}")
    optimizer = opts.get("optimizer") or "none"
    if optimizer not in OPTIMIZERS:
        raise PmdbError(f"unknown --optimizer {optimizer!r}: use {', '.join(OPTIMIZERS)}")
    mode = "inference" if opts.get("inference") else "train"
    routing = opts.get("routing") or "balanced"
    if routing not in POLICIES:
        raise PmdbError(f"unknown --routing {routing!r}: use {', '.join(POLICIES)}")
    if mode == "inference" and optimizer != "none":
        raise PmdbError(f"--optimizer {optimizer} with --inference: an inference call updates no weights")
    where = str(path) if path is not None else f"--arch {arch}"
    seq_len = opts.get("seq_len") or 64
    config = build_config(model_config, where)
    check_sizes(config, seq_len, where)
    if head != "auto" and resolve_head(config, "auto", mode) == head:
        head = "auto"  # the recipe's own head: the same workload as a label of this model
    name = Path(path).stem if path is not None else str(arch)
    return GraphRequest(name, model_config, opts.get("batch_size") or 8, seq_len, head, optimizer,
                        str(path) if path is not None else None, mode, routing)
