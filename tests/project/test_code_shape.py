"""The shape of the code, held by reading it: rules a reviewer would otherwise check by eye.

- no import circle in ``reference`` or ``conformance`` (imports inside functions count too: a lazy
  import that only dodges a circle marks a misplaced definition);
- below the seam nothing reads the environment through ``BuildSettings.from_env()`` or
  ``CacheRoots.from_env()``: the settings a compile request carries are handed down. The
  environment is read in ``reference/core/``, where a request is resolved (the seams) and at the
  entry points of tools and flows;
- no function in ``reference/`` or ``conformance/`` (outside tests) runs past 80 lines;
- on the path from the seam's door down through the pipeline, no function takes more than four
  parameters besides the graph and its inputs: the request goes down whole (a
  ``BuildContext``), not one keyword per part.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

PACKAGES = ("reference", "conformance")


def test_no_import_circle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    circles = sorted(
        f"{module} -> {imported} -> ... -> {module}"
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(imported, module)
    )
    assert not circles, "import circles:\n" + "\n".join(circles)


ROOT = Path(__file__).resolve().parents[2]

#: Where ``*.from_env()`` may be called: floor 0, the seams' request resolution, the flows' and
#: tools' entry points.
FROM_ENV_ALLOWED = ("reference/core/", "reference/compiler/request.py", "reference/flows/")
#: Public entry points below the floors above, by count: the seeds' keyword entry of the FX passes
#: (``PassContext.of``, behind ``run_passes(gm, **kwargs)`` and ``FXPass.run(gm, **kwargs)``),
#: called outside a compile, reads the strict-SPMD flag when it is not given; a compile hands its
#: request's flag in a ``PassContext`` instead. The backend's Dynamo entry (``forces_graph_breaks``),
#: before any request is resolved, reads the cache roots once to load the lowering decisions kept
#: beside the HLO cache, so that the first trace's graph is judged with them. Listed so that a new
#: one fails here.
FROM_ENV_AT_PUBLIC_ENTRIES = {"reference/fx_passes/base.py": 1, "reference/backends/graph_breaks.py": 1}


def _from_env_calls(path: Path) -> int:
    tree = ast.parse(path.read_text(), str(path))
    return sum(
        1 for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_env"
    )


def test_from_env_is_read_only_at_the_seam_and_the_entry_points():
    found = {}
    for path in sorted((ROOT / "reference").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(FROM_ENV_ALLOWED):
            continue
        n = _from_env_calls(path)
        if n and FROM_ENV_AT_PUBLIC_ENTRIES.get(rel) != n:
            found[rel] = n
    assert not found, (
        "from_env() below the seam (hand the compile request's settings down instead): "
        + ", ".join(f"{p} ({n})" for p, n in found.items())
    )


MAX_FUNCTION_LINES = 80
#: Functions past the bound that are still to be split. Listed so that no new one joins them.
TOO_LONG_STILL: set[tuple[str, str]] = set()


def test_no_function_runs_past_80_lines():
    long = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/tests/" in rel:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES and (rel, node.name) not in TOO_LONG_STILL:
                        long.append(f"{rel}: {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them): " + ", ".join(long)


#: The path a graph takes from the seam's door (``compile_fx_graph``) down: the seams, their
#: actions and the pipeline.
REQUEST_PATH = ("reference/pipeline/", "reference/backends/seam.py", "reference/backends/neuron.py", "reference/backends/compile_entry.py",
                "reference/backends/native.py", "reference/backends/capture.py", "reference/backends/inference_plan.py")
#: What a function on that path takes as "the graph and its inputs" (in one of its forms: Dynamo's
#: graph, an ATen graph, a lowering, a lowered module, a built artifact, a staged entry).
GRAPH_AND_INPUTS = {"gm", "aten_gm", "lowering", "lowered", "built", "entry", "example_inputs", "n_inputs", "args"}
MAX_PARAMETERS = 4


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls") and n not in GRAPH_AND_INPUTS]


def test_the_request_path_takes_the_request_whole():
    wide = []
    for path in sorted((ROOT / "reference").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(REQUEST_PATH):
            continue
        tree = ast.parse(path.read_text(), rel)
        errors = {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name.endswith("Error") for f in c.body}
        for node in ast.walk(tree):  # an error's constructor names what went wrong: not the path
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in errors and len(_parameters(node)) > MAX_PARAMETERS:
                wide.append(f"{rel}: {node.name}({', '.join(_parameters(node))})")
    assert not wide, (
        f"functions on the request path taking more than {MAX_PARAMETERS} parameters besides the graph "
        "(hand down the BuildContext or the CompileRequest instead): " + "; ".join(wide)
    )


def test_the_parameter_count_sees_a_wide_function():
    wide = ast.parse("def serve(lowering, compiler_args, *, graph_name, model_name, key_policy, settings): ...").body[0]
    narrow = ast.parse("def serve(self, lowering, ctx, *, eager=None, resident=None, nones=()): ...").body[0]
    assert _parameters(wide) == ["compiler_args", "graph_name", "model_name", "key_policy", "settings"]
    assert len(_parameters(narrow)) == MAX_PARAMETERS


def test_module_names_are_unique_across_the_reference():
    """A module name means one thing in reference/: no two modules share a name, and no module is
    named like a package (``pipeline/lowering.py`` beside ``lowering/`` once was). Each package's
    own ``errors.py`` is the one allowed repeat."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "reference").rglob("*.py")):
        if path.name == "__init__.py" or path.name == "errors.py":
            continue
        seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    for folder in sorted((ROOT / "reference").rglob("*/")):
        if (folder / "__init__.py").exists():
            seen.setdefault(folder.name, []).append(str(folder.relative_to(ROOT)) + "/")
    shared = {name: places for name, places in seen.items() if len(places) > 1}
    assert not shared, f"names used twice in reference/ (rename one): {shared}"
