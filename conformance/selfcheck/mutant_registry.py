"""The selfcheck's mutants as data: what a mutant is, the registry, and how one is applied.

The mutants themselves live in :mod:`conformance.selfcheck.mutants` (the contract mutants) and in
:mod:`conformance.selfcheck.mutants_statements` and :mod:`conformance.selfcheck.mutants_atom` (one
seed statement each); each registers itself here with :func:`_mutant`, and
:mod:`conformance.selfcheck.mutants` re-exports every one as an adapter factory.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Callable

from conformance.adapters import reference_internals
from conformance.adapters.reference import ReferenceImplementation


@dataclass(frozen=True)
class Mutant:
    name: str
    contract: str
    breaks: str  # what the mutant does wrong, in one sentence
    tests: tuple[str, ...]  # node ids of the conformance tests expected to catch it
    # what a catching failure says: one regex, a tuple of alternative regexes, or per test a regex
    # (or tuple of them) keyed by the node id or the end of it; see :meth:`catches`
    expect: "str | tuple[str, ...] | dict[str, str | tuple[str, ...]]"
    patch: Callable[[], None] = field(repr=False, compare=False)
    module: str = ""  # the module that registered it (per-statement mutants live in their own modules)

    def patterns_for(self, test: str) -> tuple[str, ...]:
        """The regexes a failure of ``test`` (a node id, ``path::name[param]`` or JUnit's
        ``package.module::name[param]``) may match to count as a kill."""
        if isinstance(self.expect, str):
            return (self.expect,)
        if isinstance(self.expect, tuple):
            return self.expect
        name = test.rpartition("::")[2]
        out: list[str] = []
        for where, pats in self.expect.items():
            if where == "*" or test.endswith(where) or name == where.rpartition("::")[2]:
                out += [pats] if isinstance(pats, str) else list(pats)
        return tuple(out)

    def catches(self, failed: dict[str, str]) -> list[str]:
        """The failed tests (``{node id: failure text}``) that count as kills: any failure matching
        any of the patterns given for its test. Which of several expected failures a run hits first
        does not matter (a damaged entry may crash the loader or give wrong numbers)."""
        import re

        return sorted(t for t, text in failed.items() if any(re.search(p, text) for p in self.patterns_for(t)))


MUTANTS: dict[str, Mutant] = {}


def _mutant(contract: str, tests: tuple[str, ...] | str, expect):
    """Register the decorated patch as a mutant; the module attribute of its name becomes the
    mutant's adapter factory (``--impl conformance.selfcheck.mutants:<name>``). ``expect`` is one
    regex, a tuple of alternatives, or ``{node id (or its end): regex or tuple}``; a run kills the
    mutant when any failing test matches any pattern given for it (:meth:`Mutant.catches`)."""

    def register(patch: Callable[[], None]) -> Callable[[], "MutantImplementation"]:
        name = patch.__name__
        tests_ = (tests,) if isinstance(tests, str) else tuple(tests)
        if name in MUTANTS:
            raise ValueError(f"mutant {name!r} is registered twice ({MUTANTS[name].module} and {patch.__module__})")
        MUTANTS[name] = Mutant(name, contract, " ".join((patch.__doc__ or "").split()), tests_, expect, patch,
                               patch.__module__)
        def factory() -> "MutantImplementation":
            return make(name)

        factory.__name__ = factory.__qualname__ = name
        factory.__doc__ = MUTANTS[name].breaks
        return factory

    return register


class _Patchable:
    """A module of the reference as a mutant patches it: reading works as on the module; setting a
    name the module does not have is refused, naming it. A mutant that patched a name the
    reference has since moved would otherwise patch nothing and be reported as surviving."""

    __slots__ = ("_target",)

    def __init__(self, target) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, attr: str):
        return getattr(self._target, attr)

    def __setattr__(self, attr: str, value) -> None:
        if not hasattr(self._target, attr) and not hasattr(builtins, attr):  # a global may shadow a builtin
            raise AttributeError(
                f"mutant patch: {self._target.__name__} has no attribute {attr!r} to replace (moved or "
                "renamed in the reference? patch it where it is looked up now)"
            )
        setattr(self._target, attr, value)


def _module(name: str):
    """The reference's module ``name``, for a mutant to patch (:class:`_Patchable`)."""
    return _Patchable(reference_internals.module(name))


class MutantImplementation(ReferenceImplementation):
    #: a mutant is checked against the reference's goldens
    snapshots_of = "reference"

    def __init__(self, mutant: Mutant) -> None:
        super().__init__()
        self.mutant = mutant
        self.name = f"selfcheck-{mutant.name.replace('_', '-')}"


_APPLIED: set[str] = set()


def make(name: str) -> MutantImplementation:
    """Apply mutant ``name`` to this process (once) and return its adapter."""
    mutant = MUTANTS[name]
    if name not in _APPLIED:
        mutant.patch()
        _APPLIED.add(name)
    return MutantImplementation(mutant)
