"""A planner study end to end: resolve the system (shipped, file, or platform in the store), search, store."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Run, Store
from planner import system as systems
from planner.calibration import Calibrations, FittedModels, MeasuredCollectives, platform_system
from planner.candidates import Framework
from planner.model import Transformer
from planner.registered import registered_models
from planner.search import SearchResult, search
from planner.space import domain_size
from planner.store_rows import save_study
from planner.system import System

PLATFORM_PREFIX = "platform:"
CONFIG_ORDER = ("tp", "cp", "summa_hidden", "summa_tokens", "pp", "dp", "micro_batch", "micro_batches", "panels",
                "recompute", "dist_opt")


@dataclass
class Study:
    study_id: int
    system: System
    gpus: int
    result: SearchResult


def resolve_system(store: Store | None, spec: str, *, base: str = "h100", nvlink_domain: int | None = None
                   ) -> tuple[System, str | None]:
    """(system, platform name or None) for a shipped name, a JSON file or ``platform:NAME``."""
    platform = None
    if spec.startswith(PLATFORM_PREFIX):
        if store is None:
            raise PmdbError("a platform system needs the store")
        platform = platforms.resolve(store, spec[len(PLATFORM_PREFIX):])
        system = platform_system(store, platform, systems.load(base))
    else:
        system = systems.load(spec)
    if nvlink_domain is not None:
        system = system.with_domain(nvlink_domain)
    return system, platform


def calibration_for(store: Store, platform: str | None, model_dirs: list[Path], *,
                    registry_alias: str | None = None) -> Calibrations | None:
    """Measured collective curves of the platform, then fitted models saved in ``model_dirs`` (fitters' format),
    then (with ``registry_alias``, e.g. 'champion') the platform's registered models at that alias; asked in that
    order, the first answer wins. The label names the sources and the registered versions used."""
    if platform is None:
        raise PmdbError("calibrated mode needs --system platform:NAME (the platform whose measurements to use)")
    parts: list[object] = [MeasuredCollectives(store, platform)]
    if model_dirs:
        from fitters.model import load_dir   # the fitters' saved-model loader
        from fitters.collective import CollectiveModel
        gemm, collectives = None, {}
        for directory in model_dirs:
            model = load_dir(directory)
            if isinstance(model, CollectiveModel):
                collectives[(model.collective, model.world_size)] = model
            else:
                gemm = model
        parts.append(FittedModels(gemm, collectives, label=f"fitted models ({len(model_dirs)} dirs)"))
    if registry_alias is not None:
        parts.append(registered_models(store, platform, registry_alias))
    calibration = Calibrations(*parts)
    if not calibration.parts:
        registered = f", no {registry_alias} models registered" if registry_alias else ""
        raise PmdbError(f"platform {platform!r} has no measured collective curves{registered} and no --model-dir "
                        f"was given: nothing to calibrate with")
    return calibration


def run_study(store: Store, run: Run, model: Transformer, system: System, *, gpus: int, global_batch: int,
              strategy: str, fw: Framework, top: int, workers: int, platform: str | None = None,
              calibration: object | None = None, progress: bool = True) -> Study:
    """Search and store one study in ``run``."""
    result = search(model, system, gpus, global_batch, strategy=strategy, fw=fw, top=top, workers=workers,
                    calibration=calibration, progress=progress)
    study_id = save_study(store, run.run_id, model=model, system=system, gpus=gpus, global_batch=global_batch,
                          strategy=strategy, fw=fw, result=result, domain=domain_size(gpus, system.nvlink_domain),
                          platform=platform, calibrated=calibration is not None)
    return Study(study_id, system, gpus, result)


def usage_text(usage: dict[str, dict[str, int]]) -> str:
    """'gemm: roofline 120; all_reduce: calibrated 40, ring 3' (which source timed which op family)."""
    return "; ".join(f"{kind}: " + ", ".join(f"{src} {n}" for src, n in sorted(counts.items()) if n)
                     for kind, counts in sorted(usage.items()) if any(counts.values()))


def display_frame(top: pd.DataFrame, *, rounded: bool = True) -> pd.DataFrame:
    """The columns worth printing: configuration (strategy-specific columns empty for other strategies), time,
    throughput, memory and the non-zero breakdown parts (rounded to 4 decimals for reading when ``rounded``)."""
    if top.empty:
        return top
    frame = top.drop(columns=[c for c in top.columns if c.startswith("mem_") or c == "tokens_per_s"])
    config = [c for c in CONFIG_ORDER if c in frame.columns]
    config += sorted(c for c in frame.columns if c.startswith("nvlink_"))
    rest = [c for c in frame.columns if c not in config and c not in ("rank", "strategy")]
    frame = frame[["rank", "strategy", *config, *rest]]
    for column in config:
        if frame[column].dtype.kind == "f":          # int columns that another strategy left empty
            frame[column] = frame[column].astype("Int64")
    empty = [c for c in rest if frame[c].dtype.kind == "f" and (frame[c] == 0).all()]
    frame = frame.drop(columns=empty)
    return frame.round({c: 4 for c in frame.select_dtypes("float").columns}) if rounded else frame
