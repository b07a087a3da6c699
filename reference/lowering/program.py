"""An SPMD program as lowered text: its pieces' StableHLO stitched into one module.

A graph with collectives is cut into pieces of plain compute and a step list
(:mod:`reference.spmd.split`); each piece is lowered to StableHLO like any graph. This module
writes the *whole program*: one StableHLO module holding every piece as a private function and a
``main`` that calls them in order, with each collective written as the StableHLO op
(``stablehlo.all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``) carrying the full
``replica_groups`` of its mesh and the mesh's channel id. The text names no process group and no
rank, so every rank of an SPMD model writes the same text (what the cache key hashes and the
snapshots show). The module is parsed and verified with the MLIR StableHLO dialect that ships
with the compiler, then printed in its canonical form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from reference.core.errors import LoweringError
from reference.core.specs import LoweredGraph, TensorSpec

_ELEMENT_TYPES = {
    "float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
    "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "ui8", "bool": "i1",
}
#: the reductions a program can express, and the StableHLO op that combines two values of each
REDUCERS = {"sum": "add", "max": "maximum", "min": "minimum", "product": "multiply"}


def mlir_type(spec: TensorSpec) -> str:
    elem = _ELEMENT_TYPES.get(spec.dtype)
    if elem is None:
        raise LoweringError(f"no StableHLO element type for {spec.dtype}")
    dims = "x".join(str(d) for d in spec.shape)
    return f"tensor<{dims}x{elem}>" if dims else f"tensor<{elem}>"


@dataclass
class LoweredProgram:
    """A graph with collectives, lowered: its pieces, its steps and its whole-program text
    (``text``, what the key hashes)."""

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
    def from_json(cls, doc: dict, text: str) -> "LoweredProgram":
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
                f"      %r = \"stablehlo.{REDUCERS[step['reduce_op']]}\"(%lhs, %rhs) : ({elem}, {elem}) -> {elem}\n"
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
