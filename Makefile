# Every install goes through constraints.txt, which pins torch==2.13.0 (CPU wheel).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALL := $(PY) -m pip install --quiet -c constraints.txt
# The project's own plugins, by name (as pyproject.toml's testpaths): a plugin a user makes under plugins/, as
# the README shows, is theirs to install; it never changes what `make setup` installs or `make test` checks.
OWN_PLUGINS := ghost_trace gradient_prophet openreward_bridge ray_executor self_prediction verifiers_bridge verifiers_v1
PLUGINS := $(foreach p,$(OWN_PLUGINS),plugins/$(p)/)
STAMP := $(VENV)/.installed
# tinker-cookbook's loops are run against minds in the tests. Its own requirements name tml-renderers>=0.4.1,
# which the package index lacks and which only Inkling/Kimi models use: its other requirements are the
# cookbook extra, and the cookbook itself goes in without resolving (--no-deps).
COOKBOOK := 0.6.1

# verifiers 0.4 (the v1 API) cannot share .venv with openreward (mcp 2 needs sse-starlette>=3, openreward pins
# 2.3.6): it gets a venv of its own, with uv (which runs its harness programs); the verifiers_v1 bridge in .venv
# runs it there (plugins/verifiers_v1/README.md). `make test` builds it, so CI runs the v1 tests.
VF_VENV := .venv-verifiers
VF_STAMP := $(VF_VENV)/.installed
VERIFIERS_V1 := verifiers>=0.4,<0.5

.PHONY: setup verifiers-v1 demo lint test test-fast bench clean

$(STAMP): pyproject.toml constraints.txt $(foreach p,$(PLUGINS),$(p)pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) --upgrade pip
	$(INSTALL) -e ".[local,dev,cookbook]" $(foreach p,$(PLUGINS),-e $(p))
	$(INSTALL) --no-deps tinker-cookbook==$(COOKBOOK)
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with minds-core and every plugin

$(VF_STAMP): constraints.txt
	$(PYTHON) -m venv $(VF_VENV)
	$(VF_VENV)/bin/python -m pip install --quiet -c constraints.txt --upgrade pip
	$(VF_VENV)/bin/python -m pip install --quiet -c constraints.txt "$(VERIFIERS_V1)" uv
	touch $(VF_STAMP)

verifiers-v1: $(VF_STAMP)  ## create .venv-verifiers with verifiers 0.4 and uv, where the verifiers_v1 bridge runs verifiers

demo: setup  ## train ghost_trace on the local backend
	$(VENV)/bin/minds run --env ghost_trace

lint: setup  ## ruff, with the rules pyproject.toml selects, and import-linter's contracts (docs/architecture.md)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

test: setup verifiers-v1  ## the whole test suite (core and plugins), with a progress line per test file
	@echo "make test: the whole suite, slow tests included: about 30 minutes on 2 cores (the fast subset, 'make test-fast': one process, about 60 CPU-seconds, 70 s on idle cores)"
	$(PY) -m pytest -n auto --maxprocesses 4 --dist loadfile --durations=10

test-fast: setup  ## the fast subset: every test not marked slow
	$(PY) -m pytest -m "not slow"

bench: setup  ## the benchmark scripts; they print figures
	$(PY) benchmarks/cli_startup.py
	$(PY) benchmarks/local_backend.py
	$(PY) benchmarks/pipeline.py
	$(PY) benchmarks/openreward_load.py
	$(PY) benchmarks/sampler_memory.py
	$(PY) benchmarks/executors.py
	$(PY) benchmarks/inference_overhead.py

clean:  ## remove the venvs; runs/ (your runs and local checkpoints) is kept
	rm -rf $(VENV) $(VF_VENV)
