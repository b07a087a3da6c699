"""The harness: what runs the suite against an implementation, whatever the tests assert.

The adapter protocol (:mod:`~conformance.harness.implementation`, ``NotSupported``), the evidence an
adapter reports, precision and tolerances, outcomes, expectation files, snapshot extensions, child
processes and the fork server they start from, the SPMD launcher and the torchrun world, scratch
folders and Hypothesis settings. It imports nothing else of the suite: not the tests, not their
models, not the reports, not an implementation.
"""
