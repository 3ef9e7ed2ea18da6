# Two commands do all the set-up on a fresh machine (see README):
#   make demo   -- creates .venv/, installs rlhooks, runs the simulated training run
#   make test   -- creates .venv/, installs rlhooks with test + verl extras, runs the test suite
#                  (the long checks marked slow are `make test-slow`)
# Both reuse .venv/ when it is up to date with pyproject.toml.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Installed first, on its own: an unpinned torch (pulled in by verl) would bring CUDA packages.
TORCH_SPEC ?= torch==2.13.0
# the verl the test suite runs on: the reviewed one (the [verl] extra allows the next minor for users,
# whose fingerprints decide at start-up; see README "Use with verl")
VERL_SPEC ?= verl[verl-core]==0.9.1

.PHONY: demo test test-slow bench bench-quick bench-learning setup setup-test clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-core: pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[all]"
	touch $@

$(VENV)/.stamp-test: pyproject.toml $(VENV)/.stamp-core
	$(PIP) install --quiet -e ".[test,verl]" "$(TORCH_SPEC)" "$(VERL_SPEC)"
	touch $@

setup: $(VENV)/.stamp-core
setup-test: $(VENV)/.stamp-test

demo: setup
	$(VENV)/bin/rlhooks simulate

# test processes (pytest-xdist); each imports torch and verl, so not one per core on a large machine
TEST_WORKERS ?= 2

test: setup-test
	$(PY) -m pytest -n $(TEST_WORKERS)

# the long checks left out of `make test` (20,000-step soak, end-to-end CLI runs); CI runs them
test-slow: setup-test
	$(PY) -m pytest -m slow

bench: setup-test
	$(PY) -m benchmarks.run_all

bench-quick: setup-test
	$(PY) -m benchmarks.run_all --quick
	$(PY) -m benchmarks.cpu_learning --quick --out runs/bench-cpu-learning-quick

# the simulator's --compare configurations on the real CPU learner (README "Real learning on CPU"):
# writes benchmarks/CPU_LEARNING.md, .json and cpu_learning.png; 23 min measured on 2 cores
bench-learning: setup-test
	$(PY) -m benchmarks.cpu_learning

clean:
	rm -rf $(VENV) runs build *.egg-info
