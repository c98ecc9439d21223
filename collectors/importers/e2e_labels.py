"""Import measured training steps of whole models (GPU end-to-end labels) as the ground truth of workload runs on a
named GPU platform, so that predictions of the same workload on that platform are judged against them.

Format ``neusight`` (NeuSight ``scripts/asplos/label``, ../shared/data/gpu_e2e/neusight_labels): one JSON file per
measurement, ``<GPU>/<model>-train-<seq>-<batch>.json`` with ``fw_latency`` (the model call), ``bwall_latency``
(``loss.backward()``) and ``e2e_latency`` (their sum) in ms, and ``num_layer`` (the model's depth); an inference
label, ``<model>-inf-<seq>-<batch>.json``, times the model call alone (eval mode, no_grad; NeuSight's
``measure_e2e`` with ``is_train`` false): ``bwall_latency`` 0 and ``e2e_latency`` = ``fw_latency``. The model is the
``transformers`` config ``model_configs/<model>.json`` (beside the GPU folders unless ``model_configs`` says where).
NeuSight times 25 repetitions with CUDA events and reports the mean of the fastest 5 (``measure_e2e``).

A label becomes one ``import-e2e`` run: a ``workload_runs`` row (source 'imported', ``measured_us`` = e2e,
``fw_us``/``bw_us`` = the phases, µs) of the workload whose identity is
:func:`collectors.workloads.graph_only.workload_identity` of the model config, sequence length, the recipe's own
head and no optimizer (and the label's mode), at the label's batch size and world size 1: exactly the workload a
shape-only capture (``pmdb collect workload transformer --graph-only --config <model>.json --batch-size B --seq-len
S``, with ``--inference`` for an inference label) of the same config file stores; an inference label's ``bw_us`` is
NULL (no backward was run), so ``pmdb predict --trace-set <capture> --target-platform <GPU>`` finds the label as its ground
truth (the simulator's lookup: same workload id, platform = target).

An import is all or nothing: every file is read and checked (name, fields, model config) before anything is
written, a bad file is ONE error naming the file and the field; the platform (when created), the runs, their rows
and the ``imported_files`` entries go in one transaction. The same content (sha256 of the file's bytes) is never
imported twice: it is skipped.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import duckdb

from collectors.workloads.graph_only import build_config, check_sizes, load_model_config, workload_identity
from collectors.workloads.store_rows import ensure_workload
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.jsonfile import parse_object
from pmdb.store import Store
from pmdb.userfiles import expand_files, read_bytes

KIND = "import-e2e"
FORMATS = ("neusight",)
FILE_FORMAT = {"neusight": "neusight-e2e"}       # imported_files.format
NEUSIGHT_REPETITIONS, NEUSIGHT_AVERAGED = 25, 5   # measure_e2e: `active` repetitions, mean of the `sample` fastest
_NAME = re.compile(r"^(?P<model>.+)-(?P<mode>[A-Za-z]+)-(?P<seq>\d+)-(?P<batch>\d+)\.json$")
FIELDS = ("fw_latency", "bwall_latency", "e2e_latency")  # ms
MODES = {"train": "train", "inf": "inference", "inference": "inference"}   # the file name's mode -> capture mode
E2E_TOLERANCE = 1e-3   # relative: e2e_latency must be fw_latency + bwall_latency
CREATE_HINT = "register the GPU with `pmdb platform-specs`, or pass --create-platform to create it"


@dataclass
class E2eLabel:
    """One measured training step of a model (times µs)."""

    path: Path
    model: str
    seq_len: int
    batch_size: int
    fw_us: float
    bw_us: float
    e2e_us: float
    model_config: dict[str, Any]
    model_config_path: Path
    device: str | None          # the GPU the folder is named after ('Tesla V100-PCIE-32GB'), None when unknown
    num_layer: int | None = None
    mode: str = "train"         # 'train' or 'inference' (:data:`MODES`)
    sha256: str = ""
    size_bytes: int = 0


@dataclass
class E2eImportReport:
    """What an import did: per new label its run and workload; skipped files with the reason."""

    imported: list[tuple[E2eLabel, str, int]] = field(default_factory=list)   # (label, run id, workload id)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given; a directory stands for its ``*.json`` label files (sorted). Missing paths are refused."""
    return expand_files(paths, (".json",), ".json label files")


def _ms(path: Path, data: dict[str, Any], name: str, zero: bool = False) -> float:
    """A field in ms: a positive number (``zero``: exactly 0, an inference label's backward)."""
    if name not in data:
        raise PmdbError(f"{path}: no field {name} (a NeuSight label has {', '.join(FIELDS)} in ms)")
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PmdbError(f"{path}: field {name} is {value!r}, not a number of ms")
    if zero and value != 0:
        raise PmdbError(f"{path}: field {name} is {value!r}; an inference label (-inf- in its name) runs no "
                        f"backward, so it must be 0")
    if not zero and value <= 0:
        raise PmdbError(f"{path}: field {name} is {value!r}, not a positive number of ms")
    return float(value)


def _device(path: Path) -> str | None:
    """NeuSight names a label folder after ``torch.cuda.get_device_name()`` with spaces made underscores."""
    folder = path.resolve().parent.name
    return folder.replace("_", " ") if folder else None


def parse_neusight(path: Path, data: bytes, model_configs: Path | None = None) -> E2eLabel:
    """A NeuSight e2e label from its bytes (``path`` names it in errors); ``model_configs``: the folder of
    ``<model>.json`` configs (default: ``model_configs`` beside the label's GPU folder)."""
    match = _NAME.match(path.name)
    if not match:
        raise PmdbError(f"{path}: the file name is not <model>-train-<seq>-<batch>.json (NeuSight's label name)")
    mode = MODES.get(match["mode"])
    if mode is None:
        raise PmdbError(f"{path}: mode {match['mode']!r} in the file name; NeuSight labels are training steps "
                        f"(<model>-train-<seq>-<batch>.json) or inference calls (<model>-inf-<seq>-<batch>.json)")
    seq_len, batch_size = int(match["seq"]), int(match["batch"])
    if seq_len < 1 or batch_size < 1:
        raise PmdbError(f"{path}: sequence length and batch size in the file name must be >= 1")
    doc = parse_object(path, data, not_json="not valid JSON", what="a NeuSight label")
    fw, bw, e2e = (_ms(path, doc, name, zero=name == "bwall_latency" and mode == "inference") for name in FIELDS)
    if abs(e2e - (fw + bw)) > E2E_TOLERANCE * e2e:
        raise PmdbError(f"{path}: field e2e_latency ({e2e:g} ms) is not fw_latency + bwall_latency "
                        f"({fw + bw:g} ms)")
    layers = doc.get("num_layer")
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 0):
        raise PmdbError(f"{path}: field num_layer is {layers!r}, not a layer count")
    folder = Path(model_configs) if model_configs is not None else path.resolve().parent.parent / "model_configs"
    config_path = folder / f"{match['model']}.json"
    if not config_path.is_file():
        raise PmdbError(f"{path}: no model config {config_path} for model {match['model']!r} (give the folder of "
                        f"<model>.json transformers configs with --model-configs)")
    model_config = load_model_config(config_path)
    config = build_config(model_config, str(config_path))
    check_sizes(config, seq_len, f"{path} (model config {config_path})")
    depth = getattr(config, "num_hidden_layers", None)
    if layers and isinstance(depth, int) and depth != layers:
        raise PmdbError(f"{path}: field num_layer is {layers} but the model config {config_path} has {depth} layers")
    return E2eLabel(path, match["model"], seq_len, batch_size, fw * 1e3, bw * 1e3, e2e * 1e3, model_config,
                    config_path, _device(path), layers, mode=mode)


def _measured(name: str) -> tuple[str, str, str, str | None] | None:
    """(model, seq, batch, mode) a label's file name states; None when it states none."""
    match = _NAME.match(Path(name).name)
    return (match["model"], match["seq"], match["batch"], MODES.get(match["mode"])) if match else None


def read_labels(paths: Sequence[Path], fmt: str, model_configs: Path | None = None
                ) -> tuple[list[E2eLabel], list[tuple[Path, str]]]:
    """Every label of ``paths`` read and checked (nothing is written); a file whose content was given before under
    the same model, sequence and batch is skipped, under another one refused (the content does not say which)."""
    if fmt not in FORMATS:
        raise PmdbError(f"bad --format {fmt!r}: use {', '.join(FORMATS)}")
    labels: list[E2eLabel] = []
    skipped: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    for path in expand(paths):
        data = read_bytes(path)
        label = parse_neusight(path, data, model_configs)
        label.sha256, label.size_bytes = hashlib.sha256(data).hexdigest(), len(data)
        if label.sha256 in seen:
            same_as(label, seen[label.sha256], "given before")
            skipped.append((path, f"same content as {seen[label.sha256]} given before"))
            continue
        seen[label.sha256] = path
        labels.append(label)
    devices = sorted({label.device for label in labels if label.device})
    if len(devices) > 1:
        raise PmdbError(f"the labels come from several GPU folders ({', '.join(devices)}): import each GPU's labels "
                        f"into its own --platform")
    return labels, skipped


def same_as(label: E2eLabel, other: Path | str, when: str) -> None:
    """Refuse a label whose content is that of ``other`` but whose name states another measurement."""
    if _measured(str(other)) != _measured(label.path.name):
        raise PmdbError(f"{label.path}: same content as {other} ({when}) but another model, sequence, batch or "
                        f"mode in its name: which one was measured?")


def check_platform(store: Store, name: str, create: bool) -> bool:
    """Whether the platform must be created: an existing one must be an imported cuda platform (a spec sheet's,
    `pmdb platform-specs`, or an earlier import's); a new name is created only when ``create``."""
    platforms.check_name(name)
    existing = platforms.find(store, name)
    if existing is None:
        if not create:
            raise platforms.UnknownPlatform(name, platforms.known_names(store), CREATE_HINT)
        return True
    if not existing.is_imported:
        raise PmdbError(f"platform {name!r} is this machine (detected, not imported); steps measured elsewhere go to "
                        f"a platform of their own: choose another --platform name")
    if not existing.cuda:
        raise PmdbError(f"platform {name!r} is a {existing.device_kind.value} platform; GPU labels need a cuda "
                        f"platform")
    return False


def import_e2e_files(store: Store, paths: Sequence[Path], fmt: str, *, platform: str, create_platform: bool = False,
                     model_configs: Path | None = None) -> E2eImportReport:
    """Check every label, then store the new ones on ``platform`` in one transaction (one run per label)."""
    labels, skipped = read_labels(paths, fmt, model_configs)
    create = check_platform(store, platform, create_platform)
    done = {sha: path for sha, path in store.conn.execute(
        "SELECT f.sha256, f.path FROM imported_files f JOIN collection_runs r USING (run_id) "
        "WHERE r.status = 'completed'").fetchall()}
    report = E2eImportReport(skipped=skipped)
    new = []
    for label in labels:
        if label.sha256 in done:
            same_as(label, done[label.sha256], "already imported")
            report.skipped.append((label.path, f"already imported (same content as {done[label.sha256]})"))
        else:
            new.append(label)
    if not new:
        return report
    try:
        with store.transaction():
            if create:
                device = next((label.device for label in new if label.device), None)
                platforms.ensure_named(store, platform, device_kind="cuda", details={"created_by": KIND})
                store.conn.execute("UPDATE platforms SET gpu_name = ?, gpu_count = 1 WHERE name = ?",
                                   [device, platform])
            # leftovers of imports whose run never completed block nothing
            store.conn.execute("DELETE FROM imported_files WHERE sha256 IN (SELECT unnest(?::VARCHAR[])) AND run_id "
                               "NOT IN (SELECT run_id FROM collection_runs WHERE status = 'completed')",
                               [[label.sha256 for label in new]])
            for label in new:
                run_id, workload_id = _store_label(store, label, fmt, platform)
                report.imported.append((label, run_id, workload_id))
    except duckdb.Error as exc:
        raise PmdbError(f"storing the import failed, nothing was stored: {str(exc).splitlines()[0]}") from None
    return report


def _store_label(store: Store, label: E2eLabel, fmt: str, platform: str) -> tuple[str, int]:
    """One label's run, workload, ground truth and imported_files row (the caller holds the transaction)."""
    run = store.start_run(KIND, platform, {"file": str(label.path), "format": fmt,
                                           "model_config": str(label.model_config_path)})
    workload_id = ensure_workload(store, family="transformer", name=label.model,
                                  config=workload_identity(label.model_config, label.seq_len, mode=label.mode),
                                  batch_size=label.batch_size, world_size=1)
    store.insert_one("imported_files", {"sha256": label.sha256, "run_id": run.run_id, "path": str(label.path),
                                        "format": FILE_FORMAT[fmt], "platform": platform,
                                        "size_bytes": label.size_bytes})
    store.insert_one("workload_runs", {
        "run_id": run.run_id, "workload_id": workload_id, "platform": platform,
        "iterations": NEUSIGHT_REPETITIONS, "warmup": 0, "measured_us": label.e2e_us, "fw_us": label.fw_us,
        "bw_us": label.bw_us if label.mode == "train" else None, "source": "imported", "source_file": label.sha256})
    run.summary = {"workload_id": workload_id, "model": label.model, "mode": label.mode,
                   "batch_size": label.batch_size,
                   "seq_len": label.seq_len, "e2e_us": label.e2e_us, "fw_us": label.fw_us, "bw_us": label.bw_us,
                   "device": label.device, "statistic": f"mean of the fastest {NEUSIGHT_AVERAGED} of "
                                                        f"{NEUSIGHT_REPETITIONS} repetitions (CUDA events)"}
    run.finish("completed")
    return run.run_id, workload_id
