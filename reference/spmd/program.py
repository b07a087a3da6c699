"""Lowering and running graphs with collectives: compiled pieces joined by collectives over gloo.

torch-mlir has no lowering for ``_c10d_functional`` ops, and the CPU compiler has no collective
runtime. So a graph with collectives is split at each collective into *pieces* of plain compute;
each piece is lowered to StableHLO and compiled as usual, and the collectives run between them on
torch.distributed (gloo), over this rank's group of the collective's mesh.

What is hashed, cached and snapshotted is the *whole program*: one StableHLO module holding every
piece as a private function and a ``main`` that calls them in order, with each collective written
as the StableHLO op (``stablehlo.all_reduce``, ``all_gather``, ``reduce_scatter``,
``all_to_all``) carrying the full ``replica_groups`` of its mesh and the mesh's channel id. The
text names no process group and no rank, so every rank of an SPMD model builds the same text, the
same key, and loads the same artifact. The module is parsed and verified with the MLIR StableHLO
dialect that ships with the compiler, then printed in its canonical form.

The artifact (the cache entry's ``model.neff``) is a bundle: the program's step list plus every
piece's compiled binary. One rank compiles it under the key's lock; the others wait and load it.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from reference.compiler.driver import CompilerDriver
from reference.core.errors import LoweringError, NEFFExecutionError
from reference.core.metrics import METRICS
from reference.core.specs import LoweredGraph, TensorSpec
from reference.lowering.cost import estimate_flops
from reference.lowering.stablehlo import _flatten, lower_to_stablehlo, output_specs as _output_specs
from reference.spmd.collectives import annotate_replica_groups, collective_info, is_collective, is_wait
from reference.runtime import LoadedArtifact
from reference.spmd.mesh import MESH_REGISTRY

BUNDLE_MAGIC = b"NEURON-SPMD-PROGRAM-1\n"

_ELEMENT_TYPES = {
    "float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
    "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "ui8", "bool": "i1",
}
_REDUCERS = {"sum": "add", "max": "maximum", "min": "minimum", "product": "multiply"}


def mlir_type(spec: TensorSpec) -> str:
    elem = _ELEMENT_TYPES.get(spec.dtype)
    if elem is None:
        raise LoweringError(f"no StableHLO element type for {spec.dtype}")
    dims = "x".join(str(d) for d in spec.shape)
    return f"tensor<{dims}x{elem}>" if dims else f"tensor<{elem}>"


@dataclass
class SPMDProgram:
    """A graph with collectives, lowered: its pieces, its steps and its whole-program text."""

    graph_name: str
    text: str
    pieces: list[LoweredGraph]
    steps: list[dict]
    inputs: list[str]
    outputs: list[str | None]
    input_specs: tuple[TensorSpec, ...]
    output_specs: tuple[TensorSpec, ...]
    node_count: int
    collectives: list[dict] = field(default_factory=list)

    def lowered(self) -> LoweredGraph:
        """The program as a LoweredGraph: the whole-program text is what the key hashes."""
        return LoweredGraph(self.text, self.input_specs, self.output_specs, self.node_count)

    def replica_groups(self) -> dict[str, list[list[int]]]:
        """The meshes the program's collectives run over, by channel id (a cache-key component)."""
        return {f"channel_{c['channel_id']}": c["replica_groups"] for c in self.collectives}

    def manifest(self) -> dict:
        return {"graph_name": self.graph_name, "steps": self.steps, "inputs": self.inputs, "outputs": self.outputs}

    def to_json(self) -> dict:
        """Everything but the whole-program text (staged beside it): enough to build the bundle
        later, in another process, without the graph."""
        return {
            **self.manifest(),
            "pieces": [_lowered_json(p) for p in self.pieces],
            "input_specs": [s.as_json() for s in self.input_specs],
            "output_specs": [s.as_json() for s in self.output_specs],
            "node_count": self.node_count,
            "collectives": self.collectives,
        }

    @classmethod
    def from_json(cls, doc: dict, text: str) -> "SPMDProgram":
        return cls(
            graph_name=doc["graph_name"],
            text=text,
            pieces=[_lowered_from_json(p) for p in doc["pieces"]],
            steps=doc["steps"],
            inputs=doc["inputs"],
            outputs=doc["outputs"],
            input_specs=tuple(TensorSpec.from_json(s) for s in doc["input_specs"]),
            output_specs=tuple(TensorSpec.from_json(s) for s in doc["output_specs"]),
            node_count=int(doc["node_count"]),
            collectives=doc["collectives"],
        )


def _lowered_json(g: LoweredGraph) -> dict:
    return {
        "hlo": g.hlo,
        "input_specs": [s.as_json() for s in g.input_specs],
        "output_specs": [s.as_json() for s in g.output_specs],
        "node_count": g.node_count,
    }


def _lowered_from_json(d: dict) -> LoweredGraph:
    return LoweredGraph(
        d["hlo"],
        tuple(TensorSpec.from_json(s) for s in d["input_specs"]),
        tuple(TensorSpec.from_json(s) for s in d["output_specs"]),
        int(d["node_count"]),
    )


def _resolve(node: torch.fx.Node) -> torch.fx.Node:
    while is_wait(node):
        node = node.args[0]
    return node


def _tensor_val(node: torch.fx.Node) -> torch.Tensor | None:
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def lower_program(aten_gm: torch.fx.GraphModule, *, graph_name: str) -> SPMDProgram:
    """Split ``aten_gm`` at its collectives, lower each piece, and assemble the program text.

    Raises :class:`~reference.spmd.errors.MeshError` for a collective over an unregistered group,
    :class:`LoweringError` for a collective the program cannot express (uneven all-to-all splits,
    a reduction other than sum/max/min/product).
    """
    annotate_replica_groups(aten_gm)
    nodes = list(aten_gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    out_node = next(n for n in nodes if n.op == "output")

    # Stages: lists of compute nodes, separated by collective nodes.
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

    # Value names: %argN for inputs, then one per value a step defines, in program order.
    value_of: dict[torch.fx.Node, str] = {}
    specs: dict[str, TensorSpec] = {}
    for i, p in enumerate(placeholders):
        value_of[p] = f"in{i}"
        val = _tensor_val(p)
        if val is None:
            raise LoweringError(f"input {p.name!r} is not a tensor", graph_name=graph_name)
        specs[f"in{i}"] = TensorSpec.of(val)

    stage_of: dict[torch.fx.Node, int] = {}
    for si, st in enumerate(stages):
        for n in (st if isinstance(st, list) else [st]):
            stage_of[n] = si

    def needed_later(n: torch.fx.Node, si: int) -> bool:
        for u in n.users:
            u = _resolve_user(u)
            for uu in u:
                if uu.op == "output" or stage_of.get(uu, -1) > si:
                    return True
        return False

    def _resolve_user(u: torch.fx.Node) -> list[torch.fx.Node]:
        if is_wait(u):
            out = []
            for uu in u.users:
                out.extend(_resolve_user(uu))
            return out
        return [u]

    pieces: list[LoweredGraph] = []
    steps: list[dict] = []
    collectives: list[dict] = []
    counter = 0
    for si, st in enumerate(stages):
        if isinstance(st, list):
            if not st:
                continue
            members = set(st)
            outs = [n for n in st if n.op != "get_attr" and needed_later(n, si)]
            if not outs:
                continue
            for n in outs:
                if _tensor_val(n) is None:
                    raise LoweringError(
                        f"value {n.name!r} crosses a collective but is not a tensor", graph_name=graph_name
                    )
            piece_gm, ext = _extract(aten_gm, st, members, outs)
            piece_name = f"{graph_name}_piece{len(pieces)}"
            lowered = lower_to_stablehlo(piece_gm, graph_name=piece_name)
            names = []
            for n in outs:
                counter += 1
                value_of[n] = f"v{counter}"
                specs[value_of[n]] = TensorSpec.of(_tensor_val(n))
                names.append(value_of[n])
            steps.append({"op": "piece", "index": len(pieces), "args": [value_of[_resolve(e)] for e in ext], "results": names})
            pieces.append(lowered)
        else:
            node = st
            info = collective_info(node)
            src = _resolve(node.args[0])
            counter += 1
            value_of[node] = f"v{counter}"
            val = _tensor_val(node)
            specs[value_of[node]] = TensorSpec.of(val)
            step = {
                "op": info.kind,
                "args": [value_of[src]],
                "results": [value_of[node]],
                "channel_id": info.mesh.channel_id,
                "replica_groups": [list(g) for g in info.mesh.replica_groups],
            }
            if info.reduce_op is not None:
                if info.reduce_op not in _REDUCERS:
                    raise LoweringError(
                        f"collective {node.name!r}: reduction {info.reduce_op!r} is not supported; use one of {sorted(_REDUCERS)}",
                        graph_name=graph_name,
                    )
                step["reduce_op"] = info.reduce_op
            if info.group_size is not None:
                step["group_size"] = info.group_size
            if info.kind == "all_to_all":
                rows = specs[value_of[src]].shape[0]
                size = info.mesh.group_size
                even = [rows // size] * size
                for splits in (info.input_splits, info.output_splits):
                    if splits not in (None, []) and [int(s) for s in splits] != even:
                        raise LoweringError(
                            f"collective {node.name!r}: all_to_all with uneven splits {list(splits)} is not supported; "
                            f"the program expresses equal splits {even}",
                            graph_name=graph_name,
                        )
                step["split_count"] = size
            steps.append(step)
            collectives.append(step)

    inputs = [value_of[p] for p in placeholders]
    outputs: list[str | None] = []
    for a in _flatten(out_node.args[0]):
        if isinstance(a, torch.fx.Node):
            r = _resolve(a)
            if r not in value_of:
                raise LoweringError(f"output {a.name!r} is not produced by any step", graph_name=graph_name)
            outputs.append(value_of[r])
        else:
            outputs.append(None)
    in_specs = tuple(specs[v] for v in inputs)
    out_specs = _output_specs(aten_gm)
    text = program_text(graph_name, pieces, steps, inputs, [o for o in outputs if o is not None], specs)
    return SPMDProgram(graph_name, text, pieces, steps, inputs, outputs, in_specs, out_specs, len(nodes), collectives)


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


def _piece_function(hlo: str, index: int) -> str:
    """The piece module's ``main`` as a private function ``@piece_<index>``."""
    lines = hlo.strip().splitlines()
    if not lines or not lines[0].startswith("module") or lines[-1].strip() != "}":
        raise LoweringError(f"unexpected module text for piece {index}")
    body = "\n".join(lines[1:-1])
    if "func.func @main(" not in body:
        raise LoweringError(f"piece {index} has no @main function")
    return body.replace("func.func @main(", f"func.func private @piece_{index}(", 1)


def _groups_attr(groups: list[list[int]]) -> str:
    rows = ", ".join("[" + ", ".join(str(r) for r in g) + "]" for g in groups)
    return f"dense<[{rows}]> : tensor<{len(groups)}x{len(groups[0])}xi64>"


def program_text(graph_name: str, pieces: Sequence[LoweredGraph], steps: Sequence[dict], inputs: Sequence[str],
                 outputs: Sequence[str], specs: dict[str, TensorSpec]) -> str:
    """The whole program as one verified StableHLO module, in canonical form."""
    parts = [_piece_function(p.hlo, i) for i, p in enumerate(pieces)]
    ssa: dict[str, str] = {v: f"%{v}" for v in inputs}
    body: list[str] = []
    for si, step in enumerate(steps):
        arg_types = ", ".join(mlir_type(specs[a]) for a in step["args"])
        args = ", ".join(ssa[a] for a in step["args"])
        res_types = [mlir_type(specs[r]) for r in step["results"]]
        if step["op"] == "piece":
            if len(step["results"]) == 1:
                ssa[step["results"][0]] = f"%s{si}"
                lhs = f"%s{si}"
            else:
                for j, r in enumerate(step["results"]):
                    ssa[r] = f"%s{si}#{j}"
                lhs = f"%s{si}:{len(step['results'])}"
            body.append(f"    {lhs} = func.call @piece_{step['index']}({args}) : ({arg_types}) -> ({', '.join(res_types)})")
            continue
        ssa[step["results"][0]] = f"%s{si}"
        common = (
            f"channel_handle = #stablehlo.channel_handle<handle = {step['channel_id']}, type = 1>, "
            f"replica_groups = {_groups_attr(step['replica_groups'])}"
        )
        elem = mlir_type(TensorSpec(specs[step["args"][0]].dtype, (), ()))
        region = ""
        if "reduce_op" in step:
            region = (
                f" ({{\n    ^bb0(%lhs: {elem}, %rhs: {elem}):\n"
                f"      %r = \"stablehlo.{_REDUCERS[step['reduce_op']]}\"(%lhs, %rhs) : ({elem}, {elem}) -> {elem}\n"
                f"      \"stablehlo.return\"(%r) : ({elem}) -> ()\n    }})"
            )
        if step["op"] == "all_reduce":
            attrs = f"{common}, use_global_device_ids"
            name = "all_reduce"
        elif step["op"] == "all_gather":
            attrs = f"all_gather_dim = 0 : i64, {common}, use_global_device_ids"
            name = "all_gather"
        elif step["op"] == "reduce_scatter":
            attrs = f"scatter_dimension = 0 : i64, {common}, use_global_device_ids"
            name = "reduce_scatter"
        else:
            attrs = f"split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = {step['split_count']} : i64, {common}"
            name = "all_to_all"
        body.append(f"    %s{si} = \"stablehlo.{name}\"({args}){region} {{{attrs}}} : ({arg_types}) -> {res_types[0]}")
    sig = ", ".join(f"%{v}: {mlir_type(specs[v])}" for v in inputs)
    ret_types = ", ".join(mlir_type(specs[o]) for o in outputs)
    main = [f"  func.func @main({sig}) -> ({ret_types}) {{", *body]
    main.append(f"    return {', '.join(ssa[o] for o in outputs)} : {ret_types}" if outputs else "    return")
    main.append("  }")
    text = "module @spmd_program {\n" + "\n".join(parts) + "\n" + "\n".join(main) + "\n}\n"
    return _canonical(text, graph_name)


def _canonical(text: str, graph_name: str) -> str:
    from iree.compiler import ir

    ctx = ir.Context()
    try:
        module = ir.Module.parse(text, ctx)
        if not module.operation.verify():
            raise ValueError("the module does not verify")
    except Exception as exc:
        raise LoweringError(f"the SPMD program does not verify as StableHLO: {exc}", graph_name=graph_name) from exc
    return module.operation.get_asm(enable_debug_info=False, large_elements_limit=None)


# --- the artifact: a bundle of the step list and every piece's binary ---------------------------

def pack_bundle(manifest: dict, binaries: Sequence[bytes]) -> bytes:
    header = json.dumps({"manifest": manifest, "sizes": [len(b) for b in binaries]}, sort_keys=True).encode()
    return BUNDLE_MAGIC + struct.pack("<Q", len(header)) + header + b"".join(binaries)


def unpack_bundle(blob: bytes) -> tuple[dict, list[bytes]]:
    if not blob.startswith(BUNDLE_MAGIC):
        raise NEFFExecutionError("the artifact is not an SPMD program bundle")
    off = len(BUNDLE_MAGIC)
    (n,) = struct.unpack_from("<Q", blob, off)
    off += 8
    header = json.loads(blob[off:off + n])
    off += n
    binaries = []
    for size in header["sizes"]:
        binaries.append(blob[off:off + size])
        off += size
    return header["manifest"], binaries


class ProgramCompiler:
    """Compiles every piece of one program; used as the compiler driver of ``build_artifact``, so
    the program is compiled once under its key's lock and published as one cache entry."""

    def __init__(self, program: SPMDProgram, driver: CompilerDriver | None = None) -> None:
        self.program = program
        self.driver = driver or CompilerDriver()

    def compile(self, hlo: str, compiler_args: Sequence[str], *, graph_name: str):
        start = time.perf_counter()
        binaries = []
        for i, piece in enumerate(self.program.pieces):
            METRICS.bump("spmd_piece_compiles")
            binaries.append(self.driver.compile(piece.hlo, compiler_args, graph_name=f"{graph_name}_piece{i}").artifact)
        return _Compiled(pack_bundle(self.program.manifest(), binaries), int((time.perf_counter() - start) * 1e6))


@dataclass
class _Compiled:
    artifact: bytes
    wall_us: int


_COLLECTIVE_OPS = {
    "all_reduce": lambda x, s, g: torch.ops._c10d_functional.all_reduce(x, s["reduce_op"], g),
    "all_gather": lambda x, s, g: torch.ops._c10d_functional.all_gather_into_tensor(x, s["group_size"], g),
    "reduce_scatter": lambda x, s, g: torch.ops._c10d_functional.reduce_scatter_tensor(x, s["reduce_op"], s["group_size"], g),
    "all_to_all": lambda x, s, g: torch.ops._c10d_functional.all_to_all_single(
        x, [x.shape[0] // s["split_count"]] * s["split_count"], [x.shape[0] // s["split_count"]] * s["split_count"], g
    ),
}


class LoadedProgram:
    """A loaded bundle: runs the pieces on the runtime and the collectives on torch.distributed.

    Everything it runs comes from the artifact; the only per-rank input is this rank's process
    group of each mesh, looked up by channel id in the mesh registry.
    """

    def __init__(self, blob: bytes, *, graph_name: str, pieces: Sequence[LoweredGraph] = ()) -> None:
        self.graph_name = graph_name
        self.manifest, binaries = unpack_bundle(blob)
        self._pieces = [
            LoadedArtifact(
                b,
                graph_name=f"{graph_name}_piece{i}",
                input_specs=pieces[i].input_specs if i < len(pieces) else (),
                output_specs=pieces[i].output_specs if i < len(pieces) else (),
                work=estimate_flops(pieces[i].hlo) if i < len(pieces) else None,
            )
            for i, b in enumerate(binaries)
        ]

    def __call__(self, *args: torch.Tensor) -> list:
        m = self.manifest
        if len(args) != len(m["inputs"]):
            raise NEFFExecutionError(f"expected {len(m['inputs'])} inputs, got {len(args)}", graph_name=self.graph_name)
        env: dict[str, torch.Tensor] = dict(zip(m["inputs"], args))
        for step in m["steps"]:
            if step["op"] == "piece":
                outs = self._pieces[step["index"]](*[env[a] for a in step["args"]])
                env.update(zip(step["results"], outs))
            else:
                group = MESH_REGISTRY.local_group(step["channel_id"])
                x = env[step["args"][0]].contiguous()
                y = _COLLECTIVE_OPS[step["op"]](x, step, group.group_name)
                env[step["results"][0]] = torch.ops._c10d_functional.wait_tensor(y)
        return [env[o] if o is not None else None for o in m["outputs"]]
