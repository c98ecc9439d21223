#!/usr/bin/env bash
# pmdb's GPU path checked on a GPU machine, with the README's commands, in a fresh workspace (about 5-8 minutes):
# kernel microbenchmarks on CUDA (device time beside single-call and back-to-back), a small gpt2 measured and traced
# on CUDA (Kineto + ET), a CUDA training loop recorded outside pmdb and imported, GPU kernels mined from the traces,
# replay, the exact traced shapes microbenchmarked, fit, overheads and model mode; then tests/gpu. Writes
# benchmarks/results/gpu_check_<gpu>.md (GPU, versions, steps, rows per op, replay and model-mode errors).
#
#   benchmarks/gpu_check.sh              on a CUDA machine (installs the wheels carried in .gpu-wheels/ first)
#   benchmarks/gpu_check.sh --cpu        the same steps on this CPU with a tiny model (report under the workspace)
#   options: --workspace DIR (default a new /tmp dir), --out FILE, --tests | --no-tests (default: tests/gpu
#   runs after the steps when they took under 4 minutes, so that the whole check stays within about 8)
#
# The GPU image has torch, transformers, pandas, scipy, sklearn, typer but neither duckdb nor MLflow: fill
# .gpu-wheels/ beforehand on a machine with PyPI (benchmarks/gpu_wheels.sh: duckdb and mlflow-skinny with what they
# need that the image lacks, ~44 MB). Without MLflow the fit and model-mode steps are skipped and the report says so.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
MODE=cuda
WS=""
OUT=""
TESTS=auto
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) MODE=cpu ;;
        --workspace) WS=$2; shift ;;
        --out) OUT=$2; shift ;;
        --no-tests) TESTS=0 ;;
        --tests) TESTS=1 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true PYTHONUNBUFFERED=1 COLUMNS=100
# shellcheck source=benchmarks/gpu_env.sh
. "$REPO/benchmarks/gpu_env.sh" || exit 2
WS=${WS:-$(mktemp -d /tmp/pmdb-gpu-check.XXXXXX)/ws}
WORK=$(dirname "$WS")
STEPS=$WORK/steps.log
mkdir -p "$WORK/logs"
: > "$STEPS"
started=$(date +%s)

# One step: its output to logs/NAME.log, a line "NAME RC SECONDS [NOTE]" to the step log, the tail on screen.
step() {
    local name=$1; shift
    local t0 t1 rc
    t0=$(date +%s.%N)
    echo "== $name: $*"
    "$@" >"$WORK/logs/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    echo "$name $rc $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}")" >>"$STEPS"
    tail -n 4 "$WORK/logs/$name.log" | cut -c1-160
    [ "$rc" = 0 ] || echo "   (exit $rc; whole log: $WORK/logs/$name.log)"
    return 0
}
skip() { echo "== $1: skipped ($2)"; echo "$1 skip 0 $2" >>"$STEPS"; }
pmdb() { "$PY" -m pmdb --home "$WS" "$@"; }

# 0. What pmdb needs that this Python lacks comes from the carried wheels (never from the network).
gpu_env_python step || exit 2
HAVE_MLFLOW=1
"$PY" -c "import mlflow, sqlalchemy, alembic" 2>/dev/null || HAVE_MLFLOW=0
if [ "$MODE" = cuda ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check.sh: no CUDA device is visible (use --cpu for the CPU dry run)" >&2
    exit 2
fi

# The README's commands, in order. CPU: a tiny model and few configs, so the dry run takes minutes here.
if [ "$MODE" = cuda ]; then
    OPS=(--op fully_connected --op bmm --op relu --op add --op layer_norm --op softmax --op gelu)
    MODEL=(--arch gpt2 --layers 2 --hidden 256 --heads 4 --seq-len 128 --batch-size 8 --iters 20 --warmup 5)
    BUDGET=1
else
    OPS=(--op fully_connected --op relu --op add --max-configs 10 --cache cold)
    MODEL=(--arch gpt2 --layers 1 --hidden 64 --heads 2 --seq-len 32 --batch-size 2 --iters 5 --warmup 2)
    BUDGET=0.2
fi
step init pmdb init
step platform pmdb platform
step collect-ops pmdb collect ops --sweep quick "${OPS[@]}" --no-progress
step collect-workload pmdb collect workload transformer "${MODEL[@]}"
step record-own-trace "$PY" "$REPO/benchmarks/gpu_own_trace.py" --device "$MODE" --out "$WORK/own"
MEASURED=$(grep -o -- '--measured-ms [0-9.]*' "$WORK/logs/record-own-trace.log" | awk '{print $2}')
if [ -n "$MEASURED" ]; then
    step import-trace pmdb collect trace --kineto "$WORK/own/kineto.json" --et "$WORK/own/et.json" \
        --measured-ms "$MEASURED" --workload own-loop
else
    skip import-trace "the loop was not recorded"
fi
if [ "$MODE" = cuda ]; then
    step mine-traces pmdb collect mine-traces --all
else
    skip mine-traces "a CPU trace has no GPU kernels"
fi
step replay pmdb predict --all --mode replay
if [ "$MODE" = cuda ]; then TRACED=(); else TRACED=(--max-configs 2 --cache cold); fi
step collect-ops-traced pmdb collect ops --from-traces "${TRACED[@]}" --no-progress --no-peaks
if [ "$HAVE_MLFLOW" = 1 ]; then
    step fit pmdb fit --all --budget-minutes "$BUDGET" --no-progress --summary
    step fit-overheads pmdb fit overheads
    step model pmdb predict --all --mode model
    step model-fitted pmdb predict --all --mode model --kernels models
else
    for name in fit fit-overheads model model-fitted; do skip "$name" "MLflow is not importable here"; done
fi

GPU=$(gpu_env_slug)
if [ -z "$OUT" ]; then
    if [ "$MODE" = cuda ]; then OUT=$REPO/benchmarks/results/gpu_check_$GPU.md; else OUT=$WORK/gpu_check_cpu.md; fi
fi
elapsed=$(( $(date +%s) - started ))
if [ "$MODE" = cuda ] && { [ "$TESTS" = 1 ] || { [ "$TESTS" = auto ] && [ "$elapsed" -lt 240 ]; }; }; then
    step tests "$PY" -m pytest -q -p no:cacheprovider -rs "$REPO/tests/gpu"
elif [ "$MODE" = cuda ] && [ "$TESTS" = auto ]; then
    skip tests "the steps took ${elapsed} s; run pytest tests/gpu apart (or --tests)"
fi
step report "$PY" "$REPO/benchmarks/gpu_check_report.py" "$WS" --log "$STEPS" --out "$OUT"
echo "gpu_check.sh: $(( $(date +%s) - started )) s; report $OUT; logs $WORK/logs"
failed=$(awk '$2 != "0" && $2 != "skip"' "$STEPS" | wc -l)
[ "$failed" = 0 ] || { echo "gpu_check.sh: $failed step(s) failed:"; awk '$2 != "0" && $2 != "skip" {print "  " $1}' "$STEPS"; }
[ "$failed" = 0 ]
