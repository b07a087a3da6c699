"""The test modules, one per contract, their fixtures (``conftest``) and the child scripts they run.

The top of the suite, beside the selfcheck: tests use the plugin's session state, the suite's models,
the reporting hooks (support rows, the model report) and the harness; nothing else of the suite
imports them. They talk to an implementation only through the adapter (the ``impl`` fixture), never
by importing it: no module here imports ``reference``.
"""
