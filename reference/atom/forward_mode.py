"""Per step: replay a token bucket, replay a request graph, or run eagerly; and the TBO split.

:meth:`ForwardMode.decide` settles how a step runs from the graph mode, what was captured, the
step's shape and the token counts of its data-parallel group:

- under a mode that uses TR_HYBRID, a step of either phase replays a recorded token bucket
  (``token_graph``) when its phase has one that holds the group's largest token count; every DP
  rank then replays that same bucket (:meth:`ForwardMode._pad_to_token_graph`), since a recording's
  collectives are sized by its bucket and ranks on different buckets would hang;
- under FULL (and ``FULL_DECODE_ONLY``) a decode replays the request graph of the smallest captured
  batch size that holds it (``req_graph``); a prefill runs eagerly;
- otherwise, and under ``enforce_eager``, the step runs eagerly, and ``reason`` says why.

TBO decode (two microbatches per step, ``enable_tbo``): a bucket splits when
:func:`decode_bucket_splits` (``running_bs > 2``); :func:`decode_ubatch_request_ranges` cuts it.
A request graph of a split bucket is a TBO graph, and a step that replays it lays each
microbatch's metadata out for the bucket's split (``ubatch_split_bs``), whatever it scheduled into
the bucket. A split decode no recording serves (off the ladder, ``enforce_eager``, or TR_HYBRID,
whose token graphs have no split recording) runs eagerly, its microbatches cut from the scheduled
requests.

``set_forward_context(..., forward_mode=mode)`` turns ``mode.token_graph`` into
``ForwardContext.tr_graph = "replay"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from reference.atom.graph_mode import CUDAGraphMode

__all__ = ["ForwardMode", "decode_bucket_splits", "decode_ubatch_request_ranges"]


def decode_bucket_splits(running_bs: int) -> bool:
    """Whether a decode bucket of ``running_bs`` requests runs as two microbatches under TBO."""
    return running_bs > 2


def decode_ubatch_request_ranges(running_bs: int) -> tuple[range, range]:
    """The request ranges of the two microbatches of a ``running_bs`` bucket: the first takes the
    larger half. ``ValueError`` for a bucket that does not split."""
    if not decode_bucket_splits(running_bs):
        raise ValueError(f"a decode bucket of {running_bs} requests does not split (TBO splits buckets above 2)")
    cut = (running_bs + 1) // 2
    return range(0, cut), range(cut, running_bs)


def _split(running_bs: int) -> tuple[int, int]:
    first, second = decode_ubatch_request_ranges(running_bs)
    return (len(first), len(second))


@dataclass(frozen=True)
class ForwardMode:
    """How one step runs. ``kind`` is ``"token_graph"``, ``"req_graph"`` or ``"eager"``;
    ``running_bs`` / ``running_tokens`` are the padded requests and rows the step runs (its own
    counts when eager); ``reason`` says why a step runs eagerly; ``ubatch_split_bs`` is the request
    count of each TBO microbatch (``None``: one batch)."""

    kind: str
    is_prefill: bool
    batch_size: int
    running_bs: int
    running_tokens: int
    reason: str = ""
    ubatch_split_bs: Optional[tuple[int, int]] = None

    @property
    def token_graph(self) -> bool:
        """The step replays a recorded token bucket (``tr_graph = "replay"``)."""
        return self.kind == "token_graph"

    @property
    def req_graph(self) -> bool:
        return self.kind == "req_graph"

    @property
    def replays(self) -> bool:
        return self.kind != "eager"

    @staticmethod
    def _pad_to_token_graph(num_tokens_across_dp: Sequence[int], buckets: Sequence[int]) -> Optional[int]:
        """The token bucket every rank of the DP group replays: the smallest recorded bucket that
        holds the group's largest token count (an idle rank's 0 included); ``None`` when none does."""
        if not num_tokens_across_dp:
            raise ValueError("num_tokens_across_dp is empty; give every DP rank's token count")
        largest = max(num_tokens_across_dp)
        fitting = [b for b in sorted(buckets) if b >= largest]
        return fitting[0] if fitting else None

    @classmethod
    def decide(
        cls,
        graph_mode: CUDAGraphMode,
        *,
        is_prefill: bool,
        batch_size: int,
        num_tokens: int,
        max_q_len: int = 1,
        capture_sizes: Sequence[int] = (),
        token_buckets: Optional[Mapping[str, Sequence[int]]] = None,
        enforce_eager: bool = False,
        enable_tbo: bool = False,
        num_tokens_across_dp: Optional[Sequence[int]] = None,
    ) -> "ForwardMode":
        """See the module docstring. ``capture_sizes``: the captured batch sizes (ascending);
        ``token_buckets``: the recorded token buckets per phase (``"prefill"``, ``"decode"``);
        ``num_tokens_across_dp``: every DP rank's token count (``None``: this rank alone)."""
        group = list(num_tokens_across_dp) if num_tokens_across_dp is not None else [num_tokens]
        tbo = enable_tbo and not is_prefill

        def eager(reason: str) -> ForwardMode:
            split = _split(batch_size) if tbo and decode_bucket_splits(batch_size) else None
            return cls("eager", is_prefill, batch_size, batch_size, num_tokens, reason, split)

        if enforce_eager:
            return eager("enforce_eager")
        if graph_mode.uses_tr_hybrid():
            phase = "prefill" if is_prefill else "decode"
            buckets = list((token_buckets or {}).get(phase, ()))
            bucket = cls._pad_to_token_graph(group, buckets) if buckets else None
            if bucket is None:
                if is_prefill:
                    return eager("prefill")
                return eager("nothing_captured" if not buckets else "above_largest_size")
            running_bs = batch_size if is_prefill else bucket // max_q_len
            if tbo and decode_bucket_splits(running_bs):
                return eager("tbo_split_unserved")  # token graphs have no split recording
            return cls("token_graph", is_prefill, batch_size, running_bs, bucket)
        if is_prefill:
            return eager("prefill")
        if graph_mode.decode_mode() is CUDAGraphMode.NONE or not capture_sizes:
            return eager("nothing_captured")
        fitting = [s for s in sorted(capture_sizes) if s >= batch_size]
        if not fitting:
            return eager("above_largest_size")
        running_bs = fitting[0]
        split = _split(running_bs) if tbo and decode_bucket_splits(running_bs) else None
        return cls("req_graph", False, batch_size, running_bs, running_bs * max_q_len, "", split)
