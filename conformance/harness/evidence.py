"""Execution evidence: what a block of work did with the implementation's compiled path.

A parity test that passes proves nothing when the graphs it compared never ran through the
implementation (the backend fell back to eager, or to another backend, and said nothing). So the
suite observes, around each test that needs it, which graphs reached the backend, which the
implementation compiled or served from its cache, how often the compiled path ran, and which graphs
ran outside it and why (:class:`Evidence`). Two sources fill it:

- **generic**, for every implementation (:func:`observe_dynamo`): the graphs Dynamo handed to the
  ``torch.compile`` backend, counted by wrapping the backend call, and the calls of the callable the
  backend returned, counted by wrapping that callable;
- **reported** by the implementation (``Implementation.evidence``): graphs compiled, served from its
  cache, runs of the compiled path, fallbacks with their reasons. ``None`` where not reported.

:meth:`Evidence.shortfall` turns that into a verdict: ``None`` when the compiled path carried the
work, else the one-line reason the plugin reports as ``fell back: <reason>``.

The generic observer wraps the two ``torch.compile`` backend wrappers of ``torch/__init__.py``
(``_TorchCompileWrapper`` for every backend but Inductor, ``_TorchCompileInductorWrapper`` for
Inductor) while an observation is open; this is the only place the suite touches a private name of
torch for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any, Callable, Iterable, Iterator

_MAX_REASONS = 3


@dataclasses.dataclass
class Evidence:
    """What one block of work did with the implementation's compiled path.

    ``graphs``: graphs Dynamo handed to the backend (and the backend accepted);
    ``backend_runs``: calls of the callables the backend returned; ``compiled``: graphs the
    implementation compiled; ``cached``: graphs it served from its cache; ``ran``: runs of its
    compiled path; ``fallbacks``: ``{"graph", "reason"}`` for work that ran outside it;
    ``unobserved``: graphs whose callable the generic observer had to leave unwrapped (its runs are
    not counted). A count is ``None`` where neither source observes it.
    """

    graphs: int | None = None
    backend_runs: int | None = None
    compiled: int | None = None
    cached: int | None = None
    ran: int | None = None
    fallbacks: list[dict[str, str]] = dataclasses.field(default_factory=list)
    unobserved: int = 0
    _refresh: Callable[["Evidence"], None] | None = dataclasses.field(default=None, repr=False, compare=False)

    def refresh(self) -> "Evidence":
        """Bring the implementation-reported fields up to date (a probe reads them mid-test)."""
        if self._refresh is not None:
            self._refresh(self)
        return self

    def served(self) -> int | None:
        """Graphs the implementation compiled or served from its cache (``None``: not reported)."""
        if self.compiled is None and self.cached is None:
            return None
        return (self.compiled or 0) + (self.cached or 0)

    def shortfall(self, *, require_compile: bool, require_run: bool = True) -> str | None:
        """``None`` when the compiled path carried the work, else why not, in one line.

        ``require_compile``: the work must have handed at least one graph to the backend (a parity
        test); without it a block that compiled nothing has no shortfall (an API probe that only
        calls a ``torch.compiler`` function). ``require_run=False``: the work runs a copy of what
        the backend returned (saved and loaded back), so the runs of the original prove nothing.
        """
        if self.fallbacks:
            seen: list[str] = []
            for f in self.fallbacks:
                text = f"{f['graph']}: {f['reason']}"
                if text not in seen:
                    seen.append(text)
            more = f" (and {len(seen) - _MAX_REASONS} more)" if len(seen) > _MAX_REASONS else ""
            return "; ".join(seen[:_MAX_REASONS]) + more
        graphs, served = self.graphs or 0, self.served()
        if graphs == 0 and not served:
            return "no graph reached the implementation's backend" if require_compile else None
        if served is not None and served < graphs:
            return (f"Dynamo handed the backend {graphs} graph(s), the implementation compiled or served "
                    f"only {served} (the others ran outside it)")
        if not require_run:
            return None
        if self.ran is not None and self.ran == 0 and (self.backend_runs or 0) > 0:
            return (f"the backend's callables ran {self.backend_runs} time(s), the implementation's compiled "
                    "path never")
        if self.ran is None and graphs and self.backend_runs == 0 and not self.unobserved:
            return "the callable the backend returned never ran"
        return None

    def summary(self) -> str:
        """``2 graphs, 1 compiled, 1 from cache, 3 runs, 0 fallbacks`` (what was observed)."""
        parts = []
        for label, value in (("graphs", self.graphs), ("compiled", self.compiled), ("from cache", self.cached),
                             ("runs", self.ran if self.ran is not None else self.backend_runs)):
            if value is not None:
                parts.append(f"{value} {label}")
        parts.append(f"{len(self.fallbacks)} fallbacks")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Evidence":
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}})


# --- the generic observer ----------------------------------------------------------------------------

_lock = threading.Lock()
_open: list[tuple[Evidence, frozenset[str] | None]] = []
_saved: dict[type, Callable] = {}


def _wrappers() -> list[type]:
    import torch

    return [c for c in (getattr(torch, "_TorchCompileWrapper", None), getattr(torch, "_TorchCompileInductorWrapper", None))
            if c is not None and "__call__" in c.__dict__]


def _counting(fn: Callable, observers: list[Evidence]) -> Callable:
    """``fn`` (what a backend returned) counted at each call in ``observers`` that are still open."""

    def run(*args: Any, **kwargs: Any) -> Any:
        for ev in list(observers):
            if any(ev is e for e, _ in _open):
                ev.backend_runs = (ev.backend_runs or 0) + 1
        return fn(*args, **kwargs)

    # What Dynamo and AOT Autograd look for on a compiled function: the boxed calling convention,
    # and the serializer aot_compile uses.
    for attr in ("_boxed_call", "serialize"):
        if hasattr(fn, attr):
            setattr(run, attr, getattr(fn, attr))
    return run


def _wrappable(fn: Any) -> bool:
    """A callable whose type matters to torch (a ``SerializableCallable`` that ``aot_compile``
    saves) is left as it is; its runs are then not observed."""
    try:
        from torch._dynamo.aot_compile_types import SerializableCallable
    except ImportError:  # an older torch: nothing to preserve
        return True
    return not isinstance(fn, SerializableCallable)


def _observed(call: Callable) -> Callable:
    def backend_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        compiled = call(self, *args, **kwargs)
        name = getattr(self, "compiler_name", None)
        observers = [ev for ev, names in list(_open) if names is None or name in names]
        if not observers:
            return compiled
        for ev in observers:
            ev.graphs = (ev.graphs or 0) + 1
            if not _wrappable(compiled):
                ev.unobserved += 1
        return _counting(compiled, observers) if _wrappable(compiled) else compiled

    backend_call.__wrapped__ = call  # type: ignore[attr-defined]
    return backend_call


@contextlib.contextmanager
def observe_dynamo(evidence: Evidence | None = None, *, backends: Iterable[str] | None = None) -> Iterator[Evidence]:
    """Count, into ``evidence`` (a new one by default), the graphs Dynamo hands a ``torch.compile``
    backend inside the block and the calls of what the backend returned. ``backends``: the backend
    names to count (as passed to ``torch.compile``; a function backend counts under its
    ``__name__``); ``None``: every backend."""
    ev = evidence if evidence is not None else Evidence()
    entry = (ev, None if backends is None else frozenset(backends))
    ev.graphs = ev.graphs or 0
    ev.backend_runs = ev.backend_runs or 0
    with _lock:
        if not _open:
            for cls in _wrappers():
                _saved[cls] = cls.__dict__["__call__"]
                cls.__call__ = _observed(_saved[cls])
        _open.append(entry)
    try:
        yield ev
    finally:
        with _lock:
            _open[:] = [e for e in _open if e is not entry]
            if not _open:
                for cls, call in _saved.items():
                    cls.__call__ = call
                _saved.clear()
