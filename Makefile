# gpucluster: `make lab` runs the whole path on the embedded lab; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_FLAGS ?= -q

.PHONY: setup gpu-deps test lint unit integration bench lab lab-down lock clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml scripts/host-packages.txt
	scripts/setup-host.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# Fast first: lint and unit tests (no root, no network), then integration (lab nodes, root).
test: setup lint unit integration

lint: setup
	$(PY) -m ruff check gpucluster stacks scripts tests bench collections
	$(PY) -m mypy gpucluster

# torch for the PyTorch burn's CPU tests (requirements-gpu.in; not in requirements.txt).
gpu-deps: setup
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-gpu.in

unit: setup gpu-deps
	$(PY) -m pytest $(PYTEST_FLAGS) tests/unit

integration: setup
	scripts/run-pytest-dir.sh $(PY) tests/integration $(PYTEST_FLAGS)

bench: setup
	$(PY) bench/run.py

# The whole path on the embedded lab: bring it up, converge it, verify it; the verdict is
# the last thing printed (exit 0 when every node passes). `make lab-down` removes it.
LAB_STACK ?= Pulumi.lab.yaml
lab: setup
	$(VENV)/bin/gpucluster lab up --stack $(LAB_STACK)
	$(VENV)/bin/gpucluster converge --stack $(LAB_STACK)
	$(VENV)/bin/gpucluster verify --stack $(LAB_STACK)

lab-down: setup
	$(VENV)/bin/gpucluster lab down --stack $(LAB_STACK)

lock:
	rm -rf /tmp/gpucluster-lock && $(PYTHON) -m venv /tmp/gpucluster-lock
	/tmp/gpucluster-lock/bin/pip install -q -r requirements.in
	{ echo "# Pinned: every direct and transitive dependency (from requirements.in; 'make lock' regenerates)."; \
	  /tmp/gpucluster-lock/bin/pip freeze --all | grep -v '^pip=='; } > requirements.txt

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
