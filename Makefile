# The two set-up commands are `make conformance` and `make test`; each creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JOBS ?= auto
IMPL ?=
IMPL_ARG := $(if $(IMPL),--impl $(IMPL),)

.PHONY: all venv conformance test strict bench clean

all: test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# The suite against an implementation (the reference unless IMPL=package.module:factory);
# writes reports/<impl>/summary.json and summary.md.
conformance: $(STAMP)
	$(PY) -m pytest conformance -n $(JOBS) $(IMPL_ARG)

# Everything CI checks: unit tests and the conformance suite, in parallel, with coverage.
test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --durations=25 --cov --cov-report=term --cov-report=xml:reports/coverage.xml

# The strict SPMD lane: the guard rails raise instead of warning.
strict: $(STAMP)
	NEURON_LIBTORCH_SPMD_STRICT=1 $(PY) -m pytest conformance -n $(JOBS) $(IMPL_ARG)

# Benchmarks; figures go to reports/bench/. REPEAT=N repeats each figure (median and spread);
# BENCH=name limits the run to named benchmarks (pipeline cache parallel_compile spmd).
REPEAT ?= 1
BENCH ?=
bench: $(STAMP)
	$(PY) -m benchmarks --repeat $(REPEAT) $(BENCH)

clean:
	rm -rf $(VENV) reports/reference reports/bench .pytest_cache .hypothesis
