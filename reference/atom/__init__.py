"""ATOM-style compilation and graph capture on top of the reference pipeline.

Two halves share this package. Compilation: levels and configuration, the compile decorator, custom
ops, piecewise splitting, the compiler adaptors (Inductor and the reference's own pipeline) and the
compiler manager with its on-disk map. Graph capture: graph modes, the forward context, token and
request graphs.

Importing this package does no work: no tracing, no op registration, no patching; Inductor
internals are imported where they are first used.
"""

from reference.atom.graph_mode import CUDAGraphMode
from reference.atom.custom_ops import CustomOpError, direct_register_custom_op, is_registered_op
from reference.atom.config import (
    PRESETS,
    CompilationConfig,
    CompilationLevel,
    Config,
    ConfigError,
    default_capture_sizes,
    preset,
)
from reference.atom.counters import COUNTERS, CompilationCounter, CounterSnapshot
from reference.atom.splitting import SplitItem, split_graph
from reference.atom.compiler_interface import (
    AlwaysHitShapeEnv,
    CompileCacheLoadError,
    CompilerInterface,
    InductorAdaptor,
    InductorStandaloneAdaptor,
    ReferenceAdaptor,
    make_compiler,
)
from reference.atom.piecewise_backend import ConcreteSizeEntry, PiecewiseBackend, PiecewiseCompileInterpreter
from reference.atom.vllm_backend import CACHE_FILE_NAME, CompileCacheWarning, CompilerManager, VllmBackend
from reference.atom.monitor import end_monitoring_torch_compile, start_monitoring_torch_compile
from reference.atom.decorators import (
    BufferUpdateError,
    TorchCompileWrapperWithCustomDispatcher,
    compile_model,
    support_torch_compile,
)

__all__ = [
    "CUDAGraphMode",
    "CompilationLevel",
    "CompilationConfig",
    "Config",
    "ConfigError",
    "PRESETS",
    "preset",
    "default_capture_sizes",
    "direct_register_custom_op",
    "is_registered_op",
    "CustomOpError",
    "COUNTERS",
    "CompilationCounter",
    "CounterSnapshot",
    "SplitItem",
    "split_graph",
    "CompilerInterface",
    "AlwaysHitShapeEnv",
    "InductorStandaloneAdaptor",
    "InductorAdaptor",
    "ReferenceAdaptor",
    "CompileCacheLoadError",
    "make_compiler",
    "ConcreteSizeEntry",
    "PiecewiseBackend",
    "PiecewiseCompileInterpreter",
    "CompilerManager",
    "VllmBackend",
    "CompileCacheWarning",
    "CACHE_FILE_NAME",
    "start_monitoring_torch_compile",
    "end_monitoring_torch_compile",
    "support_torch_compile",
    "TorchCompileWrapperWithCustomDispatcher",
    "BufferUpdateError",
    "compile_model",
]

# --- graph capture: names added by the graph-capture half below this line ---------------------
from reference.atom.forward_context import (  # noqa: E402
    AttentionMetaData,
    Context,
    DPMetadata,
    ForwardContext,
    ForwardContextError,
    KVCacheTensor,
    SpecDecodeMetadata,
    in_forward_context,
    get_forward_context,
    reset_forward_context,
    set_forward_context,
)
from reference.atom.recorder import (  # noqa: E402
    CPURecording,
    CUDARecording,
    GraphCaptureError,
    GraphPool,
    Recording,
    drain_collectives,
    recording_backend,
    track_collective,
)
from reference.atom.forward_mode import ForwardMode, decode_bucket_splits, decode_ubatch_request_ranges  # noqa: E402
from reference.atom.region_graph import (  # noqa: E402
    DraftGraph,
    ReqGraph,
    TokenGraph,
    eager_region,
    graph_pool,
    request_bucket,
    token_graph,
    token_graph_of,
)
from reference.atom.model_runner import (  # noqa: E402
    ModelRunner,
    RunnerCounters,
    StepReport,
    check_runner_config,
    resolve_capture_sizes,
    step_report,
)

__all__ += [
    "AttentionMetaData",
    "Context",
    "DPMetadata",
    "SpecDecodeMetadata",
    "KVCacheTensor",
    "ForwardContext",
    "ForwardContextError",
    "set_forward_context",
    "get_forward_context",
    "reset_forward_context",
    "in_forward_context",
    "GraphPool",
    "GraphCaptureError",
    "Recording",
    "CPURecording",
    "CUDARecording",
    "recording_backend",
    "eager_region",
    "token_graph",
    "token_graph_of",
    "TokenGraph",
    "ReqGraph",
    "request_bucket",
    "graph_pool",
    "ModelRunner",
    "StepReport",
    "step_report",
    "RunnerCounters",
    "check_runner_config",
    "resolve_capture_sizes",
    "DraftGraph",
    "ForwardMode",
    "decode_bucket_splits",
    "decode_ubatch_request_ranges",
    "drain_collectives",
    "track_collective",
]
