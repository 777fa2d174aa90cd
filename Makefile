# Every install goes through constraints.txt, which pins torch==2.13.0 (CPU wheel).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALL := $(PY) -m pip install --quiet -c constraints.txt
PLUGINS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml constraints.txt $(wildcard plugins/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) --upgrade pip
	$(INSTALL) -e ".[local,dev]" $(foreach p,$(PLUGINS),-e $(p))
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with minds-core and every plugin

demo: setup  ## train ghost_trace on the local backend
	$(VENV)/bin/minds run --env ghost_trace

test: setup  ## the whole test suite (core and plugins)
	$(PY) -m pytest

bench: setup  ## the benchmark scripts; they print figures
	$(PY) benchmarks/cli_startup.py
	$(PY) benchmarks/local_backend.py
	$(PY) benchmarks/pipeline.py
	$(PY) benchmarks/openreward_load.py
	$(PY) benchmarks/sampler_memory.py
	$(PY) benchmarks/executors.py

clean:  ## remove the venv; runs/ (your runs and local checkpoints) is kept
	rm -rf $(VENV)
