"""The runner's graphs precompiled into one file, so that a serving process starts from it.

:func:`precompile_runner` compiles each of a loaded runner's graph types once, as its compile site
would (the model's ``example_kwargs(graph_type)``, under the scope resolved from the model's
policy, with the runner's compile options and, for a model whose ``forward`` takes ``rank``, this
process's rank tensor), through ``aot_compile``, and writes every graph into one file
(:func:`reference.backends.precompiled_file.write_precompiled`). :func:`load_precompiled_runner`
puts the file's function in place of the runner's ``torch.compile`` result: every site then runs
the graph whose guards accept its inputs, with no trace and no compile, and a site whose inputs
no graph accepts raises :class:`~reference.backends.serializable.PrecompiledInputError` naming the
file. Only the in-process mode (``compile``) can be precompiled.
"""

from __future__ import annotations

import os
from typing import Sequence

from reference.backends.precompiled_file import (
    PrecompiledFunction, aot_compile_variant, compile_for_aot, load_precompiled, write_precompiled,
)
from reference.compiler.scope import scoped_compiler_args
from reference.core.errors import BackendOptionError
from reference.runner.model_loading import BACKENDS, NeuronModelRunner, check_graph_type, takes_rank
from reference.spmd.rank import rank_tensor

__all__ = ["precompile_runner", "load_precompiled_runner"]


def _check_mode(runner: NeuronModelRunner) -> None:
    if runner.mode != "compile":
        raise BackendOptionError(
            f"runner mode {runner.mode!r} cannot be precompiled: only mode 'compile' (backend {BACKENDS['compile']}) "
            "serves graphs in-process; create the runner with mode='compile'"
        )


def precompile_runner(
    runner: NeuronModelRunner, path: str | os.PathLike, graph_types: Sequence[str | None] = ("prefill", "decode"),
) -> PrecompiledFunction:
    """Compile ``graph_types`` of ``runner`` (loaded with :meth:`~NeuronModelRunner.load_model`)
    into ``path``; returns the file's function. Compile for serving: under ``torch.no_grad()``."""
    _check_mode(runner)
    if runner.compiled_model is None:
        raise BackendOptionError("call runner.load_model() before precompile_runner: the compile options come from it")
    model = runner.model
    compiled = compile_for_aot(model, options=runner.compile_options, backend=BACKENDS[runner.mode])
    functions = []
    for graph_type in graph_types:
        check_graph_type(graph_type)
        kwargs = dict(model.example_kwargs(graph_type))
        if takes_rank(model):
            kwargs.setdefault("rank", rank_tensor())
        with scoped_compiler_args(runner.resolve_graph_compiler_args(graph_type)):
            functions.append(aot_compile_variant(compiled, (), kwargs, module=model))
    return write_precompiled(path, functions, module=model, backend=BACKENDS[runner.mode])


def load_precompiled_runner(runner: NeuronModelRunner, path: str | os.PathLike) -> NeuronModelRunner:
    """``runner`` with its compiled model replaced by the graphs of ``path`` (see the module doc);
    the policy and options are wired by :meth:`~NeuronModelRunner.load_model` as before, and
    nothing is compiled. Raises what :func:`~reference.backends.precompiled_file.load_precompiled`
    raises for a bad file."""
    _check_mode(runner)
    runner.load_model()  # the policy, the base arguments and the model's stamps, as a compiling start has them
    runner.compiled_model = load_precompiled(path, module=runner.model)
    return runner
