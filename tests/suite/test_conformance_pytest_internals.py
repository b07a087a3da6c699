"""conformance/harness/pytest_internals.py: the pytest internals the plugin uses, behind a version
guard. The plugin's behaviour with them (skips at the test's location, one report for a failed
shared fixture) is tested end to end in tests/suite/test_conformance_plugin.py."""

from __future__ import annotations

import pytest

from conformance.harness import pytest_internals


@pytest.mark.parametrize("version, ok", [("8.0.0", True), ("9.1.1", True), ("9.2.0", False), ("9.2.0.dev3", False),
                                         ("7.4.4", False), ("10.0", False)])
def test_the_guard_knows_the_range(version, ok):
    assert pytest_internals.supported(version) is ok


def test_the_running_pytest_is_in_the_range():
    assert pytest_internals.supported(), f"pytest {pytest.__version__}: pyproject pins pytest>=8,<9.2"


def _skip() -> BaseException:
    try:
        pytest.skip("why")
    except pytest.skip.Exception as skip:
        return skip
    raise AssertionError("pytest.skip returned")


class _FixtureDef:
    def __init__(self, cached):
        self.cached_result = cached

    def cache_key(self, request):
        return ("key of", request)


def test_in_range_the_skip_moves_to_the_item_and_replaces_the_cache():
    skip = _skip()
    fixturedef = _FixtureDef((None, "k", (RuntimeError("x"), None)))  # what pytest cached for a failure
    pytest_internals.cache_skip(fixturedef, skip)
    assert skip._use_item_location is True
    assert fixturedef.cached_result[:2] == (None, "k") and fixturedef.cached_result[2][0] is skip
    fixturedef = _FixtureDef(None)
    pytest_internals.cache_skip(fixturedef, skip, request="req")
    assert fixturedef.cached_result[1] == ("key of", "req")


def test_out_of_range_nothing_is_touched_and_it_warns_once(monkeypatch):
    monkeypatch.setattr(pytest, "__version__", "9.2.0")
    monkeypatch.setattr(pytest_internals, "_WARNED", [])
    skip, fixturedef = _skip(), _FixtureDef(None)
    with pytest.warns(pytest.PytestWarning, match=r"pytest 9\.2\.0 is outside 8\.0 to 9\.2"):
        pytest_internals.cache_skip(fixturedef, skip, request="req")
    assert not getattr(skip, "_use_item_location", False) and fixturedef.cached_result is None
    assert pytest_internals._WARNED == [True]
