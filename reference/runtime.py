"""The runtime: loads a compiled artifact with the IREE runtime and runs it on the CPU.

The reference's device is the host CPU, so "uploading" a tensor means handing IREE a view of its
memory. Crossing the boundary is zero-copy wherever that is safe:

- inputs: a contiguous CPU tensor whose memory is 64-byte aligned (what torch's allocator gives)
  is imported through DLPack: IREE reads the tensor's own memory and keeps the tensor alive while
  it uses it. Anything else (a strided or offset view; float64, which the compiler narrows to
  float32 like Neuron's f64-less device, with the warning of
  :func:`reference.pipeline.float64_policy`; a tensor on another device) is first copied into a
  fresh tensor of the form the artifact takes;
- inputs the artifact writes: IREE may reuse an input's buffer for a result (a scatter or dynamic
  update returned from the graph is done in place). Such inputs must never be the caller's memory,
  so the first call of a loaded artifact passes private copies of every input and records which
  ones the program wrote or returned; from then on exactly those cross as copies;
- **resident inputs** (the graph's parameters and buffers, named by the caller as positions):
  their device buffers are made once per loaded graph and reused while the caller keeps passing the
  same tensor at the same address. An imported buffer *is* the parameter's memory, so in-place
  updates (optimizer steps, ``copy_``, writes through ``.data`` or NumPy views) are seen without
  any check; a copied one (float64, strided) is also remade when the tensor's version counter
  moves. Passing another tensor object, or the same one after ``.data`` was replaced, remakes it;
- outputs come back through DLPack as tensors over the runtime's own buffers (no copy). The
  compiler may return an input buffer, or a slice of one, for an identity: which outputs do is
  fixed by the program, so the first call (on private copies) finds those inputs too, and they
  cross as copies from then on like the written ones: no output shares memory with a caller's
  input, so none writes through to an input or back.

**The call path** after the first call is one pass over the inputs (each position's way across,
plain, resident or private copy, was settled by the first call), the invocation, and one pass over
the outputs: no per-call checks beyond the resident buffers' freshness.

**How a call runs** (:func:`choose_driver`): IREE's ``local-task`` driver spreads a call over worker
threads, and the caller waits for them; ``local-sync`` runs it on the caller's thread. Handing a call
to the workers and waiting costs about 100 µs here, more than all the arithmetic of a small program
(a decode step of a small decoder), while a large program runs up to the core count faster on the
workers. So each loaded artifact picks its driver from the work of one call (the caller's estimate,
:func:`reference.lowering.cost.estimate_flops`): ``local-sync`` up to :data:`SYNC_MAX_FLOPS`,
``local-task`` above, or the one ``NEURON_REFERENCE_RUNTIME_DRIVER`` names for every artifact.

**Programs** (:class:`LoadedProgram`): the artifact of a graph with collectives is a bundle of
its step list and one compiled binary per piece (:func:`pack_bundle`). Loading it loads every
piece; a call runs the pieces here and each collective on torch.distributed (gloo), over the
process group the caller names for the collective's channel.
"""

from __future__ import annotations

import atexit
import json
import os
import struct
import threading
import weakref
from typing import Callable, Sequence

import torch

from reference.core.errors import NEFFExecutionError
from reference.core.specs import TensorSpec
from reference.core.torch_runtime import tensor_from_dlpack_capsule

DRIVERS = ("local-sync", "local-task")
#: Above this many operations per call (about 0.5 ms of one core's arithmetic here) a call is
#: spread over IREE's worker threads; at or below it, it runs on the caller's thread. Measured on
#: two MLPs on 2 cores: at 17 MFLOP local-sync took 264 µs and local-task 437 µs; at 67 MFLOP
#: 978 µs and 941 µs; at 537 MFLOP 9.6 ms and 5.4 ms.
SYNC_MAX_FLOPS = 1 << 25
_ALIGN = 64  # IREE's CPU heap imports only 64-byte aligned memory
_DLPACK_CPU = 1  # DLPack's kDLCPU device type
# How an input crosses on a call after the first: imported in place, a resident buffer, or a
# private copy (the program writes or returns it).
_PLAIN, _RESIDENT, _WRITTEN = object(), object(), object()
_to_dlpack = torch.utils.dlpack.to_dlpack
_from_dlpack = tensor_from_dlpack_capsule


def choose_driver(work: int | None, setting: str = "auto") -> str:
    """The IREE driver an artifact whose call does ``work`` operations runs on (``None``: not
    known, the threaded driver); ``setting`` (a compile request's ``runtime_driver``, from
    ``NEURON_REFERENCE_RUNTIME_DRIVER``) overrides the choice unless it is ``"auto"``."""
    if setting not in ("auto", *DRIVERS):
        raise ValueError(f"runtime driver {setting!r} is not known; use auto or one of {', '.join(DRIVERS)}")
    if setting == "auto":
        return "local-sync" if work is not None and work <= SYNC_MAX_FLOPS else "local-task"
    return setting


def _binding():
    """IREE's native runtime module. Imported as ``iree._runtime.libs._runtime`` (what
    ``iree.runtime._binding`` forwards to) rather than through the ``iree.runtime`` package, whose
    ``__init__`` also loads its NumPy array helpers and, through them, ``ml_dtypes``: 0.6-0.9 s of
    every process's first call here, for nothing this runtime uses (it crosses through DLPack)."""
    from iree._runtime.libs import _runtime

    return _runtime


class _Device:
    """One IREE driver's device, with the VM instance and HAL module every context on it shares."""

    __slots__ = ("driver", "device", "instance", "hal")

    def __init__(self, driver: str) -> None:
        rt = _binding()
        self.driver = driver
        self.device = rt.get_cached_hal_driver(driver).create_device_by_uri(driver)
        self.instance = rt.VmInstance()
        self.hal = rt.create_hal_module(self.instance, self.device)


class _Runtime:
    """One IREE device per driver and process, created on first use.

    A process forked after the threaded driver (``local-task``) ran has none of its worker
    threads: a fork copies only the forking thread, and IREE keeps the driver, with its executor,
    once per process (``get_cached_hal_driver``), so a call handed to it would wait forever (the
    lowering probe's forked children did, in a test worker that had run large graphs before).
    Such a child runs every artifact it loads on ``local-sync``, the caller's own thread; an
    artifact it inherited loaded on ``local-task`` loads itself again on ``local-sync`` at its first
    call there (:attr:`generation` tells it that a fork happened), so a model compiled before a
    fork (a pre-forking server's workers, a DataLoader's) runs in the children."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[str, _Device] = {}
        self._task_threads_lost = False
        self._fork_hook = False
        self._inherited: list[object] = []
        #: Counts the forks this process descends from since the threaded driver first ran here.
        self.generation = 0

    def device(self, driver: str = "local-task") -> _Device:
        with self._lock:
            if driver == "local-task" and self._task_threads_lost:
                driver = "local-sync"
            found = self._devices.get(driver)
            if found is None:
                if driver == "local-task" and not self._fork_hook and hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=self._forked)
                    self._fork_hook = True
                found = self._devices[driver] = _Device(driver)
            return found

    def _forked(self) -> None:
        # In the child, right after the fork (a subprocess's preexec_fn child too): the lock may
        # have been held by a thread that is gone. The parent's devices are kept referenced, never
        # released here: releasing the threaded one joins worker threads the child does not have.
        # (A child of a child forks again: what the first fork kept stays kept.)
        self._lock = threading.Lock()
        self._inherited.extend(self._devices.values())
        self._devices = {}
        self._task_threads_lost = True
        self.generation += 1

    def keep_inherited(self, objects: object) -> None:
        self._inherited.append(objects)

    def drop(self) -> None:
        self._devices = {}


_RUNTIME = _Runtime()
_LOADED: "weakref.WeakSet[LoadedArtifact]" = weakref.WeakSet()


class _ExecutionFaults:
    """Calls that are to fail on request (:func:`fail_next_execution`), so that what a caller sees
    on an execution failure (``NEFFExecutionError``, or the fallback) can be tested: the armed call
    hands the IREE runtime an argument list without the program's inputs, and the runtime's own
    error is what fails it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed = 0

    def arm(self, calls: int) -> None:
        if not isinstance(calls, int) or calls < 1:
            raise ValueError(f"fail_next_execution(calls={calls!r}): give a positive number of calls")
        with self._lock:
            self._armed += calls

    def take(self) -> bool:
        with self._lock:
            if not self._armed:
                return False
            self._armed -= 1
            return True


_FAULTS = _ExecutionFaults()


def fail_next_execution(calls: int = 1) -> None:
    """Make the next ``calls`` executions of any loaded artifact in this process fail in the
    runtime, raising :class:`~reference.core.errors.NEFFExecutionError` naming the graph."""
    _FAULTS.arm(calls)


def _private(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in the form the artifact takes, sharing no memory with the caller."""
    moved = _importable(t)
    return moved.clone() if moved.data_ptr() == t.data_ptr() and t.numel() else moved


def _importable(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when IREE can read its memory in place, else a copy in the form it takes."""
    if t.requires_grad:
        t = t.detach()
    if t.dtype is torch.float64:
        # The compiler narrows f64 to f32 (the device has no f64 units, like Neuron's): the module's
        # signature is f32, and outputs are widened back to the graph's f64.
        t = t.to(torch.float32)
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous() or t.data_ptr() % _ALIGN:
        t = t.clone(memory_format=torch.contiguous_format)  # a fresh allocation: aligned and dense
    return t


class _Resident:
    """The device buffer of one resident input, and what it was made from."""

    __slots__ = ("source", "ptr", "version", "copied", "view")

    def __init__(self, source: torch.Tensor, device) -> None:
        held = _importable(source)
        self.source = source
        self.ptr = source.data_ptr()
        self.copied = held is not source and held.data_ptr() != source.data_ptr()
        self.version = _version(source) if self.copied else None
        self.view = device.from_dlpack_capsule(torch.utils.dlpack.to_dlpack(held))

    def fresh_for(self, t: torch.Tensor) -> bool:
        if t is not self.source or t.data_ptr() != self.ptr:
            return False
        return not self.copied or (self.version is not None and _version(t) == self.version)


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors carry no version counter: always remade when copied
        return None


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal contents (a NaN the program left alone is not a change).

    Compared as bytes, one ``memcmp`` per tensor: ``torch.equal`` goes through an ATen kernel that
    costs milliseconds a call on a 2-core machine (0.2 s for the 51 inputs of a four-block attention
    stack's first call, benchmarks/bench_startup.py), for what is a comparison of a few KiB."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.numel():
        return True
    try:
        return _raw_bytes(a) == _raw_bytes(b)
    except (RuntimeError, TypeError):  # a tensor NumPy cannot view (a conjugate view, say): by value
        return torch.equal(a, b)


def _raw_bytes(t: torch.Tensor) -> bytes:
    # a 0-d tensor cannot change its element size, a flat one can
    return t.detach().reshape(-1).view(torch.uint8).numpy().tobytes()


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


class LoadedArtifact:
    """A compiled artifact loaded into the runtime; call it with tensors, get a list of tensors.

    ``resident`` names the input positions that hold parameters and buffers: their device
    buffers are kept between calls (see the module docstring for when they are remade). ``work``
    is the caller's estimate of the operations in one call; it picks the driver
    (:func:`choose_driver`, under the ``driver`` setting), which :attr:`driver` names.
    """

    def __init__(
        self,
        artifact: bytes,
        *,
        graph_name: str,
        input_specs: Sequence[TensorSpec] = (),
        output_specs: Sequence[TensorSpec] = (),
        resident: Sequence[int] = (),
        work: int | None = None,
        driver: str = "auto",
    ) -> None:
        rt = _binding()
        self.graph_name = graph_name
        self.input_specs = tuple(input_specs)
        self.output_specs = tuple(output_specs)
        self.resident = frozenset(resident)
        self._held: dict[int, _Resident] = {}
        # per-output conversion back to the graph's dtype (bool and float64 cross as i8/f32)
        self._widen = [
            torch.bool if s.dtype == "bool" else torch.float64 if s.dtype == "float64" else None for s in self.output_specs
        ]
        self._n_in = len(self.input_specs) or None
        self._written: frozenset[int] | None = None  # inputs the program writes: known after the first call
        self._kinds: tuple[object, ...] | None = None  # per input: _PLAIN, _RESIDENT or _WRITTEN, likewise
        self.driver = choose_driver(work, driver)
        self._list = rt.VmVariantList
        self._view_type = rt.HalBufferView
        self._load(artifact)
        # Kept for a forked child only: on the threaded driver, whose workers a fork does not copy.
        self._artifact = artifact if self.driver == "local-task" else None
        _LOADED.add(self)

    def _load(self, artifact: bytes) -> None:
        rt = _binding()
        self._generation = _RUNTIME.generation
        try:
            shared = _RUNTIME.device(self.driver)
            self.driver = shared.driver  # local-sync in a child forked after the threaded driver ran
            self._device = shared.device
            self._module = rt.VmModule.copy_buffer(shared.instance, artifact)
            self._vm_ctx = rt.VmContext(instance=shared.instance, modules=(shared.hal, self._module))
            self._vm_fn = self._module.lookup_function("main")
            if self._vm_fn is None:
                raise RuntimeError("the module has no function named 'main'")
        except Exception as exc:
            raise NEFFExecutionError(f"the runtime could not load the artifact: {exc}", graph_name=self.graph_name) from exc

    def _after_fork(self) -> None:
        """First call in a process forked since this artifact was loaded: one loaded on the threaded
        driver would wait forever for worker threads the fork did not copy, so it loads again on
        this process's device (``local-sync``); its resident buffers are made again on that device."""
        if self._artifact is None or self._vm_fn is None:  # on local-sync (nothing to lose), or closed
            self._generation = _RUNTIME.generation
            return
        # The parent's objects stay referenced, never released here: like the devices (see
        # _Runtime._forked), what they release belongs to threads this process does not have.
        _RUNTIME.keep_inherited((self._vm_ctx, self._module, self._vm_fn, tuple(self._held.values())))
        self._held = {}
        self._load(self._artifact)
        self._artifact = None  # local-sync from now on, in this process and its own children

    def resident_uploads(self) -> int:
        """How many resident buffers are held now (for tests and reports)."""
        return len(self._held)

    def written_inputs(self) -> frozenset[int] | None:
        """Positions of the inputs the program writes or returns (copied on every call), or
        ``None`` before the first call."""
        return self._written

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        if self._generation != _RUNTIME.generation:
            self._after_fork()
        if self._n_in is not None and len(args) != self._n_in:
            raise NEFFExecutionError(f"expected {self._n_in} inputs, got {len(args)}", graph_name=self.graph_name)
        kinds = self._kinds
        if kinds is None:
            return self._first_call(args)
        # The call path of every step: what each position is was settled by the first call
        # (kinds), so a call is one pass over the inputs, the invocation, and one over the outputs.
        arg_list = self._list(len(args))
        push = arg_list.push_ref
        to_view = self._device.from_dlpack_capsule
        to_dlpack = _to_dlpack
        held = self._held
        try:
            for i, a in enumerate(args):
                if not isinstance(a, torch.Tensor):
                    raise NEFFExecutionError(f"input {i} is a {type(a).__name__}, not a tensor", graph_name=self.graph_name)
                kind = kinds[i]
                if kind is _PLAIN:
                    push(to_view(to_dlpack(_importable(a))))
                elif kind is _RESIDENT:
                    entry = held.get(i)
                    if entry is None or not entry.fresh_for(a):
                        entry = held[i] = _Resident(a, self._device)
                    push(entry.view)
                else:  # written or returned by the program: never the caller's memory
                    push(to_view(to_dlpack(_private(a))))
        except NEFFExecutionError:
            raise
        except Exception as exc:
            raise NEFFExecutionError(f"input could not be passed to the runtime: {exc}", graph_name=self.graph_name) from exc
        return self._outputs(self._invoke(arg_list))

    def _first_call(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run on private copies of every input and record which of them the program wrote or
        returned: those are never handed to the runtime as the caller's memory."""
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                raise NEFFExecutionError(f"input {i} is a {type(a).__name__}, not a tensor", graph_name=self.graph_name)
        copies = [_private(a) for a in args]
        before = [c.clone() for c in copies]
        arg_list = self._list(len(args))
        try:
            for c in copies:
                arg_list.push_ref(self._device.from_dlpack_capsule(torch.utils.dlpack.to_dlpack(c)))
        except Exception as exc:
            raise NEFFExecutionError(f"input could not be passed to the runtime: {exc}", graph_name=self.graph_name) from exc
        outs = self._outputs(self._invoke(arg_list))
        spans = [_span(c) for c in copies]
        returned = {i for o in outs if o.numel() for i, (lo, hi) in enumerate(spans) if lo <= o.data_ptr() < hi}
        changed = {i for i, (c, b) in enumerate(zip(copies, before)) if not _same(c, b)}
        self._written = frozenset(returned | changed)
        self._kinds = tuple(
            _WRITTEN if i in self._written else _RESIDENT if i in self.resident else _PLAIN for i in range(len(args))
        )
        return outs

    def _invoke(self, arg_list):
        ret_list = self._list(max(1, len(self.output_specs)))
        if _FAULTS.take():
            arg_list = self._list(0)  # a failure on request: the runtime refuses a call without its inputs
        try:
            self._vm_ctx.invoke(self._vm_fn, arg_list, ret_list)
        except Exception as exc:
            raise NEFFExecutionError(f"execution failed: {exc}", graph_name=self.graph_name) from exc
        return ret_list

    def _outputs(self, ret_list) -> list[torch.Tensor]:
        widen = self._widen
        n_widen = len(widen)
        to_capsule = self._device.create_dlpack_capsule
        get = ret_list.get_as_object
        view_type = self._view_type
        outs = []
        for i in range(len(ret_list)):
            t = _from_dlpack(to_capsule(get(i, view_type), _DLPACK_CPU, 0))
            to = widen[i] if i < n_widen else None
            if to is not None and t.dtype is not to:
                t = t.to(to)
            outs.append(t)
        return outs

    def close(self) -> None:
        self._held = {}
        self._device = None
        self._vm_fn = None
        self._vm_ctx = None
        self._module = None


def load(artifact: bytes, **kwargs) -> LoadedArtifact:
    return LoadedArtifact(artifact, **kwargs)


# --- programs: compiled pieces joined by collectives ------------------------------------------------

BUNDLE_MAGIC = b"NEURON-SPMD-PROGRAM-1\n"


def pack_bundle(manifest: dict, binaries: Sequence[bytes]) -> bytes:
    """One artifact of a program: its step list (``manifest``) and every piece's binary."""
    header = json.dumps({"manifest": manifest, "sizes": [len(b) for b in binaries]}, sort_keys=True).encode()
    return BUNDLE_MAGIC + struct.pack("<Q", len(header)) + header + b"".join(binaries)


def unpack_bundle(blob: bytes) -> tuple[dict, list[bytes]]:
    """The inverse of :func:`pack_bundle`; :class:`NEFFExecutionError` for anything else."""
    if not blob.startswith(BUNDLE_MAGIC):
        raise NEFFExecutionError("the artifact is not an SPMD program bundle")
    try:
        off = len(BUNDLE_MAGIC)
        (n,) = struct.unpack_from("<Q", blob, off)
        off += 8
        header = json.loads(blob[off:off + n])
        off += n
        binaries = []
        for size in header["sizes"]:
            binaries.append(blob[off:off + size])
            off += size
        manifest = header["manifest"]
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise NEFFExecutionError(f"the SPMD program bundle is damaged ({type(exc).__name__})") from None
    if off != len(blob):
        raise NEFFExecutionError("the SPMD program bundle is damaged (its length does not match its header)")
    return manifest, binaries


_COLLECTIVE_OPS = {
    "all_reduce": lambda x, s, g: torch.ops._c10d_functional.all_reduce(x, s["reduce_op"], g),
    "all_gather": lambda x, s, g: torch.ops._c10d_functional.all_gather_into_tensor(x, s["group_size"], g),
    "reduce_scatter": lambda x, s, g: torch.ops._c10d_functional.reduce_scatter_tensor(x, s["reduce_op"], s["group_size"], g),
    "all_to_all": lambda x, s, g: torch.ops._c10d_functional.all_to_all_single(
        x, [x.shape[0] // s["split_count"]] * s["split_count"], [x.shape[0] // s["split_count"]] * s["split_count"], g
    ),
}


class LoadedProgram:
    """A loaded program bundle: runs its pieces on the runtime and its collectives on
    torch.distributed.

    Everything it runs comes from the artifact. ``load_piece(index, binary)`` loads one piece (the
    caller knows its specs and work); ``group_name_of(channel_id)`` names this rank's process group
    of the collective's mesh, the only per-rank input.
    """

    def __init__(
        self, blob: bytes, *, graph_name: str, load_piece: Callable[[int, bytes], Callable],
        group_name_of: Callable[[int], str],
    ) -> None:
        self.graph_name = graph_name
        self.manifest, binaries = unpack_bundle(blob)
        self._pieces = [load_piece(i, b) for i, b in enumerate(binaries)]
        self._group_name_of = group_name_of

    def __call__(self, *args: torch.Tensor) -> list:
        m = self.manifest
        if len(args) != len(m["inputs"]):
            raise NEFFExecutionError(f"expected {len(m['inputs'])} inputs, got {len(args)}", graph_name=self.graph_name)
        values: dict[str, torch.Tensor] = dict(zip(m["inputs"], args))
        for step in m["steps"]:
            if step["op"] == "piece":
                outs = self._pieces[step["index"]](*[values[a] for a in step["args"]])
                values.update(zip(step["results"], outs))
            else:
                x = values[step["args"][0]].contiguous()
                y = _COLLECTIVE_OPS[step["op"]](x, step, self._group_name_of(step["channel_id"]))
                values[step["results"][0]] = torch.ops._c10d_functional.wait_tensor(y)
        return [values[o] if o is not None else None for o in m["outputs"]]


@atexit.register
def _release() -> None:
    # Drop runtime objects before interpreter shutdown so the binding does not report them.
    for loaded in list(_LOADED):
        loaded.close()
    _LOADED.clear()
    _RUNTIME.drop()
    import gc

    gc.collect()
