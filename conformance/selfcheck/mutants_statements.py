"""Per-statement mutants of seeds 000 to 003: each breaks exactly one statement of the catalogue
(``conformance/spec/00[0-3]_*.toml``), which names it in its ``mutants = [...]``; its tests are
tests that cite that statement.

Registered with :func:`conformance.selfcheck.mutants._mutant`; ``conformance.selfcheck.mutants``
imports this module at its end, so ``--impl conformance.selfcheck.mutants:<name>`` names them.
Like every mutant, a patch here runs only when its factory is called, never at import."""

from __future__ import annotations

from conformance.selfcheck.mutants import MUTANTS, _module, _mutant  # noqa: F401
