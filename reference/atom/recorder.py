"""Recorders: record a forward pass once, replay it many times, with the CUDA-graph contract.

The contract, whatever the device:

- :meth:`Recording.record` runs ``fn(*static_inputs)`` once. What it launches is recorded against
  the addresses it read and wrote; ``static_inputs`` are the buffers the recording reads its
  inputs from.
- :meth:`Recording.replay` copies live inputs into those static buffers (a graph reads the
  addresses it was recorded with, never the caller's tensors), relaunches the recorded work and
  returns the recorded outputs: the same tensor objects every time, overwritten by each replay.
- A recording that breaks at eager regions (``break_at_eager_regions=True``, the TR_HYBRID token
  graphs) runs each :func:`~reference.atom.region_graph.eager_region` live at replay, reading the
  live forward context, and writes its result at the address the next segment was recorded
  reading. Without breaks (FULL) an eager region is recorded inline like any other launch and
  replays with what it saw at record time.

On CUDA a recording is one ``torch.cuda.CUDAGraph`` per segment. On the CPU there is no stream
capture, so the recording is the sequence of launches itself: every compiled callable (a graph the
``torch.compile`` backend returned, wrapped by :func:`recording_backend`; a level-3 piece, compiled
or splitting; a level-2 graph) and every eager region called while recording is kept with the
tensors it read and the tensors it returned. Replay calls each again on the recorded tensors and
copies the results to the recorded outputs. A launch made inside another (an eager region inside a
splitting piece or a whole compiled graph) is part of the outer one; when it breaks the recording,
the outer launch replays live, which on the CPU is what the segments around the break and the live
region amount to.

When nothing compiled ran (an eager model: level 0), the whole forward is recorded as one launch,
the CPU's stand-in for a stream capture of its kernels. When compiled pieces ran, tensor work that
goes through no launch (plain eager ops between pieces) is invisible to the CPU recorder, as host
work is to a CUDA graph; a recording whose outputs no launch produced is refused.

Every recording lays its launches' outputs out in one :class:`GraphPool`. Recordings are never in
use at once (a graph's outputs are consumed before another replays), so each lays out from offset 0
and the pool is as large as the largest recording, not the sum.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from reference import NeuronBackendError
from reference.atom.forward_context import ForwardContext, get_forward_context, swapped_forward_context
from reference.core.torch_compat import lookup_backend, pytree

__all__ = [
    "CPURecording",
    "CUDARecording",
    "GraphCaptureError",
    "GraphPool",
    "Launch",
    "Recording",
    "active_recording",
    "drain_collectives",
    "launch",
    "new_recording",
    "recording_backend",
    "track_collective",
]

_ALIGN = 64  # bytes; every slot in the pool starts on a cache line


class GraphCaptureError(NeuronBackendError, RuntimeError):
    """Recording or replaying a graph went wrong: nested recording, unknown bucket, a live input
    that does not fit its static buffer, or an output the recording cannot reproduce."""


class GraphPool:
    """The memory every recording lays its outputs out in.

    On the CPU it is one byte storage that grows to the largest recording; tensors laid out in it
    follow it when it grows. On CUDA it is a ``torch.cuda`` graph-pool handle shared by every
    capture, created on first use.
    """

    def __init__(self) -> None:
        self._storage: Optional[torch.UntypedStorage] = None
        self._cuda_handle: Any = None
        self._cuda_mempool: Any = None  # keeps the CUDA pool alive while this object lives
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes the pool holds now: the CPU storage, or the CUDA segments of the pool once a
        capture used it (0 before the first recording)."""
        if self._cuda_handle is not None:
            return self.cuda_reserved_bytes()
        return 0 if self._storage is None else self._storage.nbytes()

    def storage(self, nbytes: int) -> torch.UntypedStorage:
        """The pool's storage, grown to at least ``nbytes`` (contents kept)."""
        with self._lock:
            if self._storage is None:
                self._storage = torch.UntypedStorage(nbytes)
            elif self._storage.nbytes() < nbytes:
                self._storage.resize_(nbytes)
            return self._storage

    def cuda_handle(self) -> Any:
        """The graph-pool id every CUDA capture passes as ``pool=``.

        The pool is a ``torch.cuda.MemPool`` this object keeps, not a bare
        ``torch.cuda.graph_pool_handle()``: PyTorch's caching allocator counts the users of a private
        pool and releases it when the last graph captured into it is destroyed, after which a
        capture into the same id fails (``use_count > 0`` in ``CUDACachingAllocator.cpp``). A
        ``MemPool`` object is a user of its own pool, so recordings can be dropped (a reset, a
        second runner, another model) and the next capture still finds the pool alive. Torch
        builds without ``MemPool`` get the bare handle and that older lifetime.
        """
        with self._lock:
            if self._cuda_handle is None:
                mempool = getattr(torch.cuda, "MemPool", None)
                if mempool is not None:
                    self._cuda_mempool = mempool()
                    self._cuda_handle = self._cuda_mempool.id
                else:
                    self._cuda_handle = torch.cuda.graph_pool_handle()
            return self._cuda_handle

    def cuda_reserved_bytes(self) -> int:
        """Bytes the CUDA caching allocator holds in this pool's segments (0 before first use)."""
        if self._cuda_handle is None:
            return 0
        handle = tuple(self._cuda_handle)
        return sum(
            seg["total_size"] for seg in torch.cuda.memory_snapshot() if tuple(seg.get("segment_pool_id", ())) == handle
        )


@dataclass
class Launch:
    """One recorded call: ``fn(*args, **kwargs)`` whose results are written to ``outputs``.

    ``eager`` launches run live at replay (under the live forward context); the others replay under
    ``context``, the forward context in force when they were recorded.
    """

    fn: Callable
    args: tuple
    kwargs: dict
    outputs: Any
    eager: bool
    name: str
    context: Optional[ForwardContext] = None
    #: A compiled graph or piece (not an eager region, not glue such as a join of microbatches).
    compiled: bool = True


class _PendingCollectives:
    """Asynchronous collectives issued eagerly and not yet waited on (``torch.distributed`` work
    handles). Every recording drains them first: a collective still pending on a stream that a
    capture joins invalidates the capture (the seed's NCCL-watchdog drain); on the CPU, with
    nothing pending, draining is a no-op."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._works: list[Any] = []

    def track(self, work: Any) -> Any:
        with self._lock:
            self._works.append(work)
        return work

    def drain(self) -> int:
        with self._lock:
            works, self._works = self._works, []
        for work in works:
            work.wait()
        return len(works)


_PENDING = _PendingCollectives()


def track_collective(work: Any) -> Any:
    """Register an async collective's work handle (``dist.all_reduce(..., async_op=True)``) so that
    the next recording waits for it before it starts; returns ``work``."""
    return _PENDING.track(work)


def drain_collectives() -> int:
    """Wait for every tracked collective; returns how many were pending. Called before each
    recording (the drain-before-record step)."""
    return _PENDING.drain()


class _Active(threading.local):
    def __init__(self) -> None:
        self.recording: Optional[Recording] = None


_active = _Active()


def active_recording() -> Optional["Recording"]:
    """The recording capturing on this thread, if any."""
    return _active.recording


def launch(
    fn: Callable, args: tuple, kwargs: Optional[dict] = None, *, eager: bool, name: str = "", compiled: Optional[bool] = None
) -> Any:
    """Call ``fn(*args, **kwargs)``; while a recording is capturing, as a recorded launch.

    ``eager=True`` marks an eager region: a break point for recordings that break at them.
    ``compiled`` (default: ``not eager``) says whether ``fn`` is compiled work; ``False`` for glue
    (a copy, a join) that the runner adds around an otherwise eager model.
    """
    rec = _active.recording
    if rec is None:
        return fn(*args, **(kwargs or {}))
    compiled = (not eager) if compiled is None else compiled
    return rec._launch(
        fn, tuple(args), dict(kwargs or {}), eager=eager, name=name or getattr(fn, "__name__", "launch"), compiled=compiled
    )


class _RecordedPiece:
    """A compiled graph from a ``torch.compile`` backend, called through :func:`launch`."""

    def __init__(self, compiled: Callable, name: str) -> None:
        self._compiled = compiled
        self.name = name

    def __call__(self, *args: Any) -> Any:
        # Dynamo calls a backend's graph with positional tensors, whatever the inner backend is.
        return launch(self._compiled, args, eager=False, name=self.name)


def recording_backend(inner: Any = "inductor") -> Callable:
    """A ``torch.compile`` backend that compiles with ``inner`` (a backend name or callable) and
    makes every graph it returns a recordable launch.

    This is how compiled pieces enter a CPU recording; on CUDA it is harmless (the launch simply
    runs inside the capture).
    """
    counter = [0]

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        compile_fn = lookup_backend(inner) if isinstance(inner, str) else inner
        compiled = compile_fn(gm, example_inputs)
        counter[0] += 1
        label = inner if isinstance(inner, str) else getattr(inner, "__name__", type(inner).__name__)
        return _RecordedPiece(compiled, f"{label}:graph{counter[0]}")

    backend.__name__ = f"recording_backend[{inner if isinstance(inner, str) else type(inner).__name__}]"
    return backend


def _same_view(a: Any, b: torch.Tensor) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
        and a.device == b.device
    )


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


class Recording:
    """One recorded graph. Subclasses implement the device part; see the module docstring."""

    def __init__(self, *, pool: GraphPool, break_at_eager_regions: bool, name: str = "graph") -> None:
        self.pool = pool
        self.break_at_eager_regions = break_at_eager_regions
        self.name = name
        self.static_inputs: tuple[torch.Tensor, ...] = ()
        self.outputs: Any = None
        self.replays = 0
        #: How many pending collectives the drain before this recording waited for.
        self.drained = 0
        self._recorded = False

    # --- shared -----------------------------------------------------------------------------
    def record(self, fn: Callable, *static_inputs: torch.Tensor) -> Any:
        """Record ``fn(*static_inputs)`` once; return what that call returned.

        Raises :class:`GraphCaptureError` if this recording was already recorded, if another
        recording is capturing on this thread, or (CPU) if an output was not produced by a launch.
        """
        if self._recorded:
            raise GraphCaptureError(f"{self.name}: already recorded; record each bucket once and replay it")
        if _active.recording is not None:
            raise GraphCaptureError(
                f"{self.name}: cannot record while {_active.recording.name} is recording; recordings do not nest"
            )
        bad = [i for i, t in enumerate(static_inputs) if not isinstance(t, torch.Tensor)]
        if bad:
            raise GraphCaptureError(f"{self.name}: static input(s) {bad} are not tensors; a graph reads tensors only")
        self.static_inputs = tuple(static_inputs)
        self.drained = drain_collectives()
        out = self._record(fn)
        self._recorded = True
        return out

    def replay(self, *live_inputs: torch.Tensor) -> Any:
        """Copy ``live_inputs`` into the static buffers, relaunch, return the recorded outputs."""
        if not self._recorded:
            raise GraphCaptureError(f"{self.name}: replay before record")
        self._copy_inputs(live_inputs)
        self._replay()
        self.replays += 1
        return self.outputs

    def _copy_inputs(self, live_inputs: Sequence[torch.Tensor]) -> None:
        if len(live_inputs) != len(self.static_inputs):
            raise GraphCaptureError(
                f"{self.name}: replay got {len(live_inputs)} inputs, the recording reads {len(self.static_inputs)}"
            )
        for i, (static, live) in enumerate(zip(self.static_inputs, live_inputs)):
            if live is static or _same_view(live, static):
                continue  # the caller wrote the step into the recorded buffer itself
            if not isinstance(live, torch.Tensor) or live.shape != static.shape or live.dtype != static.dtype:
                got = f"{tuple(live.shape)} {live.dtype}" if isinstance(live, torch.Tensor) else type(live).__name__
                raise GraphCaptureError(
                    f"{self.name}: live input {i} is {got} but was recorded as {tuple(static.shape)} {static.dtype}; "
                    "pad the step to the bucket's shape before replaying"
                )
            static.copy_(live)

    @property
    def nbytes(self) -> int:
        """Pool bytes this recording lays out (CPU); 0 where the allocator owns the layout."""
        return 0

    # --- device part -------------------------------------------------------------------------
    def _record(self, fn: Callable) -> Any:
        raise NotImplementedError

    def _replay(self) -> None:
        raise NotImplementedError

    def _launch(self, fn: Callable, args: tuple, kwargs: dict, *, eager: bool, name: str, compiled: bool = True) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def _capturing(self) -> Iterator[None]:
        _active.recording = self
        try:
            yield
        finally:
            _active.recording = None


@dataclass
class _Layout:
    """Where a recording's fresh tensors live in the pool: storage pointer -> byte offset."""

    offsets: dict[int, int] = field(default_factory=dict)
    nbytes: int = 0


class CPURecording(Recording):
    """The CPU recorder: the launches themselves, replayed in order on their recorded tensors."""

    def __init__(self, *, pool: GraphPool, break_at_eager_regions: bool, name: str = "graph") -> None:
        super().__init__(pool=pool, break_at_eager_regions=break_at_eager_regions, name=name)
        self.launches: list[Launch] = []
        self._children: list[Launch] = []
        self._layout = _Layout()

    @property
    def nbytes(self) -> int:
        return self._layout.nbytes

    def _launch(self, fn: Callable, args: tuple, kwargs: dict, *, eager: bool, name: str, compiled: bool = True) -> Any:
        # Launches made while this one runs (an eager region inside a splitting piece, or inside a
        # whole compiled graph) are not kept apart: replaying this launch calls them again. If one
        # of them breaks the recording, this launch is replayed live, under the live forward
        # context, which is what the segments around the break and the live region amount to.
        outer, self._children = self._children, []
        try:
            out = fn(*args, **kwargs)
        finally:
            children, self._children = self._children, outer
        live = (eager and self.break_at_eager_regions) or any(c.eager for c in children)
        self._children.append(
            Launch(
                fn, args, kwargs, out, eager=live, name=name, context=None if live else get_forward_context(),
                compiled=compiled or any(c.compiled for c in children),
            )
        )
        return out

    def _record(self, fn: Callable) -> Any:
        self._children = []
        with self._capturing():
            out = fn(*self.static_inputs)
        launches, self._children = self._children, []
        if not any(item.compiled for item in launches):
            # Nothing compiled ran (an eager model, level 0): the CPU stand-in for a stream capture
            # of its kernels is the whole forward as one launch, live when a region broke it.
            live = any(item.eager for item in launches)
            fwd = Launch(
                fn, tuple(self.static_inputs), {}, out, eager=live, name=f"{self.name}:eager forward",
                context=None if live else get_forward_context(),
            )
            launches = [fwd]
        self.launches = launches
        self._lay_out(out)
        return out

    def _lay_out(self, out: Any) -> None:
        """Move every launch output into the pool and point later launches and the recording's
        outputs at the moved tensors (matched by storage, so views made between launches follow)."""
        fresh: dict[int, torch.UntypedStorage] = {}
        for item in self.launches:
            for t in _tensors(item.outputs):
                st = t.untyped_storage()
                fresh.setdefault(st.data_ptr(), st)
        # Storages a launch read that existed before it (parameters, static inputs, caches) stay put,
        # even when a launch hands one back unchanged.
        kept = {t.untyped_storage().data_ptr() for t in self.static_inputs}
        produced: set[int] = set()
        for item in self.launches:
            for t in _tensors((item.args, item.kwargs)):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in produced:
                    kept.add(ptr)
            produced.update(t.untyped_storage().data_ptr() for t in _tensors(item.outputs))
        offset = 0
        for ptr, st in fresh.items():
            if ptr in kept:
                continue
            self._layout.offsets[ptr] = offset
            offset += -(-st.nbytes() // _ALIGN) * _ALIGN
        self._layout.nbytes = offset
        pool = self.pool.storage(offset)

        def move(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            base = self._layout.offsets.get(t.untyped_storage().data_ptr())
            if base is None:
                return t
            if base % t.element_size():
                raise GraphCaptureError(f"{self.name}: a {t.dtype} output lands misaligned in the pool")
            moved = torch.empty(0, dtype=t.dtype).set_(pool, base // t.element_size() + t.storage_offset(), t.shape, t.stride())
            moved.copy_(t)
            return moved

        for item in self.launches:
            item.args = pytree.tree_map(move, item.args)
            item.kwargs = pytree.tree_map(move, item.kwargs)
            item.outputs = pytree.tree_map(move, item.outputs)
        static_ptrs = {t.untyped_storage().data_ptr() for t in self.static_inputs}
        for i, t in enumerate(_tensors(out)):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self._layout.offsets and ptr not in static_ptrs:
                raise GraphCaptureError(
                    f"{self.name}: output {i} of the recorded forward was not produced by a recorded launch; on the "
                    "CPU recorder a forward that runs compiled pieces must run every tensor op in one (torch.compile "
                    "with recording_backend(...), or a level 2 or 3 model) or in an @eager_region"
                )
        self.outputs = pytree.tree_map(move, out)

    def _replay(self) -> None:
        for item in self.launches:
            if item.eager:
                new = item.fn(*item.args, **item.kwargs)
            else:
                with swapped_forward_context(item.context):
                    new = item.fn(*item.args, **item.kwargs)
            for dst, src in zip(_tensors(item.outputs), _tensors(new)):
                if dst.data_ptr() != src.data_ptr():
                    dst.copy_(src)


class CUDARecording(Recording):
    """The CUDA recorder: ``torch.cuda.CUDAGraph`` segments in the shared pool, split at eager
    regions when the recording breaks at them."""

    def __init__(self, *, pool: GraphPool, break_at_eager_regions: bool, name: str = "graph") -> None:
        super().__init__(pool=pool, break_at_eager_regions=break_at_eager_regions, name=name)
        self.segments: list[Any] = []  # torch.cuda.CUDAGraph or Launch (eager), in order
        self._open: Optional[torch.cuda.CUDAGraph] = None

    def _begin(self) -> None:
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=self.pool.cuda_handle())
        self._open = graph

    def _end(self) -> None:
        graph, self._open = self._open, None
        graph.capture_end()
        self.segments.append(graph)

    def _launch(self, fn: Callable, args: tuple, kwargs: dict, *, eager: bool, name: str, compiled: bool = True) -> Any:
        if not (eager and self.break_at_eager_regions):
            return fn(*args, **kwargs)  # captured into the open segment
        self._end()
        out = fn(*args, **kwargs)
        self.segments.append(Launch(fn, args, kwargs, out, eager=True, name=name))
        self._begin()
        return out

    def _record(self, fn: Callable) -> Any:
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), self._capturing():
            self._begin()
            try:
                out = fn(*self.static_inputs)
            finally:
                if self._open is not None:
                    self._end()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.outputs = out
        return out

    def _replay(self) -> None:
        for seg in self.segments:
            if isinstance(seg, Launch):
                new = seg.fn(*seg.args, **seg.kwargs)
                for dst, src in zip(_tensors(seg.outputs), _tensors(new)):
                    if dst.data_ptr() != src.data_ptr():
                        dst.copy_(src)
            else:
                seg.replay()


def new_recording(device: torch.device | str, *, pool: GraphPool, break_at_eager_regions: bool, name: str) -> Recording:
    """The recorder for ``device``: :class:`CUDARecording` on CUDA, :class:`CPURecording` otherwise."""
    cls = CUDARecording if torch.device(device).type == "cuda" else CPURecording
    return cls(pool=pool, break_at_eager_regions=break_at_eager_regions, name=name)
