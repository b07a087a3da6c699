"""Reporting: what a run leaves behind for people to read.

The run's summary and compile-time chart, the support matrix and the checked-in documents made from
it, the model lane's report and the review of snapshot changes on a pull request. Above the harness
and the adapters (the support documents run the suite's own adapters), beside the models, below the
plugin that calls it; never imports the tests or the reference.
"""
