"""Execution evidence: what a block of work did with the implementation's compiled path.

A parity test that passes proves nothing when the graphs it compared never ran through the
implementation (the backend fell back to eager, or to another backend, and said nothing). So the
suite observes, around each test that needs it, which graphs reached the backend, which the
implementation compiled or served from its cache, how often the compiled path ran, and which graphs
ran outside it and why (:class:`Evidence`). Two sources fill it:

- **observed**, for every implementation and without its help (:func:`observe_dynamo`): the graphs
  Dynamo handed to the ``torch.compile`` backend, counted by wrapping the backend call; the calls of
  the callable the backend returned, counted by wrapping that callable; and, during each such call,
  the ATen kernels that ran (a ``TorchDispatchMode`` that records each kernel dispatched and changes
  nothing else), compared with the compute ops of the graph the backend was handed. A call that ran
  every compute op of its graph as an ATen kernel **ran eagerly**; a call that ran some of them lists
  them (``mm`` run as an ATen kernel inside compiled code is what a library call looks like);
- **reported** by the implementation (``Implementation.evidence``): graphs compiled, served from its
  cache, runs of the compiled path, fallbacks with their reasons. ``None`` where not reported. It adds
  detail; it never replaces the observation (:func:`observe` opens both).

:meth:`Evidence.shortfall` turns that into a verdict: ``None`` when the compiled path carried the
work, else the one-line reason the plugin reports as ``fell back: <reason>``.

The generic observer wraps the two ``torch.compile`` backend wrappers of ``torch/__init__.py``
(``_TorchCompileWrapper`` for every backend but Inductor, ``_TorchCompileInductorWrapper`` for
Inductor) while an observation is open; this is the only place the suite touches a private name of
torch for it. The kernel recorder declares ``ignore_compile_internals``, so Dynamo keeps compiling
under it (a mode without it makes Dynamo skip every frame); what a backend compiles, its guards and
its recompiles are the same with and without the observer (``tests/suite/test_conformance_evidence.py``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import threading
from typing import Any, Callable, Iterable, Iterator

from conformance.harness.not_supported import NotSupported, asked_by_the_suite

_MAX_REASONS = 3
#: How many ops a reason lists before "and N more".
_MAX_OPS = 6


@dataclasses.dataclass
class Evidence:
    """What one block of work did with the implementation's compiled path.

    ``graphs``: graphs Dynamo handed to the backend (and the backend accepted);
    ``backend_runs``: calls of the callables the backend returned; ``compiled``: graphs the
    implementation compiled; ``cached``: graphs it served from its cache; ``ran``: runs of its
    compiled path; ``fallbacks``: ``{"graph", "reason"}`` for work that ran outside it;
    ``unobserved``: graphs whose callable the generic observer had to leave unwrapped (its runs are
    not counted). ``calls``: calls of the backend's callables whose kernels were observed;
    ``eager``: ``{"graph", "ops", "calls"}`` for each graph some call of which ran every compute op
    of the graph as an ATen kernel (it ran eagerly); ``aten``: ``{"graph", "ops", "calls"}`` for each
    graph whose calls ran some compute ops as ATen kernels and compiled the rest. A count is
    ``None`` where neither source observes it.
    """

    graphs: int | None = None
    backend_runs: int | None = None
    compiled: int | None = None
    cached: int | None = None
    ran: int | None = None
    fallbacks: list[dict[str, str]] = dataclasses.field(default_factory=list)
    unobserved: int = 0
    calls: int = 0
    eager: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    aten: list[dict[str, Any]] = dataclasses.field(default_factory=list)
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

    def ran_eagerly(self) -> str | None:
        """``ran eagerly: graph 0/1 (add, mul)`` when some observed call ran every compute op of its
        graph as an ATen kernel, else ``None``."""
        if not self.eager:
            return None
        parts = [f"{e['graph']} ({_ops_text(e['ops'])})" for e in self.eager[:_MAX_REASONS]]
        more = f" (and {len(self.eager) - _MAX_REASONS} more graphs)" if len(self.eager) > _MAX_REASONS else ""
        return "ran eagerly: " + "; ".join(parts) + more

    def kernels(self) -> str:
        """What the observer saw run, in one line: ``ops run as ATen kernels: mm (graph 0/0)``,
        ``no ATen compute kernel ran (2 calls)``, or ``""`` when no call was observed."""
        if not self.calls:
            return ""
        if self.eager or self.aten:
            parts = [f"{_ops_text(e['ops'])} ({e['graph']}, every compute op)" for e in self.eager]
            parts += [f"{_ops_text(e['ops'])} ({e['graph']})" for e in self.aten]
            return "ops run as ATen kernels: " + "; ".join(parts)
        return f"no ATen compute kernel ran ({self.calls} call{'s' if self.calls != 1 else ''})"

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
        eager = self.ran_eagerly()
        if eager is not None and require_run:
            return eager
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
        if self.eager:
            parts.append(f"{len(self.eager)} ran eagerly")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Evidence":
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}})


def _ops_text(ops: list[str]) -> str:
    shown = ", ".join(ops[:_MAX_OPS])
    return shown + (f" and {len(ops) - _MAX_OPS} more" if len(ops) > _MAX_OPS else "")


# --- what ran: ATen kernels ----------------------------------------------------------------------------

#: ATen ops that move, allocate or alias data and compute nothing: a runtime calls them to hand
#: tensors over (its inputs made contiguous, its outputs copied into place), so neither the graph's
#: compute ops nor a call's kernels count them. View ops (``view``, ``as_strided``, ``t``, ...) are
#: left out by their schema.
BOOKKEEPING = frozenset({
    "empty", "empty_strided", "empty_like", "empty_permuted", "new_empty", "new_empty_strided", "detach",
    "alias", "lift", "lift_fresh", "lift_fresh_copy", "resize", "set", "copy", "clone", "_copy_from",
    "_copy_from_and_resize", "_local_scalar_dense", "_has_compatible_shallow_copy_type", "_reshape_alias",
    "_unsafe_view", "contiguous", "record_stream", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_same_size", "_nested_tensor_from_mask_left_aligned",
})


#: Namespaces of ops that read metadata or mark time (``prim::device``, ``profiler::``), never compute.
_NO_COMPUTE_NAMESPACES = frozenset({"prim", "profiler"})


def compute_name(func: Any) -> str | None:
    """The name an ATen (or custom) op is counted under, or ``None`` when it computes nothing
    (a view, or one of :data:`BOOKKEEPING`). In-place and ``out=`` forms count as the op
    (``add_`` and ``add.out`` are ``add``); an op of another namespace keeps it (``mylib::attn``)."""
    namespace = getattr(func, "namespace", "aten")
    name = func._schema.name.split("::", 1)[-1]
    if namespace in _NO_COMPUTE_NAMESPACES:
        return None
    if namespace not in ("aten", "prims"):
        return f"{namespace}::{name}"
    if getattr(func, "is_view", False):
        return None
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return None if name in BOOKKEEPING else name


def _recorder(*, fake: bool = False) -> Any:
    """A dispatch mode that counts every op dispatched under it and runs it unchanged. By default
    it counts only ops on plain tensors (a backend that traces inside the call works on fake or
    functional tensors, which run nothing); ``fake=True`` counts those too (tracing a graph)."""
    return _recorder_class()(fake)


@functools.lru_cache(maxsize=1)
def _recorder_class() -> type:
    """The recorder's class, made on first use (defining it needs torch)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from torch._ops import OpOverload

    class KernelRecorder(TorchDispatchMode):
        #: a higher-order operator (``with_effects`` around an op with side effects, ``cond``, ...)
        #: is handed here too and runs as it is, uncounted: without this a mode that does not know
        #: it makes it raise, and the observer would change what the backend does
        supports_higher_order_operators = True

        def __init__(self, fake: bool) -> None:
            super().__init__()
            self.fake = fake
            self.ops: collections.Counter = collections.Counter()

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True  # Dynamo compiles as it would without the recorder

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if isinstance(func, OpOverload) and (self.fake or not types):
                self.ops[func] += 1
            elif getattr(func, "_name", "") == "with_effects" and len(args) > 1 and isinstance(args[1], OpOverload):
                self.ops[args[1]] += 1  # with_effects(token, op, *args) runs op
            return func(*args, **(kwargs or {}))

    return KernelRecorder


def graph_compute_ops(gm: Any, args: list[Any], *, grad: bool, decompose: str = "") -> frozenset[str] | None:
    """The compute ops (:func:`compute_name`) of the FX graph ``gm`` called with ``args``, traced
    once on fake copies of them. ``decompose``: ``""``, the ops as the graph calls them (what
    ``gm.forward`` runs); ``"aot"``, as AOT Autograd traces them (its own decompositions, e.g.
    ``upsample_trilinear3d`` into indexing); ``"core"``, decomposed to torch's core ATen set.
    ``None`` when the graph cannot be traced (an op without a fake kernel, a data-dependent shape)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    def trace() -> frozenset[str]:
        if decompose:
            from torch._decomp import core_aten_decompositions
            from torch._functorch.aot_autograd import aot_module_simplified

            forward: list[Any] = []

            def keep(graph: Any, example_inputs: Any) -> Any:
                forward.append(graph)
                return graph.forward

            table = core_aten_decompositions() if decompose == "core" else None
            with torch.set_grad_enabled(grad):
                aot_module_simplified(gm, args, fw_compiler=keep, decompositions=table)
            funcs = [n.target for n in forward[0].graph.nodes if n.op == "call_function" and hasattr(n.target, "_schema")]
        else:
            mode = FakeTensorMode(allow_non_fake_inputs=True)
            fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            rec = _recorder(fake=True)
            with mode, rec, torch.set_grad_enabled(grad):
                gm(*fake)
            funcs = list(rec.ops)
        return frozenset(n for n in map(compute_name, funcs) if n is not None)

    try:
        return torch._dynamo.disable(trace)()
    except Exception:  # noqa: BLE001 - the graph cannot run on fake tensors: its ops stay unknown
        return None


class _Graph:
    """What the observer keeps of one graph a backend was handed: its label and, once a call ran
    ATen kernels, its own ops in each form a backend may run them in (traced once each)."""

    FORMS = ("", "aot", "core")

    def __init__(self, gm: Any, label: str, backend: str | None) -> None:
        self.gm, self.label, self.backend = gm, label, backend
        self._ops: dict[str, frozenset[str] | None] = {}

    def ran_all(self, ran: set[str], args: list[Any], grad: bool) -> frozenset[str] | None:
        """The graph's ops, in the first form all of whose ops ``ran`` holds (the call ran them
        all as ATen kernels), else ``None``. The decomposed forms are traced only when the call
        ran ops the graph does not name (a decomposition's sign): a call that ran a subset of the
        graph's own ops (a library ``mm`` inside compiled code) cannot match them."""
        for form in self.FORMS:
            if form not in self._ops:
                self._ops[form] = graph_compute_ops(self.gm, args, grad=grad, decompose=form)
            own = self._ops[form]
            if own and own <= ran:
                return own
            if not form and own is not None and ran <= own:
                return None
        return None


def _note(entries: list[dict[str, Any]], graph: str, ops: Iterable[str]) -> None:
    for e in entries:
        if e["graph"] == graph:
            e["ops"] = sorted(set(e["ops"]) | set(ops))
            e["calls"] += 1
            return
    entries.append({"graph": graph, "ops": sorted(ops), "calls": 1})


def _judge(graph: _Graph, kernels: collections.Counter, args: list[Any], grad: bool,
           observers: list["Evidence"]) -> None:
    ran = {n for n in map(compute_name, kernels) if n is not None}
    for ev in observers:
        ev.calls += 1
    if not ran:
        return
    # a graph without compute ops (views only: a split, a transpose) is never judged eager: its
    # outputs alias its inputs, and any implementation returns them as views
    own = graph.ran_all(ran, args, grad)
    for ev in observers:
        if own is not None:
            _note(ev.eager, graph.label, own)
        else:
            _note(ev.aten, graph.label, ran)


# --- the observer ------------------------------------------------------------------------------------

_lock = threading.Lock()
_open: list[tuple[Evidence, frozenset[str] | None]] = []
_saved: dict[type, Callable] = {}


def _wrappers() -> list[type]:
    import torch

    return [c for c in (getattr(torch, "_TorchCompileWrapper", None), getattr(torch, "_TorchCompileInductorWrapper", None))
            if c is not None and "__call__" in c.__dict__]


def _live(observers: list[Evidence]) -> list[Evidence]:
    return [ev for ev in observers if any(ev is e for e, _ in _open)]


def _counting(fn: Callable, observers: list[Evidence], graph: _Graph) -> Callable:
    """``fn`` (what a backend returned), each call counted and its kernels recorded in
    ``observers`` that are still open."""
    boxed = bool(getattr(fn, "_boxed_call", False))

    def run(*args: Any, **kwargs: Any) -> Any:
        live = _live(observers)
        for ev in live:
            ev.backend_runs = (ev.backend_runs or 0) + 1
        if not live:
            return fn(*args, **kwargs)
        import torch

        # the boxed convention hands over one list the callee may clear: keep the inputs
        inputs = list(args[0]) if boxed and args and isinstance(args[0], list) else list(args)
        grad = torch.is_grad_enabled()
        rec = _recorder()
        try:
            with rec:
                out = fn(*args, **kwargs)
        except Exception as exc:
            # the implementation's own exception, unchanged (its type is part of the contract); the
            # note says where it came from
            exc.add_note(f"raised by the compiled call of {graph.label} that the {graph.backend!r} backend "
                         "returned, while the suite's kernel observer watched it")
            raise
        _judge(graph, rec.ops, inputs, grad, _live(observers))
        return out

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


def _label() -> str:
    """``graph 0/1`` (Dynamo's compile id: frame 0, its second compile), or ``graph`` outside one."""
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - an older torch: no id to give
        compile_id = None
    return f"graph {compile_id}" if compile_id is not None else "graph"


def _observed(call: Callable) -> Callable:
    def backend_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        compiled = call(self, *args, **kwargs)
        name = getattr(self, "compiler_name", None)
        observers: list[Evidence] = []
        for ev, names in list(_open):  # one evidence observed twice (adapter and suite) counts once
            if (names is None or name in names) and not any(ev is o for o in observers):
                observers.append(ev)
        if not observers:
            return compiled
        for ev in observers:
            ev.graphs = (ev.graphs or 0) + 1
            if not _wrappable(compiled):
                ev.unobserved += 1
        if not _wrappable(compiled):
            return compiled
        return _counting(compiled, observers, _Graph(args[0] if args else None, _label(), name))

    backend_call.__wrapped__ = call  # type: ignore[attr-defined]
    return backend_call


@contextlib.contextmanager
def observe_dynamo(evidence: Evidence | None = None, *, backends: Iterable[str] | None = None) -> Iterator[Evidence]:
    """Observe, into ``evidence`` (a new one by default), the graphs Dynamo hands a ``torch.compile``
    backend inside the block, the calls of what the backend returned and the ATen kernels each call
    ran. ``backends``: the backend names to observe (as passed to ``torch.compile``; a function
    backend counts under its ``__name__``); ``None``: every backend. Opening it again on the same
    ``evidence`` counts nothing twice."""
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


def backend_names(impl: Any) -> list[str] | None:
    """The ``torch.compile`` backend names the implementation registers (every seam's), or
    ``None`` (observe every backend) when it provides no backend contract."""
    try:
        with asked_by_the_suite():
            return sorted(set(impl.backend().names().values())) or None
    except (NotSupported, KeyError, AttributeError):
        return None


@contextlib.contextmanager
def observe(impl: Any) -> Iterator[Evidence]:
    """What the suite opens around work it judges: the implementation's own evidence
    (``impl.evidence()``, whatever it reports) with the observer on it, whatever the adapter does.
    An adapter that observes nothing itself still gets the graphs, calls and kernels seen."""
    with impl.evidence() as ev, observe_dynamo(ev, backends=backend_names(impl)):
        yield ev
