# The two commands of the README. Both create the virtual environment from the pins when it is missing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[cpu,test]"
	touch $(STAMP)

# The main job on an embedded default.
demo: $(STAMP)
	MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true $(BIN)/pmdb quickstart

# Two workers; each test module (and each expensive shared workspace's tests) on one of them, slow ones first
# (tests/conftest.py orders them). Bytecode is cached even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): each worker and each pmdb process a test starts would compile the project again.
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true $(BIN)/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=15

clean:
	rm -rf $(VENV) pmdb-workspace
