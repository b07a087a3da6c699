"""Whether one ATen call lowers, decided on the values it is traced with, and remembered per key.

The checked-in op table (:mod:`reference.lowering.optable`) decides by op name, from a probe on
4x4 float32 inputs. Whether torch-mlir and the compiler take a call depends on more than its name:
the overload, the dtypes, a 0-d or zero-size operand, a constant argument (``any`` over a
dimension, ``conv2d`` with stride (3, 2), ``__rdiv__`` of an int64 tensor). This module decides on
the call itself, after the fact: when a graph fails to lower or to compile, the failure names the
ATen node it stopped at (or, when it names none, every compute node is lowered alone to find it),
and that node is probed:

1. if torch has a decomposition for the op (``torch._decomp``) and the node, decomposed, lowers
   with torch-mlir, the decision is **decompose**: the op's calls with that key are decomposed
   from then on (:func:`learned_decompositions`, added to the compile's decomposition table) and
   the graph is compiled whole again;
2. otherwise the decision is **break**: the call is split out of the compiled graph and runs
   eagerly between compiled graphs (the backend's graph-break rules read :meth:`Decisions.breaks`),
   with a reason that names the op and what stopped it.

A decision's key (:func:`signature`) is the op, the dtype of every tensor operand with its rank
class (``0d``, ``empty`` for a zero-size tensor, else its rank) and every constant argument
(Python numbers, lists of them, dtypes). Decisions are kept in the process (:data:`DECISIONS`)
and on disk beside the HLO cache (``<hlo cache>/lowering-probe/<digest>.json``, one file a
decision, written atomically), keyed with the tool versions, so a warm process and the next one
find them without failing a compile first. Nothing here reads the environment: the seam hands
down the folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import select
import signal
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from reference.cache.key import tool_versions
from reference.core.atomic import write_atomic
from reference.core.errors import LoweringError
from reference.core.torch_compat import OpOverload, OpOverloadPacket, get_decompositions, pytree

log = logging.getLogger(__name__)

DECOMPOSE = "decompose"
BREAK = "break"
#: The folder, inside the HLO cache's, where decisions are kept.
FOLDER = "lowering-probe"
RECORD_VERSION = 1

_NODE_NAMED = re.compile(r"\(node ([A-Za-z_][A-Za-z0-9_]*)")


# --- keys ---------------------------------------------------------------------------------------


def _value_class(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        try:
            sizes = [int(s) for s in value.shape]
        except Exception:  # noqa: BLE001 - symbolic sizes: only the rank is known
            return f"{dtype}[{value.dim()}d]"
        if not sizes:
            return f"{dtype}[0d]"
        if 0 in sizes:
            return f"{dtype}[empty]"
        return f"{dtype}[{len(sizes)}d]"
    if isinstance(value, (list, tuple)):  # a list and a tuple of the same values key alike
        return "[" + ",".join(_value_class(v) for v in value) + "]"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return "sym"
    return type(value).__name__


def signature(args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """The key of a call's values: each tensor as its dtype and rank class, each constant as itself."""
    parts = [_value_class(a) for a in args]
    parts += [f"{k}={_value_class(v)}" for k, v in sorted(kwargs.items())]
    return ", ".join(parts)


def target_name(target: Any) -> str:
    """A stable name for what a graph node or a traced call calls: ``Tensor.sin`` for a method,
    ``aten.addmv.default`` for an op, ``torch.addmv`` / ``_operator.truediv`` for a function."""
    if isinstance(target, str):
        return f"Tensor.{target}"
    if isinstance(target, (OpOverload, OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    name = name.removeprefix("_VariableFunctionsClass.")
    if module in ("torch._C._VariableFunctions", "torch._C._nn", "torch._C._linalg", "torch._C._special",
                  "torch._C._fft"):
        module = "torch"
    return f"{module}.{name}" if module else name


@dataclass(frozen=True)
class Decision:
    """What to do with the calls of ``target`` whose values have ``signature``: ``kind`` is
    :data:`DECOMPOSE` or :data:`BREAK`; ``op`` the ATen op that did not lower; ``reason`` why."""

    kind: str
    target: str
    signature: str
    op: str
    reason: str

    def digest(self, tools: str) -> str:
        text = json.dumps([self.kind, self.target, self.signature, tools])
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _tools() -> str:
    """The tool versions a decision was made with, and the lowering code's own fingerprint (a new
    decomposition can make a call lower that broke before). No import cycle: stablehlo is imported
    here as this module's other uses of the lowering are (``lowers_alone``, the probe), so
    importing the decisions does not import the lowering."""
    from reference.lowering.stablehlo import lowering_fingerprint

    return json.dumps(sorted({**tool_versions(), "lowering": lowering_fingerprint()}.items()))


class Decisions:
    """The process's decisions (see the module doc); one small object, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._break: dict[tuple[str, str], Decision] = {}
        self._break_targets: set[str] = set()
        self._decompose: dict[tuple[str, str], Decision] = {}
        self._loaded: set[str] = set()
        self.probes = 0

    def clear(self) -> None:
        with self._lock:
            self._break.clear()
            self._break_targets.clear()
            self._decompose.clear()
            self._loaded.clear()
            self.probes = 0

    def __bool__(self) -> bool:
        return bool(self._break or self._decompose)

    # -- reading ---------------------------------------------------------------------------------

    def breaks_on(self, target: Any) -> bool:
        """Whether some break decision names ``target`` (cheap: most calls are not looked up further)."""
        return bool(self._break_targets) and target_name(target) in self._break_targets

    def break_for(self, target: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Decision | None:
        """The break decision for a call of ``target`` (as Dynamo traces it) with these values."""
        if not self._break_targets:
            return None
        name = target_name(target)
        if name not in self._break_targets:
            return None
        return self._break.get((name, signature(args, kwargs)))

    def decomposes(self, op: OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        return (str(op), signature(args, kwargs)) in self._decompose

    def decomposed_ops(self) -> list[str]:
        with self._lock:
            return sorted({target for target, _ in self._decompose})

    def all(self) -> list[Decision]:
        with self._lock:
            return [*self._decompose.values(), *self._break.values()]

    # -- writing ---------------------------------------------------------------------------------

    def add(self, decision: Decision, folder: str | None = None) -> bool:
        """Keep ``decision`` (and write it under ``folder``); False when it was known already."""
        table = self._decompose if decision.kind == DECOMPOSE else self._break
        key = (decision.target, decision.signature)
        with self._lock:
            if key in table:
                return False
            table[key] = decision
            if decision.kind == BREAK:
                self._break_targets.add(decision.target)
        if folder is not None:
            tools = _tools()
            record = {"record_version": RECORD_VERSION, "tools": tools, **asdict(decision)}
            try:
                os.makedirs(folder, exist_ok=True)
                write_atomic(os.path.join(folder, f"{decision.digest(tools)}.json"), json.dumps(record, sort_keys=True))
            except OSError as exc:  # a folder that cannot be written costs the memory, never the compile
                log.warning("lowering probe: could not keep the decision on %s in %s: %s", decision.target, folder, exc)
        return True

    def load(self, folder: str) -> int:
        """Read the decisions kept under ``folder`` (once per folder and process) made with the
        installed tools; returns how many were new."""
        with self._lock:
            if folder in self._loaded:
                return 0
            self._loaded.add(folder)
        if not os.path.isdir(folder):
            return 0
        tools, added = _tools(), 0
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    record = json.load(f)
                if record.get("record_version") != RECORD_VERSION or record.get("tools") != tools:
                    continue
                decision = Decision(*(str(record[k]) for k in ("kind", "target", "signature", "op", "reason")))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a record that does not read is ignored (it is only remembered work)
            if decision.kind in (DECOMPOSE, BREAK) and self.add(decision):
                added += 1
        return added


#: The process's decisions.
DECISIONS = Decisions()


def decisions_folder(hlo_folder: str) -> str:
    return os.path.join(hlo_folder, FOLDER)


# --- learned decompositions -----------------------------------------------------------------------


def _torch_decomposition(op: OpOverload) -> Callable | None:
    return get_decompositions([op]).get(op)


def learned_decompositions(decisions: Decisions = DECISIONS) -> dict:
    """``{op: decomposition}`` for every op with a decompose decision; each decomposes only the
    calls whose key was decided (any other call of the op stays as it is)."""
    out = {}
    for name in decisions.decomposed_ops():
        op = _op_by_name(name)
        fn = _torch_decomposition(op) if op is not None else None
        if fn is None:
            continue

        def decompose(*args, _op=op, _fn=fn, **kwargs):
            if decisions.decomposes(_op, args, kwargs):
                return _fn(*args, **kwargs)
            return NotImplemented

        out[op] = decompose
    return out


def _op_by_name(name: str) -> OpOverload | None:
    """``aten.addmv.default`` -> the overload."""
    parts = name.split(".")
    if len(parts) != 3:
        return None
    namespace, packet, overload = parts
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    except AttributeError:
        return None


# --- the probe ----------------------------------------------------------------------------------


def _val(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


def node_values(node: torch.fx.Node) -> tuple[list, dict]:
    """The values (fake tensors, constants) an ATen node is called with."""
    return [_val(a) for a in node.args], {k: _val(v) for k, v in node.kwargs.items()}


def _fresh(value: Any, mode) -> Any:
    if isinstance(value, torch.Tensor):
        with mode:
            return torch.empty_strided(tuple(int(s) for s in value.shape), tuple(int(s) for s in value.stride()),
                                       dtype=value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v, mode) for v in value)
    return value


def lowers_alone(fn: Callable, args: Sequence[Any], kwargs: dict[str, Any], table: dict, *, name: str) -> str | None:
    """Trace ``fn(*args, **kwargs)`` (fake tensors and constants) to ATen with ``table`` and lower it
    with torch-mlir; ``None`` when it lowers, else what stopped it (one line)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from reference.core.torch_compat import FakeTensorMode
    from reference.lowering.stablehlo import lower_to_stablehlo

    mode = FakeTensorMode()
    flat, spec = pytree.tree_flatten((list(args), dict(kwargs)))
    slots = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    try:
        fresh = [_fresh(flat[i], mode) for i in slots]
    except Exception as exc:  # noqa: BLE001 - symbolic sizes: nothing to trace with
        return f"its operands cannot be traced with ({_first_line(exc)})"

    def call(*tensors):
        values = list(flat)
        for i, t in zip(slots, tensors):
            values[i] = t
        a, kw = pytree.tree_unflatten(values, spec)
        return tuple(t for t in pytree.tree_leaves(fn(*a, **kw)) if isinstance(t, torch.Tensor))

    try:
        with mode:
            gm = make_fx(call, decomposition_table=table, tracing_mode="real")(*fresh)
    except Exception as exc:  # noqa: BLE001 - a decomposition that does not trace does not lower
        return f"it could not be traced ({_first_line(exc)})"
    try:
        lower_to_stablehlo(gm, graph_name=f"probe_{re.sub(r'[^A-Za-z0-9_]', '_', name)}")
    except LoweringError as exc:
        return "torch-mlir cannot lower " + (", ".join(exc.ops) or _first_line(exc))
    except Exception as exc:  # noqa: BLE001 - any other failure to lower is a failure to lower
        return f"it does not lower ({_first_line(exc)})"
    return None


#: How long a probe's child may take before it is stopped and the call counts as not decomposable.
#: A probe lowers, compiles and runs one call: seconds; the limit is for a child that hangs.
PROBE_TIMEOUT_S = 180.0


def isolated(fn: Callable[[], Any], *, died: Callable[[int], Any], timeout: float = PROBE_TIMEOUT_S) -> Any:
    """``fn()`` run in a forked child, its (picklable) result sent back; ``died(status)`` when the
    child ends without one or is stopped after ``timeout`` seconds. A probe lowers and compiles
    graphs that failed once: torch-mlir has been seen to end the process on some of them (a
    segmentation fault, LLVM's fatal error on ``shift_left``), and a probe must not take the
    user's process with it. The parent has threads (torch's OpenMP pool, IREE's workers) that a
    fork does not copy: the child computes on its own thread (``torch.set_num_threads(1)``; the
    runtime's threaded driver is replaced in a forked child, :mod:`reference.runtime`), and the
    deadline stops a child that waits anyway."""
    if not hasattr(os, "fork"):
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, leave without running the parent's exit handlers
        code = 1
        try:
            os.close(read)
            torch.set_num_threads(1)  # the parent's OpenMP workers are not in this process
            data = pickle.dumps(fn())
            with os.fdopen(write, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    with os.fdopen(read, "rb", buffering=0) as inp:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([inp], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                log.warning("lowering probe: the child %d gave no answer in %.0f s; stopped", pid, timeout)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return died(-signal.SIGKILL)
            chunk = inp.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    data = b"".join(chunks)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        return died(status)
    return pickle.loads(data)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else type(exc).__name__


def _real(value: Any, g: torch.Generator) -> Any:
    """A real tensor shaped like the fake ``value``: small values (int64 ones stay small and
    non-negative, usable as indices along a dimension of 3 or more)."""
    if isinstance(value, torch.Tensor):
        shape = tuple(int(s) for s in value.shape)
        if value.dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if value.dtype.is_floating_point:
            return torch.randn(shape, generator=g).to(value.dtype)
        return torch.randint(0, 3, shape, generator=g).to(value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_real(v, g) for v in value)
    return value


def probe_decomposition(node: torch.fx.Node, table: dict) -> bool:
    """Whether the ATen ``node``'s op has a torch decomposition under which the call lowers,
    compiles, runs and matches eager (on seeded values shaped like the call's): a decomposition
    that lowers but computes otherwise once compiled (``logcumsumexp``'s read inf) is not taken.
    A call that cannot be checked that way (eager rejects the values, operands in a list) is not
    decomposed either. Probed in a child process (:func:`isolated`)."""
    op = node.target
    fn = _torch_decomposition(op) if isinstance(op, OpOverload) else None
    if fn is None:
        return False
    DECISIONS.probes += 1
    args, kwargs = node_values(node)
    return bool(isolated(lambda: _decomposition_holds(op, fn, args, kwargs, table), died=lambda _status: False))


def _decomposition_holds(op: OpOverload, fn: Callable, args: list, kwargs: dict, table: dict) -> bool:
    from reference.lowering.optable import Prober, Sample

    decomps = {**table, op: fn}
    if lowers_alone(op, args, kwargs, decomps, name=str(op)) is not None:
        return False
    if any(isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v) for v in [*args, *kwargs.values()]):
        return False
    try:
        real = _real(list(args), torch.Generator().manual_seed(0))
        real_kwargs = {k: _real(v, torch.Generator().manual_seed(1)) for k, v in kwargs.items()}
        positions = [i for i, a in enumerate(real) if isinstance(a, torch.Tensor)]

        def call(*tensors):
            values = list(real)
            for i, t in zip(positions, tensors):
                values[i] = t
            return op(*values, **real_kwargs)

        expected = call(*[real[i] for i in positions])
        prober = Prober()
        prober.decomps = decomps
        problem = prober.compile_and_run([Sample(f"decomposed_{op._opname}", call, tuple(real[i] for i in positions),
                                                 tuple(pytree.tree_leaves(expected)))])[0]
    except Exception as exc:  # noqa: BLE001 - a call that cannot be checked is not decomposed
        log.debug("lowering probe: the decomposition of %s could not be checked: %s", op, exc)
        return False
    return problem is None


def failing_nodes(aten_gm: torch.fx.GraphModule, exc: BaseException, table: dict) -> list[tuple[torch.fx.Node, str]]:
    """The ATen nodes a failure of ``aten_gm`` stopped at, each with what stopped it: the nodes the
    failure's text names, else every compute node that does not lower alone (a failure that
    names no op, such as an allocation failure inside torch-mlir)."""
    by_name = {n.name: n for n in aten_gm.graph.nodes if n.op == "call_function"}
    why = _first_line(exc).split("\n", 1)[0]
    named = [by_name[m] for m in dict.fromkeys(_NODE_NAMED.findall(str(exc))) if m in by_name]
    if named:
        return [(n, why) for n in named if isinstance(n.target, OpOverload)]
    found = []
    for node in by_name.values():
        if not isinstance(node.target, OpOverload) or node.target.namespace not in ("aten", "prims"):
            continue
        DECISIONS.probes += 1
        args, kwargs = node_values(node)
        problem = isolated(lambda: lowers_alone(node.target, args, kwargs, table, name=node.name),
                           died=lambda status: f"lowering it alone ended the process (wait status {status})")
        if problem is not None:
            found.append((node, problem))
    return found


def sources(node: torch.fx.Node, names: Iterable[str]) -> list[str]:
    """The names, among ``names`` (the nodes of the graph Dynamo made), of the nodes an ATen
    ``node`` was traced from (its ``from_node`` provenance, followed back)."""
    wanted = set(names)
    out: list[str] = []
    stack = list(node.meta.get("from_node") or [])
    while stack:
        source = stack.pop(0)
        name = getattr(source, "name", None)
        if name in wanted and name not in out:
            out.append(name)
            continue
        stack.extend(getattr(source, "from_node", None) or [])
    return out
