# The two set-up commands are `make conformance` and `make test`; each creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JOBS ?= auto
IMPL ?=
IMPL_ARG := $(if $(IMPL),--impl $(IMPL),)

.PHONY: all venv conformance test strict selfcheck bench clean

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
# The selfcheck lane (tests/test_selfcheck.py) is part of it; its per-mutant results become reports/selfcheck.md.
test: $(STAMP)
	rm -rf reports/selfcheck
	$(PY) -m pytest -n $(JOBS) --durations=25 --cov --cov-report=term --cov-report=xml:reports/coverage.xml; \
	status=$$?; $(PY) -m conformance.selfcheck.report; exit $$status

# The strict SPMD lane: the guard rails raise instead of warning.
strict: $(STAMP)
	NEURON_LIBTORCH_SPMD_STRICT=1 $(PY) -m pytest conformance -n $(JOBS) $(IMPL_ARG)

# The selfcheck lane alone: every mutant of conformance/selfcheck/mutants.py must make a conformance
# test fail for its stated reason, and the unmutated reference must pass the same tests;
# writes reports/selfcheck.md (kill rate, and per mutant the contract and the tests that caught it).
selfcheck: $(STAMP)
	rm -rf reports/selfcheck
	SELFCHECK_CONTROL=1 $(PY) -m pytest tests/test_selfcheck.py -n 2 -p no:cacheprovider; \
	status=$$?; $(PY) -m conformance.selfcheck.report; exit $$status

# Benchmarks; figures go to reports/bench/.
bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) reports/reference reports/bench reports/selfcheck reports/selfcheck.md .pytest_cache .hypothesis
