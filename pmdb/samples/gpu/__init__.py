"""A GPU what-if from shipped data (``pmdb quickstart``'s GPU steps): a V100's spec sheet, the rows of its NeuSight
kernel tables that BERT-large (batch 2, sequence 512) needs, that step measured on a real V100 and the model's
``transformers`` config. See README.md beside this file for the source, the license and what was cut."""
from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
PLATFORM = "tesla-v100-pcie-32gb"                        # what `pmdb platform-specs` names the sheet's GPU
SPEC_SHEET = FOLDER / "Tesla_V100-PCIE-32GB.json"        # NeuSight device config (FP32 GFLOP/s, GB/s, SMs, ...)
KERNELS = FOLDER / "neusight_kernels"                    # NeuSight kernel tables (latency ms), a subset of rows
MODEL_CONFIGS = FOLDER                                   # bert_large.json: the transformers config of the label
MODEL_CONFIG = FOLDER / "bert_large.json"
LABEL = FOLDER / "bert_large-train-512-2.json"           # the measured step: fw, bw and e2e latency (ms)
BATCH_SIZE, SEQ_LEN = 2, 512                             # the label's batch and sequence length (its file name)
