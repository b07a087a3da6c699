"""Splitting a graph with collectives at its collectives: the graph analysis of an SPMD program.

torch-mlir has no lowering for ``_c10d_functional`` ops, and the CPU compiler has no collective
runtime. So a graph with collectives is cut at each collective into *pieces* of plain compute
(each a GraphModule of its own, whose inputs are the values it reads from before the cut) and a
*step list*: the pieces and the collectives in program order, over named values (``in<i>`` for
the graph's inputs, ``v<n>`` for each value a step defines). Each collective step carries the full
``replica_groups`` and the channel id of its mesh (from the mesh registry), never a process-group
name or a rank, so every rank of an SPMD model splits its graph into the same pieces and steps.

What is done with a split (lowering the pieces, writing the whole program as one StableHLO
module, compiling, loading, running the collectives) belongs to the pipeline's program strategy
(:mod:`reference.pipeline`), :mod:`reference.lowering.program` and :mod:`reference.runtime`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from reference.core.errors import LoweringError
from reference.core.specs import TensorSpec
from reference.lowering.program import REDUCERS
from reference.spmd.collectives import annotate_replica_groups, collective_info, is_collective, is_wait


@dataclass
class ProgramSplit:
    """A graph cut at its collectives. ``pieces[i]`` is the GraphModule of the step
    ``{"op": "piece", "index": i}``; ``specs`` gives every named value's tensor spec; ``outputs``
    names the graph's outputs in order (``None`` for a non-tensor output)."""

    graph_name: str
    pieces: list[torch.fx.GraphModule]
    steps: list[dict]
    inputs: list[str]
    outputs: list[str | None]
    specs: dict[str, TensorSpec]
    node_count: int
    collectives: list[dict] = field(default_factory=list)

    def piece_name(self, index: int) -> str:
        return f"{self.graph_name}_piece{index}"


def _leaves(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in _leaves(item)]
    return [x]


def _resolve(node: torch.fx.Node) -> torch.fx.Node:
    while is_wait(node):
        node = node.args[0]
    return node


def _tensor_val(node: torch.fx.Node) -> torch.Tensor | None:
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def split_at_collectives(aten_gm: torch.fx.GraphModule, *, graph_name: str) -> ProgramSplit:
    """Cut ``aten_gm`` at its collectives into pieces and steps (see the module doc). Annotates
    the collectives with their meshes first (``node.meta["replica_groups"]``).

    Raises :class:`~reference.spmd.errors.MeshError` for a collective over an unregistered group,
    :class:`LoweringError` for a collective the program cannot express (uneven all-to-all splits,
    a reduction other than sum/max/min/product).
    """
    annotate_replica_groups(aten_gm)
    return _Splitter(aten_gm, graph_name).split()


def _stages(nodes: list, graph_name: str) -> list[Any]:
    """Lists of compute nodes, separated by the collective nodes between them."""
    stages: list[Any] = []
    current: list[torch.fx.Node] = []
    for n in nodes:
        if n.op in ("placeholder", "output") or is_wait(n):
            continue
        if is_collective(n):
            stages.append(current)
            stages.append(n)
            current = []
        elif n.op in ("call_function", "call_method", "get_attr"):
            current.append(n)
        else:
            raise LoweringError(f"node {n.name!r} ({n.op}) cannot be placed in an SPMD program", graph_name=graph_name)
    stages.append(current)
    return stages


def _resolve_user(u: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read ``u``'s value, looking through the waits of collectives."""
    if is_wait(u):
        out = []
        for uu in u.users:
            out.extend(_resolve_user(uu))
        return out
    return [u]


class _Splitter:
    """One run of :func:`split_at_collectives`: the stages of the graph, and the program's value
    names (``in<i>`` for inputs, then ``v<n>`` for each value a step defines, in program order)."""

    def __init__(self, aten_gm: torch.fx.GraphModule, graph_name: str) -> None:
        self.gm, self.graph_name = aten_gm, graph_name
        self.nodes = list(aten_gm.graph.nodes)
        self.stages = _stages(self.nodes, graph_name)
        self.stage_of = {n: si for si, st in enumerate(self.stages) for n in (st if isinstance(st, list) else [st])}
        self.value_of: dict[torch.fx.Node, str] = {}
        self.specs: dict[str, TensorSpec] = {}
        self.pieces: list[torch.fx.GraphModule] = []
        self.steps: list[dict] = []
        self.collectives: list[dict] = []
        self.counter = 0

    def split(self) -> ProgramSplit:
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        for i, p in enumerate(placeholders):
            self.value_of[p] = f"in{i}"
            val = _tensor_val(p)
            if val is None:
                raise LoweringError(f"input {p.name!r} is not a tensor", graph_name=self.graph_name)
            self.specs[f"in{i}"] = TensorSpec.of(val)
        for si, st in enumerate(self.stages):
            if isinstance(st, list):
                self._piece(si, st)
            else:
                step = self._collective(st)
                self.steps.append(step)
                self.collectives.append(step)
        inputs = [self.value_of[p] for p in placeholders]
        return ProgramSplit(self.graph_name, self.pieces, self.steps, inputs, self._outputs(), self.specs, len(self.nodes),
                            self.collectives)

    def _name(self, node: torch.fx.Node) -> str:
        self.counter += 1
        self.value_of[node] = f"v{self.counter}"
        self.specs[self.value_of[node]] = TensorSpec.of(_tensor_val(node))
        return self.value_of[node]

    def _needed_later(self, n: torch.fx.Node, si: int) -> bool:
        return any(uu.op == "output" or self.stage_of.get(uu, -1) > si for u in n.users for uu in _resolve_user(u))

    def _piece(self, si: int, stage: list) -> None:
        """A step running the stage's compute as one piece, when a later step reads what it makes."""
        outs = [n for n in stage if n.op != "get_attr" and self._needed_later(n, si)]
        if not outs:
            return
        for n in outs:
            if _tensor_val(n) is None:
                raise LoweringError(f"value {n.name!r} crosses a collective but is not a tensor", graph_name=self.graph_name)
        piece_gm, ext = _extract(self.gm, stage, set(stage), outs)
        names = [self._name(n) for n in outs]
        self.steps.append({"op": "piece", "index": len(self.pieces), "args": [self.value_of[_resolve(e)] for e in ext],
                           "results": names})
        self.pieces.append(piece_gm)

    def _collective(self, node: torch.fx.Node) -> dict:
        """The step of one collective, with its mesh, reduction and split checked."""
        info = collective_info(node)
        src = _resolve(node.args[0])
        step = {
            "op": info.kind,
            "args": [self.value_of[src]],
            "results": [self._name(node)],
            "channel_id": info.mesh.channel_id,
            "replica_groups": [list(g) for g in info.mesh.replica_groups],
        }
        if info.reduce_op is not None:
            if info.reduce_op not in REDUCERS:
                raise LoweringError(
                    f"collective {node.name!r}: reduction {info.reduce_op!r} is not supported; use one of {sorted(REDUCERS)}",
                    graph_name=self.graph_name,
                )
            step["reduce_op"] = info.reduce_op
        if info.group_size is not None:
            step["group_size"] = info.group_size
        if info.kind == "all_to_all":
            size = info.mesh.group_size
            even = [self.specs[self.value_of[src]].shape[0] // size] * size
            for splits in (info.input_splits, info.output_splits):
                if splits not in (None, []) and [int(s) for s in splits] != even:
                    raise LoweringError(
                        f"collective {node.name!r}: all_to_all with uneven splits {list(splits)} is not supported; "
                        f"the program expresses equal splits {even}",
                        graph_name=self.graph_name,
                    )
            step["split_count"] = size
        return step

    def _outputs(self) -> list[str | None]:
        out_node = next(n for n in self.nodes if n.op == "output")
        outputs: list[str | None] = []
        for a in _leaves(out_node.args[0]):
            if isinstance(a, torch.fx.Node):
                r = _resolve(a)
                if r not in self.value_of:
                    raise LoweringError(f"output {a.name!r} is not produced by any step", graph_name=self.graph_name)
                outputs.append(self.value_of[r])
            else:
                outputs.append(None)
        return outputs


def _extract(gm: torch.fx.GraphModule, stage: list, members: set, outs: list) -> tuple[torch.fx.GraphModule, list]:
    """A GraphModule of ``stage``'s nodes; its inputs are the values it reads from outside."""
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    ext: list[torch.fx.Node] = []

    def arg(n: torch.fx.Node) -> torch.fx.Node:
        if n in env:
            return env[n]
        src = _resolve(n)
        if src.op == "get_attr":  # constants are copied into every piece that reads them
            _copy_attr(gm, root, src.target)
            env[n] = graph.get_attr(src.target)
            env[n].meta = dict(src.meta)
            return env[n]
        if src in env:
            env[n] = env[src]
            return env[n]
        ph = graph.placeholder(f"in{len(ext)}")
        ph.meta = dict(src.meta)
        ext.append(src)
        env[src] = env[n] = ph
        return ph

    for n in stage:
        if n.op == "get_attr":
            continue
        for a in n.all_input_nodes:
            if a not in members or a.op == "get_attr":
                arg(a)
        env[n] = graph.node_copy(n, lambda a: env[a] if a in env else arg(a))
    out = graph.output(tuple(env[n] for n in outs))
    out.meta["val"] = tuple(n.meta.get("val") for n in outs)
    return torch.fx.GraphModule(root, graph), ext


def _copy_attr(src: torch.nn.Module, dst: torch.nn.Module, target: str) -> None:
    obj: Any = src
    for part in target.split("."):
        obj = getattr(obj, part)
    *parents, last = target.split(".")
    mod = dst
    for part in parents:
        if not hasattr(mod, part):
            mod.add_module(part, torch.nn.Module())
        mod = getattr(mod, part)
    if isinstance(obj, torch.nn.Parameter):
        mod.register_parameter(last, obj)
    elif isinstance(obj, torch.Tensor):
        mod.register_buffer(last, obj)
    else:
        setattr(mod, last, obj)


