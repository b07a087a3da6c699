"""Hypothesis settings for the suite's properties.

The plugin registers two profiles, ``conformance-ci`` (inheriting Hypothesis's built-in ``ci``) and
``conformance-dev`` (inheriting ``default``), both without a deadline. :func:`settings` builds a
test's settings on top of the active one, chosen by ``CONFORMANCE_HYPOTHESIS_PROFILE``, else
``conformance-ci`` when the ``CI`` variable is set, else ``conformance-dev``. Other tests in the
same run keep the profile Hypothesis loaded. The health check on rejected examples
(``filter_too_much``) stays on: properties narrow their inputs with strategies and ``assume``,
and a property that rejects most of what it draws fails rather than testing little.
"""

from __future__ import annotations

import hypothesis

from conformance.harness import env


def profile_name() -> str:
    chosen = env.hypothesis_profile()
    if chosen:
        return chosen
    return "conformance-ci" if env.on_ci() else "conformance-dev"


def settings(**overrides) -> hypothesis.settings:
    """``hypothesis.settings`` for a conformance property: the active conformance profile, then
    ``overrides`` (e.g. ``max_examples``)."""
    return hypothesis.settings(parent=hypothesis.settings.get_profile(profile_name()), **overrides)
