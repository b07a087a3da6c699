"""The forward context: per-step metadata every layer can read without it being passed down.

A recorded graph cannot take new arguments, so what changes from step to step (sequence lengths,
block tables, the padded batch, whether to record or replay) travels beside the call. The runner
sets one :class:`ForwardContext` before a forward pass, layers read it with
:func:`get_forward_context`, and the runner resets it afterwards:

    set_forward_context(attn_metadata, config, context)
    try:
        model(input_ids, positions)
    finally:
        reset_forward_context()

or, equivalently, ``with in_forward_context(attn_metadata, config, context): ...``.

A second set without a reset in between is a leak (a step's metadata would silently outlive it);
it raises :class:`ForwardContextError` naming the file and line where the context in force was
set. The state lives in one small holder object, per thread.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Union

import torch

from reference import NeuronBackendError

__all__ = [
    "AttentionMetaData",
    "Context",
    "DPMetadata",
    "ForwardContext",
    "ForwardContextError",
    "KVCacheTensor",
    "SpecDecodeMetadata",
    "TR_GRAPH_MODES",
    "in_forward_context",
    "get_forward_context",
    "reset_forward_context",
    "set_forward_context",
]

#: What ``ForwardContext.tr_graph`` may hold: no token graph, record one, or replay one.
TR_GRAPH_MODES = (None, "record", "replay")


class ForwardContextError(NeuronBackendError, RuntimeError):
    """The set-use-reset lifecycle was broken (a leaked context, a bad field value)."""


@dataclass
class AttentionMetaData:
    """What an attention op needs to know about the step's sequences.

    ``max_seqlen_q`` is the query rows per request (1 for plain decode, ``mtp_k + 1`` when a
    drafter's tokens are verified); together with ``Context.running_bs`` it picks a request graph.
    Tensors here are read by recorded code at their addresses, so a runner keeps them in its static
    buffers when it records and copies live values in when it replays.
    """

    max_seqlen_q: int = 1
    max_seqlen_k: int = 0
    cu_seqlens_q: Optional[torch.Tensor] = None
    context_lens: Optional[torch.Tensor] = None
    block_tables: Optional[torch.Tensor] = None
    slot_mapping: Optional[torch.Tensor] = None


@dataclass
class DPMetadata:
    """Token counts across data-parallel ranks: what a cross-rank gather pads to."""

    num_tokens_across_dp: list[int] = field(default_factory=list)

    @property
    def max_tokens_across_dp(self) -> int:
        return max(self.num_tokens_across_dp, default=0)


@dataclass
class SpecDecodeMetadata:
    """Speculative decoding: the draft tokens each request verifies and where its logits are."""

    draft_token_ids: Optional[torch.Tensor] = None
    num_draft_tokens: list[int] = field(default_factory=list)
    logits_indices: Optional[torch.Tensor] = None


@dataclass
class KVCacheTensor:
    """One layer's key and value cache."""

    layer_num: int
    k_cache: torch.Tensor
    v_cache: torch.Tensor


@dataclass
class Context:
    """The per-step state read most often.

    ``running_bs`` is the padded sequence count (the request-graph key, the draft width);
    ``running_tokens`` the padded row count (what a cross-rank gather pads to). The two differ on a
    prefill (ragged prompts), so both are kept.
    """

    positions: Optional[torch.Tensor] = None
    is_prefill: bool = False
    batch_size: int = 0
    running_bs: int = 0
    running_tokens: int = 0
    is_draft: bool = False

    @property
    def phase(self) -> str:
        """``"prefill"`` or ``"decode"``: the step kind a token graph is recorded for."""
        return "prefill" if self.is_prefill else "decode"


@dataclass
class ForwardContext:
    """Everything a layer may read during one forward pass; empty between passes."""

    no_compile_layers: dict[int, Any] = field(default_factory=dict)
    attn_metadata: Union[AttentionMetaData, dict, None] = None
    kv_cache_data: dict[str, KVCacheTensor] = field(default_factory=dict)
    context: Optional[Context] = None
    dp_metadata: Optional[DPMetadata] = None
    spec_decode_metadata: Optional[SpecDecodeMetadata] = None
    #: ``None`` (run the forward), ``"record"`` (record token graphs) or ``"replay"`` (replay them).
    tr_graph: Optional[str] = None
    #: How the runner decided the step runs (a ``ForwardMode``), when it decided one.
    forward_mode: Any = None


class _Slot(threading.local):
    """The context in force on this thread and where it was set (``None`` once reset)."""

    def __init__(self) -> None:
        self.current = ForwardContext()
        self.set_at: Optional[_SetAt] = None


_slot = _Slot()


class _SetAt:
    """Where a context was set: the caller's file, line and function, kept as plain values and
    formatted only when an error names them (every step sets a context; a stack walk per step would
    cost more than the rest of the set)."""

    __slots__ = ("filename", "lineno", "name")

    def __init__(self, depth: int) -> None:
        frame = sys._getframe(depth)
        self.filename, self.lineno, self.name = frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.name}"


def _caller(depth: int) -> _SetAt:
    return _SetAt(depth + 1)


def set_forward_context(
    attn_metadata: Union[AttentionMetaData, dict, None],
    atom_config: Any = None,
    context: Optional[Context] = None,
    *,
    num_tokens_across_dp: Optional[list[int]] = None,
    dp_metadata: Optional[DPMetadata] = None,
    spec_decode_metadata: Optional[SpecDecodeMetadata] = None,
    kv_cache_data: Optional[dict[str, KVCacheTensor]] = None,
    tr_graph: Optional[str] = None,
    forward_mode: Any = None,
    _depth: int = 2,
) -> ForwardContext:
    """Make a new context current for the next forward pass and return it.

    ``atom_config`` (a ``Config``) contributes ``no_compile_layers`` from its compilation config's
    ``static_forward_context`` when it has one. ``num_tokens_across_dp`` builds the
    :class:`DPMetadata` (capture passes the same count for every rank); give ``dp_metadata`` instead
    to pass one already built. ``forward_mode`` (a ``ForwardMode``) that replays a token bucket
    sets ``tr_graph = "replay"``.

    Raises :class:`ForwardContextError` if a context is already in force (its ``set_at`` is named:
    reset it after each pass) or if ``tr_graph`` is not one of :data:`TR_GRAPH_MODES`.
    """
    if _slot.set_at is not None:
        raise ForwardContextError(
            f"a forward context is already set (at {_slot.set_at}) and was never reset; call "
            "reset_forward_context() after each forward pass, or use the in_forward_context(...) block"
        )
    if tr_graph not in TR_GRAPH_MODES:
        raise ForwardContextError(f"tr_graph={tr_graph!r} is not one of {TR_GRAPH_MODES}")
    if getattr(forward_mode, "token_graph", False):
        if tr_graph not in (None, "replay"):
            raise ForwardContextError(f"forward_mode replays a token bucket, and tr_graph={tr_graph!r} asks otherwise")
        tr_graph = "replay"
    if dp_metadata is not None and num_tokens_across_dp is not None:
        raise ForwardContextError("give num_tokens_across_dp or dp_metadata, not both")
    if num_tokens_across_dp is not None:
        dp_metadata = DPMetadata(list(num_tokens_across_dp))
    compilation = getattr(atom_config, "compilation_config", None)
    layers = dict(getattr(compilation, "static_forward_context", None) or {})
    ctx = ForwardContext(
        no_compile_layers=layers,
        attn_metadata=attn_metadata,
        kv_cache_data=dict(kv_cache_data or {}),
        context=context,
        dp_metadata=dp_metadata,
        spec_decode_metadata=spec_decode_metadata,
        tr_graph=tr_graph,
        forward_mode=forward_mode,
    )
    _slot.current = ctx
    _slot.set_at = _caller(_depth)
    return ctx


def get_forward_context() -> ForwardContext:
    """The context in force; an empty :class:`ForwardContext` between passes."""
    return _slot.current


def reset_forward_context() -> None:
    """End the pass: the current context becomes an empty ``ForwardContext()``."""
    _slot.current = ForwardContext()
    _slot.set_at = None


@contextlib.contextmanager
def in_forward_context(*args: Any, **kwargs: Any) -> Iterator[ForwardContext]:
    """``set_forward_context(*args, **kwargs)`` for the block, reset when it leaves (even on error)."""
    ctx = set_forward_context(*args, _depth=4, **kwargs)
    try:
        yield ctx
    finally:
        reset_forward_context()


@contextlib.contextmanager
def swapped_forward_context(ctx: ForwardContext) -> Iterator[ForwardContext]:
    """Put ``ctx`` in force for the block and restore what was there, whatever it was.

    For replaying recorded work under the context it was recorded with; not part of the lifecycle
    (no leak check), so it never stands in for :func:`set_forward_context`.
    """
    saved = (_slot.current, _slot.set_at)
    _slot.current = ctx
    try:
        yield ctx
    finally:
        _slot.current, _slot.set_at = saved
