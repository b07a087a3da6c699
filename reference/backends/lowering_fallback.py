"""What the backend does when a graph does not lower or compile: learn which call stopped it,
and compile the graph again without that call.

A seam that fails on an ATen graph leaves the graph and its cache folders on the exception
(:func:`note_failed_graph`, called by :meth:`reference.backends.seam.Seam.graph`). The backend's
Dynamo wrapper (:func:`reference.backends.graph_breaks.forces_graph_breaks`) then asks
:func:`learn` what to do: the failing ATen nodes are found and probed
(:mod:`reference.lowering.lowering_probe`), and each becomes a decision, kept in the process and
beside the HLO cache:

- **decompose**, when torch's decomposition of the op lowers: the frame is traced again and AOT
  Autograd decomposes that call (the graph stays whole and compiled);
- **break**, otherwise: the Dynamo call the node came from (its ``from_node`` provenance) is
  split out of the graph: the frame is traced again, and the graph-break rules break at calls of
  that function with values of that key, reporting the op and the reason (``op=aten.addmv.default
  (torch.addmv()): ...``). The call runs eagerly between compiled graphs.

Each failure is learned from once: a graph that fails again with nothing new to learn fails with
its own error. Graph breaks need the Dynamo hooks (torch releases the hooks were written for).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from reference.core.build_settings import CacheRoots
from reference.core.errors import LoweringError, NEFFCompilationError, NeuronBackendError
from reference.lowering.decompositions import library_lowerings
from reference.lowering.lowering_probe import (
    BREAK, DECISIONS, DECOMPOSE, Decision, decisions_folder, failing_nodes, node_values, probe_decomposition,
    signature, sources, target_name,
)

log = logging.getLogger(__name__)

#: Where a seam leaves the failed ATen graph and its cache roots on the exception.
FAILED_GRAPH = "_neuron_failed_aten_graph"


def note_failed_graph(exc: NeuronBackendError, aten_gm: torch.fx.GraphModule, roots: CacheRoots | None) -> None:
    """Leave ``aten_gm`` (the graph that failed) and the cache roots on ``exc`` for :func:`learn`;
    the innermost graph wins (a seam inside another)."""
    if getattr(exc, FAILED_GRAPH, None) is None:
        try:
            setattr(exc, FAILED_GRAPH, (aten_gm, roots))
        except AttributeError:  # an exception type without a __dict__: nothing to learn from
            pass


def _folder(roots: CacheRoots | None) -> str | None:
    if roots is None or roots.disabled:
        return None
    try:
        return decisions_folder(roots.folder("hlo"))
    except NeuronBackendError:  # an untrusted folder: decisions stay in the process
        return None


def load_decisions(roots: CacheRoots | None) -> None:
    """Read the decisions kept beside the HLO cache of ``roots`` (once per folder and process)."""
    folder = _folder(roots)
    if folder is not None:
        DECISIONS.load(folder)


def _table() -> dict:
    from reference.lowering.stablehlo import decomposition_table

    return {**decomposition_table(), **library_lowerings()}


def _example(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("example_value")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_example(a) for a in arg)
    return arg


def _why(exc: BaseException) -> str:
    """What stopped the node, in a few words (the error's own text is in the log)."""
    if isinstance(exc, LoweringError):
        ops = [op for op in exc.ops if not op.startswith("torch.constant.")]
        users = getattr(exc, "constant_users", None) or []
        named = ops or users
        return f"torch-mlir could not lower {', '.join(named)}" if named else "torch-mlir could not lower it"
    text = str(exc)
    detail = text.split("lowered to", 1)[1].split(":", 1)[0].strip() if "lowered to" in text else ""
    return f"the compiler rejected it{f' (lowered to {detail})' if detail else ''}"


def learn(gm: torch.fx.GraphModule, exc: BaseException) -> list[Decision]:
    """Decisions learned from ``exc``, the failure of a Dynamo graph ``gm`` in a seam; empty when
    there is nothing new (the failure then stands)."""
    if not isinstance(exc, NEFFCompilationError):
        return []
    failed = getattr(exc, FAILED_GRAPH, None)
    if failed is None:
        return []
    aten_gm, roots = failed
    folder = _folder(roots)
    table = _table()
    dynamo_nodes = {n.name: n for n in gm.graph.nodes if n.op in ("call_function", "call_method")}
    learned: list[Decision] = []
    for node, problem in failing_nodes(aten_gm, exc, table):
        op = str(node.target)
        args, kwargs = node_values(node)
        key = signature(args, kwargs)
        why = _why(exc) if problem.startswith(type(exc).__name__) else problem
        if isinstance(exc, LoweringError) and probe_decomposition(node, table):
            decision = Decision(DECOMPOSE, op, key, op, f"{op} ({key}) does not lower; torch's decomposition of it does")
            if DECISIONS.add(decision, folder):
                learned.append(decision)
            continue
        for name in sources(node, dynamo_nodes):
            source = dynamo_nodes[name]
            values = [_example(a) for a in source.args]
            kw = {k: _example(v) for k, v in source.kwargs.items()}
            decision = Decision(BREAK, target_name(source.target), signature(values, kw), op,
                                f"{op} ({key}) has no lowering on this backend: {why}")
            if DECISIONS.add(decision, folder):
                learned.append(decision)
    for decision in learned:
        log.info("neuron backend: %s %s (%s): %s", decision.kind, decision.target, decision.signature, decision.reason)
    return learned
