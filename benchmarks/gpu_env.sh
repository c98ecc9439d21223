# Sourced by the scripts that run on a lent GPU machine (gpu_check.sh, gpu_source_table.sh); needs REPO (the checkout).
#
# gpu_env_python [RUNNER]: sets PY ($PMDB_PYTHON, else the checkout's .venv when it imports duckdb, else python3) and,
# when that Python lacks duckdb or pmdb, installs the wheels carried in .gpu-wheels/ and pmdb itself (never from the
# network: the GPU image has no duckdb or MLflow, benchmarks/gpu_wheels.sh fills the folder). Each install runs as
# `RUNNER NAME CMD...` when a runner is given (gpu_check.sh's step logger), else directly. Returns 2 when the wheels
# are needed and absent.
gpu_env_python() {
    if [ -n "${PMDB_PYTHON:-}" ]; then PY=$PMDB_PYTHON
    elif [ -x "$REPO/.venv/bin/python" ] && "$REPO/.venv/bin/python" -c "import duckdb" 2>/dev/null; then
        PY=$REPO/.venv/bin/python
    else PY=python3
    fi
    "$PY" -c "import duckdb, pmdb.migrations" 2>/dev/null && return 0
    if [ ! -d "$REPO/.gpu-wheels" ]; then
        echo "$(basename "$0"): duckdb or pmdb is missing and .gpu-wheels/ is not here: run benchmarks/gpu_wheels.sh" \
             "on a machine with PyPI first" >&2
        return 2
    fi
    local runner=${1:-_gpu_env_direct}
    "$runner" install-wheels "$PY" -m pip install -q --no-index --no-deps --no-cache-dir "$REPO"/.gpu-wheels/*.whl
    "$runner" install-pmdb "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir -e "$REPO"
}

# gpu_env_slug: the GPU's name as a file-name part (e.g. nvidia-h200), 'cpu' without a CUDA device; needs PY.
gpu_env_slug() {
    "$PY" -c "import torch, re; print(re.sub('[^a-z0-9]+', '-', torch.cuda.get_device_name(0).lower()).strip('-') \
if torch.cuda.is_available() else 'cpu')"
}

_gpu_env_direct() {
    echo "== $1"
    shift
    "$@"
}
