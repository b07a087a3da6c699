"""The suite's one reader of what a backend warned about: warnings and logging alike."""

from __future__ import annotations

import logging
import warnings

import pytest

from conformance.harness.warnings_given import warnings_given


def test_a_warning_and_a_log_record_at_warning_or_above_are_both_given_and_debug_is_not():
    log = logging.getLogger("some_backend.cache")
    with warnings_given() as given:
        warnings.warn("entry abc refused: bad checksum")
        log.warning("cache dir %s is not writable", "/ro")
        log.error("compile of graph g failed")
        log.info("just chatter")
    assert given == ["cache dir /ro is not writable", "compile of graph g failed", "entry abc refused: bad checksum"]


def test_what_was_given_before_an_exception_is_kept_and_the_handler_is_removed():
    root = logging.getLogger()
    before = list(root.handlers)
    with pytest.raises(RuntimeError):
        with warnings_given() as given:
            warnings.warn("fell back to eager")
            raise RuntimeError("boom")
    assert given == ["fell back to eager"]
    assert root.handlers == before
