"""The level-3 ``torch.compile`` backend and the compiler manager with its on-disk map.

:class:`VllmBackend` is what Dynamo calls with the traced graph. It derives the cache directory
(``<cache_root>/<hash>/rank_<i>/<prefix>/``; the hash covers the configuration, the traced source
files, the graph itself and the piece compiler's state), splits the graph at the splitting ops,
compiles every other piece through :class:`CompilerManager`, writes ``computation_graph.py`` and
returns the stitching module (wrapped to copy inputs into static buffers when
``cudagraph_copy_inputs`` is on).

:class:`CompilerManager` compiles or loads one piece, keyed by ``(runtime_shape, graph_index,
compiler name)``. Its map of handles is the file ``vllm_compile_cache.py``: a ``pprint``-ed Python
literal, read back with ``ast.literal_eval`` (never executed), published atomically. A map that is
damaged, of another format, or written for another hash is ignored with a warning and rewritten.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import pprint
import re
import threading
import time
import warnings
from typing import Any, Callable, Optional

import torch
import torch.fx as fx

from reference import get_rank
from reference.atom.compiler_interface import CompileCacheLoadError, CompilerInterface, make_compiler
from reference.atom.config import CompilationConfig, Config
from reference.atom.counters import COUNTERS
from reference.atom.monitor import dump_debug_file, write_text_atomically
from reference.atom.recorder import launch
from reference.atom.piecewise_backend import PiecewiseBackend, PiecewiseCompileInterpreter, SplittingPiece
from reference.atom.splitting import SplitItem, split_graph

__all__ = ["CompilerManager", "VllmBackend", "CompileCacheWarning", "CACHE_FILE_NAME", "default_cache_root"]

log = logging.getLogger(__name__)

CACHE_FILE_NAME = "vllm_compile_cache.py"
_FORMAT = "atom-compile-cache-1"
_HEADER = (
    "# Compile cache map of reference.atom: (runtime_shape, graph_index, compiler) -> handle.\n"
    "# A Python literal read with ast.literal_eval; it is never executed.\n"
)
_STACK_FILE = re.compile(r'File "([^"]+)", line \d+')


class CompileCacheWarning(UserWarning):
    """The compile cache map could not be used as found; it is rebuilt."""


def default_cache_root() -> str:
    """Where compile caches go when ``CompilationConfig.cache_dir`` is empty."""
    return os.path.join(os.path.expanduser("~"), ".cache", "atom", "torch_compile_cache")


def _valid_key(key: Any) -> bool:
    return (
        isinstance(key, tuple)
        and len(key) == 3
        and (key[0] is None or (isinstance(key[0], int) and not isinstance(key[0], bool)))
        and isinstance(key[1], int)
        and isinstance(key[2], str)
    )


class CompilerManager:
    """Compile-or-load for every piece of one model, with the persisted map of handles."""

    def __init__(self, compilation_config: CompilationConfig, compiler: Optional[CompilerInterface] = None) -> None:
        self.compilation_config = compilation_config
        self.compiler = compiler or make_compiler(compilation_config)
        self.cache: dict[tuple[Optional[int], int, str], Any] = {}
        self.disable_cache = False
        self.cache_dir = ""
        self.cache_file_path = ""
        self.hash_key = ""
        self._dirty = False
        self._lock = threading.Lock()

    def compute_hash(self, config: Any) -> str:
        return self.compiler.compute_hash(config)

    def initialize_cache(self, cache_dir: str, hash_key: str, disable_cache: bool = False, prefix: str = "") -> None:
        """Use ``cache_dir`` (already ``.../<hash>/rank_<i>/<prefix>``) and read its map."""
        self.cache_dir = cache_dir
        self.hash_key = hash_key
        self.disable_cache = disable_cache
        self.cache_file_path = os.path.join(cache_dir, CACHE_FILE_NAME)
        self.cache = {}
        if not disable_cache:
            os.makedirs(cache_dir, exist_ok=True)
            self.cache = self._read_map()
        self.compiler.initialize_cache(cache_dir, disable_cache=disable_cache, prefix=prefix)

    def _read_map(self) -> dict:
        path = self.cache_file_path
        if not os.path.exists(path):
            return {}
        problem = None
        try:
            with open(path, encoding="utf-8") as f:
                data = ast.literal_eval(f.read())
        except (OSError, ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            data, problem = None, f"it does not parse as a Python literal ({type(exc).__name__})"
        if problem is None:
            if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("entries"), dict):
                problem = f"it is not a map of format {_FORMAT!r}"
            elif data.get("hash") != self.hash_key:
                problem = f"it was written for hash {data.get('hash')!r}, not {self.hash_key!r}"
            elif not all(_valid_key(k) for k in data["entries"]):
                problem = "it holds keys other than (runtime_shape, graph_index, compiler)"
        if problem is not None:
            warnings.warn(f"compile cache map {path} is ignored and will be rebuilt: {problem}", CompileCacheWarning, stacklevel=3)
            self._dirty = True
            return {}
        return dict(data["entries"])

    def save_to_file(self) -> None:
        """Publish the map if it changed; entries another process published meanwhile are kept."""
        with self._lock:
            if self.disable_cache or not self._dirty:
                return
            on_disk = {}
            if os.path.exists(self.cache_file_path):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", CompileCacheWarning)
                    on_disk = self._read_map()
            merged = {**on_disk, **self.cache}
            text = _HEADER + pprint.pformat({"format": _FORMAT, "hash": self.hash_key, "entries": merged}, indent=4) + "\n"
            write_text_atomically(self.cache_file_path, text)
            self.cache = merged
            self._dirty = False
        COUNTERS.bump("num_cache_entries_updated")

    def load(self, graph: fx.GraphModule, example_inputs: list, graph_index: int, runtime_shape: Optional[int] = None) -> Optional[Callable]:
        """The cached callable for this piece and shape, or ``None`` (absent or unloadable)."""
        key = (runtime_shape, graph_index, self.compiler.name)
        if key not in self.cache:
            return None
        try:
            compiled = self.compiler.load(self.cache[key], graph, example_inputs, graph_index, runtime_shape)
        except CompileCacheLoadError as exc:
            warnings.warn(f"compile cache entry {key} is recompiled: {exc}", CompileCacheWarning, stacklevel=3)
            del self.cache[key]
            self._dirty = True
            return None
        COUNTERS.bump("num_cache_hits")
        return compiled

    def compile(
        self,
        graph: fx.GraphModule,
        example_inputs: list,
        compiler_config: dict[str, Any],
        graph_index: int = 0,
        num_graphs: int = 1,
        runtime_shape: Optional[int] = None,
    ) -> Callable:
        """Load the piece from the cache, else compile it and record its handle."""
        compiled = None if self.disable_cache else self.load(graph, example_inputs, graph_index, runtime_shape)
        if compiled is not None:
            return compiled
        key = f"artifact_shape_{runtime_shape}_subgraph_{graph_index}"
        start = time.perf_counter()
        compiled, handle = self.compiler.compile(graph, example_inputs, compiler_config, runtime_shape, key)
        COUNTERS.bump("num_backend_compilations")
        if runtime_shape is not None:
            COUNTERS.bump("num_specialized_compilations")
        log.debug(
            "compiled piece %d/%d for %s with %s in %.2f s",
            graph_index + 1, num_graphs, "every size" if runtime_shape is None else f"size {runtime_shape}",
            self.compiler.name, time.perf_counter() - start,
        )
        if handle is not None and not self.disable_cache:
            self.cache[(runtime_shape, graph_index, self.compiler.name)] = handle
            self._dirty = True
        return compiled


def traced_files(graph: fx.GraphModule) -> list[str]:
    """Source files that produced the graph's nodes (from each node's recorded stack)."""
    files: set[str] = set()
    for node in graph.graph.nodes:
        files.update(_STACK_FILE.findall(node.meta.get("stack_trace") or ""))
    return sorted(f for f in files if os.path.isfile(f))


class VllmBackend:
    """The ``torch.compile`` backend of level 3 (one instance per compiled model part)."""

    def __init__(
        self,
        config: Config,
        prefix: str = "",
        extra_traced_files: tuple[str, ...] = (),
        compiler: Optional[CompilerInterface] = None,
    ) -> None:
        """``compiler`` overrides the piece compiler the configuration picks (``make_compiler``)."""
        self.config = config
        self.compilation_config = config.compilation_config
        self.prefix = prefix
        self.extra_traced_files = tuple(extra_traced_files)
        self.compiler_manager = CompilerManager(self.compilation_config, compiler)
        self.split_gm: Optional[fx.GraphModule] = None
        self.piecewise_graphs: list[SplitItem] = []
        self.piecewise_backends: dict[str, PiecewiseBackend] = {}
        self.cache_dir = ""
        self.hash_key = ""
        #: What the last call handed to Dynamo: the stitching module, or its input-copying wrapper.
        self.runnable: Optional[Callable] = None

    def compute_hash_key(self, graph: fx.GraphModule) -> str:
        """Digest of the configuration, the traced source files, the graph and the compiler."""
        hasher = hashlib.sha256()
        hasher.update(self.config.compute_hash().encode())
        for path in sorted(set(traced_files(graph)) | set(self.extra_traced_files)):
            hasher.update(path.encode())
            with open(path, "rb") as f:
                hasher.update(f.read())
        hasher.update(graph.code.encode())
        hasher.update(self.compiler_manager.compute_hash(self.config).encode())
        hasher.update(self.compiler_manager.compiler.name.encode())
        return hasher.hexdigest()[:10]

    def __call__(self, graph: fx.GraphModule, example_inputs: list) -> Callable:
        cc = self.compilation_config
        COUNTERS.bump("num_graphs_seen")
        name = self.prefix or "model"
        dump_debug_file(self.config, f"{name}_traced_graph.py", graph.print_readable(print_output=False))
        self.hash_key = self.compute_hash_key(graph)
        root = cc.cache_dir or default_cache_root()
        self.cache_dir = os.path.join(root, self.hash_key, f"rank_{get_rank()}", self.prefix)
        self.compiler_manager.initialize_cache(self.cache_dir, self.hash_key, prefix=self.prefix)

        split_gm, items = split_graph(graph, cc.splitting_ops or [])
        COUNTERS.bump("num_piecewise_graphs_seen", len(items))
        to_compile = [item.submod_name for item in items if not item.is_splitting_graph]
        interpreter = PiecewiseCompileInterpreter(
            split_gm, to_compile, list(cc.resolved_compile_sizes), self.compiler_manager, dict(cc.inductor_compile_config)
        )
        interpreter.run(*example_inputs)
        for item in items:
            if item.is_splitting_graph:
                split_gm.__dict__[item.submod_name] = SplittingPiece(item.graph, f"split:{item.submod_name}")
        COUNTERS.bump("num_piecewise_capturable_graphs_seen", len(interpreter.backends))
        self.compiler_manager.save_to_file()
        self.split_gm, self.piecewise_graphs, self.piecewise_backends = split_gm, items, interpreter.backends

        source = "import torch\n\n" + split_gm.print_readable(print_output=False, include_stride=True, include_device=True)
        write_text_atomically(os.path.join(self.cache_dir, "computation_graph.py"), source)
        dump_debug_file(self.config, f"{name}_computation_graph.py", source)

        if not cc.cudagraph_copy_inputs or cc.cudagraph_mode is None or cc.cudagraph_mode.value == 0:
            self.runnable = split_gm
        else:
            self.runnable = _CopyIntoStaticBuffers(split_gm, graph, max(self.config.capture_sizes or [1]))
        return self.runnable


class _CopyIntoStaticBuffers:
    """Copies every input with a symbolic batch size into a static buffer before the call, so a
    graph recorded against those buffers reads the live inputs at the recorded addresses."""

    def __init__(self, split_gm: fx.GraphModule, graph: fx.GraphModule, largest: int) -> None:
        self.split_gm = split_gm
        # The traced values (fake tensors) tell which inputs have a symbolic first dimension.
        traced = [node.meta.get("example_value") for node in graph.graph.find_nodes(op="placeholder")]
        self.tensor_indices = [
            i
            for i, x in enumerate(traced)
            if isinstance(x, torch.Tensor) and x.dim() > 0 and isinstance(x.shape[0], torch.SymInt)
        ]
        self._largest = largest
        self.input_buffers: dict[int, torch.Tensor] = {}

    def _buffer(self, index: int, live: torch.Tensor) -> torch.Tensor:
        buf = self.input_buffers.get(index)
        rows = live.shape[0]
        if buf is None or buf.shape[0] < rows or buf.shape[1:] != live.shape[1:] or buf.dtype != live.dtype:
            # Sized for the largest capture size once; only a larger (never recorded) batch regrows it.
            buf = torch.empty((max(rows, self._largest), *live.shape[1:]), dtype=live.dtype, device=live.device)
            self.input_buffers[index] = buf
        return buf[:rows]

    def _copy_in(self, *args: Any) -> list:
        args = list(args)
        for index in self.tensor_indices:
            static = self._buffer(index, args[index])
            static.copy_(args[index])
            args[index] = static
        return args

    def __call__(self, *args: Any) -> Any:
        # The copy is a launch of its own, so a recording around the model replays it too.
        return self.split_gm(*launch(self._copy_in, args, eager=False, name="copy inputs", compiled=False))
