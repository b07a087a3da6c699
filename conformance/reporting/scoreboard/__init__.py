"""The scoreboard: one static page that sets every implementation's results side by side.

``python -m conformance.reporting.scoreboard`` (``make scoreboard``) reads what is already on disk,
runs nothing, and writes ``reports/scoreboard/index.html`` with its script and style sheet beside it
(the page opens from ``file://``, offline):

- the checked-in op tables and support matrices (``docs/support/<impl>-ops.json``, ``<impl>.md``);
- each run's ``reports/<impl>/<lane>/summary.json`` (contracts, failures, seed statements);
- with ``--history DIR``, earlier runs' ``summary.json`` files (each implementation's totals per run).

:mod:`.sources` reads and checks the inputs (a malformed or foreign file is skipped with a warning
naming it); :mod:`.page` shapes them into the page's data and renders it. Every text from a report
reaches the page escaped: the template escapes what it prints, and the script only sets text.
"""
