"""One compiled piece at run time: a general-shape callable plus lazily compiled sizes.

A piece whose inputs carry the symbolic batch size reads the size from that argument on every
call. A size listed in ``compile_sizes`` is compiled for exactly that size the first time it is
seen (through the compiler manager, so from the cache when it holds it) and reused after; every
other size runs the general-shape callable.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import torch
import torch.fx as fx

from reference.atom.recorder import launch
from reference.core.torch_compat import detect_fake_mode, enable_python_dispatcher

__all__ = ["ConcreteSizeEntry", "PiecewiseBackend", "PiecewiseCompileInterpreter", "SplittingPiece"]


@dataclasses.dataclass
class ConcreteSizeEntry:
    """The state of one ``compile_sizes`` entry for one piece."""

    runtime_shape: int
    need_to_compile: bool
    compiled: bool = False
    runnable: Optional[Callable] = None


class PiecewiseBackend:
    """The callable that stands in for one non-splitting piece of the stitching module."""

    def __init__(
        self,
        graph: fx.GraphModule,
        compile_sizes: list[int],
        piecewise_compile_index: int,
        total_piecewise_compiles: int,
        sym_shape_indices: list[int],
        compiled_graph_for_general_shape: Callable,
        manager: Any,
        compiler_config: dict[str, Any],
    ) -> None:
        self.graph = graph
        self.piecewise_compile_index = piecewise_compile_index
        self.total_piecewise_compiles = total_piecewise_compiles
        self.sym_shape_indices = sym_shape_indices
        self.compiled_graph_for_general_shape = compiled_graph_for_general_shape
        self._manager = manager
        self._compiler_config = compiler_config
        self.first_run_finished = False
        self.concrete_size_entries: dict[int, ConcreteSizeEntry] = {
            size: ConcreteSizeEntry(runtime_shape=size, need_to_compile=True) for size in compile_sizes
        }

    def runtime_shape(self, args: tuple) -> Optional[int]:
        """The batch size of this call, or ``None`` for a piece with no symbolic size."""
        if not self.sym_shape_indices:
            return None
        return int(args[self.sym_shape_indices[0]])

    def __call__(self, *args: Any) -> Any:
        # A recordable launch: a graph recorded around the compiled model (token and request
        # graphs) records each piece inline, on the CPU recorder as on CUDA.
        return launch(self._run, args, eager=False, name=f"piece{self.piecewise_compile_index}")

    def _run(self, *args: Any) -> Any:
        if not self.first_run_finished:
            # The first call is the warm-up Dynamo runs right after compiling: general shape.
            self.first_run_finished = True
            return self.compiled_graph_for_general_shape(*args)
        shape = self.runtime_shape(args)
        entry = self.concrete_size_entries.get(shape) if shape is not None else None
        if entry is None:
            return self.compiled_graph_for_general_shape(*args)
        if entry.need_to_compile and not entry.compiled:
            entry.runnable = self._manager.compile(
                self.graph,
                list(args),
                self._compiler_config,
                graph_index=self.piecewise_compile_index,
                num_graphs=self.total_piecewise_compiles,
                runtime_shape=shape,
            )
            entry.compiled = True
            self._manager.save_to_file()
        return entry.runnable(*args)


class PiecewiseCompileInterpreter(torch.fx.Interpreter):
    """Runs the stitching module on fake inputs and, at each piece to compile, compiles it for the
    general shape and installs its :class:`PiecewiseBackend` in place of the submodule.

    Runs inside the Dynamo backend call, under the fake mode of Dynamo's tracing context.
    """

    def __init__(
        self,
        module: fx.GraphModule,
        compile_submod_names: list[str],
        compile_sizes: list[int],
        manager: Any,
        compiler_config: dict[str, Any],
        on_compiled: Optional[Callable[[str, PiecewiseBackend], None]] = None,
    ) -> None:
        super().__init__(module)
        self.fake_mode = detect_fake_mode()
        self.compile_submod_names = compile_submod_names
        self.compile_sizes = compile_sizes
        self.manager = manager
        self.compiler_config = compiler_config
        self.on_compiled = on_compiled
        self.backends: dict[str, PiecewiseBackend] = {}

    def run(self, *args: Any) -> Any:
        if self.fake_mode is None:
            raise RuntimeError("piecewise compilation runs inside a Dynamo backend call (no fake mode found)")
        fake_args = [self.fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
        with self.fake_mode, enable_python_dispatcher():
            return super().run(*fake_args)

    def call_module(self, target: Any, args: tuple, kwargs: dict) -> Any:
        output = super().call_module(target, args, kwargs)
        if target in self.compile_submod_names:
            index = self.compile_submod_names.index(target)
            submod = self.fetch_attr(target)
            sym_shape_indices = [i for i, x in enumerate(args) if isinstance(x, torch.SymInt)]
            general = self.manager.compile(
                submod,
                list(args),
                self.compiler_config,
                graph_index=index,
                num_graphs=len(self.compile_submod_names),
                runtime_shape=None,
            )
            backend = PiecewiseBackend(
                submod,
                self.compile_sizes,
                index,
                len(self.compile_submod_names),
                sym_shape_indices,
                general,
                self.manager,
                self.compiler_config,
            )
            # Replace the submodule with the backend as a plain attribute: the stitching module's
            # forward calls self.submod_<n>(...), which now reaches the backend.
            self.module.__dict__[target] = backend
            self.backends[target] = backend
            if self.on_compiled is not None:
                self.on_compiled(target, backend)
        return output


class SplittingPiece:
    """A splitting-op piece of the stitching module, left uncompiled and called as a recordable
    launch: recorded inline, unless the op is an eager region, which breaks a token graph there."""

    def __init__(self, graph: fx.GraphModule, name: str) -> None:
        self.graph = graph
        self.name = name

    def __call__(self, *args: Any) -> Any:
        return launch(self.graph, args, eager=False, name=self.name)
