# The two set-up commands are `make conformance` and `make test`; each creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JOBS ?= auto
IMPL ?=
IMPL_ARG := $(if $(IMPL),--impl $(IMPL),)

.PHONY: all venv conformance test strict bench models optable clean

all: test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,models]'
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

# The whole model lane (make test runs a cheap subset of it); writes reports/<impl>/models.md.
models: $(STAMP)
	CONFORMANCE_MODELS=all $(PY) -m pytest conformance/test_models.py -n $(JOBS) $(IMPL_ARG)

# Regenerate the checked-in op table (reference/lowering/optable.json) from the installed tools.
optable: $(STAMP)
	$(PY) -c "import sys; from reference.lowering.optable import main; sys.exit(main(['--write']))"

# Benchmarks; figures go to reports/bench/.
bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) reports/reference reports/bench .pytest_cache .hypothesis
