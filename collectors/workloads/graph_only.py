"""Shape-only capture of one transformer training step: the model's op graph with shapes, recorded on the ``meta``
device (no weights, no arithmetic), stored as an ordinary trace set with one execution trace and no Kineto times.

The step follows the recipe of the GPU e2e labels (NeuSight ``measure_e2e``, ../shared/data/README.md, gpu_e2e):
the ``transformers`` config as given (``AutoConfig.for_model(**json)``), fp32, ``attn_implementation="eager"``
and ``experts_implementation="eager"`` (mixture-of-experts layers loop over their experts; transformers' default,
a fused ``grouped_mm``, takes bf16 only on the meta device, whose checks are CUDA's), training mode (dropout on),
input ids all ones of shape (batch, seq), cross-entropy of the logits (``prediction_logits`` for pre-training heads)
against the inputs, ``loss.backward()``, no optimizer unless asked.
One warm-up step runs unrecorded first, so the recorded step is a repetition like the ones the labels average: the
parameters' gradients exist and the backward accumulates into them (with an optimizer, the loop zeroes them
instead and the recorded step ends with ``optimizer.step()`` on initialised state).

**Inference** (``mode`` 'inference', the recipe of NeuSight's ``-inf-`` labels): the model in eval mode (no
dropout), encoder models (BERT) with a sequence-classification head instead of their pre-training one, and the
model call alone under ``torch.no_grad()``: no loss, no backward, no optimizer. Its workload identity differs from
the training step's by its recipe (:data:`RECIPE_INFERENCE`), so a label of either kind meets only its own capture.

The recorded step is marked ``ProfilerStep#1`` (one complete iteration); inside it each phase is a record_function
named ``pmdb::phase::<forward|loss|backward|optimizer>`` (:data:`PHASE_MARKERS`), so the forward and the backward
can be priced separately (the labels time ``fw`` = the model call and ``bw`` = ``loss.backward()``; the loss is in
neither).

What the meta device changes, and what :func:`normalize_trace` does about it (documented, tested against a real CPU
run of the same step in tests/collectors/workloads/test_graph_only.py):

1. **Kernel internals are pruned.** An op with a backend kernel (any op that is not ``CompositeImplicitAutograd``,
   or has its own CPU/Meta kernel) is a leaf: whatever ran *inside* it is that backend's implementation detail
   (CPU: ``resolve_conj``, ``resize_``, ``zero_``; meta: the Python meta functions' ``prims::*`` and helper
   ``aten::`` calls; CUDA: its own). Those descendants are dropped on every device; composite ops keep their
   children (they decompose above the backend, identically everywhere).
2. **Gradient accumulation is in place.** Autograd's input buffers add two gradients of one tensor out of place on
   meta (meta tensors count as "subclass-like", which disables in-place accumulation) and in place on a real device:
   an ``aten::add`` directly under an ``autograd::engine::evaluate_function: ...`` node becomes ``aten::add_``.
3. **Storage ids are rebuilt.** Meta storages have no data pointer, so the recorder gives every tensor the same
   storage id. They are rebuilt from the op schemas' alias annotations: an output that aliases an input (views,
   in-place ops) shares its storage, every other output gets a new one; tensors first seen as inputs (parameters,
   the inputs, gradients of the warm-up step) get one each.

Two differences remain, inherent to the meta device and left as they are: ``torch.tensor(data)`` on meta allocates
directly, so a real run's host-to-device ``aten::to`` and ``aten::lift_fresh`` of such literals (zero-size in
transformers' cache) are absent; ``aten::reshape`` of a non-contiguous input that needs no copy calls
``aten::view`` on meta (and its backward is ``ViewBackward0``) where a real device calls ``aten::_reshape_alias``
(``ReshapeAliasBackward0``). Both are views or empty: no device work. Everything else follows the host (CPU)
dispatch of composite ops, which is also what a GPU runs except where a composite op branches on the device:
``aten::dropout`` decomposes into ``bernoulli_``/``div_``/``mul`` here and is one fused ``native_dropout`` on CUDA.
Mixture-of-experts routers add three small ones: the backward of indexing and of ``max`` call ``index_put`` and
``scatter`` out of place on meta (``_index_put_impl_``, ``scatter_`` on a real device), and ``one_hot`` takes its
meta branch (an ``eq`` against ``arange``). Their expert loops, data-dependent, are routed by a stated policy
(:mod:`collectors.workloads.moe_routing`: Switch Transformers' expert modules, the fused top-k experts of Mixtral,
Qwen2-MoE, OLMoE, Qwen3-MoE, DeepSeek-V2/V3, GLM-4-MoE, Phi-MoE, GraniteMoE, ERNIE-4.5-MoE and the hybrids
Qwen3-Next, MiniMax and Jamba).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import resource
import shutil
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.jsonfile import read_json
from pmdb.store import Store

PHASES = ("forward", "loss", "backward", "optimizer")
PHASE_MARKERS = {phase: f"pmdb::phase::{phase}" for phase in PHASES}
STEP_MARKER = "ProfilerStep#1"   # profile.STEP_MARKER of iteration 1: the trace's one complete iteration
HEADS = ("auto", "pretraining", "causal-lm", "masked-lm", "seq2seq-lm", "sequence-classification")
OPTIMIZERS = ("none", "adamw", "sgd")
MODES = ("train", "inference")
RECIPE = "train-step:ones-ce-vs-inputs:fp32:eager"   # the labels' recipe, part of the workload identity
# the inference labels' recipe (NeuSight ``-inf-`` labels): eval mode, the model call under no_grad, nothing else
RECIPE_INFERENCE = "inference:ones:fp32:eager:no-grad"
METADATA_KEYS = ("_name_or_path", "transformers_version")  # config keys that name, not shape, a model
KIND = "graph"
EVALUATE_PREFIX = "autograd::engine::evaluate_function: "


@dataclass(frozen=True)
class GraphRequest:
    """A shape-only capture: the model config (``transformers`` config-class arguments with ``model_type``), batch
    size and sequence length (tokens), training head and optimizer."""

    name: str
    model_config: dict[str, Any]
    batch_size: int
    seq_len: int
    head: str = "auto"
    optimizer: str = "none"
    source: str | None = None   # the config file as given
    mode: str = "train"         # 'train': the training step; 'inference': the model call alone (:data:`MODES`)
    routing: str = "balanced"   # how mixture-of-experts layers route (:data:`moe_routing.POLICIES`); not identity

    def identity(self) -> dict[str, Any]:
        return workload_identity(self.model_config, self.seq_len, self.head, self.optimizer, self.mode)


def config_digest(model_config: dict[str, Any]) -> str:
    """sha256 of the model config as canonical JSON (sorted keys), without naming-only keys (:data:`METADATA_KEYS`)."""
    shape = {k: v for k, v in model_config.items() if k not in METADATA_KEYS}
    return hashlib.sha256(json.dumps(shape, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def workload_identity(model_config: dict[str, Any], seq_len: int, head: str = "auto",
                      optimizer: str = "none", mode: str = "train") -> dict[str, Any]:
    """The ``workloads.config`` of a recipe step: the same for a shape-only capture and an imported label of the same
    model config, sequence length, head, optimizer and mode (the batch size is the workload's own column), so both
    get one workload id (:func:`collectors.workloads.store_rows.ensure_workload` hashes it). A training step's
    identity is what it was before inference existed (stores keep matching their labels); an inference one differs
    by its recipe."""
    if mode not in MODES:
        raise PmdbError(f"unknown mode {mode!r}: use {', '.join(MODES)}")
    return {"recipe": RECIPE if mode == "train" else RECIPE_INFERENCE, "model_type": model_config.get("model_type"),
            "model_config_sha256": config_digest(model_config), "seq_len": int(seq_len), "head": head,
            "optimizer": None if optimizer == "none" else optimizer}


def load_model_config(path: Path) -> dict[str, Any]:
    """A ``transformers`` config JSON (e.g. model_configs/gpt3_27.json): an object with a ``model_type``."""
    data = read_json(path, "model config", want_object=True)
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise PmdbError(f"model config file {path}: no 'model_type' (the transformers model type, e.g. gpt2)")
    return data


def build_config(model_config: dict[str, Any], where: str) -> Any:
    """The ``transformers`` config object (errors as one-line PmdbError naming ``where``)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(**model_config)
    except (ValueError, TypeError, KeyError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PmdbError(f"{where}: not a usable transformers config ({reason})") from None


# sizes a model config must give as whole numbers >= 1 when it gives them (transformers maps n_embd, d_model, ...
# to these names); a 0 fails deep inside the model's constructor (ZeroDivisionError) instead of in one line
POSITIVE_SIZES = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size",
                  "num_key_value_heads", "head_dim", "max_position_embeddings", "n_inner", "d_ff", "d_kv",
                  "num_local_experts", "num_experts_per_tok", "moe_intermediate_size")
EXPERT_COUNTS = ("num_local_experts", "num_experts")   # a top-k router's experts, by the names configs give them


def check_sizes(config: Any, seq_len: int, where: str) -> None:
    """The model's sizes are whole numbers >= 1 (:data:`POSITIVE_SIZES`), and the sequence fits the model's
    position table (on meta an overflow would go unnoticed)."""
    for name in POSITIVE_SIZES:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1:
            raise PmdbError(f"{where}: {name} is {value}; model sizes must be >= 1")
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and 0 < positions < seq_len:
        raise PmdbError(f"{where}: sequence length {seq_len} exceeds the model's {positions} positions")
    check_top_k(config, where)


def check_top_k(config: Any, where: str) -> None:
    """A top-k router picks at most as many experts per token as there are (more fails deep inside torch.topk)."""
    top_k = getattr(config, "num_experts_per_tok", None)
    experts = next((n for n in (getattr(config, name, None) for name in EXPERT_COUNTS)
                    if isinstance(n, int) and not isinstance(n, bool) and n > 0), None)
    if isinstance(top_k, int) and experts is not None and top_k > experts:
        raise PmdbError(f"{where}: num_experts_per_tok is {top_k}, more than the model's {experts} experts")


def resolve_head(config: Any, head: str, mode: str = "train") -> str:
    """The head the labels' recipe uses for ``auto``: encoder-decoder models a seq2seq LM, encoder models (those
    with a masked-LM class, e.g. BERT) their pre-training head in training and a sequence classifier in inference
    (NeuSight's ``get_model``), every other model a causal LM."""
    if head not in HEADS:
        raise PmdbError(f"unknown --head {head!r} for a graph capture: use {', '.join(HEADS)}")
    if head != "auto":
        return head
    from transformers.models.auto import modeling_auto as auto

    kind = getattr(config, "model_type", "")
    if getattr(config, "is_encoder_decoder", False):
        return "seq2seq-lm"
    if kind in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        if mode == "inference" and kind in auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
            return "sequence-classification"
        return "pretraining" if kind in auto.MODEL_FOR_PRETRAINING_MAPPING_NAMES else "masked-lm"
    return "causal-lm"


def build_model(request: GraphRequest, device: str) -> tuple[Any, str, dict[str, Any]]:
    """(model in training mode, or eval mode for inference; head used; model inputs) on ``device`` ('meta': no
    memory, no initialisation)."""
    import torch
    import transformers

    config = build_config(request.model_config, request.source or request.name)
    check_sizes(config, request.seq_len, request.source or request.name)
    head = resolve_head(config, request.head, request.mode)
    classes = {"pretraining": transformers.AutoModelForPreTraining, "causal-lm": transformers.AutoModelForCausalLM,
               "masked-lm": transformers.AutoModelForMaskedLM, "seq2seq-lm": transformers.AutoModelForSeq2SeqLM,
               "sequence-classification": transformers.AutoModelForSequenceClassification}
    try:
        with torch.device(device):
            model = classes[head].from_config(config, attn_implementation="eager", experts_implementation="eager")
    except ValueError as exc:
        raise PmdbError(f"{request.name}: {config.model_type} has no {head} model class in transformers "
                        f"({str(exc).strip().splitlines()[0]}); try another --head") from None
    model = model.to(torch.float32)
    model = model.train() if request.mode == "train" else model.eval()
    ids = torch.ones(request.batch_size, request.seq_len, dtype=torch.int64, device=device)
    inputs: dict[str, Any] = {"input_ids": ids}
    if head == "seq2seq-lm":
        inputs.update(decoder_input_ids=ids, decoder_attention_mask=ids)
    return model, head, inputs


def _optimizer(model: Any, name: str) -> Any:
    """The optimizer of the step, multi-tensor (``foreach``) as on a GPU; None for 'none'."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, foreach=True)
    return None


def _step(model: Any, inputs: dict[str, Any], optimizer: Any, marked: bool) -> None:
    """One training step of the recipe; ``marked``: inside the phase record_functions."""
    import torch
    from torch.profiler import record_function

    def phase(name: str) -> Any:
        return record_function(PHASE_MARKERS[name]) if marked else contextlib.nullcontext()

    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    with phase("forward"):
        out = model(**inputs)
    with phase("loss"):
        logits = out["prediction_logits"] if "prediction_logits" in out else out["logits"]
        ids = inputs["input_ids"]
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))
    del out, logits
    with phase("backward"):
        loss.backward()
    if optimizer is not None:
        with phase("optimizer"):
            optimizer.step()


def _inference(model: Any, inputs: dict[str, Any], marked: bool) -> None:
    """One model call of the inference recipe (under no_grad); ``marked``: inside the forward phase marker."""
    import torch
    from torch.profiler import record_function

    with torch.no_grad(), record_function(PHASE_MARKERS["forward"]) if marked else contextlib.nullcontext():
        model(**inputs)


def record_step(model: Any, inputs: dict[str, Any], optimizer: str, path: Path, mode: str = "train") -> None:
    """A warm-up step, then the recorded one: an execution trace of ``ProfilerStep#1`` written to ``path``
    (``mode`` 'inference': the model call alone, under no_grad, and no optimizer)."""
    from torch.profiler import ExecutionTraceObserver, record_function

    opt = _optimizer(model, optimizer) if mode == "train" else None

    def step(marked: bool) -> None:
        if mode == "train":
            _step(model, inputs, opt, marked=marked)
        else:
            _inference(model, inputs, marked)

    step(False)
    observer = ExecutionTraceObserver()
    observer.register_callback(str(path))
    observer.start()
    try:
        with record_function(STEP_MARKER):
            step(True)
    finally:
        observer.stop()
        observer.unregister_callback()


@dataclass
class NormalizeStats:
    """What :func:`normalize_trace` did (node counts)."""

    recorded: int = 0
    kept: int = 0
    pruned: int = 0
    accumulations_in_place: int = 0
    storages: int = 0


@lru_cache(maxsize=None)
def _decomposes(qualified: str) -> bool:
    """True when ``aten::op.overload`` decomposes above the backends (CompositeImplicitAutograd, no CPU or Meta
    kernel of its own): its children are the same calls on every device. False for ops with a kernel (leaves)."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return bool(has(qualified, "CompositeImplicitAutograd")) and not has(qualified, "CPU") \
            and not has(qualified, "Meta")
    except RuntimeError:   # not a registered operator
        return False


@lru_cache(maxsize=None)
def _aliases(schema: str) -> tuple[tuple[frozenset[str], ...], tuple[tuple[frozenset[str], bool], ...]] | None:
    """Alias sets of each argument and (alias set, written) of each return of an op schema: 'Tensor(a) self' ->
    {'a'}; a return 'Tensor(a!)' is the written input itself (in-place), 'Tensor(a)' a view of it. None: not
    parsable."""
    import torch

    try:
        parsed = torch._C.parse_schema(schema)
    except RuntimeError:
        return None
    args = tuple(frozenset(a.alias_info.before_set) if a.alias_info is not None else frozenset()
                 for a in parsed.arguments)
    returns = tuple((frozenset(r.alias_info.before_set), bool(r.alias_info.is_write)) if r.alias_info is not None
                    else (frozenset(), False) for r in parsed.returns)
    return args, returns


def _qualified(schema: str, name: str) -> str:
    head = schema.split("(", 1)[0].strip() if schema else ""
    return head or name


def _attr(node: dict[str, Any], key: str) -> Any:
    return next((a.get("value") for a in node.get("attrs", []) if isinstance(a, dict) and a.get("name") == key), None)


def _set_attr(node: dict[str, Any], key: str, value: Any) -> None:
    for a in node.get("attrs", []):
        if isinstance(a, dict) and a.get("name") == key:
            a["value"] = value
            return


def _tensor_entries(value: Any, type_: Any) -> list[list[Any]]:
    """The tensor values of one argument (a tensor or a list of tensors), as mutable lists."""
    if not isinstance(type_, str) or not isinstance(value, list):
        return []
    if type_.startswith("Tensor"):
        return [value] if len(value) >= 2 and isinstance(value[0], int) else []
    if type_.startswith("GenericList[") and all(isinstance(v, list) for v in value):
        return [v for v in value if len(v) >= 2 and isinstance(v[0], int)]
    return []


def normalize_trace(path: Path, *, meta: bool) -> NormalizeStats:
    """Rewrite a recorded execution trace in place: prune kernel internals (every device); on a ``meta`` recording
    also accumulate gradients in place and rebuild storage ids (module docstring, points 1-3)."""
    doc = json.loads(Path(path).read_text())
    from collectors.traces import schemas

    cfg = schemas.config("et", doc.get("schema"), str(path))
    if cfg["node"].get("parent") != "ctrl_deps" or cfg["node"].get("input_values") != "inputs.values" \
            or cfg.get("attrs_list") != "attrs":
        raise PmdbError(f"{path}: execution trace schema {doc.get('schema')} has another node layout than the "
                        f"graph capture rewrites (ctrl_deps, inputs.values, attrs)")
    nodes = sorted(doc["nodes"], key=lambda n: n["id"])   # ids follow op start: parents first
    stats = NormalizeStats(recorded=len(nodes))
    by_id = {n["id"]: n for n in nodes}
    dropped: set[int] = set()
    kept = []
    for node in nodes:
        parent = node.get("ctrl_deps")
        if parent != node["id"] and parent in by_id:
            above = by_id[parent]
            if parent in dropped or (above["name"].startswith(("aten::", "prims::")) and not _decomposes(
                    _qualified(_attr(above, "op_schema") or "", above["name"]))):
                dropped.add(node["id"])
                continue
        kept.append(node)
    stats.kept, stats.pruned = len(kept), len(dropped)
    if meta:
        stats.storages, stats.accumulations_in_place = _rebuild_storages(kept, by_id)
    doc["nodes"] = kept
    Path(path).write_text(json.dumps(doc))
    return stats


@lru_cache(maxsize=None)
def _schema_of(qualified: str) -> Any:
    import torch

    name, _, overload = qualified.partition(".")
    packet = getattr(torch.ops.aten, name.split("::", 1)[1])
    return getattr(packet, overload or "default")._schema


def _dense(shape: Any, strides: Any) -> bool:
    """Non-overlapping and dense: the strides, fastest first, are the running products of the sizes."""
    if not isinstance(shape, list) or not isinstance(strides, list) or len(shape) != len(strides) \
            or not all(isinstance(v, int) for v in shape + strides):
        return False
    expected = 1
    for size, stride in sorted(((s, t) for s, t in zip(shape, strides) if s != 1), key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _accumulates_in_place(node: dict[str, Any], parent: dict[str, Any] | None, is_view: dict[int, bool]) -> bool:
    """An out-of-place gradient sum of autograd's input buffer that a real device does in place: ``aten::add``
    directly under an ``evaluate_function`` node whose buffered gradient (input 0) is dense and not a view (a view's
    base keeps its storage alive: autograd sums out of place then, on every device)."""
    if node["name"] != "aten::add" or parent is None or not parent["name"].startswith(EVALUATE_PREFIX) \
            or _qualified(_attr(node, "op_schema") or "", "") != "aten::add.Tensor":
        return False
    ins = node.get("inputs", {})
    first = _tensor_entries((ins.get("values") or [None])[0], (ins.get("types") or [None])[0])
    shapes, strides = ins.get("shapes") or [None], ins.get("strides") or [None]
    return bool(first) and not is_view.get(first[0][0], False) and _dense(shapes[0], strides[0])


def _rebuild_storages(nodes: list[dict[str, Any]], by_id: dict[int, dict[str, Any]]) -> tuple[int, int]:
    """Storage ids of a meta recording from alias annotations, and in-place gradient sums (module docstring, points
    2 and 3); returns (storages, sums made in place)."""
    storage: dict[int, int] = {}
    is_view: dict[int, bool] = {}
    count = in_place = 0
    add_ = str(_schema_of("aten::add_.Tensor"))

    def fresh() -> int:
        nonlocal count
        count += 1
        return count

    for node in nodes:
        ins, outs = node.get("inputs", {}), node.get("outputs", {})
        in_entries = [_tensor_entries(v, t) for v, t in zip(ins.get("values", []), ins.get("types", []))]
        for entries in in_entries:
            for entry in entries:
                if entry[0] not in storage:
                    storage[entry[0]] = fresh()
                entry[1] = storage[entry[0]]
        if _accumulates_in_place(node, by_id.get(node.get("ctrl_deps")), is_view):
            node["name"] = "aten::add_"
            _set_attr(node, "op_schema", add_)
            in_place += 1
        schema = _attr(node, "op_schema")
        sets = _aliases(schema) if schema else None
        for j, (value, type_) in enumerate(zip(outs.get("values", []), outs.get("types", []))):
            shared, written = sets[1][j] if sets is not None and j < len(sets[1]) else (frozenset(), False)
            source = next((in_entries[i][0] for i, s in enumerate(sets[0]) if s & shared and i < len(in_entries)
                           and in_entries[i]), None) if shared else None
            for entry in _tensor_entries(value, type_):
                storage[entry[0]] = storage[source[0]] if source is not None else fresh()
                # a written input stays what it was; a (non-written) alias is a view
                is_view[entry[0]] = (is_view.get(source[0], False) if written else True) if source is not None \
                    else False
                entry[1] = storage[entry[0]]
    return count, in_place


@dataclass
class CaptureInfo:
    """A capture's facts: seconds per stage, peak resident memory of the process (MiB), node counts."""

    head: str
    parameters: int
    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: float = 0.0
    stats: NormalizeStats = field(default_factory=NormalizeStats)
    routing: str | None = None   # how mixture-of-experts layers were routed (:mod:`moe_routing`), None without


def capture(request: GraphRequest, path: Path, device: str = "meta") -> CaptureInfo:
    """Record the recipe step of ``request`` to the execution trace ``path`` and normalize it. ``device`` 'cpu' runs
    it for real (the reference the tests compare the meta capture with; a tiny model only)."""
    import torch

    from collectors.workloads.moe_routing import expert_routing

    started = time.perf_counter()
    model, head, inputs = build_model(request, device)
    built = time.perf_counter()
    try:
        with expert_routing(model, request.batch_size, request.seq_len, request.routing) if device == "meta" \
                else contextlib.nullcontext() as routing:
            record_step(model, inputs, request.optimizer, path, request.mode)
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        what = "training step" if request.mode == "train" else "inference call"
        raise PmdbError(f"{request.name}: the {what} cannot be recorded on the {device} device "
                        f"({text[0] if text else type(exc).__name__})") from None
    recorded = time.perf_counter()
    info = CaptureInfo(head, sum(p.numel() for p in model.parameters()), routing=routing)
    del model, inputs
    info.stats = normalize_trace(path, meta=torch.device(device).type == "meta")
    done = time.perf_counter()
    info.seconds = {"build": built - started, "record": recorded - built, "normalize": done - recorded}
    info.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return info


def collect_graph(store: Store, platform: str, request: GraphRequest, args: dict[str, Any]) -> dict[str, Any]:
    """Capture the step, then store it under a 'graph' run: the workload (:func:`workload_identity`, world size 1)
    and a trace set of one ET-only rank. Nothing is written when the capture fails. Returns the run summary."""
    from collectors.traces.ingest import RankTraces, ingest_trace_set
    from collectors.workloads.store_rows import ensure_workload

    if platforms.load(store, platform).is_imported:
        raise PmdbError(f"platform {platform!r} holds imported data; a capture is recorded on this machine's "
                        f"platform (predict it on another with --target-platform)")
    work = store.workspace.artifacts / "tmp" / f"graph-{time.time_ns()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        et = work / "rank0.et.json"
        info = capture(request, et)
        started = time.perf_counter()
        with store.run(KIND, platform, args) as run:
            workload_id = ensure_workload(store, family="transformer", name=request.name, config=request.identity(),
                                          batch_size=request.batch_size, world_size=1)
            set_id = ingest_trace_set(store, run.run_id, platform, [RankTraces(0, None, et)], label=request.name,
                                      workload_id=workload_id, source="captured")
            run.summary = {"workload_id": workload_id, "trace_set_id": set_id, "mode": request.mode, "head": info.head,
                           "parameters": info.parameters, "et_nodes": info.stats.kept,
                           "pruned_nodes": info.stats.pruned, "et_bytes": et.stat().st_size,
                           "seconds": {**{k: round(v, 3) for k, v in info.seconds.items()},
                                       "store": round(time.perf_counter() - started, 3)},
                           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                           **({"routing": info.routing} if info.routing else {})}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return run.summary
