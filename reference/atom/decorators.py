"""``@support_torch_compile``: a model class that compiles itself by level, then skips guards.

At levels 0 and 1 the decorated model sets ``do_not_compile`` and calls ``forward`` directly (at
level 1 the runner, not the model, wraps it in Dynamo with the eager backend: see
:func:`compile_model`). At level 2 and above the first call marks dimension 0 of every tensor
argument dynamic and compiles ``forward`` with the level's backend (Inductor, or the reference
backend when Inductor is off, at level 2; :class:`~reference.atom.vllm_backend.VllmBackend` at
level 3). Every later call runs the bytecode Dynamo produced for that first call directly,
without evaluating Dynamo's guards: the forward's code object is swapped for the compiled one for
the duration of the call. A forward whose compiled code reassigns a module buffer is refused at
that first compile (:class:`BufferUpdateError`), since recorded graphs would silently keep reading
the old tensor.

The swap is per class: while one instance dispatches, its class's ``forward`` is the compiled code,
so do not run an uncompiled instance of the same class concurrently on another thread.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import types
import typing
from typing import Any, Callable, Optional, Union

import torch

from reference import NeuronBackendError
from reference.atom.vllm_backend import VllmBackend
from reference.atom.config import CompilationLevel, Config
from reference.atom.counters import COUNTERS
from reference.atom.recorder import recording_backend
from reference.atom.monitor import decompile, dump_debug_file, end_monitoring_torch_compile, start_monitoring_torch_compile
from reference.core.torch_compat import inductor_module, mark_dynamic, register_bytecode_hook

__all__ = [
    "support_torch_compile",
    "TorchCompileWrapperWithCustomDispatcher",
    "BufferUpdateError",
    "compile_model",
    "level_backend",
]


class BufferUpdateError(NeuronBackendError, RuntimeError):
    """The compiled forward reassigns a module buffer; names the class and shows the code."""


_TENSOR_ANNOTATIONS = (torch.Tensor, Optional[torch.Tensor], "torch.Tensor", "Optional[torch.Tensor]", "torch.Tensor | None")


class _BytecodeHooks:
    """One Dynamo bytecode hook for the process, registered on the first compile (never at import),
    that hands each new code object to the wrapper compiling on this thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered = False
        self._local = threading.local()

    @contextlib.contextmanager
    def compiling(self, wrapper: TorchCompileWrapperWithCustomDispatcher):
        with self._lock:
            if not self._registered:
                register_bytecode_hook(self._hook)
                self._registered = True
        previous = getattr(self._local, "wrapper", None)
        self._local.wrapper = wrapper
        try:
            yield
        finally:
            self._local.wrapper = previous

    def _hook(self, old_code: types.CodeType, new_code: types.CodeType) -> None:
        wrapper = getattr(self._local, "wrapper", None)
        if wrapper is not None and old_code is wrapper.original_code_object:
            wrapper.bytecode_hook(old_code, new_code)


_HOOKS = _BytecodeHooks()


def level_backend(config: Config, prefix: str = "") -> Any:
    """The ``torch.compile`` backend a level uses (levels 2 and 3)."""
    cc = config.compilation_config
    if cc.level == CompilationLevel.PIECEWISE:
        return VllmBackend(config, prefix=prefix)
    if cc.level == CompilationLevel.DYNAMO_ONCE:
        if cc.use_inductor and cc.piece_compiler != "reference":
            return "inductor"
        # the seam sits on a lower floor; imported here to keep importing this module cheap
        from reference.backends.neuron import neuron_backend

        return neuron_backend
    raise ValueError(f"level {int(cc.level)} compiles nothing; levels 2 and 3 have a backend")


def _with_inductor_config(backend: Any, patches: dict) -> Any:
    """``"inductor"`` with the configuration's Inductor patches; any other backend as it is."""
    if backend != "inductor":
        return backend
    patches = dict(patches)

    def inductor(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        return inductor_module("compile_fx").compile_fx(  # Inductor: heavy, imported on use
            gm, example_inputs, config_patches=patches)

    return inductor


class TorchCompileWrapperWithCustomDispatcher:
    """Holds the compiled callable and the code objects Dynamo produced for ``forward``."""

    def __init__(self, config: Config, prefix: str = "") -> None:
        cc = config.compilation_config
        backend = level_backend(config, prefix)
        self.atom_backend = backend
        if not isinstance(backend, VllmBackend):
            # Level 2's one graph is a recordable launch, as level 3's pieces are, so a graph
            # recorded around the model records it (inline, or live where an eager region runs
            # inside it).
            backend = recording_backend(_with_inductor_config(backend, cc.inductor_compile_config))
        self.compiled_callable = torch.compile(self.forward, fullgraph=True, backend=backend)
        self.original_code_object = self.__class__.forward.__code__
        self.compiled_codes: list[types.CodeType] = []
        self.use_custom_dispatcher = cc.level >= CompilationLevel.DYNAMO_ONCE

    def bytecode_hook(self, old_code: types.CodeType, new_code: types.CodeType) -> None:
        COUNTERS.bump("num_dynamo_compiles")
        dump_debug_file(self.atom_config, f"decompiled_code_{len(self.compiled_codes) + 1}.py", decompile(new_code))
        if "update" in new_code.co_names:
            # refused before it is kept: the guard-free dispatcher must never run this code
            raise BufferUpdateError(
                f"{type(self).__name__}.forward reassigns a module buffer (the compiled code updates "
                "the module's _buffers); a recorded graph would keep reading the old tensor. Update "
                "the buffer in place (buf.copy_(...)) or run this model at level 0. Compiled code:\n"
                + decompile(new_code)
            )
        self.compiled_codes.append(new_code)

    @contextlib.contextmanager
    def dispatch_to_code(self, index: int):
        """Run ``forward`` as the ``index``-th compiled code object for the ``with`` block."""
        cls = type(self)
        cls.forward.__code__ = self.compiled_codes[index]
        try:
            yield
        finally:
            cls.forward.__code__ = self.original_code_object


def _dynamic_dims_from_signature(forward: Callable) -> dict[str, int]:
    dims = {}
    hints = {}
    try:
        hints = typing.get_type_hints(forward)
    except Exception:  # unresolvable annotations: fall back to the raw ones
        pass
    for name, param in inspect.signature(forward).parameters.items():
        if name == "self":
            continue
        annotation = hints.get(name, param.annotation)
        if annotation in _TENSOR_ANNOTATIONS or annotation is inspect.Parameter.empty:
            dims[name] = 0
    return dims


def support_torch_compile(cls: Optional[type] = None, *, dynamic_arg_dims: Optional[dict[str, Union[int, list[int]]]] = None):
    """Class decorator; the class's ``__init__`` gains the keywords ``atom_config`` (a
    :class:`~reference.atom.config.Config`) and ``prefix``. ``dynamic_arg_dims`` maps forward
    argument names to the dimensions to mark dynamic (default: dimension 0 of every argument
    annotated as a tensor, or not annotated, whose value is a tensor)."""

    def decorate(cls: type) -> type:
        if "forward" not in vars(cls) and not hasattr(cls, "forward"):
            raise TypeError(f"@support_torch_compile: {cls.__name__} has no forward")
        dims = dict(dynamic_arg_dims) if dynamic_arg_dims is not None else _dynamic_dims_from_signature(cls.forward)
        return _support_torch_compile(cls, dims)

    return decorate(cls) if cls is not None else decorate


def _support_torch_compile(cls: type, dynamic_arg_dims: dict[str, Union[int, list[int]]]) -> type:
    cls.__bases__ = cls.__bases__ + (TorchCompileWrapperWithCustomDispatcher,)
    old_init = cls.__init__
    init_params = inspect.signature(old_init).parameters
    takes_config = "atom_config" in init_params  # passed on only to an __init__ that names it

    def __init__(self, *args, atom_config: Optional[Config] = None, prefix: str = "", **kwargs):
        config = atom_config if atom_config is not None else Config()
        if takes_config:
            kwargs["atom_config"] = config
        old_init(self, *args, **kwargs)
        self.atom_config = config
        cc = config.compilation_config
        self.do_not_compile = config.enforce_eager or cc.level in (CompilationLevel.NO_COMPILATION, CompilationLevel.DYNAMO_AS_IS)
        if self.do_not_compile:
            return
        TorchCompileWrapperWithCustomDispatcher.__init__(self, config, prefix)

    def __call__(self, *args, **kwargs):
        if self.do_not_compile or torch.compiler.is_compiling():
            return self.forward(*args, **kwargs)
        if not self.compiled_codes:
            bound = inspect.signature(type(self).forward).bind(self, *args, **kwargs)
            bound.apply_defaults()
            for name, dims in dynamic_arg_dims.items():
                arg = bound.arguments.get(name)
                if isinstance(arg, torch.Tensor) and arg.dim() > 0:
                    dims = [dims] if isinstance(dims, int) else list(dims)
                    mark_dynamic(arg, [d + arg.dim() if d < 0 else d for d in dims])
            start_monitoring_torch_compile(self.atom_config)
            try:
                with _HOOKS.compiling(self):
                    return self.compiled_callable(*args, **kwargs)
            finally:
                end_monitoring_torch_compile(self.atom_config)
        if not self.use_custom_dispatcher:
            return self.compiled_callable(*args, **kwargs)
        COUNTERS.bump("num_guardless_dispatches")
        with self.dispatch_to_code(0):
            return self.forward(*args, **kwargs)

    cls.__init__ = __init__
    cls.__call__ = __call__
    return cls


def compile_model(model: torch.nn.Module, config: Config) -> torch.nn.Module:
    """What the model runner does to ``model`` at ``config``'s level; returns ``model`` itself.

    At level 1 the runner, not the decorator, compiles: every ``@support_torch_compile`` module in
    ``model`` (``model`` included) gets its ``forward`` compiled in place by Dynamo with the
    ``eager`` backend and a full graph (a graph break is an error), as a recordable launch. A model
    with no such module has its ``@token_graph`` units compiled so, or else its own ``forward``.
    Compiling in place keeps the module's ``__call__`` (a token-graph unit's record and replay)
    outside Dynamo. Calling it again compiles nothing more. Every other level returns ``model``
    untouched: it compiles itself (levels 2 and 3) or runs eagerly (level 0, ``enforce_eager``).
    """
    if config.enforce_eager or config.compilation_config.level != CompilationLevel.DYNAMO_AS_IS:
        return model
    targets = [m for m in model.modules() if isinstance(m, TorchCompileWrapperWithCustomDispatcher)]
    if not targets:
        targets = [m for m in model.modules() if getattr(type(m), "token_graph_per_phase", None) is not None]
    backend = recording_backend("eager")
    for module in targets or [model]:
        if module.__dict__.get("_atom_runner_compiled"):
            continue
        module.forward = torch.compile(module.forward, backend=backend, fullgraph=True)
        module.__dict__["_atom_runner_compiled"] = True
    return model
