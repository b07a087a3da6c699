"""Typed errors of the reference backend.

Every error names what went wrong (the graph, op, flag or variable) and what to do about it.

Errors raised while Dynamo calls the backend would normally reach the caller wrapped in
``torch._dynamo.exc.BackendCompilerFailed``. Dynamo lets one family of its own exceptions pass
through unwrapped (those deriving from ``ShortenTraceback``), so :class:`NeuronBackendError` derives
from it: a caller can write ``except NEFFCompilationError`` around a compiled call, as the backend
reference promises.

This module does not import Dynamo (0.9-1.0 s of a process's start here): a serving process that
runs precompiled graphs never needs it (docs/caching.md, "Precompiled functions"). Until Dynamo is
imported, :class:`NeuronBackendError` derives from a stand-in of the same layout; every path that
lets Dynamo call the backend imports :mod:`reference.core.torch_compat`, which imports Dynamo and
calls :func:`derive_from_dynamo`, so that from then on every error here, including those made
before, is a ``ShortenTraceback``. No error of the reference can reach Dynamo before that.
"""

from __future__ import annotations

from typing import Sequence


class _Standalone(RuntimeError):
    """What :class:`NeuronBackendError` derives from before Dynamo is imported: a
    ``RuntimeError`` with an instance dict, as Dynamo's ``TorchDynamoException`` is."""


def derive_from_dynamo(short_traceback: type) -> None:
    """Put Dynamo's ``ShortenTraceback`` (``short_traceback``) under :class:`NeuronBackendError`
    (:mod:`reference.core.torch_compat` calls this once, when it imports Dynamo)."""
    if NeuronBackendError.__bases__ != (short_traceback,):
        NeuronBackendError.__bases__ = (short_traceback,)


class NeuronBackendError(_Standalone):
    """Base of every error the reference backend raises on purpose (a ``ShortenTraceback`` once
    Dynamo is imported; see the module doc)."""

    def __init__(self, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.first_useful_frame = None  # what ShortenTraceback's __init__ sets: no frame to cut at
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # keep errors picklable across forked workers
        return (_rebuild, (type(self), {k: v for k, v in self.__dict__.items() if k not in _DYNAMO_STATE}))


# What Dynamo attaches to an exception that passes through it (its tracer output, the compile id,
# frames): the error's meaning does not depend on it, and some of it does not pickle.
_DYNAMO_STATE = frozenset(
    {"_torch_dynamo_tracer_output", "frame_exec_strategy", "first_useful_frame", "real_stack",
     "innermost_user_frame_summary", "compile_id"}
)


def _rebuild(cls, state):
    obj = cls.__new__(cls)
    NeuronBackendError.__init__(obj, state.get("message", ""))
    obj.__dict__.update(state)
    return obj


class NEFFCompilationError(NeuronBackendError):
    """The compiler rejected a graph, its arguments, or failed while compiling it."""

    def __init__(
        self,
        message: str,
        *,
        graph_name: str | None = None,
        command: Sequence[str] | None = None,
        compiler_log: str = "",
        op: str | None = None,
    ) -> None:
        text = (f"graph {graph_name!r}: " if graph_name else "") + message
        if compiler_log:
            text += f"\ncompiler output:\n{compiler_log.rstrip()}"
        if command:
            text += "\ncommand line:\n  " + " ".join(command)
        super().__init__(text)
        self.reason = message  # what went wrong, without the graph name and the compiler's output
        self.graph_name = graph_name
        self.command = list(command) if command else None
        self.compiler_log = compiler_log
        self.op = op  # the ATen op the compiler rejected, when the error could be traced to one


class CompilerArgumentError(NEFFCompilationError):
    """An unknown compiler flag or a malformed flag value."""

    def __init__(self, flag: str, problem: str, *, accepted: str = "") -> None:
        msg = f"compiler argument {flag!r}: {problem}"
        if accepted:
            msg += f" (accepted: {accepted})"
        super().__init__(msg)
        self.flag = flag


class NEFFExecutionError(NeuronBackendError):
    """A compiled artifact failed to load or to execute."""

    def __init__(self, message: str, *, graph_name: str | None = None) -> None:
        prefix = f"graph {graph_name!r}: " if graph_name else ""
        super().__init__(prefix + message)
        self.graph_name = graph_name


class LoweringError(NEFFCompilationError):
    """A graph could not be lowered to StableHLO (for example, an op with no lowering)."""

    def __init__(self, message: str, *, graph_name: str | None = None, ops: Sequence[str] = ()) -> None:
        super().__init__(message, graph_name=graph_name)
        self.ops = list(ops)


class TrainingUnsupportedError(LoweringError):
    """A training graph whose backward graph cannot be lowered: refused when its forward compiles,
    so it falls back (or fails) as one graph, before a step has run."""

    def __init__(self, cause: LoweringError) -> None:
        super().__init__(
            "this graph cannot be trained with the neuron backend: its backward graph does not lower. "
            "Run the forward under torch.no_grad() if no backward() is needed; else set "
            "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to run this graph (forward and backward) eagerly, "
            f"or move the op out of the compiled region.\n{cause.reason}",
            graph_name=cause.graph_name, ops=cause.ops,
        )


class UnsupportedInputError(NeuronBackendError):
    """A graph input the backend cannot take (a non-tensor, a symbolic shape, a dtype)."""

    def __init__(self, message: str, *, graph_name: str | None = None) -> None:
        prefix = f"graph {graph_name!r}: " if graph_name else ""
        super().__init__(prefix + message)
        self.graph_name = graph_name


class PrecisionError(UnsupportedInputError):
    """A float64 graph refused under ``NEURON_REFERENCE_FLOAT64=error`` (the device computes in
    float32 at most)."""


class PrecisionWarning(UserWarning):
    """A graph computed at a lower precision than its dtype says (float64 computed in float32)."""


class DynamicShapeError(UnsupportedInputError):
    """``dynamic=True`` (or a dynamic ``shapes_spec``): the backend compiles static shapes only."""


class CacheMissError(NeuronBackendError):
    """A compile was needed while ``NEURON_LIBTORCH_ASSERT_CACHE_HIT`` demands a cache hit."""

    def __init__(self, graph_name: str, key: str, detail: str = "") -> None:
        super().__init__(
            f"graph {graph_name!r} missed the NEFF cache (key {key}) while NEURON_LIBTORCH_ASSERT_CACHE_HIT "
            "is set; warm the cache with the same compiler arguments (check the graph's scope)" + (f": {detail}" if detail else "")
        )
        self.graph_name = graph_name
        self.key = key


class FlowDirectoryError(NeuronBackendError, ValueError):
    """A directory handed to a flow (``parallel_compile``'s staged graphs, ``parallel_trace``'s or
    the capture seam's staging folder) that is missing or is not a directory; names the path."""

    def __init__(self, what: str, path: str, problem: str, todo: str) -> None:
        super().__init__(f"{what} {path!r} {problem}; {todo}")
        self.path = path


class CompilerStackMissingError(NeuronBackendError):
    """A ``neuron*`` backend used where the reference's compiler stack (torch-mlir, IREE) is not
    installed: the suite alone was installed, without the ``reference`` extra."""

    def __init__(self, missing: Sequence[str], prefix: str) -> None:
        super().__init__(
            f"the neuron* backends need the reference's compiler stack, and this environment ({prefix}) lacks "
            f"{', '.join(missing)}: install the 'reference' extra (pip install 'neuron-conformance[reference]'; "
            "in a checkout, pip install -e '.[reference]'). Without it this environment holds the conformance "
            "suite alone, which runs other implementations (--conformance-impl package.module:factory)"
        )
        self.missing = list(missing)


class BackendOptionError(NeuronBackendError, ValueError):
    """A ``torch.compile(options=...)`` entry of the wrong type or value."""


class EnvVarError(NeuronBackendError, ValueError):
    """An environment variable with a value the reference cannot parse."""

    def __init__(self, name: str, value: str, accepted: str, *, default_used: bool = False) -> None:
        if default_used:  # the user never set it: say so, and which variable to set
            message = (
                f"environment variable {name} is not set, and its default {value!r} cannot be used; "
                f"set {name} to {accepted}"
            )
        else:
            message = f"environment variable {name}={value!r} is not valid; accepted values: {accepted}"
        super().__init__(message)
        self.name = name
        self.value = value
        self.default_used = default_used


# --- precompiled graphs and files (reference.precompile, torch.compiler.load_compiled_function) ----------


class PrecompileError(NeuronBackendError):
    """``aot_compile`` asked for a graph the backend cannot hand over as bytes (says which and why).
    Raised by the compile side (:mod:`reference.backends.aot_seam`), kept here with the other errors."""

    def __init__(self, graph: str, why: str) -> None:
        super().__init__(
            f"{graph} cannot be precompiled with the neuron backend: {why}. Compile it with torch.compile "
            "(no aot_compile) instead, or change the function so that it is one inference graph"
        )
        self.graph = graph
        self.why = why


class PrecompiledFileError(NeuronBackendError):
    """A precompiled file (or the bytes of one compiled graph in it) cannot be used: names the file
    and the reason. Its artifact was not run (and, through :func:`reference.load_precompiled`,
    nothing of it was unpickled)."""

    def __init__(self, file: str, reason: str, what_to_do: str = "precompile the function again in this environment") -> None:
        super().__init__(f"precompiled file {file}: {reason}; {what_to_do}")
        self.file = file
        self.reason = reason


class PrecompiledVersionError(PrecompiledFileError):
    """The file was written by another torch, reference or runtime version, or in another format."""


class PrecompiledTargetError(PrecompiledFileError):
    """The file's artifact was built for another CPU than this process runs on."""


class PrecompiledIntegrityError(PrecompiledFileError):
    """The file is truncated, altered, not a precompiled file, or fails authentication."""


class PrecompiledInputError(PrecompiledFileError):
    """A loaded function was called with inputs its guards do not accept (another shape, dtype, ...)."""
