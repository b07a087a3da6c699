"""The backend's own decompositions: ops whose default lowering the installed tools reject.

They join the core ATen table and torch-mlir's in :func:`reference.lowering.stablehlo.decomposition_table`.
Each entry returns ``NotImplemented`` for the cases it leaves to the default path.
"""

from __future__ import annotations

import functools
import math
import threading

import torch

from reference.core.torch_compat import dispatch_has_kernel, get_decompositions
from reference.lowering import op_rewrites, sorting

aten = torch.ops.aten


def fmod_scalar(x: torch.Tensor, other) -> torch.Tensor:
    """``fmod(x, scalar)``: torch-mlir fails on the scalar operand (``torch.constant.int`` does not
    legalize), so the scalar becomes a tensor; integers use ``x - other * trunc(x / other)``, exact."""
    if x.is_floating_point():
        return aten.fmod.Tensor(x, torch.scalar_tensor(other, dtype=x.dtype, device=x.device))
    return x - other * torch.div(x, other, rounding_mode="trunc")


def remainder(x: torch.Tensor, other) -> torch.Tensor:
    """``remainder``: Python's rule, the sign of the divisor. torch-mlir lowers it to
    ``stablehlo.remainder``, which is C's ``fmod`` (the sign of the dividend), so ``-7 % 3`` gave -1
    instead of 2. The fmod result is moved by one divisor where its sign differs from the divisor's,
    the same correction eager's CPU kernel makes, so floats keep eager's rounding too (and
    ``1e-16 % -inf`` is ``-inf``, ``-0.5 % -inf`` is ``-0.5``, as in eager)."""
    dtype = torch.result_type(x, other)
    x = x.to(dtype)
    if not isinstance(other, torch.Tensor):
        return _remainder_by_scalar(x, other, dtype)
    other = other.to(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        # eager computes half types in float32 and rounds once; IREE's half fmod is off by up to a divisor
        return remainder(x.float(), other.float()).to(dtype)
    if dtype.is_floating_point:
        # fmod of a finite dividend by an infinite divisor is the dividend (C's rule, eager's);
        # IREE's gives nan
        r = torch.where(torch.isinf(other) & torch.isfinite(x), x, aten.fmod.Tensor(x, other))
    else:
        r = x - other * torch.div(x, other, rounding_mode="trunc")
    # The wrong side chosen by the divisor's sign with a select: no comparison of two booleans,
    # which the compiled graph got wrong once one side was a folded constant.
    wrong_side = torch.where(other < 0, r > 0, r < 0)
    return torch.where(wrong_side, r + other, r)


def empty_contraction(x: torch.Tensor, y: torch.Tensor):
    """``mm``/``bmm`` over a contracted dimension of size 0 is zeros; iree-compile dies of a division
    by zero (SIGFPE, status -8) tiling such a matmul, so it never reaches the compiler. Any other
    shape keeps the op (``NotImplemented``: the decomposition declines)."""
    if x.shape[-1] != 0:
        return NotImplemented
    return x.new_zeros((*x.shape[:-1], y.shape[-1]))


def scalar_reduction(x: torch.Tensor, dim=None, keepdim: bool = False, *, dtype=None):
    """A reduction of a 0-d tensor (``mean``, ``sum``, ``amax``, ``amin`` over ``dim`` 0 or -1) is
    the tensor itself; torch-mlir's lowering pipeline dies of a segmentation fault on such a
    reduction, taking the user's process with it, so it never reaches torch-mlir. A tensor with
    dimensions keeps the op (``NotImplemented``: the decomposition declines)."""
    if x.dim() != 0:
        return NotImplemented
    return x.to(dtype) if dtype is not None else x.clone()


class _Inner(threading.local):
    """Which of the decompositions below is running: each calls its own op once more, which the
    decomposition table would hand back to it; inside, it declines, so the op is kept as it is."""

    def __init__(self) -> None:
        self.ops: set[str] = set()


_INNER = _Inner()


def _declining(name: str):
    """A decorator: the decomposition returns ``NotImplemented`` for calls made from inside itself."""

    def wrap(fn):
        @functools.wraps(fn)
        def decomposition(*args, **kwargs):
            if name in _INNER.ops:
                return NotImplemented
            _INNER.ops.add(name)
            try:
                return fn(*args, **kwargs)
            finally:
                _INNER.ops.discard(name)

        return decomposition

    return wrap


def _then_the_table(fn):
    """Marks a decomposition that, where it declines (``NotImplemented``), hands the call to the
    decomposition the table held for the op before it (torch's or torch-mlir's) instead of keeping
    the op: for ops torch-mlir cannot lower as they are (``index_add``). See :func:`falling_back`."""
    fn.falls_back = True
    return fn


def falling_back(fn, prior):
    """``fn`` where it decomposes, ``prior`` where it declines (for decompositions marked with
    :func:`_then_the_table`; :func:`reference.lowering.stablehlo.decomposition_table` applies it)."""
    if prior is None or not getattr(fn, "falls_back", False):
        return fn

    @functools.wraps(fn)
    def decomposition(*args, **kwargs):
        out = fn(*args, **kwargs)
        return prior(*args, **kwargs) if out is NotImplemented else out

    return decomposition


@_declining("pow")
def real_pow(x, exponent):
    """``pow`` with a floating result (tensor or Python-number base, tensor exponent) as C's ``pow``
    computes it. IREE's CPU ``pow`` works through ``exp(y * log(x))``: a negative base gave NaN
    for every exponent (``(-3.0) ** 2.0`` is 9; ``float_power`` of int64 and bool, which computes in
    float64 narrowed to float32, read NaN), ``0 ** 0`` gave NaN (it is 1), and a negative
    Python-number base (``pow(-2.0, t)``) gave 0. Here the magnitude comes from ``|x|``, the sign
    from an odd integral exponent, NaN for a negative base and a non-integral exponent (an
    infinite base excepted), and 1 where the exponent is 0 or the base is 1. Integer results keep
    the op."""
    if not isinstance(exponent, torch.Tensor):
        return NotImplemented  # pow(tensor, number): real_pow_by_number
    if not isinstance(x, torch.Tensor):
        return _pow_of_number(x, exponent)
    base = x
    dtype = torch.result_type(base, exponent)
    if not dtype.is_floating_point:
        return NotImplemented
    if dtype in (torch.float16, torch.bfloat16):
        return real_pow.__wrapped__(base.float(), exponent.float()).to(dtype)
    base, exponent = base.to(dtype), exponent.to(dtype)
    magnitude = aten.pow.Tensor_Tensor(base.abs(), exponent)
    integral = exponent == torch.floor(exponent)
    half = exponent * 0.5
    odd = integral & (half != torch.floor(half))
    # negative, a negative zero too ((-0.0) ** -3 is -inf), as one comparison: the or of two
    # comparisons read True for a positive constant base (bloom's ALiBi slopes, 0.707 ** 1 < 0)
    signed = torch.where(torch.isinf(base), base, 1 / base) < 0
    out = torch.where(odd & signed, -magnitude, magnitude)
    undefined = (base < 0) & ~integral & ~torch.isinf(base)
    out = torch.where(undefined, torch.full_like(out, math.nan), out)
    one = (exponent == 0) | (base == 1) | ((base == -1) & torch.isinf(exponent))
    return torch.where(one, torch.ones_like(out), out)


def _pow_of_number(base, exponent: torch.Tensor):
    """``pow(number, tensor)``: the base's sign is known while tracing, so it is decided here (a
    constant tensor compared in the compiled graph is what went wrong for remainder). A positive
    base keeps the op (IREE is right there, and ``theta ** (arange / d)`` of rotary embeddings keeps
    its StableHLO)."""
    dtype = torch.result_type(base, exponent)
    if not dtype.is_floating_point or isinstance(base, bool) or base > 0 or base != base:
        return NotImplemented
    if dtype in (torch.float16, torch.bfloat16):
        return _pow_of_number(base, exponent.float()).to(dtype)
    exponent = exponent.to(dtype)
    if base == 0:
        zero = torch.where(exponent > 0, torch.zeros_like(exponent), torch.full_like(exponent, math.inf))
        return torch.where(exponent == 0, torch.ones_like(exponent), zero)
    magnitude = aten.pow.Scalar(-base, exponent)
    integral = exponent == torch.floor(exponent)
    half = exponent * 0.5
    odd = integral & (half != torch.floor(half))
    out = torch.where(odd, -magnitude, magnitude)
    out = torch.where(integral, out, torch.full_like(out, math.nan))
    one = (exponent == 0) | (torch.isinf(exponent) if base == -1 else torch.zeros_like(integral))
    return torch.where(one, torch.ones_like(out), out)


@_declining("pow_number")
def real_pow_by_number(x: torch.Tensor, exponent):
    """``pow`` of a floating tensor by an integral Python number: the same fault as above for a
    negative base (``x ** 4.0`` of -3 was NaN). IREE gets exponents 2 and 1 right and they are the
    common case (``x.pow(2)`` of a norm), so those keep the op and its StableHLO; every other
    integral exponent is ``|x| ** n`` with the sign of an odd ``n``. A non-integral exponent keeps
    the op (NaN for a negative base is right)."""
    if not isinstance(x, torch.Tensor) or isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        return NotImplemented
    if not x.is_floating_point() or not float(exponent).is_integer() or exponent in (1, 2) or math.isinf(exponent):
        return NotImplemented
    if x.dtype in (torch.float16, torch.bfloat16):
        return real_pow_by_number.__wrapped__(x.float(), exponent).to(x.dtype)
    if exponent == 0:
        return torch.ones_like(x)
    magnitude = aten.pow.Tensor_Scalar(x.abs(), exponent)
    if int(exponent) % 2 == 0:
        return magnitude
    signed = torch.where(torch.isinf(x), x, 1 / x) < 0  # one comparison, as in real_pow
    return torch.where(signed, -magnitude, magnitude)


@_declining("atan2")
def atan2_of_zeros(y: torch.Tensor, x: torch.Tensor):
    """``atan2`` where both sides are zero: IREE's CPU ``atan2`` gives NaN there; C (and eager) give
    0 or pi with the sign of ``y`` (pi when ``x`` is -0.0). A negative zero is told by its
    reciprocal (``1 / -0.0`` is -inf). Elsewhere the op as it is."""
    out = aten.atan2.default(y, x)
    y, x = y.to(out.dtype), x.to(out.dtype)
    zeros = (y == 0) & (x == 0)
    negative_x = (1 / x) < 0
    negative_y = (1 / y) < 0
    pi = torch.full_like(out, math.pi)
    zero_case = torch.where(negative_x, torch.where(negative_y, -pi, pi), y)
    return torch.where(zeros, zero_case, out)


def broadcast_first(op):
    """``op`` of two tensors of different shapes as ``op`` of the two broadcast to one shape.
    torch-mlir lowers the shifts (``bitwise_left_shift``, ``bitwise_right_shift``) without
    broadcasting their operands: ``int64[5, 1] << int64[5, 5]`` made a ``stablehlo.shift_left``
    whose result type cannot be inferred, and LLVM's fatal error ended the process (the op lane's
    two crashed rows). Operands of one shape keep the op as it is."""

    def decomposition(x, other):
        if not isinstance(x, torch.Tensor) or not isinstance(other, torch.Tensor) or x.shape == other.shape:
            return NotImplemented
        shape = torch.broadcast_shapes(x.shape, other.shape)
        return op(x.expand(shape), other.expand(shape))

    return decomposition


def _bool_operands(*values) -> bool:
    return all(v is None or (isinstance(v, torch.Tensor) and v.dtype == torch.bool) for v in values)


@_then_the_table
def bool_clamp_min(x, bound):
    """``clamp_min`` of bools by a bool tensor is their logical or. Lowered as is, the comparison
    took the 1-bit integers as signed (True is -1): ``clamp_min(True, True)`` read False."""
    if not isinstance(x, torch.Tensor) or not _bool_operands(x, bound):
        return NotImplemented
    return torch.logical_or(x, bound)


@_then_the_table
def bool_clamp_max(x, bound):
    """``clamp_max`` of bools by a bool tensor: their logical and (the signed-compare fault above).
    Both hand every other call to the table's own decomposition (torch's core table has one)."""
    if not isinstance(x, torch.Tensor) or not _bool_operands(x, bound):
        return NotImplemented
    return torch.logical_and(x, bound)


def bool_add(x: torch.Tensor, other, *, alpha=1):
    """``add`` of two bool tensors is their logical or (eager's ``True + True`` is ``True``); lowered
    as an addition of 1-bit integers it wrapped to ``False``. Any other dtype keeps the op."""
    if not isinstance(x, torch.Tensor) or torch.result_type(x, other) != torch.bool:
        return NotImplemented
    if not alpha:
        return x.clone() if not isinstance(other, torch.Tensor) else torch.logical_or(x, torch.zeros_like(other))
    return torch.logical_or(x, other)


@_declining("bool_accumulate")
def bool_scatter_add(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor):
    """``scatter_add`` into a bool tensor: eager's is a logical or of what lands on an element; as
    1-bit integers the additions wrapped (True + True read False). Accumulated in int32 and
    compared with 0. Any other dtype keeps the op."""
    if x.dtype != torch.bool:
        return NotImplemented
    return aten.scatter_add.default(x.to(torch.int32), dim, index, src.to(torch.int32)) != 0


@_then_the_table
@_declining("bool_accumulate")
def bool_index_add(x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha=1):
    """``index_add`` into a bool tensor: as ``scatter_add``, a logical or of what lands on an element
    (and of nothing when ``alpha`` is false), accumulated in int32 and compared with 0. Any other
    dtype (and the int32 call made here) takes the table's decomposition, as before."""
    if x.dtype != torch.bool:
        return NotImplemented
    if not alpha:
        return x.clone()
    return aten.index_add.default(x.to(torch.int32), dim, index, source.to(torch.int32)) != 0


@_declining("bool_accumulate")
def bool_index_put_accumulate(x: torch.Tensor, indices, values: torch.Tensor, accumulate: bool = False):
    """``index_put(..., accumulate=True)`` into a bool tensor: a logical or of the values that land on
    an element, accumulated in int32 and compared with 0. Without ``accumulate`` (the last write
    wins, no sum) and for any other dtype, the op as it is."""
    if x.dtype != torch.bool or not accumulate:
        return NotImplemented
    return aten.index_put.default(x.to(torch.int32), indices, values.to(torch.int32), True) != 0


@_then_the_table
@_declining("bool_accumulate")
def bool_masked_index_put_accumulate(x: torch.Tensor, mask: torch.Tensor, indices, values: torch.Tensor):
    """``_unsafe_masked_index_put_accumulate`` (the backward of masked indexing, as in padded
    gathers) into a bool tensor: the same logical or, accumulated in int32. Other dtypes (and the
    int32 call made here) take the table's decomposition, as before."""
    if x.dtype != torch.bool:
        return NotImplemented
    return aten._unsafe_masked_index_put_accumulate.default(x.to(torch.int32), mask, indices, values.to(torch.int32)) != 0


def scalar_scan(x: torch.Tensor, dim: int, *, dtype=None):
    """``cumsum`` of a 0-d tensor over dim 0/-1 is the tensor itself (in the result dtype: ``cumsum``
    of an integer or bool tensor is int64); torch-mlir leaves the scan of a 0-d tensor unconverted.
    A tensor with dimensions keeps the op. (Not ``logcumsumexp``: declining there let torch
    decompose the op another way, which read inf on a 5x5x5 float32 input.)"""
    if x.dim() != 0:
        return NotImplemented
    if dtype is None and not (x.is_floating_point() or x.is_complex()):
        dtype = torch.int64
    return x.to(dtype) if dtype is not None else x.clone()


def scalar_sum(x: torch.Tensor, dim=None, keepdim: bool = False, *, dtype=None):
    """``sum`` of a 0-d tensor (see :func:`scalar_reduction`), in sum's result dtype: an integer or
    bool tensor sums to int64 (``sum``, ``count_nonzero``, ``sum_to_size`` of a bool[] or int64[]
    read dtype bool where eager returns int64)."""
    if x.dim() != 0:
        return NotImplemented
    if dtype is None and not (x.is_floating_point() or x.is_complex()):
        dtype = torch.int64
    return x.to(dtype) if dtype is not None else x.clone()


def _remainder_by_scalar(x: torch.Tensor, other, dtype: torch.dtype) -> torch.Tensor:
    """``remainder`` by a Python number: the divisor's sign is known while tracing, so the wrong
    side is one comparison. (With the number made a constant tensor and the sides compared as
    booleans, ``(r < 0) != (other < 0)``, the compiled graph moved results that were already right
    by one divisor: ``remainder(x, 2)`` of x in (0, 1) came out x + 2.)"""
    if dtype in (torch.float16, torch.bfloat16):
        return _remainder_by_scalar(x.float(), other, torch.float32).to(dtype)
    if dtype.is_floating_point:
        r = aten.fmod.Scalar(x, other)
    else:
        r = x - other * torch.div(x, other, rounding_mode="trunc")
    wrong_side = (r < 0) if other > 0 else (r > 0)
    return torch.where(wrong_side, r + other, r)


def grouped_mm_rows(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """A grouped matmul over rows sorted by group (``transformers::grouped_mm_fallback``: row ``s``
    of ``input`` [S, K] times ``weight[e]`` [K, N] for the group ``e`` with
    ``offs[e-1] <= s < offs[e]``; rows from ``offs[-1]`` on are zero) as one batched matmul: each
    row's group comes from comparing its index with the offsets, its weight matrix is gathered, and
    ``bmm`` multiplies every row by its own. Static shapes; no loop over a data-dependent count."""
    rows = torch.arange(input.shape[0], device=input.device)
    group = (rows[:, None] >= offs.to(rows.dtype)[None, :]).sum(-1)  # [S], weight.shape[0] past the end
    inside = group < weight.shape[0]
    per_row = weight[group.clamp(max=weight.shape[0] - 1)]  # [S, K, N]
    out = torch.bmm(input.unsqueeze(1), per_row).squeeze(1)
    return torch.where(inside[:, None], out, torch.zeros((), dtype=out.dtype, device=out.device))


#: Ops of other libraries' namespaces the backend lowers itself: (namespace, op, overload) -> its
#: decomposition. Looked up when a compile or a graph-break decision needs them, since the library
#: registers its op when it is imported, which may be after the backend.
LIBRARY_LOWERINGS = {("transformers", "grouped_mm_fallback", "default"): grouped_mm_rows}


def library_lowerings() -> dict:
    """The entries of :data:`LIBRARY_LOWERINGS` whose op is registered in this process."""
    table = {}
    for (namespace, name, overload), fn in LIBRARY_LOWERINGS.items():
        if dispatch_has_kernel(f"{namespace}::{name}"):  # registered in this process
            table[getattr(getattr(getattr(torch.ops, namespace), name), overload)] = fn
    return table


def flash_attention_backward(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    """The gradients of CPU flash attention (``scaled_dot_product_attention`` in a training graph).

    AOT Autograd decomposes the forward op, but below autograd, so the backward graph still calls
    the fused backward op, which torch-mlir cannot lower. This is its math: with ``P`` the softmax
    of the scaled (masked) scores, ``dV = Pᵀ dO``, ``dS = P ⊙ (dO Vᵀ - rowsum(dO ⊙ O))``,
    ``dQ = dS K · scale``, ``dK = dSᵀ Q · scale``. ``P`` is recomputed from ``query`` and ``key``:
    the forward's decomposition saves the attention weights where the fused op saves its
    log-sum-exp, so ``logsumexp`` is not read. Dropout is left to the fused op.
    """
    if dropout_p != 0.0 or query.dim() != 4:
        return NotImplemented
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % kv_heads:
        return NotImplemented
    groups = heads // kv_heads
    k = key.repeat_interleave(groups, dim=1) if groups > 1 else key
    v = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = (query @ k.transpose(-2, -1)) * scale
    if is_causal:  # top-left aligned, as the fused op
        keep = torch.ones(query.shape[-2], k.shape[-2], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    p = torch.softmax(scores, dim=-1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(dim=-1, keepdim=True))
    grad_q = (grad_s @ k) * scale
    grad_k = (grad_s.transpose(-2, -1) @ query) * scale
    if groups > 1:  # each key/value head served ``groups`` query heads: their gradients add up
        grad_k = grad_k.unflatten(1, (kv_heads, groups)).sum(dim=2)
        grad_v = grad_v.unflatten(1, (kv_heads, groups)).sum(dim=2)
    return grad_q, grad_k, grad_v


def convolution_backward(
    grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """The gradients of a (non-transposed) convolution as convolutions, which torch-mlir lowers
    (it cannot lower the fused backward op): the input's gradient is the transposed convolution of
    ``grad_out`` with the weight; the weight's is a convolution of the input by ``grad_out`` with
    batch and channels swapped (per group: batch and groups are folded into the channels);
    the bias's is ``grad_out`` summed over every dimension but the channels."""
    if transposed:
        return NotImplemented
    dims = input.dim() - 2
    stride, padding, dilation = (list(v) * dims if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    kernel = weight.shape[2:]
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        # what the forward's output size drops (a stride that does not divide) comes back as output padding
        extra = [
            input.shape[2 + d] - ((grad_out.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] - 1) + 1)
            for d in range(dims)
        ]
        grad_input = aten.convolution.default(grad_out, weight, None, stride, padding, dilation, True, extra, groups)
    if output_mask[1]:
        n, c_in = input.shape[0], input.shape[1]
        c_out = grad_out.shape[1]
        spatial_in, spatial_out = input.shape[2:], grad_out.shape[2:]
        per_in, per_out = c_in // groups, c_out // groups
        # [N, G*Cg, ...] -> [Cg, G*N, ...]: the input's channels become the batch, batch x groups the channels
        x = input.reshape(n, groups, per_in, *spatial_in).transpose(0, 2).reshape(per_in, groups * n, *spatial_in)
        g = grad_out.reshape(n, groups, per_out, *spatial_out).movedim(0, 2).reshape(groups * per_out, n, *spatial_out)
        w = aten.convolution.default(x, g, None, dilation, padding, stride, False, [0] * dims, groups)
        # [Cg, Cout, K' ...] -> [Cout, Cg, K ...] (K' exceeds K where the stride left input unused)
        w = w.transpose(0, 1)
        for d in range(dims):
            w = w.narrow(2 + d, 0, kernel[d])
        grad_weight = w.contiguous()
    if output_mask[2]:
        grad_bias = grad_out.sum(dim=[0, *range(2, grad_out.dim())])
    return grad_input, grad_weight, grad_bias


_HALF = (torch.float16, torch.bfloat16)


def accumulating_in_float32(op, then=None):
    """``op`` on float16/bfloat16 operands computed in float32 and its result rounded to the operand's
    type once, as eager's CPU kernels compute matrix products, convolutions, cumulative sums and
    vector norms (float32 is their accumulator type). Lowered as they are, IREE's CPU code kept
    every partial sum in the half type: a float16 ``bmm``, ``conv3d`` or ``conv_transpose1d`` and a
    bfloat16 ``cumsum`` drifted past the tolerance and float16 ``vector_norm(ord=6)`` overflowed
    (9**6 is past 65504). Only these ops: each other op keeps its
    declared type, so results are rounded op by op as in eager (promoting the whole graph rounded
    only its outputs and moved a bfloat16 router's top-k). An explicit ``dtype=``, and every other
    type, go to ``then`` (or keep the op); the inner call is float32, so it is not promoted again."""

    def decomposition(*args, **kwargs):
        x = args[0]
        if isinstance(x, torch.Tensor) and x.dtype in _HALF and kwargs.get("dtype") is None:
            half = x.dtype

            def up(a):
                return a.float() if isinstance(a, torch.Tensor) and a.dtype == half else a

            return op(*map(up, args), **{k: up(v) for k, v in kwargs.items()}).to(half)
        return NotImplemented if then is None else then(*args, **kwargs)

    decomposition.__name__ = f"{op.__name__.replace('.', '_')}_accumulating_in_float32"
    return _then_the_table(decomposition)


def _with_dimensions(decomposition):
    """``decomposition`` for tensors with dimensions; a 0-d tensor keeps the op."""

    @functools.wraps(decomposition)
    def declining_0d(x, *args, **kwargs):
        if x.dim() == 0:
            return NotImplemented
        return decomposition(x, *args, **kwargs)

    return declining_0d


def extra_decompositions() -> dict:
    table = {
        aten.fmod.Scalar: fmod_scalar,
        aten.remainder.Tensor: remainder,
        aten.remainder.Scalar: remainder,
        aten.mm.default: accumulating_in_float32(aten.mm.default, then=empty_contraction),
        aten.mean.dim: scalar_reduction,
        aten.sum.dim_IntList: scalar_sum,
        aten.amax.default: scalar_reduction,
        aten.amin.default: scalar_reduction,
        aten.bmm.default: accumulating_in_float32(aten.bmm.default, then=empty_contraction),
        aten.convolution.default: accumulating_in_float32(aten.convolution.default),
        aten.linalg_vector_norm.default: accumulating_in_float32(aten.linalg_vector_norm.default),
        aten.add.Tensor: bool_add,
        aten.scatter_add.default: bool_scatter_add,
        aten.index_add.default: bool_index_add,
        aten.index_put.default: bool_index_put_accumulate,
        aten._unsafe_masked_index_put_accumulate.default: bool_masked_index_put_accumulate,
        aten.pow.Tensor_Tensor: real_pow,
        aten.pow.Scalar: real_pow,
        aten.pow.Tensor_Scalar: real_pow_by_number,
        aten.atan2.default: atan2_of_zeros,
        aten.argmax.default: op_rewrites.argmax,  # 0-d, and NaN-aware for floats
        aten.argmin.default: op_rewrites.argmin,
        aten.cumsum.default: accumulating_in_float32(aten.cumsum.default, then=scalar_scan),
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default: flash_attention_backward,
        aten.convolution_backward.default: convolution_backward,
        aten.clamp_min.Tensor: bool_clamp_min,
        aten.clamp_max.Tensor: bool_clamp_max,
        aten.bitwise_left_shift.Tensor: broadcast_first(aten.bitwise_left_shift.Tensor),
        aten.bitwise_right_shift.Tensor: broadcast_first(aten.bitwise_right_shift.Tensor),
    }
    # torch's own, outside its core table: the max-pool gradient as a scatter-add; the copying
    # views (``view_copy``, ``permute_copy``, ``unbind_copy``) as the view and a copy, and
    # ``diagonal`` / ``unfold`` / ``as_strided_copy`` as strided views (which torch-mlir's importer
    # turns into gathers of constant indices); it has no pattern for these ops as such
    # (each failed naming its Python int operand, ``torch.constant.int``)
    table.update(get_decompositions([
        aten.max_pool2d_with_indices_backward, aten.view_copy, aten.permute_copy, aten.unbind_copy,
        aten.diagonal, aten.diagonal_copy, aten.unfold, aten.as_strided_copy,
    ]))
    # ... but not unfold of a 0-d tensor: its strided form killed the process in torch-mlir's
    # lowering (the op lane's unfold float32 row, input float32[]); its window, of size 0 or 1,
    # is written directly instead (op_rewrites.unfold)
    with_dims = _with_dimensions(table[aten.unfold.default])

    def unfold(x, *args, **kwargs):
        return op_rewrites.unfold(x, *args, **kwargs) if x.dim() == 0 else with_dims(x, *args, **kwargs)

    table[aten.unfold.default] = unfold
    for op, fn in op_rewrites.rewrites().items():
        table.setdefault(op, fn)
    table.update(sorting.decompositions())
    return table
