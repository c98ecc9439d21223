#!/usr/bin/env bash
# A modern GPU's kernel table and its burst/sustained probe, measured in one short device session (#33; about 7-9
# minutes on an H100/H200): what the cross-GPU models lack (every table GPU is a 2016-2020 card) and what no spec sheet
# says (whether a training step's stream runs at the clock single-call tables were timed at).
#
#   1. benchmarks/gpu_sustained_probe.py: the BERT/GPT-2 GEMMs, a big GEMM, an add and a layer norm timed as single
#      calls (NeuSight's method), back to back and in a 3 s stream, with nvidia-smi's clock and power beside;
#   2. `pmdb collect ops` on CUDA, forward, a seeded random sweep of the cross-GPU ops (device time per call from the
#      profiler, single call and back to back beside it), stopped cleanly after --minutes;
#   3. benchmarks/gpu_table_export.py: those rows as a generic kernel table (kernels.csv.gz) with their timings.
#
# Everything lands in OUT (default: $OUT when the device tool set it, else benchmarks/data/gpu_tables/GPU): commit it
# and add the GPU as a source on any machine with `pmdb platform-specs SHEET --name NAME` and
# `pmdb collect import-ops OUT/kernels.csv.gz --format generic --platform NAME`.
#
#   benchmarks/gpu_source_table.sh                on a CUDA machine (installs the wheels in .gpu-wheels/ first)
#   benchmarks/gpu_source_table.sh --cpu          the same steps on this CPU, tiny (a dry run of the script)
#   options: --minutes M (the sweep's budget, default 5), --sample N (configs per op, default 200), --out DIR
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
MODE=cuda
MINUTES=5
SAMPLE=200
DEST=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) MODE=cpu ;;
        --minutes) MINUTES=${2:-}; shift ;;
        --sample) SAMPLE=${2:-}; shift ;;
        --out) DEST=${2:-}; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "gpu_source_table.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$MINUTES" in ''|*[!0-9.]*) echo "gpu_source_table.sh: --minutes takes a number of minutes" >&2; exit 2 ;; esac
case "$SAMPLE" in ''|*[!0-9]*|0) echo "gpu_source_table.sh: --sample takes a whole number > 0" >&2; exit 2 ;; esac
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true PYTHONUNBUFFERED=1 COLUMNS=100
# shellcheck source=benchmarks/gpu_env.sh
. "$REPO/benchmarks/gpu_env.sh" || exit 2
gpu_env_python || exit 2
if [ "$MODE" = cuda ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_source_table.sh: no CUDA device is visible (use --cpu for the CPU dry run)" >&2
    exit 2
fi
GPU=$(gpu_env_slug)
DEST=${DEST:-${OUT:-$REPO/benchmarks/data/gpu_tables/$GPU}}
WS=$(mktemp -d /tmp/pmdb-gpu-table.XXXXXX)/ws
mkdir -p "$DEST"
started=$(date +%s)
pmdb() { "$PY" -m pmdb --home "$WS" "$@"; }

# The sweep runs op by op (a budget would cut the ops listed last), each with its share of --minutes: the GEMMs two.
if [ "$MODE" = cuda ]; then
    PROBE=(--device cuda)
    OPS=(fully_connected:2 bmm:2 layer_norm:1 softmax:1 add:1 gelu:1)
    SWEEP=(--sweep random --sample "$SAMPLE")
    CACHE=device
    nvidia-smi --query-gpu=name,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,driver_version \
        --format=csv > "$DEST/gpu.csv" 2>&1 || true
else
    PROBE=(--device cpu --seconds 0.3 --idle 0.1)
    OPS=(fully_connected:2 add:1 layer_norm:1)
    SWEEP=(--sweep random --sample 4 --cache warm)
    CACHE=warm
fi
"$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])" \
    > "$DEST/versions.txt"
echo "== 1. burst against sustained"
"$PY" "$REPO/benchmarks/gpu_sustained_probe.py" "${PROBE[@]}" --out "$DEST" || exit 1
echo "== 2. kernel sweep (${MINUTES} min at most)"
pmdb init > /dev/null || exit 1
pmdb platform > /dev/null || exit 1
shares=0
for item in "${OPS[@]}"; do shares=$(( shares + ${item#*:} )); done
rc=0
: > "$DEST/collect.log"
for item in "${OPS[@]}"; do
    budget=$(awk "BEGIN {printf \"%.3f\", $MINUTES * ${item#*:} / $shares}")
    pmdb collect ops --op "${item%%:*}" --pass fwd "${SWEEP[@]}" --budget-minutes "$budget" --seed 0 --no-progress \
        --no-peaks >> "$DEST/collect.log" 2>&1 || { rc=$?; echo "   ${item%%:*}: collect ops exited $rc"; }
    grep -E "configs measured" "$DEST/collect.log" | tail -n 1 | sed "s/^run [0-9a-f]*: /   ${item%%:*}: /" | cut -c1-120
done
[ "$rc" = 0 ] || echo "gpu_source_table.sh: a sweep failed; exporting what the store holds"
echo "== 3. export"
"$PY" "$REPO/benchmarks/gpu_table_export.py" "$WS" "$DEST" --cache-state "$CACHE" || exit 1
echo "gpu_source_table.sh: $(( $(date +%s) - started )) s; wrote $DEST"
[ "$rc" = 0 ]
