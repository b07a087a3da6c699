# The two set-up commands are `make conformance` and `make test`; each creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JOBS ?= auto
IMPL ?=
IMPL_ARG := $(if $(IMPL),--impl $(IMPL),)

.PHONY: all venv conformance test strict bench support-docs support-drift clean

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

# Everything CI checks: unit tests and the conformance suite, in parallel, with coverage; then the
# checked-in support matrices against fresh probe runs.
test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --durations=25 --cov --cov-report=term --cov-report=xml:reports/coverage.xml
	$(MAKE) --no-print-directory support-drift

# docs/support/<impl>.md for the reference, inductor, aot_eager and (with the turbine extra)
# turbine_cpu, regenerated from fresh runs of the support probes.
support-docs: $(STAMP)
	$(PY) -m conformance.support_docs -n 2

# The same runs compared with the checked-in matrices: prints the diff and fails on any drift.
support-drift: $(STAMP)
	$(PY) -m conformance.support_docs --check -n 2

# The strict SPMD lane: the guard rails raise instead of warning.
strict: $(STAMP)
	NEURON_LIBTORCH_SPMD_STRICT=1 $(PY) -m pytest conformance -n $(JOBS) $(IMPL_ARG)

# Benchmarks; figures go to reports/bench/.
bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) reports/reference reports/bench .pytest_cache .hypothesis
