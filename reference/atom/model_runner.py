"""The model runner's graph half: capture at startup, then per step replay or run eagerly.

:meth:`ModelRunner.capture_cudagraph` records one graph per capture size, largest first:
a warm-up forward (compiles what the shape needs), then the recording, both under a forward
context built on the runner's static buffers. Under FULL the whole forward is a request graph
(:class:`~reference.atom.region_graph.ReqGraph`); when the mode uses TR_HYBRID (including
``FULL_AND_TR_HYBRID``, which the runner records exactly as TR_HYBRID) the model's
``@token_graph`` unit records its token buckets.

The runner refuses a model and configuration that cannot run together (:func:`check_runner_config`)
and, at level 1, compiles the model itself (:func:`~reference.atom.decorators.compile_model`).

Each step runs as :meth:`~reference.atom.forward_mode.ForwardMode.decide` says: a prefill runs
eagerly (unless its phase recorded a token bucket); ``enforce_eager`` runs eagerly; a decode above
the largest captured size runs eagerly; any other decode replays the bucket it was padded to (under
TR_HYBRID, the bucket of the DP group's largest token count). With ``enable_tbo`` a decode whose
bucket splits runs as two microbatches. ``counters`` counts each outcome. A drafter (``mtp_k``
draft tokens per request) records its passes as draft graphs; :meth:`ModelRunner.propose` runs them.

Who owns which buffer between recorded pieces (the rule every mode follows):

- the runner owns the step's inputs and metadata: ``forward_vars`` (``input_ids``, ``positions``,
  ``context_lens``, ``cu_seqlens_q``). A recording reads them at the addresses it was recorded
  with, so a step that replays writes itself there first, padding rows and requests included
  (token 0, position 0, context length 0), and its forward context is built on those buffers. A
  launch recorded inline (a compiled piece, a splitting op that is no eager region) and an eager
  region run live both read the current step, whichever mode replays them;
- the recording owns what its launches produce (in the graph pool): a live eager region reads its
  inputs and writes its results, returned or mutated in place (``mutates_args``), at the recorded
  addresses, which is where the next recorded piece reads them;
- the runner that captures owns the recordings: a capture drops the token graphs an earlier
  capture left on the model, since they read the earlier runner's buffers.

The model is any module with ``model(input_ids, positions) -> hidden_states`` and
``model.compute_logits(hidden_states)``; its attention reads the step's metadata from the forward
context.
"""

from __future__ import annotations

import collections
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
    ForwardContext,
    KVCacheTensor,
    in_forward_context,
    get_forward_context,
    swapped_forward_context,
)
from reference.atom.forward_mode import ForwardMode, decode_bucket_splits, decode_ubatch_request_ranges
from reference.atom.graph_mode import CUDAGraphMode
from reference.atom.recorder import launch
from reference.atom.region_graph import PHASES, DraftGraph, ReqGraph, request_bucket, token_graph_of

__all__ = ["ModelRunner", "RunnerCounters", "StepReport", "check_runner_config", "resolve_capture_sizes", "step_report"]


@dataclass
class RunnerCounters:
    """What :meth:`ModelRunner.run_model` did: graph replays, and eager runs by the rule that chose them."""

    replays: int = 0
    eager: int = 0
    eager_by_reason: dict[str, int] = field(default_factory=dict)

    def count_eager(self, reason: str) -> None:
        self.eager += 1
        self.eager_by_reason[reason] = self.eager_by_reason.get(reason, 0) + 1


@dataclass(frozen=True)
class StepReport:
    """Which path served one :meth:`ModelRunner.execute` step.

    ``path`` is ``"token_graph"`` (a token bucket replayed), ``"req_graph"`` (a request graph
    replayed) or ``"eager"``; ``bucket`` is the replayed bucket (rows of a token bucket, requests
    of a request graph; ``None`` when eager); ``padded_rows`` the rows the runner added to reach it;
    ``reason`` why an eager step ran eagerly (``""`` for a replay).
    """

    path: str
    batch_size: int
    rows: int
    is_prefill: bool
    bucket: Optional[int] = None
    padded_rows: int = 0
    reason: str = ""
    ubatch_split_bs: Optional[tuple[int, int]] = None

    @property
    def replayed(self) -> bool:
        return self.path != "eager"


def step_report(runner: "ModelRunner") -> Optional[StepReport]:
    """The :class:`StepReport` of the runner's last step (``None`` before the first)."""
    return runner.last_step


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
    reports capture progress (``None``: standard error); ``enable_tbo`` runs decodes whose bucket
    splits as two microbatches (TBO; ``reference.atom.forward_mode``).
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
        enable_tbo: bool = False,
        drafter: Optional[nn.Module] = None,
    ) -> None:
        self.model = model
        self.enable_tbo = enable_tbo
        self.drafter = drafter
        if drafter is not None and (mtp_k < 1 or not isinstance(getattr(drafter, "hidden_size", None), int)):
            raise ConfigError(
                "drafter",
                f"an MTP drafter needs mtp_k >= 1 (got {mtp_k}) and a hidden_size attribute (the width of the hidden "
                "state it reads); give both or no drafter",
            )
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
        self.draft_graph = DraftGraph()
        self.counters = RunnerCounters()
        #: What served each step, the latest last (bounded: a serving loop runs forever).
        self.steps: collections.deque[StepReport] = collections.deque(maxlen=4096)
        self.last_step: Optional[StepReport] = None
        self._units: Optional[list[nn.Module]] = None  # the model's @token_graph units, found once
        max_seqs = config.max_num_seqs
        max_tokens = max_seqs * (mtp_k + 1)
        # Static buffers: every recording reads its inputs and metadata from slices of these, and a
        # replaying step is written into them first. A replayed prefill may count one request per
        # row plus a padding request, hence the request-sized buffers' length.
        max_requests = max(max_seqs, max_tokens) + 1
        self.forward_vars: dict[str, Any] = {
            "input_ids": torch.zeros(max_tokens, dtype=torch.long, device=self.device),
            "positions": torch.zeros(max_tokens, dtype=torch.long, device=self.device),
            "context_lens": torch.zeros(max_requests, dtype=torch.long, device=self.device),
            "cu_seqlens_q": torch.zeros(max_requests + 1, dtype=torch.int32, device=self.device),
        }
        if drafter is not None:
            self.forward_vars["draft_hidden"] = torch.zeros(max_seqs, drafter.hidden_size, device=self.device)
            self.forward_vars["draft_ids"] = torch.zeros(max_seqs, dtype=torch.long, device=self.device)

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
        self, bs: int, context_lens: torch.Tensor, positions: torch.Tensor, max_seqlen_k: int, *, static: bool = False
    ) -> tuple[AttentionMetaData, Context]:
        """A decode's metadata for ``bs`` requests; ``static``: ``cu_seqlens_q`` is laid out in the
        runner's buffer (a recorded or replayed step), else in a fresh tensor (an eager one)."""
        q = self.max_q_len
        rows = bs * q
        cu = torch.arange(0, rows + 1, q, dtype=torch.int32, device=self.device)
        if static:
            cu = self.forward_vars["cu_seqlens_q"][: bs + 1].copy_(cu)
        attn = AttentionMetaData(
            max_seqlen_q=q,
            max_seqlen_k=max_seqlen_k,
            cu_seqlens_q=cu,
            context_lens=context_lens,
        )
        context = Context(positions=positions, is_prefill=False, batch_size=bs, running_bs=bs, running_tokens=rows)
        return attn, context

    def capture_cudagraph(self) -> tuple[float, list[int]]:
        """Record a graph per capture size, largest first; return ``(elapsed_s, sizes ascending)``.

        Nothing is recorded (and ``(0.0, [])`` returned) when the graph mode is ``NONE``,
        ``use_cudagraph`` is off or ``enforce_eager`` is set. Raises ``ConfigError`` naming the size
        field when the largest size is above ``max_num_seqs``. Under FULL with ``enable_tbo`` a
        bucket that splits is recorded as a TBO graph (its two microbatches cut at the bucket).
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
        if tr_hybrid:
            # Token graphs live on the model; those another runner recorded read its buffers.
            for unit in _token_graph_units(self.model):
                token_graph_of(unit).reset()
        for i, bs in enumerate(sizes, 1):
            self._report(f"capturing graphs {i}/{len(sizes)}: batch size {bs} ({bs * q} rows)")
            rows = bs * q
            input_ids, positions, context_lens = fv["input_ids"][:rows], fv["positions"][:rows], fv["context_lens"][:bs]
            attn, context = self._decode_metadata(bs, context_lens, positions, self.max_model_len, static=True)
            # Capture is symmetric: every DP rank records the same bucket.
            common = dict(num_tokens_across_dp=[rows] * self.dp_size, kv_cache_data=self.kv_cache_data)
            with in_forward_context(attn, self.config, context, **common):
                self.model(input_ids, positions)  # warm-up: compile and settle allocations
            if tr_hybrid:
                with in_forward_context(attn, self.config, context, tr_graph="record", **common):
                    self.model(input_ids, positions)
            else:
                split = _split_of(bs) if self.enable_tbo and decode_bucket_splits(bs) else None
                with in_forward_context(attn, self.config, context, **common):
                    self.req_graph.record(
                        request_bucket(bs, q),
                        lambda ids, pos, _lens, split=split: self._forward(ids, pos, split),
                        input_ids,
                        positions,
                        context_lens,
                    )
            if self.drafter is not None:
                self._capture_drafter(bs)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
        self.capture_sizes = sorted(sizes)
        return time.perf_counter() - start, list(self.capture_sizes)

    def _draft_pass(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, logits = self.drafter(hidden, token_ids)
        return hidden, logits.argmax(-1)

    def _capture_drafter(self, bs: int) -> None:
        """The drafter records each of its ``mtp_k`` passes for ``bs`` requests as a
        :class:`~reference.atom.region_graph.DraftGraph`, in the pool every graph shares."""
        fv = self.forward_vars
        hidden, ids = fv["draft_hidden"][:bs], fv["draft_ids"][:bs]
        self._draft_pass(hidden, ids)  # warm-up
        for j in range(self.mtp_k):
            self.draft_graph.record((bs, j), self._draft_pass, hidden, ids)

    def propose(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """The drafter's ``mtp_k`` passes from each request's last hidden state and token: the
        draft tokens ``[batch, mtp_k]``. Replays the draft graphs of the padded bucket when the
        batch fits the ladder; runs the drafter eagerly otherwise."""
        if self.drafter is None:
            raise ConfigError("drafter", "propose() needs a runner built with a drafter")
        bs = int(token_ids.shape[0])
        replay = bool(self.capture_sizes) and not self.enforce_eager and bs <= self.capture_sizes[-1]
        drafts = []
        if replay:
            running_bs = self.padded_batch(bs)
            if running_bs != bs:
                hidden = torch.cat([hidden, hidden.new_zeros(running_bs - bs, hidden.shape[1])])
                token_ids = torch.cat([token_ids, token_ids.new_zeros(running_bs - bs)])
            for j in range(self.mtp_k):
                hidden, token_ids = self.draft_graph.replay((running_bs, j), hidden, token_ids)
                drafts.append(token_ids[:bs].clone())  # the next replay overwrites the outputs
            self.counters.replays += 1
        else:
            for _ in range(self.mtp_k):
                hidden, token_ids = self._draft_pass(hidden, token_ids)
                drafts.append(token_ids)
            self.counters.count_eager("draft_above_largest_size" if self.capture_sizes else "draft_nothing_captured")
        return torch.stack(drafts, dim=1)

    # --- steps ---------------------------------------------------------------------------------
    def _token_buckets(self) -> dict[str, list[int]]:
        # The units are found once: walking the model's modules on every step costs tens of µs.
        if self._units is None:
            self._units = _token_graph_units(self.model)
        units = self._units
        if not units:
            return {}
        graph = token_graph_of(units[0])
        return {phase: graph.captured_sizes(phase) for phase in PHASES}

    def decide(
        self, batch_size: int, num_tokens: int, *, is_prefill: bool, num_tokens_across_dp: Optional[list[int]] = None
    ) -> ForwardMode:
        """The :class:`ForwardMode` of a step of ``batch_size`` requests and ``num_tokens`` rows."""
        return ForwardMode.decide(
            self.graph_mode,
            is_prefill=is_prefill,
            batch_size=batch_size,
            num_tokens=num_tokens,
            max_q_len=self.max_q_len,
            capture_sizes=self.capture_sizes,
            token_buckets=self._token_buckets() if self._tr_hybrid_active() and self.capture_sizes else {},
            enforce_eager=self.enforce_eager,
            enable_tbo=self.enable_tbo,
            num_tokens_across_dp=num_tokens_across_dp,
        )

    def padded_batch(self, batch_size: int) -> int:
        """The captured size a decode of ``batch_size`` requests pads to (itself when none fits)."""
        for size in self.capture_sizes:
            if size >= batch_size:
                return size
        return batch_size

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, split: Optional[tuple[int, int]]) -> torch.Tensor:
        """The model's forward, or, with a TBO ``split``, its two microbatches one after the other,
        each under a forward context laid out for its requests."""
        if split is None:
            return self.model(input_ids, positions)
        fc = get_forward_context()
        q = self.max_q_len
        outs, first = [], 0
        for count in split:
            rows = slice(first * q, (first + count) * q)
            with swapped_forward_context(_ubatch_context(fc, first, count, q, rows)):
                outs.append(self.model(input_ids[rows], positions[rows]))
            first += count
        # The join is a launch of its own, so a recording around the two microbatches replays it.
        return launch(torch.cat, (outs,), eager=False, name="tbo join", compiled=False)

    def run_model(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward under the forward context in force; returns ``(logits, hidden_states)``.

        Runs as the context's ``forward_mode`` says (decided from the context when it has none):
        eagerly (as two microbatches for a TBO split), by replaying the token bucket the unit
        records (``tr_graph = "replay"``), or by replaying the request graph of its bucket.
        """
        fc = get_forward_context()
        context = fc.context
        if context is None:
            raise ConfigError("forward_context", "run_model needs a forward context with a Context; set one first")
        mode = fc.forward_mode
        if mode is None:
            mode = self.decide(context.running_bs or context.batch_size, int(input_ids.shape[0]), is_prefill=context.is_prefill)
        if not mode.replays:
            self.counters.count_eager(mode.reason)
            hidden = self._forward(input_ids, context.positions, mode.ubatch_split_bs)
            return self.model.compute_logits(hidden), hidden
        self.counters.replays += 1
        if mode.token_graph:
            if fc.tr_graph != "replay":
                raise ConfigError("forward_context", "the step replays a token bucket; set the context with forward_mode=... (tr_graph='replay')")
            hidden = self.model(input_ids, context.positions)
        else:
            key = request_bucket(mode.running_bs, fc.attn_metadata.max_seqlen_q)
            hidden = self.req_graph.replay(key, input_ids, context.positions, fc.attn_metadata.context_lens)
        hidden = hidden[: mode.batch_size * self.max_q_len] if not mode.is_prefill else hidden[: int(input_ids.shape[0])]
        return self.model.compute_logits(hidden), hidden

    def _stage(
        self, input_ids: torch.Tensor, positions: torch.Tensor, context_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write a replaying step (already padded to its bucket) into the runner's buffers and
        return the views the step runs on. Launches recorded inline read these addresses."""
        fv = self.forward_vars
        rows, requests = int(input_ids.shape[0]), int(context_lens.shape[0])
        if rows > fv["input_ids"].shape[0] or requests > fv["context_lens"].shape[0]:
            raise ConfigError(
                "max_num_seqs",
                f"a replayed step of {rows} rows and {requests} requests does not fit the runner's buffers "
                f"({fv['input_ids'].shape[0]} rows, {fv['context_lens'].shape[0]} requests); raise max_num_seqs",
            )
        return (
            fv["input_ids"][:rows].copy_(input_ids),
            fv["positions"][:rows].copy_(positions),
            fv["context_lens"][:requests].copy_(context_lens),
        )

    def _check_step(self, bs: int, rows: int, query_lens, num_tokens_across_dp) -> None:
        """A step's counts agree with each other: this rank's rows at its index of the DP group's
        counts, and the prefill's query lengths summing to its rows over its requests."""
        if num_tokens_across_dp is not None:
            if len(num_tokens_across_dp) != self.dp_size or num_tokens_across_dp[self.rank] != rows:
                raise ConfigError(
                    "num_tokens_across_dp",
                    f"{list(num_tokens_across_dp)} does not hold {self.dp_size} ranks' counts with this rank's "
                    f"{rows} rows at index {self.rank}",
                )
        if query_lens is not None and (int(query_lens.sum()) != rows or len(query_lens) != bs):
            raise ConfigError(
                "query_lens", f"gives {len(query_lens)} requests of {int(query_lens.sum())} rows for a step of {bs} requests and {rows} rows"
            )

    def execute(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        context_lens: torch.Tensor,
        *,
        is_prefill: bool = False,
        max_seqlen_k: Optional[int] = None,
        query_lens: Optional[torch.Tensor] = None,
        num_tokens_across_dp: Optional[list[int]] = None,
    ) -> torch.Tensor:
        """Run one step of ``len(context_lens)`` requests and return the logits of its rows.

        ``query_lens`` (a prefill) gives each request's new rows; the attention metadata's
        ``cu_seqlens_q`` is laid out from it. ``num_tokens_across_dp`` is every DP rank's token
        count (this rank's at ``rank``): under TR_HYBRID every rank pads to the bucket of the
        group's largest. A step that replays is padded to its bucket (padding rows: token 0,
        position 0; padding requests: context length 0) and written into ``forward_vars``, the
        buffers the recordings read; its forward context is built on them. :attr:`last_step`
        (and :attr:`steps`) says which path served the step.
        """
        bs = int(context_lens.shape[0])
        rows = int(input_ids.shape[0])
        self._check_step(bs, rows, query_lens, num_tokens_across_dp)
        mode = self.decide(bs, rows, is_prefill=is_prefill, num_tokens_across_dp=num_tokens_across_dp)
        padded_rows = 0
        if mode.replays and mode.running_tokens > rows:
            padded_rows = mode.running_tokens - rows
            input_ids = torch.cat([input_ids, input_ids.new_zeros(padded_rows)])
            positions = torch.cat([positions, positions.new_zeros(padded_rows)])
            if not is_prefill:
                context_lens = torch.cat([context_lens, context_lens.new_zeros(mode.running_bs - bs)])
            elif query_lens is not None:  # the padding rows are one more request of their own
                query_lens = torch.cat([query_lens, query_lens.new_tensor([padded_rows])])
                context_lens = torch.cat([context_lens, context_lens.new_zeros(1)])
        if mode.replays:
            # The recording reads the runner's buffers: the step, padding included, goes there.
            input_ids, positions, context_lens = self._stage(input_ids, positions, context_lens)
        k_len = max_seqlen_k if max_seqlen_k is not None else int(context_lens.max()) if bs else 0
        attn, context = self._decode_metadata(mode.running_bs, context_lens, positions, k_len, static=mode.replays)
        if query_lens is not None:
            attn.max_seqlen_q = int(query_lens.max()) if bs else 0
            cu = torch.cat([query_lens.new_zeros(1), query_lens.cumsum(0)]).to(torch.int32)
            if mode.replays:
                cu = self.forward_vars["cu_seqlens_q"][: len(cu)].copy_(cu)
            attn.cu_seqlens_q = cu
        elif is_prefill:
            attn.max_seqlen_q, attn.cu_seqlens_q = rows, None
        context.batch_size, context.is_prefill = bs, is_prefill
        context.running_tokens = int(input_ids.shape[0])
        group = list(num_tokens_across_dp) if num_tokens_across_dp is not None else [context.running_tokens] * self.dp_size
        report = StepReport(
            path=mode.kind,
            batch_size=bs,
            rows=rows,
            is_prefill=is_prefill,
            bucket=None if not mode.replays else (mode.running_tokens if mode.token_graph else mode.running_bs),
            padded_rows=padded_rows,
            reason=mode.reason,
            ubatch_split_bs=mode.ubatch_split_bs,
        )
        with in_forward_context(
            attn,
            self.config,
            context,
            num_tokens_across_dp=group,
            kv_cache_data=self.kv_cache_data,
            forward_mode=mode,
        ):
            logits, _ = self.run_model(input_ids)
        self.last_step = report
        self.steps.append(report)
        return logits[:rows]


def _token_graph_units(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if getattr(type(m), "token_graph_per_phase", None) is not None]


def _split_of(running_bs: int) -> tuple[int, int]:
    first, second = decode_ubatch_request_ranges(running_bs)
    return (len(first), len(second))


def _ubatch_context(fc: ForwardContext, first: int, count: int, q: int, rows: slice) -> ForwardContext:
    """The forward context of one TBO microbatch: requests ``first .. first + count`` of the step,
    their rows, their context lengths, and the cache slots they own (``block_tables``)."""
    md = fc.attn_metadata
    slots = md.block_tables if md.block_tables is not None else torch.arange(len(md.context_lens), device=md.context_lens.device)
    attn = AttentionMetaData(
        max_seqlen_q=md.max_seqlen_q,
        max_seqlen_k=md.max_seqlen_k,
        cu_seqlens_q=torch.arange(0, count * q + 1, q, dtype=torch.int32, device=md.context_lens.device),
        context_lens=md.context_lens[first : first + count],
        block_tables=slots[first : first + count],
        slot_mapping=md.slot_mapping,
    )
    ctx = fc.context
    context = Context(
        positions=ctx.positions[rows] if ctx.positions is not None else None,
        is_prefill=ctx.is_prefill,
        batch_size=count,
        running_bs=count,
        running_tokens=count * q,
        is_draft=ctx.is_draft,
    )
    return ForwardContext(
        no_compile_layers=fc.no_compile_layers,
        attn_metadata=attn,
        kv_cache_data=fc.kv_cache_data,
        context=context,
        dp_metadata=fc.dp_metadata,
        spec_decode_metadata=fc.spec_decode_metadata,
        forward_mode=fc.forward_mode,
    )
