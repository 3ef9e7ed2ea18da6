# Two commands do all the set-up on a fresh machine (see README):
#   make demo   -- creates .venv/, installs rlhooks, runs the simulated training run
#   make test   -- creates .venv/, installs rlhooks with test + verl extras, runs the test suite
#                  (the long checks marked slow are `make test-slow`)
#   make docs   -- regenerates the reference pages from the code, builds the site strictly (build/site/)
#   make docs-serve -- serves the site with live reload on http://127.0.0.1:8000
# All reuse .venv/ when it is up to date with pyproject.toml.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# pip install through uv where it can be had (pip's configuration passed over; pip itself otherwise)
PIP_INSTALL := $(PY) scripts/pip_install.py
# Installed first, on its own: an unpinned torch (pulled in by verl) would bring CUDA packages.
TORCH_SPEC ?= torch==2.13.0
# the verl the test suite runs on: the reviewed one (the [verl] extra allows the next minor for users,
# whose fingerprints decide at start-up; see docs/how-to/verl.md#install)
VERL_SPEC ?= verl[verl-core]==0.9.1

.PHONY: demo test test-slow bench bench-quick bench-quick-suite bench-learning docs docs-serve setup setup-test setup-docs clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-core: pyproject.toml | $(VENV)/bin/python
	$(PIP_INSTALL) --quiet "$(TORCH_SPEC)"
	$(PIP_INSTALL) --quiet -e ".[all]"
	touch $@

$(VENV)/.stamp-test: pyproject.toml $(VENV)/.stamp-core
	$(PIP_INSTALL) --quiet -e ".[test,verl]" "$(TORCH_SPEC)" "$(VERL_SPEC)"
	touch $@

$(VENV)/.stamp-docs: pyproject.toml $(VENV)/.stamp-core
	$(PIP_INSTALL) --quiet -e ".[docs]"
	touch $@

setup: $(VENV)/.stamp-core
setup-test: $(VENV)/.stamp-test
setup-docs: $(VENV)/.stamp-docs

demo: setup
	$(VENV)/bin/rlhooks simulate

# test processes (pytest-xdist); each imports torch and verl, so not one per core on a large machine
TEST_WORKERS ?= 2

# The tests and benchmarks start hundreds of Python processes (xdist workers, CLI runs, Ray's workers): with
# bytecode caches (__pycache__/, ignored by git) each compiles rlhooks and pytest's rewritten test modules once,
# not in every process. A machine may set PYTHONDONTWRITEBYTECODE (this one does: ~15 s more a pytest
# worker's collection; docs/DEVELOPMENT.md, "Tenth session"); set empty here, Python writes them.
test test-slow bench bench-quick-suite bench-learning: export PYTHONDONTWRITEBYTECODE :=

test: setup-test
	$(PY) -m pytest -n $(TEST_WORKERS)

# the long checks left out of `make test` (20,000-step soak, end-to-end CLI runs, the V1 runs); CI runs them.
# Two workers, a test file per worker at a time (--dist loadfile: a file's module-scoped V1 runs stay together):
# a V1 run on the CPU learner leaves the cores idle much of its time (waits on Ray actors and polls)
test-slow: setup-test
	$(PY) -m pytest -m slow -n $(TEST_WORKERS) --dist loadfile --durations=25

bench: setup-test
	$(PY) -m benchmarks.run_all

bench-quick: bench-quick-suite
	$(PY) -m benchmarks.cpu_learning --quick --out runs/bench-cpu-learning-quick

# every benchmarks/bench_*.py in quick mode (CI runs this; its V1 smoke run is make bench-learning's, which runs
# the same benchmarks.cpu_learning path for 4 steps)
bench-quick-suite: setup-test
	$(PY) -m benchmarks.run_all --quick

# the simulator's --compare configurations on the real CPU learner, on verl's V1 trainer (dapo and uniform, seeds
# 0-2, 40 steps; docs/how-to/cpu-learner.md): writes benchmarks/CPU_LEARNING.md, .json and docs/img/cpu_learning.png,
# beside the legacy trainer's runs (--trainer legacy); what it costs: docs/DEVELOPMENT.md ("make bench-learning on V1")
# CI passes BENCH_LEARNING_ARGS="--configs dapo --seeds 0 --steps 4 --test-freq 2 --val-max-samples 64 --no-write"
# (its time budget: one shorter V1 run, validated at steps 0, 2 and 4 on 64 prompts; not compared with the legacy
# seeds' 40-step finals)
bench-learning: setup-test
	$(PY) -m benchmarks.cpu_learning $(BENCH_LEARNING_ARGS)

# the reference pages the code is the source of truth for (components, CLI, metrics; hooks.md from
# the hook specs), then the site; --strict: a broken link, anchor or API reference fails the build
docs: setup-docs
	$(PY) docs/gen_reference.py
	$(VENV)/bin/rlhooks hooks > docs/hooks.md
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: setup-docs
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

clean:
	rm -rf $(VENV) runs build *.egg-info
