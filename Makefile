# lorasent: `make run` sets up a pinned environment if missing, then runs the pipeline.
# Targets document themselves: `make help`.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lorasent-installed
# torch is installed apart from the lock: the CPU build here (pip takes it from local
# disk), a CUDA build from PyPI elsewhere; for ROCm pass the wheel index, e.g.
# make run TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.4
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
# Passed to `python -m venv`, e.g. --system-site-packages to reuse an image's torch.
VENV_FLAGS ?=
PYTEST_ARGS ?=
export PATH := $(abspath $(BIN)):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help setup run test lint lock clean

help:  ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install \
		$(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -c requirements.lock -e '.[dev]'
	touch $@

setup: $(STAMP)  ## Create .venv with pinned dependencies (skipped when up to date)

run: $(STAMP)  ## Set up if needed, then run the pipeline (dvc repro)
	$(BIN)/dvc repro

test: $(STAMP)  ## Set up if needed, then run all tests (the slow ones take a few minutes)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)  ## Lint the code (ruff)
	$(BIN)/ruff check src tests

lock:  ## Re-resolve requirements.lock in a throwaway venv (needs the package index)
	rm -rf build/lockvenv && $(PYTHON) -m venv build/lockvenv
	build/lockvenv/bin/python -m pip install -q "$(TORCH_SPEC)"
	build/lockvenv/bin/python -m pip install -q -e '.[dev]'
	{ sed -n '/^#/p' requirements.lock; build/lockvenv/bin/python -m pip freeze \
		--exclude-editable | grep -v -E '^torch=='; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf build/lockvenv

clean:  ## Remove the environment and DVC's outputs (data/, models/); keeps the DVC cache
	rm -rf $(VENV) data/raw data/split models/base models/adapter
