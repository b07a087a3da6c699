"""A tiny decoder for the graph-capture contract, built on an implementation's ATOM surface.

The model is written against the names the seed gives (``eager_region``, ``token_graph``,
``get_forward_context``) taken from the adapter's ``AtomCapability`` (``impl.atom()``), so the same model runs on any
implementation. Its attention reads the step's metadata from the forward context: the context
lengths (a tensor) and ``max_seqlen_k`` (a host int that picks how much of the cache it reads),
which is what makes it an eager region. It is correct under FULL too, as long as the recorded
``max_seqlen_k`` covers the live one: the lengths mask whatever it reads beyond them.

Each call of the attention appends ``(rows, max_seqlen_k)`` to ``model.attention_calls``, so a test
can see which metadata an eager region ran with.
"""

from __future__ import annotations

import io
from conformance.harness.capabilities import AtomCapability
from typing import Any

import torch
from torch import nn

VOCAB, DIM, HEADS, MAX_LEN, MAX_SEQS = 64, 32, 2, 12, 10


class _Decoder(nn.Module):
    """A backbone (the compiled unit) and the LM head the runner calls on its hidden states."""

    def __init__(self, backbone: nn.Module, calls: list) -> None:
        super().__init__()
        self.model = backbone
        self.lm_head = nn.Linear(DIM, VOCAB)
        self.attention_calls = calls

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)


def _decoder(backbone: nn.Module, calls: list, seed: int) -> nn.Module:
    """The decoder around ``backbone`` with seeded random weights, in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    model = _Decoder(backbone, calls)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model.eval()


def build_graph_decoder(atom: AtomCapability, *, per_phase: bool = False, seed: int = 0) -> nn.Module:
    """A decoder whose backbone is a ``@token_graph`` unit with one eager-region attention."""
    head_dim = DIM // HEADS
    calls: list[tuple[int, int]] = []

    @atom.eager_region
    def cache_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        fc = atom.get_forward_context()
        md, kv = fc.attn_metadata, fc.kv_cache_data["layer0"]
        rows, span = q.shape[0], md.max_seqlen_k
        calls.append((rows, span))
        keys = torch.cat([kv.k_cache[:rows, :span], k[:, None]], dim=1)  # [rows, span + 1, H, D]
        vals = torch.cat([kv.v_cache[:rows, :span], v[:, None]], dim=1)
        lens = md.context_lens[:rows]
        valid = torch.arange(span + 1, device=q.device)[None, :] < lens[:, None]
        valid[:, span] = True  # every row attends to its own new token
        scores = torch.einsum("thd,tlhd->thl", q, keys) * head_dim**-0.5
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        return torch.einsum("thl,tlhd->thd", scores.softmax(-1), vals)

    @atom.token_graph(per_phase=per_phase)
    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Embedding(MAX_LEN + 1, DIM)
            self.qkv = nn.Linear(DIM, 3 * DIM)
            self.o = nn.Linear(DIM, DIM)
            self.norm = nn.LayerNorm(DIM)
            self.up = nn.Linear(DIM, 2 * DIM)
            self.down = nn.Linear(2 * DIM, DIM)

        def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            h = self.embed(input_ids) + self.pos(positions)
            q, k, v = self.qkv(h).view(-1, 3, HEADS, head_dim).unbind(1)
            h = h + self.o(cache_attention(q, k, v).reshape(-1, DIM))
            return h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))

    return _decoder(Backbone(), calls, seed)


def kv_cache(atom: AtomCapability, seed: int = 1, device: Any = "cpu") -> dict:
    """A filled cache of ``MAX_SEQS`` request slots of ``MAX_LEN`` entries."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(MAX_SEQS, MAX_LEN, HEADS, DIM // HEADS, generator=gen).to(device)
    v = torch.randn(MAX_SEQS, MAX_LEN, HEADS, DIM // HEADS, generator=gen).to(device)
    return {"layer0": atom.KVCacheTensor(0, k, v)}


def decode_step(batch_size: int, seed: int, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, positions, context_lens)`` of a decode step of ``batch_size`` requests."""
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, MAX_LEN + 1, (batch_size,), generator=gen)
    ids = torch.randint(0, VOCAB, (batch_size,), generator=gen)
    return ids.to(device), lens.to(device), lens.to(device)


def eager_logits(atom: AtomCapability, model: nn.Module, cache: dict, step: tuple, *, max_seqlen_k: int = MAX_LEN) -> torch.Tensor:
    """The step run with no compiler and no graph: the uncompiled forward, live metadata."""
    ids, pos, lens = step
    attn = atom.AttentionMetaData(max_seqlen_q=1, max_seqlen_k=max_seqlen_k, context_lens=lens)
    ctx = atom.Context(positions=pos, batch_size=len(lens), running_bs=len(lens), running_tokens=len(ids))
    with torch.no_grad(), atom.in_forward_context(attn, None, ctx, kv_cache_data=cache):
        return model.compute_logits(type(model.model).forward(model.model, ids, pos))


def compiled_decoder(atom: AtomCapability, backend: str, *, device: Any = "cpu", per_phase: bool = False) -> nn.Module:
    """The decoder with its backbone compiled in place by ``backend`` through the recording backend.

    Inductor gets dynamic shapes (one compile serves every bucket); other backends compile each
    bucket's static shape (the reference backend compiles static shapes only).
    """
    model = build_graph_decoder(atom, per_phase=per_phase).to(device)
    model.model.compile(backend=atom.recording_backend(backend), dynamic=True if backend == "inductor" else False)
    return model


def make_runner(
    atom: AtomCapability,
    model: nn.Module,
    mode: Any,
    *,
    sizes: Any = (2, 4, 8),
    max_num_seqs: int = MAX_SEQS,
    cache: dict,
    device: Any = "cpu",
    **kwargs: Any,
) -> Any:
    """A runner at level 0 (the model is compiled already) with ``mode`` and explicit sizes."""
    cc = atom.CompilationConfig(cudagraph_mode=mode, cudagraph_capture_sizes=list(sizes))
    config = atom.Config(compilation_config=cc, max_num_seqs=max_num_seqs, enforce_eager=kwargs.pop("enforce_eager", False))
    return atom.ModelRunner(model, config, device=device, kv_cache_data=cache, max_model_len=MAX_LEN, **kwargs)


def replay_mismatches(
    atom: AtomCapability, model: nn.Module, runner: Any, cache: dict, batch_sizes: Any, *, atol: float, device: Any = "cpu"
) -> dict[int, float]:
    """Run a decode of each batch size through ``runner`` and eagerly; the batch sizes whose
    logits differ by more than ``atol`` (worst absolute difference). Every step's inputs are fresh
    tensors, so a replay that does not copy them into its recorded buffers reads stale values."""
    bad: dict[int, float] = {}
    with torch.no_grad():
        for bs in batch_sizes:
            step = decode_step(bs, seed=100 + bs, device=device)
            want = eager_logits(atom, model, cache, step)
            got = runner.execute(*step)
            diff = (got - want).abs().max().item() if got.shape == want.shape else float("inf")
            if not diff <= atol:
                bad[bs] = diff
    return bad


def record_token_pass(atom: AtomCapability, unit: nn.Module, cache: dict, rows: int, *, is_prefill: bool) -> None:
    """A capture loop's two passes over a ``@token_graph`` unit for ``rows`` rows of one phase:
    a warm-up forward, then a record pass (``tr_graph="record"``)."""
    ids, pos = torch.zeros(rows, dtype=torch.long), torch.ones(rows, dtype=torch.long)
    attn = atom.AttentionMetaData(max_seqlen_k=MAX_LEN, context_lens=torch.ones(rows, dtype=torch.long))
    ctx = atom.Context(positions=pos, is_prefill=is_prefill, batch_size=rows, running_bs=rows, running_tokens=rows)
    with torch.no_grad():
        with atom.in_forward_context(attn, None, ctx, kv_cache_data=cache):
            unit(ids, pos)
        with atom.in_forward_context(attn, None, ctx, kv_cache_data=cache, tr_graph="record"):
            unit(ids, pos)


# --- the decoder every level compiles itself (the runner matrix) ---------------------------------

#: The attention op of the level decoder: a splitting op (level 3 cuts the graph there) whose
#: implementation is an eager region (a token graph breaks there).
LEVEL_OP = "token_attention"
# Keyed by the capability's registration function: a capability object is made per call of
# impl.atom(), but the op registry it registers into is the implementation's, once per process.
_LEVEL_OPS: dict[Any, tuple[str, list]] = {}


def _attend_into(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fc: Any, kv: Any) -> None:
    """Attention of the step in ``fc`` over cache ``kv``, written into ``out`` row range by row range.

    Request i owns the query rows cu[i]:cu[i+1] and cache slot block_tables[i] (i without a table),
    of which its first context_lens[i] entries are valid; each row also sees its request's new rows
    up to itself. A decode lays out max_seqlen_q rows per request without reading a device tensor
    on the host (which a CUDA graph capture under FULL would refuse)."""
    md = fc.attn_metadata
    span, rows = md.max_seqlen_k, q.shape[0]
    if fc.context is not None and not fc.context.is_prefill:
        cu = list(range(0, rows + 1, md.max_seqlen_q))
    elif md.cu_seqlens_q is not None:
        cu = md.cu_seqlens_q.tolist()
    else:
        cu = list(range(rows + 1))
    cached = torch.arange(span, device=q.device)
    for i in range(len(cu) - 1):
        s, e = cu[i], cu[i + 1]
        if e <= s:
            continue
        n = e - s
        slot = md.block_tables[i] if md.block_tables is not None else i
        keys = torch.cat([kv.k_cache[slot, :span], k[s:e]])  # [span + n, H, D]
        vals = torch.cat([kv.v_cache[slot, :span], v[s:e]])
        new = torch.arange(n, device=q.device)
        valid = torch.cat([(cached < md.context_lens[i]).expand(n, span), new[None, :] <= new[:, None]], dim=1)
        scores = torch.einsum("nhd,lhd->nhl", q[s:e], keys) * q.shape[-1] ** -0.5
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        out[s:e] = torch.einsum("nhl,lhd->nhd", scores.softmax(-1), vals)


def register_level_attention(atom: AtomCapability) -> tuple[str, list]:
    """Register the level decoder's attention op once per process and ATOM module; returns its
    ``"namespace.op"`` name and the list every call appends ``(rows, max_seqlen_k)`` to."""
    known = _LEVEL_OPS.get(atom.direct_register_custom_op)
    if known is not None:
        return known
    calls: list[tuple[int, int]] = []

    @atom.eager_region
    def request_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        fc = atom.get_forward_context()
        calls.append((q.shape[0], fc.attn_metadata.max_seqlen_k))
        out = torch.zeros_like(q)
        _attend_into(out, q, k, v, fc, fc.kv_cache_data["layer0"])
        return out

    def token_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor) -> None:
        output.copy_(request_attention(q, k, v))

    def token_attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor) -> None:
        return None

    # One kernel for every device (the CPU here, CUDA on a GPU machine); the fake one for tracing.
    name = atom.direct_register_custom_op(
        LEVEL_OP, token_attention, mutates_args=["output"], fake_impl=token_attention_fake, dispatch_key="CompositeExplicitAutograd"
    )
    _LEVEL_OPS[atom.direct_register_custom_op] = (name, calls)
    return name, calls


def level_config(atom: AtomCapability, level: int, mode: Any, *, use_inductor: bool = True, sizes: Any = (1, 2, 4), cache_dir: str = "", **cc: Any) -> Any:
    """A ``Config`` at ``level`` with ``mode``, explicit capture sizes, and the level decoder's
    attention as the splitting op; ``use_inductor=False`` compiles with the implementation's own
    compiler (the seed's field; the reference's pieces)."""
    name, _ = register_level_attention(atom)
    compilation = atom.CompilationConfig(
        level=level, cudagraph_mode=mode, cudagraph_capture_sizes=list(sizes), splitting_ops=[name],
        use_inductor=use_inductor, cache_dir=cache_dir, **cc,
    )
    return atom.Config(compilation_config=compilation, max_num_seqs=MAX_SEQS)


def build_level_decoder(atom: AtomCapability, config: Any, *, seed: int = 0) -> nn.Module:
    """A decoder whose backbone is ``@token_graph @support_torch_compile``: it compiles itself at
    ``config``'s level (levels 2 and 3) or is compiled by the runner (level 1), and records token
    graphs under TR_HYBRID. Attention is :data:`LEVEL_OP`."""
    name, calls = register_level_attention(atom)
    namespace, op = name.split(".")
    attention = getattr(getattr(torch.ops, namespace), op)
    head_dim = DIM // HEADS

    @atom.token_graph
    @atom.support_torch_compile
    class LevelBackbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Embedding(MAX_LEN + 1, DIM)
            self.qkv = nn.Linear(DIM, 3 * DIM)
            self.o = nn.Linear(DIM, DIM)
            self.up = nn.Linear(DIM, 2 * DIM)
            self.down = nn.Linear(2 * DIM, DIM)

        def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            h = self.embed(input_ids) + self.pos(positions)
            normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            q, k, v = self.qkv(normed).chunk(3, dim=-1)
            q, k, v = (t.reshape(-1, HEADS, head_dim) for t in (q, k, v))
            o = torch.zeros_like(q)  # the reference lowering has no rule for empty_like
            attention(q, k, v, o)
            h = h + self.o(o.reshape(-1, DIM))
            return h + self.down(torch.relu(self.up(h)))

    return _decoder(LevelBackbone(atom_config=config), calls, seed)


def prefill_step(query_lens: Any, seed: int, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, positions, context_lens, query_lens)`` of a prefill: request i brings
    ``query_lens[i]`` new tokens after ``context_lens[i]`` cached ones."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.tensor(list(query_lens))
    lens = torch.randint(0, MAX_LEN - int(q.max()) + 1, (len(q),), generator=gen)
    ids = torch.randint(0, VOCAB, (int(q.sum()),), generator=gen)
    pos = torch.cat([torch.arange(int(c), int(c) + int(n)) for c, n in zip(lens, q)])
    return ids.to(device), pos.to(device), lens.to(device), q.to(device)


def eager_step_logits(atom: AtomCapability, model: nn.Module, cache: dict, ids, pos, lens, query_lens=None) -> torch.Tensor:
    """Any step (prefill with ``query_lens``, else a decode) run with no compiler and no graph."""
    q = query_lens if query_lens is not None else torch.ones(len(lens), dtype=torch.long, device=lens.device)
    cu = torch.cat([q.new_zeros(1), q.cumsum(0)]).to(torch.int32)
    attn = atom.AttentionMetaData(max_seqlen_q=int(q.max()), max_seqlen_k=MAX_LEN, cu_seqlens_q=cu, context_lens=lens)
    ctx = atom.Context(
        positions=pos, is_prefill=query_lens is not None, batch_size=len(lens), running_bs=len(lens), running_tokens=len(ids)
    )
    with torch.no_grad(), atom.in_forward_context(attn, None, ctx, kv_cache_data=cache):
        return model.compute_logits(type(model.model).forward(model.model, ids, pos))


def dp_rank_main(atom_module: str, rank: int, counts: list, init_file: str, out_path: str) -> None:
    """One rank of a DP group in a process of its own (``multiprocessing`` spawn): builds the level
    decoder at level 0 with TR_HYBRID, captures, gathers the group's token counts over gloo, runs
    its decode step with them, and writes what it saw (JSON) to ``out_path``."""
    import importlib
    import json

    import torch.distributed as dist

    atom = importlib.import_module(atom_module)
    torch.set_num_threads(1)
    model = build_level_decoder(atom, level_config(atom, 0, "NONE"))
    cache = kv_cache(atom)
    config = level_config(atom, 0, "TR_HYBRID")
    runner = atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=MAX_LEN, rank=rank, dp_size=len(counts), progress=io.StringIO())
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=len(counts))
    try:
        with torch.no_grad():
            runner.capture_cudagraph()
            gathered = [torch.zeros(1, dtype=torch.long) for _ in counts]
            dist.all_gather(gathered, torch.tensor([counts[rank]]))
            group = [int(t) for t in gathered]
            ids, pos, lens = decode_step(counts[rank], seed=70 + rank)
            before = len(model.attention_calls)
            got = runner.execute(ids, pos, lens, num_tokens_across_dp=group)
            rows = [r for r, _ in model.attention_calls[before:]]
            diff = (got - eager_step_logits(atom, model, cache, ids, pos, lens)).abs().max().item()
        with open(out_path, "w") as f:
            json.dump({"group": group, "rows": rows, "diff": diff}, f)
    finally:
        dist.destroy_process_group()


# --- the production-shaped decoder (every cell of the runner matrix) -----------------------------

#: The production decoder's two attention ops, both splitting ops of level 3 that write their result
#: into an output buffer the piece before them allocated (``mutates_args=["output"]``) and read the
#: KV cache and metadata from the forward context by layer name. ``LIVE_OP`` is declared an eager
#: region (a token graph breaks there and runs it live); ``INLINE_OP`` is not, so every graph mode
#: records it inline, and it is right only if the step's metadata is where it was recorded reading.
LIVE_OP, INLINE_OP = "prod_attention_live", "prod_attention_inline"
PROD_LAYERS = 2
_PROD_OPS: dict[Any, tuple[tuple[str, str], list]] = {}


def register_production_attention(atom: AtomCapability) -> tuple[tuple[str, str], list]:
    """Register the production decoder's attention ops once per process and ATOM module, with the
    default dispatch key (the design's: the op must run on the device the model runs on). Returns
    their ``"namespace.op"`` names and the list every call appends ``(layer, rows, max_seqlen_k)`` to."""
    known = _PROD_OPS.get(atom.direct_register_custom_op)
    if known is not None:
        return known
    calls: list[tuple[str, int, int]] = []

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
        # The result goes into ``output`` in place (the op mutates it); nothing is returned.
        fc = atom.get_forward_context()
        calls.append((layer_name, q.shape[0], fc.attn_metadata.max_seqlen_k))
        _attend_into(output, q, k, v, fc, fc.kv_cache_data[layer_name])

    def live_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
        attend(q, k, v, output, layer_name)

    def inline_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
        attend(q, k, v, output, layer_name)

    def fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
        return None

    live = atom.direct_register_custom_op(LIVE_OP, atom.eager_region(live_attention), mutates_args=["output"], fake_impl=fake)
    inline = atom.direct_register_custom_op(INLINE_OP, inline_attention, mutates_args=["output"], fake_impl=fake)
    _PROD_OPS[atom.direct_register_custom_op] = ((live, inline), calls)
    return (live, inline), calls


def production_config(
    atom: AtomCapability, level: int, mode: Any, *, use_inductor: bool = True, sizes: Any = (1, 2, 4), cache_dir: str = "", **cc: Any
) -> Any:
    """A ``Config`` at ``level`` with ``mode`` whose splitting ops are the production attention ops."""
    names, _ = register_production_attention(atom)
    compilation = atom.CompilationConfig(
        level=level, cudagraph_mode=mode, cudagraph_capture_sizes=list(sizes), splitting_ops=list(names),
        use_inductor=use_inductor, cache_dir=cache_dir, **cc,
    )
    return atom.Config(compilation_config=compilation, max_num_seqs=MAX_SEQS)


def build_production_decoder(atom: AtomCapability, config: Any, *, seed: int = 0) -> nn.Module:
    """A decoder shaped as serving models are: a ``@token_graph @support_torch_compile`` backbone of
    :data:`PROD_LAYERS` pre-norm layers (RMSNorm, QKV, attention into a zero-filled output buffer,
    output projection, RMSNorm, gated SiLU MLP), layer 0's attention :data:`LIVE_OP` and layer 1's
    :data:`INLINE_OP`, a final RMSNorm; ``model.attention_calls`` lists ``(layer, rows, span)``."""
    (live, inline), calls = register_production_attention(atom)
    ops = [getattr(getattr(torch.ops, n.split(".")[0]), n.split(".")[1]) for n in (live, inline)]
    head_dim = DIM // HEADS

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(DIM))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Layer(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.layer_name = f"layer{index}"
            self.attention = ops[index % len(ops)]
            self.input_norm, self.post_norm = RMSNorm(), RMSNorm()
            self.qkv = nn.Linear(DIM, 3 * DIM)
            self.o = nn.Linear(DIM, DIM)
            self.gate_up = nn.Linear(DIM, 4 * DIM)
            self.down = nn.Linear(2 * DIM, DIM)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(self.input_norm(h)).chunk(3, dim=-1)
            q, k, v = (t.reshape(-1, HEADS, head_dim) for t in (q, k, v))
            out = torch.zeros_like(q)  # the reference lowering has no rule for empty_like
            self.attention(q, k, v, out, self.layer_name)
            h = h + self.o(out.reshape(-1, DIM))
            gate, up = self.gate_up(self.post_norm(h)).chunk(2, dim=-1)
            return h + self.down(torch.nn.functional.silu(gate) * up)

    @atom.token_graph
    @atom.support_torch_compile
    class ProductionBackbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Embedding(MAX_LEN + 1, DIM)
            self.layers = nn.ModuleList(Layer(i) for i in range(PROD_LAYERS))
            self.norm = RMSNorm()

        def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            h = self.embed(input_ids) + self.pos(positions)
            for layer in self.layers:
                h = layer(h)
            return self.norm(h)

    model = _decoder(ProductionBackbone(atom_config=config), calls, seed)
    with torch.no_grad():  # RMSNorm weights near 1, as trained models have them
        for module in model.modules():
            if isinstance(module, RMSNorm):
                module.weight.add_(1.0)
    return model


def production_kv_cache(atom: AtomCapability, seed: int = 1, device: Any = "cpu") -> dict:
    """One filled cache per production layer (``"layer<i>"``), ``MAX_SEQS`` slots of ``MAX_LEN``."""
    gen = torch.Generator().manual_seed(seed)
    shape = (MAX_SEQS, MAX_LEN, HEADS, DIM // HEADS)
    return {
        f"layer{i}": atom.KVCacheTensor(i, torch.randn(shape, generator=gen).to(device), torch.randn(shape, generator=gen).to(device))
        for i in range(PROD_LAYERS)
    }
