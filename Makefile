# hybridlab — two commands do all set-up: `make demo` and `make test` (both create .venv when missing).
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hybridlab-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONHASHSEED := 0

.PHONY: setup demo test test-fast eval engine-report sweep-alpha sweep report lab bench bench-quick soak lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found (hybridlab needs Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch first and exactly so: this pin is the CPU build; anything else pulls CUDA wheels.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[models,onnx,lab,tune,learn,eval,mcp,qdrant,postgres,irds,dev]'
	$(BIN)/python -m ipykernel install --prefix $(VENV) --name hybridlab --display-name "Python (hybridlab)"
	touch $(STAMP)

demo: setup
	$(BIN)/hybridlab demo

# Caches shared by every clone of this machine (each entry is checked against what it stands for):
# mypy's (keyed by each module's source hash) and the evaluation sets' embeddings cache (keyed by model
# and text hash; hybridlab.eval.evalsets.embedding_cache_path), beside the ONNX model cache.
USER_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/hybridlab
MYPY_CACHE ?= $(USER_CACHE)/mypy
# test processes (pytest-xdist); each test module is one group, the long ones start first (tests/conftest.py)
TEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)

# lint (ruff), format (ruff format), types (mypy, [tool.mypy] in pyproject.toml), the layer, no-cycle
# and no-bench contracts in pyproject.toml (import-linter), then every test (bench/tests too)
test: setup
	$(BIN)/ruff check hybridlab tests bench
	$(BIN)/ruff format --check hybridlab tests bench
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest tests bench/tests -q $(PYTEST_PARALLEL) --durations=20

# the edit loop: everything but the tests marked slow (real indexes, servers, > ~10 s); under 5 min here
test-fast: setup
	$(BIN)/python -m pytest tests bench/tests -q -m "not slow" $(PYTEST_PARALLEL) --durations=20

eval: setup
	$(BIN)/python -m pytest tests/eval -q

# issue-3 acceptance figures (project-name queries, hybrid vs vector, staged vs parallel) -> reports/engine/<date>/
engine-report: setup
	$(BIN)/python -m bench.engine_report

sweep-alpha: setup
	$(BIN)/hybridlab grid --dataset all

# Optuna sweeps (notebooks/sweep.ipynb via papermill) into reports/<date>-sweep-<set>/, the winners
# exported to configs/, then the report over both. ~10 min here. Spread over processes and machines
# (docs/scale-out.md): make sweep WORKERS=4 STORAGE=postgresql://user@host/db (or journal:/shared/sweep.log);
# the same command on another machine joins the studies.
STORAGE ?=
WORKERS ?= 1
SWEEP_ARGS = --workers $(WORKERS) $(if $(STORAGE),--storage '$(STORAGE)')
sweep: setup
	$(BIN)/hybridlab sweep --dataset memories $(SWEEP_ARGS) --export configs/best.json
	$(BIN)/hybridlab sweep --dataset scifact $(SWEEP_ARGS) --export configs/best-scifact.json
	$(BIN)/hybridlab sweep --dataset holoviz $(SWEEP_ARGS) --export configs/best-holoviz.json
	$(BIN)/hybridlab report

# Cron-safe: no prompts, exit 1 on failure, an flock on reports/.report.lock so runs never overlap.
report: setup
	$(BIN)/hybridlab report

lab: setup
	$(BIN)/jupyter lab --notebook-dir=. --MappingKernelManager.default_kernel_name=hybridlab $(LAB_ARGS) notebooks/start.ipynb

bench: setup
	$(BIN)/pip install -e '.[bench]'
	$(BIN)/python -m bench

bench-quick: setup
	$(BIN)/pip install -e '.[bench]'
	$(BIN)/python -m bench --quick

soak: setup
	# every reliability test incl. the soak loops; figures land in reports/reliability.md
	$(BIN)/python tests/reliability/report.py --soak

lint: setup
	$(BIN)/ruff check hybridlab tests bench
	$(BIN)/ruff format --check hybridlab tests bench
	$(BIN)/mypy

clean:
	rm -rf .hybridlab .cache
