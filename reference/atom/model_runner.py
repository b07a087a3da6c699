"""The model runner's graph half: capture at startup, then per step replay or run eagerly.

:meth:`ModelRunner.capture_cudagraph` records one graph per capture size, largest first:
a warm-up forward (compiles what the shape needs), then the recording, both under a forward
context built on the runner's static buffers. Under FULL the whole forward is a request graph
(:class:`~reference.atom.region_graph.ReqGraph`); when the mode uses TR_HYBRID (including
``FULL_AND_TR_HYBRID``, which the runner records exactly as TR_HYBRID) the model's
``@token_graph`` unit records its token buckets.

:meth:`ModelRunner.run_model` dispatches a step by four rules: a prefill runs eagerly;
``enforce_eager`` runs eagerly; a decode above the largest captured size runs eagerly; any other
decode replays the bucket it was padded to. ``counters`` counts each outcome.

The model is any module with ``model(input_ids, positions) -> hidden_states`` and
``model.compute_logits(hidden_states)``; its attention reads the step's metadata from the forward
context.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional, TextIO

import torch
from torch import nn

from reference.atom.config import CompilationConfig, CompilationLevel, Config, ConfigError, default_capture_sizes
from reference.atom.decorators import TorchCompileWrapperWithCustomDispatcher, compile_model
from reference.atom.forward_context import (
    AttentionMetaData,
    Context,
    KVCacheTensor,
    in_forward_context,
    get_forward_context,
)
from reference.atom.graph_mode import CUDAGraphMode
from reference.atom.region_graph import ReqGraph, request_bucket

__all__ = ["ModelRunner", "RunnerCounters", "check_runner_config", "resolve_capture_sizes"]


@dataclass
class RunnerCounters:
    """What :meth:`ModelRunner.run_model` did: graph replays, and eager runs by the rule that chose them."""

    replays: int = 0
    eager: int = 0
    eager_by_reason: dict[str, int] = field(default_factory=dict)

    def count_eager(self, reason: str) -> None:
        self.eager += 1
        self.eager_by_reason[reason] = self.eager_by_reason.get(reason, 0) + 1


def resolve_capture_sizes(cc: CompilationConfig) -> tuple[list[int], str]:
    """The capture sizes and the field they came from: ``cudagraph_capture_sizes`` as given, else
    the ladder for one ``cuda_graph_sizes`` value, else that list."""
    if cc.cudagraph_capture_sizes is not None:
        return list(cc.cudagraph_capture_sizes), "cudagraph_capture_sizes"
    if len(cc.cuda_graph_sizes) == 1:
        return default_capture_sizes(cc.cuda_graph_sizes[0]), "cuda_graph_sizes"
    return list(cc.cuda_graph_sizes), "cuda_graph_sizes"


def _has_token_graph_unit(model: nn.Module) -> bool:
    return any(getattr(type(m), "token_graph_per_phase", None) is not None for m in model.modules())


def check_runner_config(model: nn.Module, config: Config) -> None:
    """Refuse a model and configuration that cannot run together, naming the field.

    - ``level`` 2 or 3 compiles through ``@support_torch_compile``: a model with no decorated
      module would silently run eagerly.
    - A ``cudagraph_mode`` that uses TR_HYBRID records token graphs: the model needs a
      ``@token_graph`` unit (unless no graph is captured: ``enforce_eager``, ``use_cudagraph=False``).
    """
    cc = config.compilation_config
    if config.enforce_eager:
        return
    if cc.level >= CompilationLevel.DYNAMO_ONCE and not any(
        isinstance(m, TorchCompileWrapperWithCustomDispatcher) for m in model.modules()
    ):
        raise ConfigError(
            "level",
            f"level {int(cc.level)} compiles through @support_torch_compile, and {type(model).__name__} has no decorated "
            "module; decorate the model's compiled part, or use level 0 or 1",
        )
    mode = cc.cudagraph_mode or CUDAGraphMode.NONE
    if cc.use_cudagraph and mode.uses_tr_hybrid() and not _has_token_graph_unit(model):
        raise ConfigError(
            "cudagraph_mode",
            f"{mode.name} records token graphs, and {type(model).__name__} has no @token_graph unit; mark the module that "
            "holds the step's per-token work with @token_graph, or use FULL",
        )


class ModelRunner:
    """Capture and per-step dispatch for one model on one rank.

    ``mtp_k`` is the number of draft tokens a request verifies per decode step (0 without a
    drafter); ``kv_cache_data`` is handed to every forward context; ``progress`` is where rank 0
    reports capture progress (``None``: standard error).
    """

    def __init__(
        self,
        model: nn.Module,
        config: Config,
        *,
        device: torch.device | str = "cpu",
        rank: int = 0,
        dp_size: int = 1,
        mtp_k: int = 0,
        max_model_len: int = 0,
        kv_cache_data: Optional[dict[str, KVCacheTensor]] = None,
        progress: Optional[TextIO] = None,
    ) -> None:
        self.model = model
        self.config = config
        self.device = torch.device(device)
        self.rank = rank
        self.dp_size = dp_size
        self.mtp_k = mtp_k
        self.max_model_len = max_model_len
        self.kv_cache_data = dict(kv_cache_data or {})
        self.progress = progress
        self.enforce_eager = config.enforce_eager
        check_runner_config(model, config)
        # Level 1: the runner, not the decorator, compiles (in place; the model stays this object).
        compile_model(model, config)
        self.capture_sizes: list[int] = []
        self.req_graph = ReqGraph()
        self.counters = RunnerCounters()
        max_seqs = config.max_num_seqs
        max_tokens = max_seqs * (mtp_k + 1)
        # Static buffers: every recording reads its inputs from slices of these.
        self.forward_vars: dict[str, Any] = {
            "input_ids": torch.zeros(max_tokens, dtype=torch.long, device=self.device),
            "positions": torch.zeros(max_tokens, dtype=torch.long, device=self.device),
            "context_lens": torch.zeros(max_seqs, dtype=torch.long, device=self.device),
        }

    # --- mode ----------------------------------------------------------------------------------
    @property
    def graph_mode(self) -> CUDAGraphMode:
        """The mode the runner records and replays with: ``NONE`` under ``enforce_eager`` or
        ``use_cudagraph=False``, whatever ``cudagraph_mode`` says."""
        if self.enforce_eager or not self.config.compilation_config.use_cudagraph:
            return CUDAGraphMode.NONE
        return self.config.compilation_config.cudagraph_mode or CUDAGraphMode.NONE

    def _tr_hybrid_active(self) -> bool:
        """Token graphs serve decode steps: TR_HYBRID and FULL_AND_TR_HYBRID alike."""
        return self.graph_mode.uses_tr_hybrid()

    @property
    def max_q_len(self) -> int:
        return self.mtp_k + 1

    # --- capture -------------------------------------------------------------------------------
    def _report(self, text: str) -> None:
        if self.rank == 0:
            stream = self.progress if self.progress is not None else sys.stderr
            print(text, file=stream, flush=True)

    def _decode_metadata(
        self, bs: int, context_lens: torch.Tensor, positions: torch.Tensor, max_seqlen_k: int
    ) -> tuple[AttentionMetaData, Context]:
        q = self.max_q_len
        rows = bs * q
        attn = AttentionMetaData(
            max_seqlen_q=q,
            max_seqlen_k=max_seqlen_k,
            cu_seqlens_q=torch.arange(0, rows + 1, q, dtype=torch.int32, device=self.device),
            context_lens=context_lens,
        )
        context = Context(positions=positions, is_prefill=False, batch_size=bs, running_bs=bs, running_tokens=rows)
        return attn, context

    def capture_cudagraph(self) -> tuple[float, list[int]]:
        """Record a graph per capture size, largest first; return ``(elapsed_s, sizes ascending)``.

        Nothing is recorded (and ``(0.0, [])`` returned) when the graph mode is ``NONE``,
        ``use_cudagraph`` is off or ``enforce_eager`` is set. Raises ``ConfigError`` naming the size field when the largest
        size is above ``max_num_seqs``.
        """
        if self.graph_mode is CUDAGraphMode.NONE:
            return 0.0, []
        start = time.perf_counter()
        sizes, source = resolve_capture_sizes(self.config.compilation_config)
        sizes = sorted(sizes, reverse=True)
        if sizes[0] > self.config.max_num_seqs:
            raise ConfigError(
                source,
                f"largest capture size {sizes[0]} is above max_num_seqs={self.config.max_num_seqs}; "
                "lower the sizes or raise max_num_seqs",
            )
        tr_hybrid = self._tr_hybrid_active()
        q = self.max_q_len
        fv = self.forward_vars
        for i, bs in enumerate(sizes, 1):
            self._report(f"capturing graphs {i}/{len(sizes)}: batch size {bs} ({bs * q} rows)")
            rows = bs * q
            input_ids, positions, context_lens = fv["input_ids"][:rows], fv["positions"][:rows], fv["context_lens"][:bs]
            attn, context = self._decode_metadata(bs, context_lens, positions, self.max_model_len)
            # Capture is symmetric: every DP rank records the same bucket.
            common = dict(num_tokens_across_dp=[rows] * self.dp_size, kv_cache_data=self.kv_cache_data)
            with in_forward_context(attn, self.config, context, **common):
                self.model(input_ids, positions)  # warm-up: compile and settle allocations
            if tr_hybrid:
                with in_forward_context(attn, self.config, context, tr_graph="record", **common):
                    self.model(input_ids, positions)
            else:
                with in_forward_context(attn, self.config, context, **common):
                    self.req_graph.record(
                        request_bucket(bs, q), lambda ids, pos, _lens: self.model(ids, pos), input_ids, positions, context_lens
                    )
            if self.device.type == "cuda":
                torch.cuda.synchronize()
        self.capture_sizes = sorted(sizes)
        return time.perf_counter() - start, list(self.capture_sizes)

    # --- steps ---------------------------------------------------------------------------------
    def padded_batch(self, batch_size: int) -> int:
        """The captured size a decode of ``batch_size`` requests pads to (itself when none fits)."""
        for size in self.capture_sizes:
            if size >= batch_size:
                return size
        return batch_size

    def _replays(self, batch_size: int, is_prefill: bool) -> bool:
        return not (is_prefill or self.enforce_eager or not self.capture_sizes or batch_size > self.capture_sizes[-1])

    def _decode_replays(self) -> bool:
        """Whether a decode within the ladder replays a recording: FULL_DECODE_ONLY and FULL record
        request graphs, the TR_HYBRID modes token graphs."""
        return self.graph_mode.decode_mode() is not CUDAGraphMode.NONE

    def run_model(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward under the forward context in force; returns ``(logits, hidden_states)``."""
        fc = get_forward_context()
        context = fc.context
        if context is None:
            raise ConfigError("forward_context", "run_model needs a forward context with a Context; set one first")
        bs = context.batch_size
        if context.is_prefill:
            self.counters.count_eager("prefill")
        elif self.enforce_eager:
            self.counters.count_eager("enforce_eager")
        elif not self.capture_sizes:
            self.counters.count_eager("nothing_captured")
        elif bs > self.capture_sizes[-1]:
            self.counters.count_eager("above_largest_size")
        else:
            self.counters.replays += 1
            if self._tr_hybrid_active():
                hidden = self.model(input_ids, context.positions)  # the unit replays (tr_graph="replay")
            else:
                key = request_bucket(context.running_bs, fc.attn_metadata.max_seqlen_q)
                hidden = self.req_graph.replay(key, input_ids, context.positions, fc.attn_metadata.context_lens)
            hidden = hidden[: bs * self.max_q_len]
            return self.model.compute_logits(hidden), hidden
        hidden = self.model(input_ids, context.positions)
        return self.model.compute_logits(hidden), hidden

    def execute(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        context_lens: torch.Tensor,
        *,
        is_prefill: bool = False,
        max_seqlen_k: Optional[int] = None,
        query_lens: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Run one step of ``len(context_lens)`` requests and return the logits of its rows.

        ``query_lens`` (a prefill) gives each request's new rows; the attention metadata's
        ``cu_seqlens_q`` is laid out from it. A decode that replays is padded to its bucket
        (padding rows: token 0, position 0, context length 0) in fresh tensors, which the replay
        copies into the recorded buffers.
        """
        bs = int(context_lens.shape[0])
        rows = int(input_ids.shape[0])
        replay = self._replays(bs, is_prefill)
        running_bs = self.padded_batch(bs) if replay else bs
        q = self.max_q_len
        if replay and running_bs != bs:
            pad_rows = running_bs * q - rows
            input_ids = torch.cat([input_ids, input_ids.new_zeros(pad_rows)])
            positions = torch.cat([positions, positions.new_zeros(pad_rows)])
            context_lens = torch.cat([context_lens, context_lens.new_zeros(running_bs - bs)])
        k_len = max_seqlen_k if max_seqlen_k is not None else int(context_lens.max()) if bs else 0
        attn, context = self._decode_metadata(running_bs, context_lens, positions, k_len)
        if query_lens is not None:
            if int(query_lens.sum()) != rows or len(query_lens) != bs:
                raise ConfigError(
                    "query_lens", f"gives {len(query_lens)} requests of {int(query_lens.sum())} rows for a step of {bs} requests and {rows} rows"
                )
            attn.max_seqlen_q = int(query_lens.max()) if bs else 0
            attn.cu_seqlens_q = torch.cat([query_lens.new_zeros(1), query_lens.cumsum(0)]).to(torch.int32)
        elif is_prefill:
            attn.max_seqlen_q, attn.cu_seqlens_q = rows, None
        context.batch_size, context.is_prefill = bs, is_prefill
        context.running_tokens = int(input_ids.shape[0])
        tr_graph = "replay" if replay and self._tr_hybrid_active() else None
        with in_forward_context(
            attn,
            self.config,
            context,
            num_tokens_across_dp=[context.running_tokens] * self.dp_size,
            kv_cache_data=self.kv_cache_data,
            tr_graph=tr_graph,
        ):
            logits, _ = self.run_model(input_ids)
        return logits[:rows]
