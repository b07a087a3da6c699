"""Token graphs, request graphs, eager regions and the one pool they share.

Two kinds of recording serve decode steps:

- :class:`ReqGraph` (FULL): one recording of the whole forward per request bucket,
  ``request_bucket(running_bs, max_seqlen_q) == (running_bs, draft_num)``. Eager regions inside are
  recorded inline, so they replay with the metadata of the capture step; only attention that reads
  its per-step data from tensors (copied into the static buffers) is correct under FULL.
- :class:`TokenGraph` (TR_HYBRID): one recording per token bucket (``bs * q`` rows) of a module
  marked :func:`token_graph`. Its compiled pieces are recorded; every :func:`eager_region` breaks
  the recording, runs live at replay reading the step's forward context, and hands its result to
  the next segment at the address that segment was recorded reading.

A token-graph unit records and replays according to ``ForwardContext.tr_graph``: ``"record"`` in
the capture loop, ``"replay"`` when the runner decided the step replays a bucket, ``None`` to run
the forward as it is. A recording serves prefill and decode steps of its row count alike unless
the unit is declared ``@token_graph(per_phase=True)``, which records each phase apart;
:meth:`TokenGraph.captured_sizes` reports, per phase, the buckets that phase's record passes asked
for.

Every recording lays out in :func:`graph_pool`, one :class:`~reference.atom.recorder.GraphPool`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch
from torch import nn

from reference.atom.forward_context import get_forward_context
from reference.atom.recorder import GraphCaptureError, GraphPool, Recording, launch, new_recording

__all__ = [
    "PHASES",
    "DraftGraph",
    "ReqGraph",
    "TokenGraph",
    "eager_region",
    "graph_pool",
    "request_bucket",
    "token_graph",
    "token_graph_of",
]

PHASES = ("prefill", "decode")

# The process's one pool. Creating it allocates nothing; the first recording sizes it.
_POOL = GraphPool()


def graph_pool() -> GraphPool:
    """The pool every :class:`ReqGraph` and :class:`TokenGraph` records into."""
    return _POOL


def request_bucket(running_bs: int, max_seqlen_q: int) -> tuple[int, int]:
    """The request-graph key: ``(running_bs, draft_num)``, where ``draft_num`` is the draft tokens
    each request verifies (its query rows less the one it decodes)."""
    if running_bs < 1 or max_seqlen_q < 1:
        raise GraphCaptureError(
            f"request_bucket(running_bs={running_bs}, max_seqlen_q={max_seqlen_q}): both must be >= 1"
        )
    return (running_bs, max_seqlen_q - 1)


def eager_region(fn: Callable) -> Callable:
    """Declare ``fn`` an eager region: an op whose launches depend on host data of the step.

    It is a graph break for ``torch.compile`` (the pieces on either side compile apart), a break
    point of token-graph recordings (run live at replay, with the live forward context), and an
    inline launch of FULL recordings.
    """

    @functools.wraps(fn)
    def region(*args: Any, **kwargs: Any) -> Any:
        return launch(fn, args, kwargs, eager=True, name=fn.__qualname__)

    region.is_eager_region = True
    return torch.compiler.disable(region, recursive=True)


def _device_of(inputs: tuple) -> torch.device:
    for t in inputs:
        if isinstance(t, torch.Tensor):
            return t.device
    raise GraphCaptureError("a graph needs at least one tensor input to know its device")


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise GraphCaptureError(f"phase {phase!r} is not one of {PHASES}")


class TokenGraph:
    """The token-bucket recordings of one unit.

    Buckets are keyed by row count (the first input's leading dimension) and, when ``per_phase``,
    by phase as well. ``pool`` defaults to :func:`graph_pool` (a private pool is for measuring).
    """

    def __init__(self, name: str = "token_graph", *, per_phase: bool = False, pool: Optional[GraphPool] = None) -> None:
        self.name = name
        self.per_phase = per_phase
        self.pool = pool if pool is not None else graph_pool()
        self._recordings: dict[tuple[int, Optional[str]], Recording] = {}
        self._asked: dict[str, set[int]] = {p: set() for p in PHASES}

    def _key(self, rows: int, phase: str) -> tuple[int, Optional[str]]:
        return (rows, phase if self.per_phase else None)

    def record(self, fn: Callable, inputs: tuple, *, phase: str) -> Any:
        """Record ``fn(*inputs)`` for the rows of ``inputs[0]`` in ``phase`` (the inputs become the
        static buffers). A bucket another phase already recorded, when not per phase, is not
        recorded again: it is replayed and counted as this phase's bucket too."""
        _check_phase(phase)
        device = _device_of(inputs)
        rows = int(inputs[0].shape[0])
        key = self._key(rows, phase)
        self._asked[phase].add(rows)
        if key in self._recordings:
            return self._recordings[key].replay(*inputs)
        rec = new_recording(
            device, pool=self.pool, break_at_eager_regions=True, name=f"{self.name}[{rows} rows, {phase}]"
        )
        out = rec.record(fn, *inputs)
        self._recordings[key] = rec
        return out

    def replay(self, inputs: tuple, *, phase: str) -> Any:
        """Replay the bucket of ``inputs[0]``'s rows for ``phase``; unknown buckets raise
        :class:`GraphCaptureError` listing the recorded ones."""
        _check_phase(phase)
        rows = int(inputs[0].shape[0])
        rec = self._recordings.get(self._key(rows, phase))
        if rec is None or rows not in self._asked[phase]:
            raise GraphCaptureError(
                f"{self.name}: no token graph recorded for {rows} rows in a {phase} step; "
                f"{phase} buckets: {self.captured_sizes(phase)}; pad the step to one of them or run it eagerly"
            )
        return rec.replay(*inputs)

    def captured_sizes(self, phase: str) -> list[int]:
        """The row buckets a ``phase`` step can replay, ascending."""
        _check_phase(phase)
        return sorted(self._asked[phase])

    def recordings(self) -> list[Recording]:
        return list(self._recordings.values())

    def reset(self) -> None:
        """Drop every recording and every phase's buckets; the next record pass records anew.
        The pool stays valid for the next recordings (it owns its memory, not the recordings)."""
        self._recordings.clear()
        self._asked = {p: set() for p in PHASES}


def token_graph(cls: Optional[type] = None, *, per_phase: bool = False) -> Any:
    """Mark an ``nn.Module`` class as a token-graph recording unit: ``@token_graph`` or
    ``@token_graph(per_phase=True)``.

    Called with ``ForwardContext.tr_graph`` set, the module records (``"record"``) or replays
    (``"replay"``) its :class:`TokenGraph` for the call's rows and the step's phase; otherwise it
    runs its forward as usual. Tensor arguments are passed positionally (they are the recording's
    static inputs).
    """

    def mark(klass: type) -> type:
        if not (isinstance(klass, type) and issubclass(klass, nn.Module)):
            raise TypeError(f"@token_graph marks nn.Module classes, not {klass!r}")
        plain_call = klass.__call__

        def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            fc = get_forward_context()
            if fc.tr_graph is None:
                return plain_call(self, *args, **kwargs)
            if kwargs:
                raise GraphCaptureError(
                    f"{klass.__name__}: a token-graph unit takes its inputs positionally, got keywords {sorted(kwargs)}"
                )
            phase = fc.context.phase if fc.context is not None else "decode"
            graph = token_graph_of(self)
            if fc.tr_graph == "record":
                return graph.record(functools.partial(plain_call, self), args, phase=phase)
            return graph.replay(args, phase=phase)

        klass.__call__ = __call__
        klass.token_graph_per_phase = per_phase
        return klass

    return mark(cls) if cls is not None else mark


def token_graph_of(module: nn.Module) -> TokenGraph:
    """The :class:`TokenGraph` of a module whose class is marked :func:`token_graph` (created on
    first use)."""
    per_phase = getattr(type(module), "token_graph_per_phase", None)
    if per_phase is None:
        raise GraphCaptureError(f"{type(module).__name__} is not marked @token_graph")
    graph = module.__dict__.get("_atom_token_graph")
    if graph is None:
        graph = TokenGraph(type(module).__name__, per_phase=per_phase)
        module.__dict__["_atom_token_graph"] = graph
    return graph


class ReqGraph:
    """Whole-forward recordings keyed by :func:`request_bucket` (FULL mode)."""

    kind = "request bucket"
    key_names = "(running_bs, draft_num)"

    def __init__(self, name: str = "req_graph", *, pool: Optional[GraphPool] = None) -> None:
        self.name = name
        self.pool = pool if pool is not None else graph_pool()
        self._recordings: dict[tuple[int, int], Recording] = {}

    def record(self, key: tuple[int, int], fn: Callable, *static_inputs: torch.Tensor) -> Any:
        """Record ``fn(*static_inputs)`` as the graph of request bucket ``key``, once."""
        if key in self._recordings:
            raise GraphCaptureError(f"{self.name}: bucket {key} is already recorded")
        rec = new_recording(
            _device_of(static_inputs), pool=self.pool, break_at_eager_regions=False, name=f"{self.name}{key}"
        )
        out = rec.record(fn, *static_inputs)
        self._recordings[key] = rec
        return out

    def replay(self, key: tuple[int, int], *live_inputs: torch.Tensor) -> Any:
        rec = self._recordings.get(key)
        if rec is None:
            raise GraphCaptureError(
                f"{self.name}: no graph for {self.kind} {key} {self.key_names}; recorded: {sorted(self._recordings)}"
            )
        return rec.replay(*live_inputs)

    def keys(self) -> list[tuple[int, int]]:
        return sorted(self._recordings)

    def __contains__(self, key: object) -> bool:
        return key in self._recordings

    def recordings(self) -> list[Recording]:
        return list(self._recordings.values())


class DraftGraph(ReqGraph):
    """A drafter's recordings (MTP-style speculative decoding), keyed by ``(running_bs, pass)``:
    the drafter records each of its passes per batch bucket, in either graph mode, in the same pool
    as every other graph (:func:`graph_pool`). Drafters are not ``@token_graph`` units."""

    kind = "draft bucket"
    key_names = "(running_bs, pass)"

    def __init__(self, name: str = "draft_graph", *, pool: Optional[GraphPool] = None) -> None:
        super().__init__(name, pool=pool)
