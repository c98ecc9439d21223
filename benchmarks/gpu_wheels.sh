#!/usr/bin/env bash
# Fill .gpu-wheels/ (git-ignored) with what pmdb needs on the lent GPU machine that its image lacks, for
# benchmarks/gpu_check.sh to install there with `pip install --no-index`: duckdb (the pin of pyproject.toml) and
# mlflow-skinny (MLflow's client, tracking and registry stores, without the server's UI) with its dependencies that
# the image does not hold. Run on a machine that reaches PyPI; ~44 MB of manylinux x86_64 wheels.
#
#   benchmarks/gpu_wheels.sh            for the image's Python 3.12 (device KINDS.md: Python 3.12.3)
#   PYV=3.11 benchmarks/gpu_wheels.sh   for a Python 3.11 image
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${PYV:-3.12}
PY=${PY:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
mkdir -p .gpu-wheels
# Exact versions: what `pip download mlflow-skinny==3.17.2 sqlalchemy alembic` resolved on 2026-11-28, less the
# packages the GPU image already has (torch, pandas, numpy, scipy, scikit-learn, typer, click, protobuf, pyyaml,
# requests, packaging, cloudpickle, anyio, jinja2, markupsafe, typing-extensions, ...).
"$PY" -m pip download --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu-wheels \
    duckdb==2.0.0 mlflow-skinny==3.17.2 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 \
    databricks-sdk==0.162.0 google-auth==2.63.0 pyasn1==0.6.5 pyasn1-modules==0.4.2 cryptography==50.0.2 \
    cffi==2.1.1 pycparser==3.12 cachetools==7.3.3 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 sqlparse==0.6.1 \
    python-dotenv==1.2.4 importlib-metadata==9.1.0 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 \
    opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2 pydantic==2.14.4 \
    pydantic-core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0 fastapi==0.165.0 starlette==1.10.0 \
    uvicorn==0.54.0
du -sh .gpu-wheels
