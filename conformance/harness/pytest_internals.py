"""The pytest internals the plugin relies on, here and nowhere else, with the versions they fit.

pytest has no public API for two things the plugin does when a test or a fixture raises
``NotSupported`` (or a shared fixture fails):

- report the skip the plugin raises from its hook at the test's location, not the hook's:
  ``Skipped._use_item_location``, which pytest sets itself for a skip raised inside a fixture;
- make the later tests that share a failed module- or session-scoped fixture get a skip instead of
  the cached error: ``FixtureDef.cached_result`` and ``FixtureDef.cache_key``, the cache pytest's
  own ``pytest_fixture_setup`` writes.

Both are written for pytest 8.0 up to (not including) 9.2, the range pyproject.toml pins. Outside
it :func:`supported` is false and the functions below do nothing but warn once: a skip is then
reported at the plugin's line, and the tests sharing a fixture that raised NotSupported still skip
(the plugin turns the re-raised NotSupported into a skip), but a shared fixture's other failure
repeats in every test that shares it instead of being reported once.
"""

from __future__ import annotations

import warnings

import pytest

#: [from, to) of the pytest versions this module was written for and tested with
VERSIONS = ((8, 0), (9, 2))


def _version(text: str) -> tuple[int, int]:
    parts = (text.split(".") + ["0"])[:2]
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)  # type: ignore[return-value]


def supported(version: str | None = None) -> bool:
    """Whether ``version`` (default: the running pytest) is in :data:`VERSIONS`."""
    low, high = VERSIONS
    return low <= _version(version or pytest.__version__) < high


_WARNED: list[bool] = []


def _usable() -> bool:
    if supported():
        return True
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn(pytest.PytestWarning(
            f"conformance: pytest {pytest.__version__} is outside {VERSIONS[0][0]}.{VERSIONS[0][1]} to "
            f"{VERSIONS[1][0]}.{VERSIONS[1][1]} (excluded), the versions the plugin's use of pytest internals "
            "was written for (conformance/harness/pytest_internals.py); skips are reported at the plugin's "
            "location and a shared fixture's failure is reported by every test that shares it"))
    return False


def at_item_location(skip: BaseException) -> None:
    """Have pytest report ``skip`` (a ``pytest.skip.Exception`` raised by a hook of the plugin) at
    the test's location."""
    if _usable():
        skip._use_item_location = True  # type: ignore[attr-defined]


def cache_skip(fixturedef, skip: BaseException, request=None) -> None:
    """Make ``fixturedef`` hand ``skip`` (a ``pytest.skip.Exception``) to every later test that
    shares it, instead of what it cached. ``request``: the fixture's request, for the cache key when
    nothing is cached yet (the key of what is cached otherwise)."""
    at_item_location(skip)
    if not _usable():
        return
    cached = fixturedef.cached_result
    if request is not None:
        key = fixturedef.cache_key(request)
    else:
        key = cached[1] if cached is not None else None
    fixturedef.cached_result = (None, key, (skip, skip.__traceback__))
