"""The reference implementation of a Neuron-style ``torch.compile`` backend, on the CPU.

Public names follow the backend reference (``neuron_dynamo_backend``) and the design documents.
Internals live in subpackages and may move; import from here or from the subpackage ``__init__``.
"""

import importlib

# Each public name and the module it lives in, imported on first use (PEP 562): ``import reference``
# itself imports nothing, so a serving process that only loads precompiled graphs
# (``reference.load_precompiled``) never imports Dynamo, the compile side or the compiler stack.
_WHERE = {
    "__version__": "reference.core.versions",
    **dict.fromkeys(("get_model_name", "get_rank", "set_model_name"), "reference.core.settings"),
    **dict.fromkeys((
        "BackendOptionError", "CacheMissError", "CompilerArgumentError", "CompilerStackMissingError", "EnvVarError",
        "FlowDirectoryError", "LoweringError", "NEFFCompilationError", "NEFFExecutionError", "NeuronBackendError",
        "UnsupportedInputError",
    ), "reference.core.errors"),
    **dict.fromkeys(("NeuronCompilationMetrics", "get_dynamo_metrics", "reset_dynamo_metrics"), "reference.core.metrics"),
    **dict.fromkeys(("compile_only", "is_device_tensor", "reset_graph_break_thresholds", "set_graph_break_thresholds",
                     "to_device"), "reference.backends.api"),
    **dict.fromkeys(("PrecompiledFunction", "Variant", "load_precompiled", "precompile"), "reference.backends.precompiled_file"),
    **dict.fromkeys((
        "PrecompileError", "PrecompiledFileError", "PrecompiledInputError", "PrecompiledIntegrityError",
        "PrecompiledTargetError", "PrecompiledVersionError",
    ), "reference.core.errors"),
}


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'reference' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [
    "__version__",
    "set_model_name",
    "get_model_name",
    "get_rank",
    "get_dynamo_metrics",
    "reset_dynamo_metrics",
    "NeuronCompilationMetrics",
    "NEFFCompilationError",
    "NEFFExecutionError",
    "NeuronBackendError",
    "LoweringError",
    "CompilerArgumentError",
    "CompilerStackMissingError",
    "UnsupportedInputError",
    "BackendOptionError",
    "CacheMissError",
    "FlowDirectoryError",
    "EnvVarError",
    "compile_only",
    "to_device",
    "is_device_tensor",
    "set_graph_break_thresholds",
    "reset_graph_break_thresholds",
    "precompile",
    "load_precompiled",
    "PrecompiledFunction",
    "Variant",
    "PrecompileError",
    "PrecompiledFileError",
    "PrecompiledInputError",
    "PrecompiledIntegrityError",
    "PrecompiledTargetError",
    "PrecompiledVersionError",
]
