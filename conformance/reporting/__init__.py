"""Reporting: what a run leaves behind for people to read.

The run's summary and compile-time chart, the support matrix and its checked-in documents, the model
lane's report and the review of snapshot changes on a pull request. Built on the harness (and, for the
support documents, on the suite's own adapters); never imports the tests.
"""
