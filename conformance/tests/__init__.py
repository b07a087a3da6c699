"""The test modules, one per contract, their fixtures (``conftest``) and the child scripts they run.

The top of the suite: tests use the harness, the suite's models and the reporting hooks (support
rows, the model report); nothing below imports them. Tests talk to an implementation only through the
adapter (``impl``), never by importing it.
"""
