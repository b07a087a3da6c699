"""The suite's proof that it catches broken implementations (``make selfcheck``).

:mod:`conformance.selfcheck.mutants` holds deliberately broken variants of the reference, each
breaking one contract point; ``tests/suite/test_selfcheck.py`` runs the conformance tests that should
catch each one and asserts that they fail, for the stated reason.
"""
