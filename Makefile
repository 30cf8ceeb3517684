# gpucluster: `make lab` runs the whole path on the embedded lab; `make test` runs the tests.
SHELL := /bin/bash
# The controller's Python: 3.12 or newer (ansible-core 2.21); scripts/find-python.sh picks one,
# or set PYTHON. The PyTorch burn's CPU tests use their own venv (TORCH_PYTHON, see gpu-deps).
TORCH_PYTHON ?= python3.11
TORCH_VENV ?= .venv-torch
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_FLAGS ?= -q

.PHONY: setup gpu-deps test lint unit unit-fast unit-process integration twins twins-then-process lab-tiers bench lab lab-down lock clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml scripts/host-packages.txt
	scripts/setup-host.sh
	@# A venv on an older Python (made before the move to ansible-core 2.21) is made again.
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then rm -rf $(VENV); fi
	test -x $(PY) || "$$(scripts/find-python.sh)" -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# Fast first: the in-process unit tests and lint, then the lab tiers side by side (scripts/
# run-lab-tiers.sh; each tier's whole log in runs/<tier>.log): integration (lab nodes, root), the
# longest, beside the platform twins and then the unit tests that start processes (no root, no
# network). The host's two cores are saturated while the twins run and half idle in integration's
# last part (its Ceph and bounded measurements wait more than they compute): the process tests
# fill that, instead of running alone before the lab tiers (`make test` was 43.5 min that way).
test: setup unit-fast lint lab-tiers

lab-tiers: setup
	scripts/run-lab-tiers.sh "$(MAKE)" integration twins-then-process

# The twins, then the unit tests that start processes, whatever the twins' outcome (both report);
# the exit status is the first failing one's.
twins-then-process: setup
	@$(MAKE) --no-print-directory twins; twins=$$?; \
	$(MAKE) --no-print-directory unit-process; process=$$?; \
	if [ $$twins -ne 0 ]; then exit $$twins; fi; exit $$process

lint: setup
	$(PY) -m ruff check gpucluster stacks scripts tests bench collections
	$(PY) -m mypy gpucluster

# torch for the PyTorch burn's CPU tests (requirements-gpu.in; not in requirements.txt), in a venv
# of its own: the burn is a script that runs on the nodes' Python, and the CPU build of torch
# this machine holds is for Python 3.11. Without TORCH_PYTHON those tests skip, saying why.
gpu-deps: $(TORCH_VENV)/.installed

$(TORCH_VENV)/.installed: requirements-gpu.in
	@if command -v $(TORCH_PYTHON) >/dev/null; then \
	  { test -x $(TORCH_VENV)/bin/python || $(TORCH_PYTHON) -m venv $(TORCH_VENV); } && \
	  $(TORCH_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-gpu.in && touch $@; \
	else echo "gpu-deps: no $(TORCH_PYTHON); the PyTorch burn's CPU tests will skip (set TORCH_PYTHON)" >&2; fi

# The unit tests in two tiers, on every core (pytest-xdist; each test is independent of the
# others' order and process). unit-fast: in-process tests only (no `process` mark; a test that
# starts a process without it fails, tests/unit/conftest.py), first in `make test`. unit-process:
# the ones that start processes (ansible-playbook, ssh -G, the wheel, a browser).
UNIT_WORKERS ?= auto
unit: unit-fast unit-process

unit-fast: setup
	$(PY) -m pytest $(PYTEST_FLAGS) -n $(UNIT_WORKERS) -m "not process" tests/unit

unit-process: setup gpu-deps
	$(PY) -m pytest $(PYTEST_FLAGS) -n $(UNIT_WORKERS) -m process tests/unit

# --durations: the slowest setups and tests stay in runs/integration.log (where CI time is cut from).
integration: setup
	scripts/run-pytest-dir.sh $(PY) tests/integration $(PYTEST_FLAGS) --durations=20 --ignore=tests/integration/twins

# Every platform twin (Pulumi.twin-*.yaml) from nothing to its verdicts and its fault
# (tests/integration/twins; `make test` runs them after the other integration tests), TWIN_WORKERS
# at a time: each twin is a lab of its own (its own bridges, addresses and apt proxy), and a twin's
# converge waits on its nodes' SSH, apt and dpkg, so two overlap on this 2-core host.
# Reports: runs/twins/<twin>.json and .log.
TWIN_WORKERS ?= 2
twins: setup
	scripts/run-pytest-dir.sh $(PY) tests/integration/twins $(PYTEST_FLAGS) -n $(TWIN_WORKERS) --dist load

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
	rm -rf /tmp/gpucluster-lock && "$$(scripts/find-python.sh)" -m venv /tmp/gpucluster-lock
	/tmp/gpucluster-lock/bin/pip install -q -r requirements.in
	{ echo "# Pinned: every direct and transitive dependency (from requirements.in; 'make lock' regenerates)."; \
	  /tmp/gpucluster-lock/bin/pip freeze --all | grep -v '^pip=='; } > requirements.txt

clean:
	rm -rf $(VENV) $(TORCH_VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
