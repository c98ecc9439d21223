"""``pmdb collect import-e2e``: measured training steps of whole models (GPU e2e labels) as ground truth of workload
runs on a named GPU platform; atomic and idempotent by file checksum."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pandas as pd
import typer

from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError


def import_e2e(ctx: typer.Context,
               files: Optional[List[Path]] = typer.Argument(
                   None, help="Label files to import (a directory stands for its .json files). All are checked "
                              "before anything is stored; all or none are imported; a file already imported (same "
                              "sha256) is skipped."),
               fmt: Optional[str] = typer.Option(
                   None, "--format", help="neusight: <GPU>/<model>-train-<seq>-<batch>.json with fw_latency, "
                                          "bwall_latency and e2e_latency in ms (stored in µs)."),
               platform: Optional[str] = typer.Option(
                   None, "--platform", help="The GPU platform the steps were measured on: an imported cuda platform "
                                            "(e.g. one `pmdb platform-specs` registered)."),
               create_platform: bool = typer.Option(
                   False, "--create-platform", help="Create --platform as an imported cuda platform when it does not "
                                                    "exist (its GPU name from the label folder)."),
               model_configs: Optional[Path] = typer.Option(
                   None, "--model-configs", help="Folder of the <model>.json transformers configs the labels name "
                                                 "(default: model_configs beside the labels' GPU folder).")) -> None:
    """Import measured GPU training steps (forward, backward, total) and inference calls (-inf- labels: the
    forward alone) as ground truth of their workloads."""
    from collectors.importers.e2e_labels import FORMATS, import_e2e_files

    if fmt not in FORMATS:
        raise PmdbError(f"bad --format {fmt!r}: use {', '.join(FORMATS)}" if fmt else
                        f"give --format ({', '.join(FORMATS)})")
    if not platform:
        raise PmdbError("give --platform NAME: the GPU the labels were measured on (e.g. tesla-v100-pcie-32gb)")
    if not files:
        raise PmdbError("give the label files (or directories) to import; see `pmdb collect import-e2e --help`")
    with open_store(ctx) as store:
        report = import_e2e_files(store, files, fmt, platform=platform, create_platform=create_platform,
                                  model_configs=model_configs)
    for path, reason in report.skipped:
        typer.echo(f"skipped {path}: {reason}")
    if not report.imported:
        typer.echo(f"nothing new to import on platform {platform}")
        return
    render(pd.DataFrame([{"run_id": run_id, "workload_id": workload_id,
                          "model": label.model + (" (inf)" if label.mode == "inference" else ""),
                          "batch": label.batch_size, "seq": label.seq_len, "fw_us": round(label.fw_us, 1),
                          "bw_us": round(label.bw_us, 1) if label.mode == "train" else "-",
                          "e2e_us": round(label.e2e_us, 1)}
                         for label, run_id, workload_id in report.imported]))


def register(app: typer.Typer) -> None:
    app.command("import-e2e")(import_e2e)
