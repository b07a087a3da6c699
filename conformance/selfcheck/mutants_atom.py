"""Per-statement mutants of seed 004 (ATOM): each breaks exactly one statement of
``conformance/spec/004_atom.toml``, which names it in its ``mutants = [...]``.

Registered with :func:`conformance.selfcheck.mutants._mutant`; ``conformance.selfcheck.mutants``
imports this module at its end, so ``--impl conformance.selfcheck.mutants:<name>`` names them."""

from __future__ import annotations

from conformance.selfcheck.mutants import MUTANTS, _module, _mutant  # noqa: F401

# ... the mutants, each a function under @_mutant(contract, tests, expect) ...

# the factories registered above, for ``from conformance.selfcheck.mutants_atom import *``
__all__ = [name for name, m in MUTANTS.items() if m.module == __name__]
