"""The runner side (the seeds' vLLM-Neuron): policy, not mechanism.

The runner resolves a graph type to a concrete compiler-argument list by calling the model's
``compiler_args_for`` policy, and hands that list to the backend through
``scoped_compiler_args`` (in-process) or on the trace job (deferred). The backend never calls model
code.
"""

from reference.runner.opt_level import optimization_level, with_optimization_level
from reference.runner.model_loading import (
    GRAPH_TYPES,
    CompilerArgsPolicyError,
    NeuronModelRunner,
    UnknownGraphTypeError,
)
from reference.runner.worker import NeuronWorker
from reference.runner.precompiled import load_precompiled_runner, precompile_runner

__all__ = [
    "GRAPH_TYPES",
    "CompilerArgsPolicyError",
    "NeuronModelRunner",
    "NeuronWorker",
    "UnknownGraphTypeError",
    "load_precompiled_runner",
    "optimization_level",
    "precompile_runner",
    "with_optimization_level",
]
