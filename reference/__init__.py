"""The reference implementation of a Neuron-style ``torch.compile`` backend, on the CPU.

Public names follow the backend reference (``neuron_dynamo_backend``) and the design documents.
Internals live in subpackages and may move; import from here or from the subpackage ``__init__``.
"""

from reference.core.versions import __version__  # noqa: E402

from reference.core.settings import get_model_name, get_rank, set_model_name  # noqa: E402
from reference.core.errors import (  # noqa: E402
    BackendOptionError,
    CacheMissError,
    CompilerArgumentError,
    CompilerStackMissingError,
    EnvVarError,
    FlowDirectoryError,
    LoweringError,
    NEFFCompilationError,
    NEFFExecutionError,
    NeuronBackendError,
    UnsupportedInputError,
)
from reference.core.metrics import NeuronCompilationMetrics, get_dynamo_metrics, reset_dynamo_metrics  # noqa: E402
from reference.backends.api import (  # noqa: E402
    compile_only,
    is_device_tensor,
    reset_graph_break_thresholds,
    set_graph_break_thresholds,
    to_device,
)
from reference.backends.precompiled_file import PrecompiledFunction, Variant, load_precompiled, precompile  # noqa: E402
from reference.backends.serializable import (  # noqa: E402
    PrecompileError,
    PrecompiledFileError,
    PrecompiledInputError,
    PrecompiledIntegrityError,
    PrecompiledTargetError,
    PrecompiledVersionError,
)

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
