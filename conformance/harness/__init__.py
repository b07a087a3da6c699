"""The harness: what runs the suite against an implementation, whatever the tests assert.

The adapter protocol (:mod:`~conformance.harness.implementation`, ``NotSupported``), the evidence an
adapter reports, precision and tolerances, outcomes, expectation files, snapshot extensions, child
processes and the fork server they start from, the rank launcher, scratch folders, Hypothesis
settings, the environment variables the suite reads (:mod:`~conformance.harness.env`) and the pytest
internals the plugin relies on. The bottom of the suite: it imports nothing else of it (not the
adapters, the models, the reports or the tests) and never the reference; the contracts in
pyproject.toml hold it to that.
"""
