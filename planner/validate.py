"""Predict measured training runs with their given parallelism (no search) and score the predictions.

The input is a CSV with one measured run per row, parsed by header names (case, spaces, '#' and '_' ignored):
GPUs, global batch, micro batch, hidden size, attention heads, layers, sequence length, tensor / data / pipeline
parallelism, and the iteration time in ms (or s). The vTrain sample (Megatron-DeepSpeed GPT on one A100 node) uses
exactly these headers; its runs use activation checkpointing (full recomputation), fp16 and Adam.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pmdb import metrics
from pmdb.errors import PmdbError
from planner.calibration import Calibrations
from planner.candidates import RECOMPUTE, Candidates, Framework
from planner.evaluate import Evaluation, Prepared, evaluate_prepared, merge, prepare
from planner.model import Transformer
from planner.system import System

# field -> accepted header spellings after normalisation (lower case, alphanumerics only)
HEADERS = {
    "gpus": ("gpus", "numgpus", "ngpus"),
    "global_batch": ("globalbatch", "globalbatchsize"),
    "micro_batch": ("microbatch", "microbatchsize"),
    "hidden": ("hiddensize", "hidden"),
    "heads": ("attentionheads", "numattentionheads", "heads"),
    "layers": ("layers", "numlayers"),
    "seq_len": ("sequencelength", "seqlen", "maxlength"),
    "tp": ("tensorparallelism", "tensorparallelsize", "tp"),
    "dp": ("dataparallelism", "dataparallelsize", "dp"),
    "pp": ("pipelineparallelism", "pipelineparallelsize", "pp"),
    "time_ms": ("iterationtimems",),
    "time_s": ("iterationtimes",),
}


@dataclass
class Validation:
    """Per-row predictions beside the measurements, and the error summary (pmdb.metrics.summary)."""

    rows: pd.DataFrame
    summary: dict[str, float]
    usage: dict[str, dict[str, int]]

    def worst(self, n: int) -> pd.DataFrame:
        order = self.rows["rel_error"].abs().sort_values(ascending=False).index
        return self.rows.loc[order[:n]]


def _norm(header: str) -> str:
    return re.sub(r"[^a-z0-9]", "", header.lower())


def read_runs(path: Path) -> pd.DataFrame:
    """The measured runs of a CSV as columns named like HEADERS' keys plus 'measured_s'."""
    try:
        raw = pd.read_csv(path)
    except FileNotFoundError:
        raise PmdbError(f"no such file: {path}") from None
    except OSError as exc:
        raise PmdbError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise PmdbError(f"cannot parse {path} as CSV: {str(exc).splitlines()[0]}") from None
    by_norm = {_norm(h): h for h in raw.columns}
    out = pd.DataFrame(index=raw.index)
    for field, spellings in HEADERS.items():
        found = next((by_norm[s] for s in spellings if s in by_norm), None)
        if found is not None:
            out[field] = pd.to_numeric(raw[found], errors="coerce")
    missing = [f for f in HEADERS if f not in out and not f.startswith("time")]
    if missing:
        raise PmdbError(f"{path}: no column for {missing[0]!r} (headers: {', '.join(raw.columns)})")
    if "time_ms" in out:
        out["measured_s"] = out.pop("time_ms") / 1e3
        out = out.drop(columns=["time_s"], errors="ignore")
    elif "time_s" in out:
        out["measured_s"] = out.pop("time_s")
    else:
        raise PmdbError(f"{path}: no iteration-time column ('iteration time (ms)' or 'iteration time (s)')")
    bad = out.isna().any(axis=1) | (out <= 0).any(axis=1)
    if bad.any():
        raise PmdbError(f"{path}: row {int(np.flatnonzero(bad)[0]) + 2} has a missing, non-numeric or non-positive "
                        f"value")
    ints = [c for c in out if c != "measured_s"]
    out[ints] = out[ints].astype(np.int64)
    wrong = out["tp"] * out["dp"] * out["pp"] != out["gpus"]
    if wrong.any():
        raise PmdbError(f"{path}: row {int(np.flatnonzero(wrong)[0]) + 2}: tensor × data × pipeline parallelism "
                        f"is not the number of GPUs")
    uneven = (out["global_batch"] % (out["dp"] * out["micro_batch"]) != 0) | (out["layers"] % out["pp"] != 0)
    if uneven.any():
        raise PmdbError(f"{path}: row {int(np.flatnonzero(uneven)[0]) + 2}: global batch is not a multiple of "
                        f"data parallelism × micro batch, or layers of pipeline parallelism")
    return out


def megatron_placement(tp: np.ndarray, dp: np.ndarray, pp: np.ndarray, domain: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPUs of the tensor, data and pipeline groups inside one NVLink domain (node) as Megatron orders ranks:
    tensor fastest, then data, then pipeline: ``f_tp = min(tp, D)``, ``f_dp = min(dp, max(1, D // tp))``,
    ``f_pp = min(pp, max(1, D // (tp · dp)))``."""
    tp, dp, pp = (np.asarray(x, dtype=np.int64) for x in (tp, dp, pp))
    f_tp = np.minimum(tp, domain)
    f_dp = np.minimum(dp, np.maximum(1, domain // tp))
    f_pp = np.minimum(pp, np.maximum(1, domain // (tp * dp)))
    return f_tp, f_dp, f_pp


@dataclass
class PreparedRuns:
    """Measured runs grouped by model shape, each group's candidates prepared (:func:`planner.evaluate.prepare`)
    for NVLink domains of ``domain`` GPUs: what pricing them depends on neither the system's rates nor a
    calibration. ``groups`` holds (row positions, prepared candidates)."""

    n: int
    domain: int
    groups: list[tuple[np.ndarray, Prepared]]
    merged: Prepared | None = None   # all groups as one (planner.evaluate.merge), where they merge

    def evaluations(self, system: System, calibration: object | None = None
                    ) -> Iterator[tuple[np.ndarray, Evaluation]]:
        """(row positions, evaluation) of each group under ``system`` and ``calibration``: one evaluation of
        all groups merged where they merge and no calibrated GEMM or collective model prices them."""
        if system.nvlink_domain != self.domain:
            raise ValueError(f"runs prepared for NVLink domains of {self.domain} GPUs, priced with "
                             f"{system.nvlink_domain}")
        models = hasattr(calibration, "gemm_time") or hasattr(calibration, "collective_time")
        if self.merged is not None and not models:
            yield np.concatenate([where for where, _ in self.groups]), evaluate_prepared(self.merged, system,
                                                                                         calibration)
            return
        for where, prepared in self.groups:
            yield where, evaluate_prepared(prepared, system, calibration)

    def predict(self, system: System, calibration: object | None = None) -> np.ndarray:
        """Predicted iteration seconds of every run (the ``predicted_s`` of :func:`validate`)."""
        predicted = np.zeros(self.n)
        for where, result in self.evaluations(system, calibration):
            predicted[where] = result.time
        return predicted


def prepare_runs(runs: pd.DataFrame, fw: Framework, *, vocab: int, recompute: str = "full",
                 domain: int) -> PreparedRuns:
    """``runs`` (columns as :func:`read_runs` makes them) prepared to be priced many times (1D tensor parallelism,
    the given tp/dp/pp, groups placed as Megatron places them in NVLink domains of ``domain`` GPUs)."""
    if recompute not in RECOMPUTE:
        raise PmdbError(f"bad recomputation {recompute!r}: use {', '.join(RECOMPUTE)}")
    groups = []
    for shape, group in runs.groupby(["hidden", "heads", "layers", "seq_len"]):
        hidden, heads, layers, seq_len = (int(x) for x in shape)
        model = Transformer(name=f"gpt-h{hidden}-l{layers}", seq_len=seq_len, hidden=hidden, heads=heads,
                            layers=layers, vocab=vocab)
        f_tp, f_dp, f_pp = megatron_placement(group["tp"], group["dp"], group["pp"], domain)
        cands = Candidates.from_columns(
            "1d", t1=group["tp"], pp=group["pp"], dp=group["dp"], f_t1=f_tp, f_dp=f_dp, f_pp=f_pp,
            mb=group["micro_batch"],
            nmb=group["global_batch"] // (group["dp"] * group["micro_batch"]),
            recompute=RECOMPUTE.index(recompute))
        groups.append((runs.index.get_indexer(group.index), prepare(model, cands, fw, reuse=True)))
    merged = merge([prepared for _, prepared in groups]) if len(groups) > 1 else None
    return PreparedRuns(len(runs), domain, groups, merged)


def validate(runs: pd.DataFrame, system: System, fw: Framework, *, vocab: int, recompute: str = "full",
             calibration: object | None = None, fitted: object | None = None,
             prepared: PreparedRuns | None = None) -> Validation:
    """Predict every run (1D tensor parallelism, the given tp/dp/pp), with the ideal formulas or, given a
    calibration, its GEMM/collective times where it covers them; ``fitted`` (a
    :class:`planner.fitting.PlannerCalibration`) replaces the system's efficiencies and adds its fixed costs.
    Runs larger than one NVLink domain are priced with the two-tier network, groups placed as Megatron places
    them (:func:`megatron_placement`). ``prepared``: these runs already prepared (:func:`prepare_runs`)."""
    if recompute not in RECOMPUTE:
        raise PmdbError(f"bad recomputation {recompute!r}: use {', '.join(RECOMPUTE)}")
    if fitted is not None:
        system = fitted.system(system)
        calibration = fitted if calibration is None else Calibrations(calibration, fitted)
    if prepared is None:
        prepared = prepare_runs(runs, fw, vocab=vocab, recompute=recompute, domain=system.nvlink_domain)
    predicted = np.zeros(len(runs))
    memory = np.zeros(len(runs))
    parts: list[dict[str, float]] = [{} for _ in range(len(runs))]
    usage: dict[str, dict[str, int]] = {}
    for where, result in prepared.evaluations(system, calibration):
        for kind, counts in result.usage.items():
            for source, n in counts.items():
                usage.setdefault(kind, {})[source] = usage.get(kind, {}).get(source, 0) + n
        predicted[where] = result.time
        memory[where] = result.memory["total"]
        for i, row in zip(where, range(len(where))):
            parts[i] = {k: float(v[row]) for k, v in result.parts.items()}
    rows = runs.copy()
    rows["predicted_s"] = predicted
    rows["rel_error"] = metrics.relative_errors(predicted, rows["measured_s"])
    rows["memory_gb"] = memory / 1e9
    rows["breakdown"] = parts
    return Validation(rows, metrics.summary(predicted, rows["measured_s"]), usage)
