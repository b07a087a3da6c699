"""The op lane's engine: one verdict per (OpInfo entry, dtype), from real compiles through the adapter.

torch's OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``) describes
every public op with sample inputs per dtype and, for some, the tolerances its own tests use. For one
entry and one dtype, :func:`run_op` wraps the entry's function in a one-op Python function,
compiles it through the adapter's ``compile`` (one ``torch.compile`` per entry and dtype, so the
samples that share shapes and constant arguments share a compile through Dynamo's guards, and the
implementation's own caches serve a repeated run), calls it on the first samples, compares each
result with eager and reads the execution evidence. The verdict is one of :data:`VERDICTS`.

Importing ``op_db`` costs seconds and runs ``torch.backends.disable_global_flags()`` (a setting of
torch's own test harness that makes a later ``torch.backends.<x>.<flag> = ...`` raise);
:func:`op_db` imports it on first use and restores the flag, so the suite's other tests in the same
worker see torch as they would without the lane.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import signal
import threading
from typing import Any, Callable, Iterator, Sequence

from conformance.harness.evidence import observe
from conformance.harness.implementation import Implementation, NotSupported, forced_graph_break
from conformance.harness.not_supported import asked_by_the_suite

MATCHES = "matches"
GRAPH_BREAK = "graph break"
#: A graph break that comes neither from a rule the implementation declares
#: (``forced_graph_breaks()["gb_type"]``) nor from one of Dynamo's own, named reasons.
UNDECLARED_BREAK = "undeclared graph break"
FELL_BACK = "fell back"
WRONG = "wrong"
ERROR = "error"
NOT_SUPPORTED = "not supported"
#: Every verdict, in the order the table lists its rows (the ones a team acts on first).
VERDICTS = (WRONG, ERROR, UNDECLARED_BREAK, FELL_BACK, GRAPH_BREAK, NOT_SUPPORTED, MATCHES)

#: The detail of a row whose run ended the process (no verdict came back).
CRASHED = "the process running the row died (a crash such as a segmentation fault; no exception to report)"

#: The dtypes the lane runs, where the entry supports them on the CPU.
DTYPES = ("float32", "float16", "bfloat16", "int64", "bool")

#: Samples compared per (entry, dtype): the first ones OpInfo yields. Every distinct shape or
#: constant argument is another compile (about half a second each through the reference's
#: iree-compile), so the lane bounds them; the table states the number.
MAX_SAMPLES = 3


#: How long one row may run (seconds of wall time: sample generation, the compiles, the calls). A
#: row takes 1 to 30 s on a loaded 2-core machine (Inductor's C++ compiles the longest); the bound is
#: for a row that never ends (a ``masked.*`` row once hung its worker), so it is generous.
ROW_TIMEOUT_S = 300.0
#: Past the bound, how long the row has to unwind (the soft stop below) before the process is ended.
ROW_TIMEOUT_GRACE_S = 30.0


#: Entries whose result is uninitialized memory: compared by structure, shape and dtype only (two
#: eager calls may return the same garbage, so the random-op check below cannot tell).
UNDEFINED_VALUES = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})


#: Entries that return indices into their input whose order among equal elements torch leaves
#: unspecified (an unstable sort; ``stable=True`` makes it specified, and is then compared exactly):
#: indices that differ from eager's only among equal elements are right (see :func:`ties_reordered`).
TIE_ORDER_FREE = frozenset({"sort", "argsort", "topk"})


class RowTimedOut(BaseException):
    """A row ran past its bound. A ``BaseException`` (as ``KeyboardInterrupt`` is), so that no
    ``except Exception`` on the way out (the lane's own "eager rejects this sample", an
    implementation's error handling, Dynamo's) can turn it into another verdict."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the row ran past its bound of {seconds:g} s and was stopped")
        self.seconds = seconds


def timed_out(entry: str, dtype: str, seconds: float, *, ended_process: bool = False) -> "Verdict":
    """The *error* row of a row stopped at its bound."""
    how = ("the row did not unwind within the grace period, so the process running it was ended"
           if ended_process else "the row was stopped and the process went on")
    return Verdict(entry, dtype, ERROR, f"RowTimedOut: ran past the row bound of {seconds:g} s ({how})")


@contextlib.contextmanager
def row_deadline(seconds: float | None, *, grace: float = ROW_TIMEOUT_GRACE_S,
                 on_hard_expiry: Callable[[], None] | None = None) -> Iterator[None]:
    """Bound the block to ``seconds`` of wall time (``None`` or 0: no bound).

    Two stops, because a hang may be in Python or in native code. The soft stop, a ``SIGALRM``
    timer (only in the main thread, where Python runs signal handlers), raises
    :class:`RowTimedOut` inside the block at the next Python bytecode, which also interrupts a
    wait on a child process (iree-compile) and lets every ``with`` unwind. The hard stop, a timer
    thread, fires ``grace`` seconds later if the block still has not ended (a loop in a C
    extension never returns to Python): it calls ``on_hard_expiry`` (which records the row's
    verdict) and ends the process with ``os._exit``; under pytest-xdist the worker is replaced and
    the lane goes on, the row recorded as the timeout (or, without a callback, as a crash)."""
    if not seconds or seconds <= 0:
        yield
        return
    soft = threading.current_thread() is threading.main_thread()
    done = threading.Event()

    def hard() -> None:
        if done.wait(seconds + grace):
            return
        try:
            if on_hard_expiry is not None:
                on_hard_expiry()
        finally:
            os._exit(70)  # EX_SOFTWARE: the row would not stop; the worker goes, the lane goes on

    def alarm(_signum: int, _frame: Any) -> None:
        raise RowTimedOut(seconds)

    watchdog = threading.Thread(target=hard, name="op-row-deadline", daemon=True)
    previous = signal.signal(signal.SIGALRM, alarm) if soft else None
    if soft:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    watchdog.start()
    try:
        yield
    finally:
        done.set()
        if soft:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class OpLaneUnavailable(RuntimeError):
    """torch's OpInfo database cannot be imported here."""


@functools.lru_cache(maxsize=1)
def op_db() -> tuple[Any, ...]:
    """torch's OpInfo entries (imported on first use; see the module doc for the flag it restores)."""
    import torch

    flag = "__allow_nonbracketed_mutation_flag"  # the module global disable_global_flags() clears
    saved = getattr(torch.backends, flag, True)
    try:
        from torch.testing._internal.common_methods_invocations import op_db as db
    except ImportError as exc:  # expecttest is what torch's test helpers need beyond torch
        raise OpLaneUnavailable(
            f"cannot import torch's OpInfo database ({type(exc).__name__}: {exc}); "
            "install the suite's dependencies (pip install expecttest)"
        ) from exc
    finally:
        setattr(torch.backends, flag, saved)
    return tuple(db)


def entry_id(opinfo: Any) -> str:
    """``name`` or ``name.variant`` (OpInfo's ``variant_test_name``), unique in ``op_db``."""
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


def entries() -> dict[str, Any]:
    """The OpInfo entries by :func:`entry_id`, in ``op_db`` order."""
    return {entry_id(o): o for o in op_db()}


def cpu_dtypes(opinfo: Any) -> list[str]:
    """Of :data:`DTYPES`, those the entry declares for the CPU."""
    supported = {str(d).removeprefix("torch.") for d in opinfo.supported_dtypes("cpu")}
    return [d for d in DTYPES if d in supported]


def seed_for(entry: str, dtype: str) -> int:
    """A seed that depends on the row only (not on the order rows run in, nor on the worker)."""
    return int.from_bytes(hashlib.sha256(f"{entry}/{dtype}".encode()).digest()[:4], "little")


@dataclasses.dataclass
class Verdict:
    """One row of the table. ``detail``: the reason (break rule, fallback, exception, max error);
    ``sample``: the sample it concerns; ``samples``: samples compared; ``tolerance``: (rtol, atol)
    and where it came from; ``ran``: what the suite's observer saw the compiled calls run
    (:meth:`~conformance.harness.evidence.Evidence.kernels`: no ATen compute kernel, or which ops ran
    as ATen kernels)."""

    entry: str
    dtype: str
    verdict: str
    detail: str = ""
    sample: str = ""
    samples: int = 0
    tolerance: str = ""
    ran: str = ""
    evidence: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- tolerances -------------------------------------------------------------------------------------


def declared_tolerance(opinfo: Any, dtype: Any) -> tuple[float, float] | None:
    """The loosest (rtol, atol) the entry's own decorators declare for ``dtype`` on the CPU
    (``toleranceOverride`` in a ``DecorateInfo``), or ``None``."""
    from torch.testing._internal.common_device_type import toleranceOverride

    found: tuple[float, float] | None = None
    for info in getattr(opinfo, "decorators", ()) or ():
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        if getattr(info, "dtypes", None) is not None and dtype not in info.dtypes:
            continue
        for deco in getattr(info, "decorators", ()) or ():
            if isinstance(deco, toleranceOverride) and dtype in deco.d:
                tol = deco.d[dtype]
                found = (max(tol.rtol, found[0]), max(tol.atol, found[1])) if found else (tol.rtol, tol.atol)
    return found


def tolerance_for(opinfo: Any, dtype: Any) -> tuple[float, float, str]:
    """(rtol, atol, source): the entry's declared tolerance, else the suite's for the dtype under
    the implementation's declared precision (conformance/harness/tolerances.py; integers and
    bools exact)."""
    from conformance.harness.tolerances import tolerance

    declared = declared_tolerance(opinfo, dtype)
    if declared is not None:
        return declared[0], declared[1], "OpInfo"
    rtol, atol = tolerance(dtype)
    return rtol, atol, "suite"


# --- comparing ----------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe(v) for v in value[:6]) + (", ..." if len(value) > 6 else "")
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_sample(sample: Any) -> str:
    """``input=float32[3, 4] args=(2,) kwargs={'dim': 1}``: enough to find the sample again."""
    parts = [f"input={_describe(sample.input)}"]
    if sample.args:
        parts.append(f"args={_describe(tuple(sample.args))}")
    if sample.kwargs:
        parts.append("kwargs={" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in sample.kwargs.items()) + "}")
    return " ".join(parts)


def _sort_dim(entry: str, sample: Any) -> int | None:
    """The dimension a sort/argsort/topk sample orders along, or ``None`` when its order is
    specified (``stable=True``) or it has no dimension to gather along."""
    args, kwargs = tuple(sample.args), dict(sample.kwargs)
    if kwargs.get("stable") or not hasattr(sample.input, "dim") or sample.input.dim() == 0:
        return None
    position = 1 if entry == "topk" else 0  # topk(input, k, dim, ...); sort/argsort(input, dim, ...)
    dim = args[position] if len(args) > position and not isinstance(args[position], bool) else kwargs.get("dim", -1)
    return int(dim)


def ties_reordered(entry: str, sample: Any, actual: Any, expected: Any) -> bool:
    """Whether ``actual`` differs from eager's ``expected`` only in the order of equal elements, for
    the entries of :data:`TIE_ORDER_FREE`: the values (sort, topk) are equal, and the indices pick
    from the input exactly the values eager's indices pick, each position of the input at most once
    along the dimension (so they are a permutation of a sort's positions, or distinct for topk)."""
    import torch

    dim = _sort_dim(entry, sample) if entry in TIE_ORDER_FREE else None
    if dim is None:
        return False
    got = actual if isinstance(actual, (tuple, list)) else (actual,)
    want = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(got) != len(want) or not all(isinstance(t, torch.Tensor) for t in (*got, *want)):
        return False
    if any(a.shape != e.shape or a.dtype != e.dtype for a, e in zip(got, want)):
        return False
    *values, (a_idx, e_idx) = [(a.detach().cpu(), e.detach().cpu()) for a, e in zip(got, want)]
    if a_idx.dtype != torch.int64 or any(not torch.equal(a, e) for a, e in values):
        return False
    x = sample.input.detach().cpu()
    if a_idx.numel() and (a_idx.min() < 0 or a_idx.max() >= x.shape[dim]):
        return False
    picked, wanted = torch.gather(x, dim, a_idx), torch.gather(x, dim, e_idx)
    same = picked == wanted
    if picked.is_floating_point():
        same |= picked.isnan() & wanted.isnan()
    if not bool(same.all()):
        return False
    ordered = a_idx.sort(dim=dim).values
    return bool((ordered.diff(dim=dim) != 0).all()) if ordered.shape[dim] > 1 else True


def mismatch(actual: Any, expected: Any, rtol: float, atol: float, *, values: bool = True) -> str | None:
    """Why ``actual`` differs from ``expected`` (structure, shape, dtype or values past the
    tolerance, with the max absolute error), or ``None``.

    The tolerance is the row's, which follows its input dtype; a floating result of an exact row
    (``cos`` of an int64 tensor is float32) is held to the suite's tolerance for the result's
    dtype instead: comparing it exactly would call one ulp of float rounding wrong."""
    import torch
    from torch.utils import _pytree as pytree

    from conformance.harness.tolerances import tolerance as suite_tolerance

    got, got_spec = pytree.tree_flatten(actual)
    want, want_spec = pytree.tree_flatten(expected)
    if got_spec != want_spec:
        return f"structure {got_spec} != eager's {want_spec}"
    for index, (a, e) in enumerate(zip(got, want)):
        where = f"output {index}: " if len(want) > 1 else ""
        if not isinstance(e, torch.Tensor):
            if isinstance(e, float) and isinstance(a, float) and (math.isclose(a, e, rel_tol=rtol, abs_tol=atol) or (a != a and e != e)):
                continue
            if a != e:
                return f"{where}{a!r} != eager's {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"{where}{type(a).__name__} where eager returns a tensor"
        if a.shape != e.shape:
            return f"{where}shape {list(a.shape)} != eager's {list(e.shape)}"
        if a.dtype != e.dtype:
            return f"{where}dtype {str(a.dtype).removeprefix('torch.')} != eager's {str(e.dtype).removeprefix('torch.')}"
        if a.layout != e.layout:
            return f"{where}layout {a.layout} != eager's {e.layout}"
        if not values or e.numel() == 0:
            continue
        a, e = a.detach().cpu(), e.detach().cpu()
        if e.layout != torch.strided:  # sparse: its values, as dense tensors
            a, e = a.to_dense(), e.to_dense()
        if e.is_complex():
            a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
        if e.dtype == torch.bool or not (e.is_floating_point() or e.is_complex()):
            differs = a != e
            if bool(differs.any()):
                wide = (a.to(torch.float64) - e.to(torch.float64)).abs().max().item()
                return f"{where}{int(differs.sum())} of {e.numel()} elements differ (max abs error {wide:.4g}, exact compare)"
            continue
        r_tol, a_tol = (rtol, atol) if (rtol or atol) else suite_tolerance(e.dtype)
        a64, e64 = a.to(torch.float64), e.to(torch.float64)
        close = torch.isclose(a64, e64, rtol=r_tol, atol=a_tol, equal_nan=True)
        if not bool(close.all()):
            err = (a64 - e64).abs()
            err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
            return (f"{where}{int((~close).sum())} of {e.numel()} elements differ: max abs error "
                    f"{err.max().item():.4g} (rtol {r_tol:g}, atol {a_tol:g})")
    return None


# --- running one row --------------------------------------------------------------------------------


def samples_for(opinfo: Any, dtype: Any, seed: int, limit: int = MAX_SAMPLES) -> list[Any]:
    """The first ``limit`` CPU samples of the entry for ``dtype``, made under ``seed``."""
    import itertools

    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return list(itertools.islice(opinfo.sample_inputs("cpu", dtype, requires_grad=False), limit))


def _clone(value: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


def _call(fn: Callable, sample: Any, seed: int) -> Any:
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return fn(_clone(sample.input), *_clone(tuple(sample.args)), **_clone(dict(sample.kwargs)))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line[:300]}" if line else type(exc).__name__


def _graph_breaks() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


@functools.lru_cache(maxsize=1)
def _dynamo_reasons() -> tuple[frozenset[str], tuple[Any, ...]]:
    """The diagnostic types of Dynamo's own graph breaks (torch's graph-break registry): exact
    names, and patterns for the few with a placeholder in them."""
    import torch._dynamo

    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    try:
        with open(path, encoding="utf-8") as f:
            registry = json.load(f)
    except OSError:  # a torch without the registry: no break can be told to be Dynamo's own
        return frozenset(), ()
    names = {e["Gb_type"] for entries in registry.values() for e in entries if "Gb_type" in e}
    exact = frozenset(n for n in names if "{" not in n)
    patterns = tuple(re.compile(re.sub(r"\\\{[^}]*\\\}", ".*", re.escape(n)) + r"\Z") for n in names if "{" in n)
    return exact, patterns


def break_type(reason: str) -> str:
    """The diagnostic type of a graph-break reason as Dynamo counts it (the text before its
    ``Explanation:``)."""
    return " ".join(reason.split("Explanation:", 1)[0].split())


def undeclared_breaks(reasons: Sequence[str], declared: str | None) -> list[str]:
    """Of the graph-break ``reasons``, those that come neither from the implementation's declared
    rule (its ``gb_type``) nor from one of Dynamo's own reasons."""
    exact, patterns = _dynamo_reasons()
    out = []
    for reason in reasons:
        kind = break_type(reason)
        if kind == declared or kind in exact or any(p.match(kind) for p in patterns):
            continue
        out.append(reason)
    return out


def _declared_gb_type(impl: Implementation) -> str | None:
    try:
        with asked_by_the_suite():
            return str(forced_graph_break(impl, "gb_type"))
    except NotSupported:
        return None


def one_op(op: Callable) -> Callable:
    """The function the lane compiles: a call of the entry's op and nothing else."""

    def op_under_test(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    return op_under_test


def run_op(impl: Implementation, opinfo: Any, dtype_name: str, *, limit: int = MAX_SAMPLES, edges: bool = False) -> Verdict:
    """Compile the entry's op for ``dtype_name`` through ``impl.compile`` and give its verdict.
    ``edges``: the samples' tensors re-drawn at the edges of the dtype (the op lane's edge variant,
    :func:`conformance.harness.edges.edge_samples`).

    Raises :class:`NotSupported` when the adapter does (the row is then *not supported*)."""
    import torch

    dtype = getattr(torch, dtype_name)
    entry = entry_id(opinfo)
    seed = seed_for(entry, dtype_name)
    rtol, atol, source = tolerance_for(opinfo, dtype)
    row = Verdict(entry, dtype_name, MATCHES, tolerance=f"rtol {rtol:g}, atol {atol:g} ({source})")
    samples = samples_for(opinfo, dtype, seed, limit)
    if edges and samples:
        from conformance.harness.edges import edge_samples

        samples = edge_samples(samples, dtype_name, seed)
        if not samples:
            row.verdict, row.detail = NOT_SUPPORTED, f"no edge values for {dtype_name}"
            return row
    if not samples:
        row.verdict, row.detail = NOT_SUPPORTED, "OpInfo has no CPU sample for this dtype"
        return row
    impl.reset()
    compiled = impl.compile(one_op(opinfo.op))
    breaks_before = _graph_breaks()
    wrong: tuple[str, str] | None = None
    import torch._dynamo.config as dynamo_config

    with observe(impl) as ev, dynamo_config.patch(recompile_limit=max(8, 2 * limit), accumulated_recompile_limit=4096):
        for index, sample in enumerate(samples):
            where = f"sample {index}: {describe_sample(sample)}"
            try:
                expected = _call(opinfo.op, sample, seed + index)
            except Exception as exc:  # noqa: BLE001 - eager itself rejects the sample: nothing to compare
                row.samples = index
                if index == 0:
                    row.verdict, row.detail, row.sample = NOT_SUPPORTED, f"eager raises on the sample: {first_line(exc)}", where
                    return row
                break
            # a random op gives another result on each call: compare its structure, not its values
            random = opinfo.name in UNDEFINED_VALUES or (
                mismatch(_call(opinfo.op, sample, seed + index + 1), expected, rtol, atol) is not None)
            try:
                actual = _call(compiled, sample, seed + index)
            except NotSupported:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever the implementation raises is the verdict
                row.verdict, row.detail, row.sample, row.samples = ERROR, first_line(exc), where, index + 1
                break
            row.samples = index + 1
            why = mismatch(actual, expected, rtol, atol, values=not random)
            if why is not None and ties_reordered(entry, sample, actual, expected):
                why = None  # equal elements in another order, where torch leaves it unspecified
            if why is not None and wrong is None:
                wrong = (why, where)
    row.evidence = ev.refresh().as_dict()
    row.ran = ev.kernels()
    if row.verdict == ERROR:
        return row
    new_breaks = [k for k, v in _graph_breaks().items() if v > breaks_before.get(k, 0)]
    # every sample counts: a graph that reached the backend and ran eagerly in any call is a
    # fallback, break or no break (a break only moves the op out of the graph)
    short = ev.shortfall(require_compile=not new_breaks)
    undeclared = undeclared_breaks(new_breaks, _declared_gb_type(impl)) if new_breaks else []
    if wrong is not None:
        row.verdict, (row.detail, row.sample) = WRONG, wrong
    elif short is not None:
        row.verdict, row.detail = FELL_BACK, short[:300]
    elif undeclared:
        rule = " ".join(undeclared[0].split())
        row.verdict, row.detail = UNDECLARED_BREAK, ("from no rule the implementation declares "
                                                     f"(forced_graph_breaks()['gb_type']) nor Dynamo's own: {rule}")[:300]
    elif new_breaks:
        rule = " ".join(new_breaks[0].split())
        row.verdict, row.detail = GRAPH_BREAK, rule[:300]
    return row


def in_part(entry: str, dtype: str, part: tuple[int, int]) -> bool:
    """Whether the row is in part ``K`` of ``(K, N)``: the parts split the rows by a hash of the
    row, so the ``N`` parts together hold every row once."""
    k, n = part
    return seed_for(entry, dtype) % n == k


def iter_rows(names: Sequence[str] | None = None) -> Iterator[tuple[str, str]]:
    """Every (entry, dtype) row the lane runs: each entry's CPU dtypes of :data:`DTYPES`."""
    table = entries()
    for name in names if names is not None else table:
        for dtype in cpu_dtypes(table[name]):
            yield name, dtype
