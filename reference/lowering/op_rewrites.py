"""Ops torch-mlir has no StableHLO pattern for, written with ops it has.

Each function here is a decomposition (:func:`reference.lowering.decompositions.extra_decompositions`
adds :func:`rewrites` to the table): it runs while AOT Autograd traces the graph, on fake tensors,
and what it calls becomes the graph. Before, each of these ops broke the graph (the op lane's rows
named the op and "torch-mlir could not lower ..."); now the call compiles. A function returns
``NotImplemented`` for the calls it leaves as they are (the op is then kept, and the lowering probe
decides: torch's decomposition, or a break).

Numerics follow eager's CPU kernels: half types compute in float32 and round once where eager's
kernels do (their accumulator type), integer and bool operands of a floating function are
converted to the default float type first, as eager promotes them. The special functions
(``lgamma``, ``digamma``, ``erfc``) are series evaluated in float32; their accuracy is stated at each.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten

_HALF = (torch.float16, torch.bfloat16)


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype eager computes a floating function of ``x`` in (integers and bools: the default)."""
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def _in_float32(fn):
    """``fn`` computed in float32 for half and integer operands, its result rounded to the dtype
    eager gives (half types: their own; integers and bools: the default float type)."""

    def decomposition(x: torch.Tensor, *args, **kwargs):
        out_dtype = _float_dtype(x)
        compute = torch.float32 if out_dtype in _HALF or out_dtype == torch.float32 else out_dtype
        return fn(x.to(compute), *args, **kwargs).to(out_dtype)

    decomposition.__name__ = fn.__name__
    decomposition.__doc__ = fn.__doc__
    return decomposition


# --- uninitialized memory ----------------------------------------------------------------------------


def _contiguous_strides(size) -> list[int]:
    strides, step = [], 1
    for n in reversed(list(size)):
        strides.append(step)
        step *= max(int(n), 1)
    return strides[::-1]


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``empty_permuted`` (``empty_like``'s op): memory whose values are undefined, allocated as
    ``empty_strided`` of the logical shape (torch-mlir lowers that one; a graph output is returned
    as a new contiguous tensor either way)."""
    return aten.empty_strided.default(list(size), _contiguous_strides(size), dtype=dtype or torch.get_default_dtype(),
                                      device=device, pin_memory=False)


def new_empty_strided(x: torch.Tensor, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``new_empty_strided``: undefined values of ``x``'s dtype and device unless given, allocated
    contiguous (torch-mlir lowers ``empty_strided`` with contiguous strides only; values and shape
    are what a caller reads, and a compiled graph's outputs are new tensors)."""
    return aten.empty_strided.default(list(size), _contiguous_strides(size), dtype=dtype or x.dtype, device=device or x.device,
                                      pin_memory=False)


# --- elementwise -------------------------------------------------------------------------------------


def _broadcast_float(a, b):
    dtype = torch.result_type(a, b)
    a = a if isinstance(a, torch.Tensor) else torch.scalar_tensor(a, dtype=dtype)
    b = b if isinstance(b, torch.Tensor) else torch.scalar_tensor(b, dtype=dtype)
    a, b = torch.broadcast_tensors(a.to(dtype), b.to(dtype))
    return a, b, dtype


def fmax(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``fmax``: the larger operand, a NaN only where both are NaN (``maximum`` propagates NaN)."""
    a, b, dtype = _broadcast_float(a, b)
    if not dtype.is_floating_point:
        return torch.where(a >= b, a, b) if dtype != torch.bool else a | b
    larger = torch.where(a >= b, a, b)
    return torch.where(torch.isnan(a), b, torch.where(torch.isnan(b), a, larger))


def fmin(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``fmin``: the smaller operand, a NaN only where both are NaN."""
    a, b, dtype = _broadcast_float(a, b)
    if not dtype.is_floating_point:
        return torch.where(a <= b, a, b) if dtype != torch.bool else a & b
    smaller = torch.where(a <= b, a, b)
    return torch.where(torch.isnan(a), b, torch.where(torch.isnan(b), a, smaller))


def _sign_bit(x: torch.Tensor) -> torch.Tensor:
    """Whether ``x``'s sign bit is set (-0.0 and a NaN with the bit set included), read from its
    bits: ``x < 0`` misses both."""
    if x.dtype == torch.float32:
        return x.view(torch.int32) < 0
    if x.dtype in _HALF:
        return x.view(torch.int16) < 0
    return x < 0


def copysign(x, other) -> torch.Tensor:
    """``copysign``: ``|x|`` with the sign bit of ``other`` (the result is floating)."""
    dtype = torch.result_type(x, other)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    x = x.to(dtype)
    other = other.to(dtype) if isinstance(other, torch.Tensor) else torch.scalar_tensor(other, dtype=dtype)
    magnitude = torch.abs(x)
    return torch.where(_sign_bit(other), -magnitude, magnitude)


def angle(x: torch.Tensor) -> torch.Tensor:
    """``angle`` of a real tensor: pi for negative values, 0 otherwise, NaN kept."""
    dtype = _float_dtype(x)
    x = x.to(dtype)
    out = torch.where(x < 0, torch.full_like(x, math.pi), torch.zeros_like(x))
    return torch.where(torch.isnan(x), x, out)


def hypot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``hypot``: ``sqrt(a^2 + b^2)`` scaled by the larger magnitude, so squares neither overflow
    nor underflow (as C's ``hypot``); half types in float32."""
    a, b, dtype = _broadcast_float(a, b)
    compute = torch.float32 if dtype in _HALF else dtype
    a, b = torch.abs(a.to(compute)), torch.abs(b.to(compute))
    big, small = torch.maximum(a, b), torch.minimum(a, b)
    safe = torch.where(big == 0, torch.ones_like(big), big)
    ratio = small / safe
    out = big * torch.sqrt(1 + ratio * ratio)
    out = torch.where(torch.isinf(a) | torch.isinf(b), torch.full_like(out, math.inf), out)
    return out.to(dtype)


@_in_float32
def erfc(x: torch.Tensor) -> torch.Tensor:
    """``erfc``: ``1 - erf(x)`` loses every digit where erf is close to 1 (erfc(4) is 1.5e-8), so
    it is evaluated as ``t * exp(-x^2 + P(t))``, ``t = 1 / (1 + |x|/2)``, with the Chebyshev fit of
    Numerical Recipes (``erfcc``; fractional error below 1.2e-7 for every x), reflected for x < 0."""
    t, poly = _erfc_parts(x)
    ans = t * torch.exp(-x * x + poly)
    out = torch.where(x >= 0, ans, 2.0 - ans)
    return torch.where(torch.isnan(x), x, out)


def reciprocal(x: torch.Tensor) -> torch.Tensor:
    """``reciprocal`` of an integer or bool tensor: of its default-float value (eager promotes)."""
    if x.is_floating_point():
        return NotImplemented
    return aten.reciprocal.default(x.to(torch.get_default_dtype()))


def erf(x: torch.Tensor) -> torch.Tensor:
    """``erf`` of an integer or bool tensor: of its default-float value (eager promotes)."""
    if x.is_floating_point():
        return NotImplemented
    return aten.erf.default(x.to(torch.get_default_dtype()))


def _erfc_parts(x: torch.Tensor):
    """``(t, poly)`` of the erfc fit below: erfc(|x|) = t * exp(-x^2 + poly)."""
    z = torch.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    coefficients = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                    -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223)
    poly = torch.full_like(t, coefficients[0])
    for c in coefficients[1:]:
        poly = poly * t + c
    return t, poly


@_in_float32
def erfcx(x: torch.Tensor) -> torch.Tensor:
    """``special.erfcx``, exp(x^2) erfc(x): for x >= 0 the fit's ``t * exp(poly)`` (the two
    exponentials cancel, so nothing overflows); for x < 0, ``2 exp(x^2) - t * exp(poly)``."""
    t, poly = _erfc_parts(x)
    positive = t * torch.exp(poly)
    out = torch.where(x >= 0, positive, 2.0 * torch.exp(x * x) - positive)
    return torch.where(torch.isnan(x), x, out)


@_in_float32
def log_ndtr(x: torch.Tensor) -> torch.Tensor:
    """``special.log_ndtr``, the log of the normal CDF: ``log(erfc(-x/sqrt 2) / 2)``; below 0 as
    ``log(erfcx(-x/sqrt 2) / 2) - x^2/2`` (the CDF itself underflows long before its log does)."""
    z = -x * (1.0 / math.sqrt(2.0))
    t, poly = _erfc_parts(z)
    tail = torch.log(0.5 * t) + poly - z * z  # log(erfc(z) / 2) for z >= 0
    inner = torch.log1p(-0.5 * t * torch.exp(-z * z + poly))  # log(1 - erfc(-z) / 2) for z < 0
    return torch.where(torch.isnan(x), x, torch.where(z >= 0, tail, inner))


@_in_float32
def erfinv(x: torch.Tensor) -> torch.Tensor:
    """``erfinv``: M. Giles' single-precision approximation ("Approximating the erfinv function",
    GPU Computing Gems, 2011): a polynomial in ``w = -log(1 - x^2)`` on each side of w = 5;
    +-inf at +-1 and NaN outside [-1, 1], as eager."""
    out = _erfinv(x, -torch.log((1.0 - x) * (1.0 + x)))
    out = torch.where(torch.abs(x) == 1, x * math.inf, out)
    return torch.where(torch.abs(x) > 1, torch.full_like(out, math.nan), out)


def _erfinv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """erfinv(x), given ``w = -log(1 - x^2)`` (a caller that knows 1 - x^2 more precisely than
    from ``x`` passes it: :func:`ndtri`)."""
    central = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
               -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
    tail = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
            -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
    near = w - 2.5
    far = torch.sqrt(torch.where(w < 5, torch.full_like(w, 5.0), w)) - 3.0
    p_near = torch.full_like(w, central[0])
    for c in central[1:]:
        p_near = p_near * near + c
    p_far = torch.full_like(w, tail[0])
    for c in tail[1:]:
        p_far = p_far * far + c
    return torch.where(w < 5, p_near, p_far) * x


def ndtri(p: torch.Tensor) -> torch.Tensor:
    """``special.ndtri``, the inverse normal CDF: ``sqrt 2 * erfinv(2p - 1)``; -inf at 0, +inf at
    1, NaN outside [0, 1]."""
    dtype = _float_dtype(p)
    q = p.to(torch.float32)
    # 1 - x^2 for x = 2p - 1 is 4p(1 - p): from p it keeps its digits where x rounds to -1
    w = -torch.log(4.0 * q * (1.0 - q))
    out = math.sqrt(2.0) * _erfinv(2.0 * q - 1.0, w)
    # past the fit's range (w above 16, p below about 1e-7): the tail's asymptotic guess refined
    # by two Newton steps on log_ndtr(x) = log p (a lower tail; p near 1 does not get there in float32)
    far = w > 16
    log_p = torch.log(torch.where(far, q, torch.full_like(q, 1e-8)))
    t = -2.0 * log_p
    x = -torch.sqrt(t - torch.log(2.0 * math.pi * t))
    for _ in range(2):
        log_cdf = log_ndtr(x)
        log_pdf = -0.5 * x * x - _HALF_LOG_TWO_PI
        x = x - (log_cdf - log_p) * torch.exp(log_cdf - log_pdf)
    out = torch.where(far, x, out)
    out = torch.where(q == 0, torch.full_like(out, -math.inf), torch.where(q == 1, torch.full_like(out, math.inf), out))
    return torch.where((q < 0) | (q > 1), torch.full_like(out, math.nan), out).to(dtype)


# --- modified Bessel functions of order 0 and 1 -------------------------------------------------------
# Below |x| = _BESSEL_SPLIT the power series (30 terms: float32-exact there); above, the asymptotic
# expansion e^|x| / sqrt(2 pi |x|) * sum a_k / |x|^k (seven terms). The scaled forms (i0e, i1e)
# multiply by e^-|x|, the expansion written without the exponential so nothing overflows.

_BESSEL_SPLIT = 15.0
_BESSEL_TERMS = 30


def _bessel_series(x: torch.Tensor, order: int) -> torch.Tensor:
    """sum over k of (x/2)^(2k + order) / (k! (k + order)!), for |x| below the split."""
    quarter = 0.25 * x * x
    term = (0.5 * x) if order == 1 else torch.ones_like(x)
    total = term
    for k in range(1, _BESSEL_TERMS):
        term = term * quarter / (k * (k + order))
        total = total + term
    return total


def _bessel_asymptotic_scaled(z: torch.Tensor, order: int) -> torch.Tensor:
    """e^-z I_order(z) for large z > 0: 1/sqrt(2 pi z) * sum of a_k / z^k, where
    a_k = prod over j = 1..k of (4 order^2 - (2j - 1)^2) / (8 j) (with alternating signs)."""
    mu = 4.0 * order * order
    coefficient, total, power = 1.0, torch.ones_like(z), torch.ones_like(z)
    for j in range(1, 8):
        coefficient *= -(mu - (2 * j - 1) ** 2) / (8.0 * j)
        power = power / z
        total = total + coefficient * power
    return total / (math.sqrt(2.0 * math.pi) * torch.sqrt(z))  # 2 pi z would overflow past 5e37


def _modified_bessel(order: int, scaled: bool):
    @_in_float32
    def decomposition(x: torch.Tensor) -> torch.Tensor:
        z = torch.abs(x)
        small = z < _BESSEL_SPLIT
        safe_small = torch.where(small, x, torch.zeros_like(x))
        series = _bessel_series(safe_small, order)
        if scaled:
            series = series * torch.exp(-torch.abs(safe_small))
        big = torch.where(small, torch.full_like(z, _BESSEL_SPLIT), z)
        asymptotic = _bessel_asymptotic_scaled(big, order)
        if not scaled:  # inf from z = 88.7 on, where e^z overflows, as eager's kernel (I_0 itself would from 91.9)
            asymptotic = asymptotic * torch.exp(big)
        if order == 1:
            asymptotic = torch.where(x < 0, -asymptotic, asymptotic)
        out = torch.where(small, series, asymptotic)
        return torch.where(torch.isnan(x), x, out)

    decomposition.__name__ = f"i{order}{'e' if scaled else ''}"
    decomposition.__doc__ = (f"The modified Bessel function of the first kind of order {order}"
                             f"{', scaled by exp(-|x|)' if scaled else ''} (see the section's comment).")
    return decomposition


i0, i0e, i1, i1e = (_modified_bessel(0, False), _modified_bessel(0, True), _modified_bessel(1, False),
                    _modified_bessel(1, True))


# --- gamma functions ---------------------------------------------------------------------------------
# Evaluated in float32 by recurrence and an asymptotic series: an argument below _SHIFT is moved up
# past it with gamma's recurrence (a product of _SHIFT factors, which stays far from float32's
# range there), where Stirling's series (three terms) is accurate to float32's precision; an
# argument at or above _SHIFT goes to the series directly, so nothing overflows before the result
# does (lgamma(1e5) read -inf when every argument was shifted). Arguments below 1/2 are reflected.
# Near lgamma's zeros (x = 1, 2) the shifted sum cancels: the absolute error there is a few float32
# ulps of log(8!) (about 1e-6).

_SHIFT = 8
_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


def _lgamma_positive(x: torch.Tensor) -> torch.Tensor:
    """lgamma for x >= 1/2: shifted by _SHIFT below _SHIFT, then Stirling's series, written as
    ``y (log y - 1) - log(y) / 2`` so it overflows only where lgamma itself does (past 4e36)."""
    shifted = x < _SHIFT
    base = torch.where(shifted, x, torch.ones_like(x))  # the product's factors stay small
    product = torch.ones_like(x)
    for k in range(_SHIFT):
        product = product * (base + k)
    y = torch.where(shifted, x + _SHIFT, x)
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 / 1680)))
    log_y = torch.log(y)
    stirling = y * (log_y - 1.0) - 0.5 * log_y + _HALF_LOG_TWO_PI + series
    return torch.where(shifted, stirling - torch.log(product), stirling)


@_in_float32
def lgamma(x: torch.Tensor) -> torch.Tensor:
    """``lgamma``: log |Gamma(x)|; +inf at 0 and the negative integers (as eager), reflection
    ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` below 1/2."""
    reflect = x < 0.5
    positive = torch.where(reflect, 1.0 - x, x)
    value = _lgamma_positive(positive)
    sin_pi_x = torch.abs(_sin_pi(_reduced(x)))
    reflected = math.log(math.pi) - torch.log(sin_pi_x) - value
    out = torch.where(reflect, reflected, value)
    pole = (x <= 0) & (x == torch.floor(x))
    out = torch.where(pole, torch.full_like(out, math.inf), out)
    return torch.where(torch.isinf(x), torch.full_like(out, math.inf), torch.where(torch.isnan(x), x, out))


def _reduced(x: torch.Tensor) -> torch.Tensor:
    """``x`` minus the nearest integer (exact in floating point): ``|sin(pi x)|`` and ``tan(pi x)``,
    of period 1, computed on it keep their digits near the poles, where ``pi * x`` itself would
    lose them (lgamma(-8.9999) was off by 6e-4 before)."""
    return x - torch.round(x)


#: Taylor coefficients of sin(t) / t in t^2, t^0 .. t^14: for |t| <= pi/2 the first left out,
#: (pi/2)^16 / 17!, is below 1e-11.
_SIN_TAYLOR = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(8))


def _sin_pi(r: torch.Tensor) -> torch.Tensor:
    """sin(pi r) for |r| <= 1/2 as a polynomial, accurate to float32's precision relative to the
    value, down to the smallest normal r. Not IREE's sin: its CPU sin of a product such as
    ``pi * r`` is accurate to about 6e-8 absolute only (sin(pi * 1e-10) read 6.2e-8), which the
    reflections divide by (lgamma(-1e-10) read 17.7, eager 23.0)."""
    t = math.pi * r
    t2 = t * t
    acc = torch.full_like(t, _SIN_TAYLOR[-1])
    for c in reversed(_SIN_TAYLOR[:-1]):
        acc = acc * t2 + c
    return t * acc


def _cos_pi(r: torch.Tensor) -> torch.Tensor:
    """cos(pi r) for |r| <= 1/2, as sin(pi (1/2 - |r|)): near r = 1/2, where the cosine vanishes,
    ``1/2 - |r|`` is exact, so its relative accuracy holds there too."""
    return _sin_pi(0.5 - torch.abs(r))


@_in_float32
def digamma(x: torch.Tensor) -> torch.Tensor:
    """``digamma``: the derivative of lgamma. -inf at +0, +inf at -0 and NaN at the negative
    integers (as eager);
    reflection ``psi(1 - x) - pi / tan(pi x)`` below 1/2; recurrence up past _SHIFT, then the
    asymptotic series ``log y - 1/(2y) - sum B_2k / (2k y^2k)`` (four terms)."""
    reflect = x < 0.5
    z = torch.where(reflect, 1.0 - x, x)
    correction = torch.zeros_like(z)
    for k in range(_SHIFT):
        correction = correction + 1.0 / (z + k)
    y = z + _SHIFT
    inv2 = 1.0 / (y * y)
    series = inv2 * (1.0 / 12 - inv2 * (1.0 / 120 - inv2 * (1.0 / 252 - inv2 / 240)))
    value = torch.log(y) - 0.5 / y - series - correction
    r = _reduced(x)
    reflected = value - math.pi * _cos_pi(r) / _sin_pi(r)
    out = torch.where(reflect, reflected, value)
    integer = x == torch.floor(x)
    out = torch.where((x < 0) & integer, torch.full_like(out, math.nan), out)
    pole = torch.where(_sign_bit(x), torch.full_like(out, math.inf), torch.full_like(out, -math.inf))
    out = torch.where(x == 0, pole, out)  # -inf at +0, +inf at -0 (eager's copysign(inf, -x))
    return torch.where(torch.isnan(x), x, out)


#: Bernoulli numbers B_2, B_4, ..., B_12, for the Euler-Maclaurin tail of the Hurwitz zeta sum.
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730)
#: Terms summed directly before the tail: the tail is evaluated at q + _ZETA_TERMS, which is 5 or
#: more for every q above -11 (past it, in float32, the tail's error grows).
_ZETA_TERMS = 16


def _hurwitz_zeta(s: int, q: torch.Tensor) -> torch.Tensor:
    """zeta(s, q) = sum over k >= 0 of (q + k)^-s, for an integer ``s >= 2``: the first
    _ZETA_TERMS terms summed, the rest by Euler-Maclaurin (the integral, half the first left-out
    term, and six Bernoulli corrections). Powers are products, so a negative ``q`` is fine."""
    def inverse_power(base: torch.Tensor, exponent: int) -> torch.Tensor:
        inv = 1.0 / base
        out = inv
        for _ in range(exponent - 1):
            out = out * inv
        return out

    total = torch.zeros_like(q)
    for k in range(_ZETA_TERMS):
        total = total + inverse_power(q + k, s)
    a = q + _ZETA_TERMS
    a_to_minus_s = inverse_power(a, s)
    total = total + a * a_to_minus_s / (s - 1) + 0.5 * a_to_minus_s
    rising, term_power, factorial = float(s), a_to_minus_s / a, 2.0  # s(s+1)...(s+2j-2), a^(-s-2j+1), (2j)!
    for j, b in enumerate(_BERNOULLI, start=1):
        total = total + (b / factorial * rising) * term_power
        rising *= (s + 2 * j - 1) * (s + 2 * j)
        term_power = term_power / (a * a)
        factorial *= (2 * j + 1) * (2 * j + 2)
    return total


def polygamma(n: int, x: torch.Tensor) -> torch.Tensor:
    """``polygamma(n, x)``: ``digamma`` for n = 0, else ``(-1)^(n+1) n! zeta(n + 1, x)``; at 0 and the
    negative integers +inf for odd n and -inf for even n (eager's values). In float32 (half types
    round once; integers and bools become the default float type)."""
    if n == 0:
        return digamma(x)
    out_dtype = _float_dtype(x)
    q = x.to(torch.float32)
    sign = 1.0 if n % 2 == 1 else -1.0
    value = sign * math.factorial(n) * _hurwitz_zeta(n + 1, q)
    pole = (q <= 0) & (q == torch.floor(q))
    value = torch.where(pole, torch.full_like(value, sign * math.inf), value)
    if n == 1:  # eager's trigamma: 0 at +inf; NaN where its sin(pi x) is NaN, from pi x past
        # float32's max on (its zeta, for n >= 2: NaN at +inf, a pole at -inf)
        value = torch.where(q == math.inf, torch.zeros_like(value), value)
        overflow = -torch.finfo(torch.float32).max / math.pi
        value = torch.where(q < overflow, torch.full_like(value, math.nan), value)
    return torch.where(torch.isnan(q), q, value).to(out_dtype)


# --- reductions and scans ----------------------------------------------------------------------------


def any_dims(x: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """``any`` over several dimensions: one dimension at a time (torch-mlir lowers ``any.dim``)."""
    if x.dim() == 0:
        return x.to(torch.bool) if x.dtype != torch.bool else x.clone()
    dims = range(x.dim()) if dim is None or len(dim) == 0 else [d % x.dim() for d in dim]
    out = x
    for d in sorted(set(dims), reverse=True):
        out = aten.any.dim(out, d, True)
    return out if keepdim else out.squeeze(sorted(set(dims)))


def _dim_of(x: torch.Tensor, dim: int) -> int:
    return dim % max(x.dim(), 1)


def _first_index_of(x: torch.Tensor, d: int, values: torch.Tensor, keepdim: bool) -> torch.Tensor:
    """The first position along ``d`` where ``x`` equals ``values`` (kept as a dimension of size 1),
    or, where ``values`` is NaN, the first NaN: eager's index for ``max``/``min``/``argmax``."""
    n = x.shape[d]
    shape = [1] * x.dim()
    shape[d] = n
    positions = torch.arange(n, device=x.device).reshape(shape)
    hit = (x == values) | torch.isnan(x)  # where values is not NaN, the slice holds no NaN
    index = torch.where(hit, positions, torch.full_like(positions, n)).amin(d, keepdim=True)
    return index if keepdim else index.squeeze(d)


def _extreme_with_index(x: torch.Tensor, d: int, keepdim: bool, largest: bool):
    """Values and first indices of the extreme over ``d`` of a float tensor, NaN included: a NaN in
    the slice is its extreme, as in eager. (torch-mlir lowers ``max.dim`` and ``argmax`` to one
    reduction comparing with ``>``, which passes a NaN over: max of [1, nan, 3] read 3, index 2;
    ``amax`` propagates it.)"""
    values = x.amax(d, keepdim=True) if largest else x.amin(d, keepdim=True)
    index = _first_index_of(x, d, values, keepdim)
    return (values if keepdim else values.squeeze(d)), index


def _reduction_with_index(op, largest: bool):
    def decomposition(x: torch.Tensor, dim: int, keepdim: bool = False):
        """``max``/``min`` over a dimension (values and indices). A 0-d tensor: the tensor and
        index 0 (torch-mlir's pattern takes tensors with dimensions). A bool tensor: of its 0/1
        integers, the values turned back to bool (lowered as they are, True and False compared as
        signed 1-bit integers, True = -1: max picked False). A float tensor: NaN-aware
        (:func:`_extreme_with_index`). Other calls keep the op."""
        if x.dim() == 0:
            return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
        if x.dtype == torch.bool:
            values, indices = op(x.to(torch.int32), dim, keepdim)
            return values.to(torch.bool), indices
        if x.is_floating_point() and x.numel():
            return _extreme_with_index(x, _dim_of(x, dim), keepdim, largest)
        return NotImplemented

    decomposition.__name__ = f"{op._opname}_with_index"
    return decomposition


max_dim = _reduction_with_index(aten.max.dim, largest=True)
min_dim = _reduction_with_index(aten.min.dim, largest=False)


def _arg_extreme(largest: bool):
    def decomposition(x: torch.Tensor, dim=None, keepdim: bool = False):
        """``argmax``/``argmin``: 0 for a 0-d tensor (torch-mlir's pattern takes tensors with
        dimensions: on a 0-d one the compile failed naming ``keepdim``); for a float tensor the
        first extreme, a NaN counting as the extreme (:func:`_extreme_with_index`). Other calls
        keep the op."""
        if x.dim() == 0:
            return torch.zeros((), dtype=torch.int64, device=x.device)
        if not x.is_floating_point() or not x.numel():
            return NotImplemented
        if dim is None:
            index = _extreme_with_index(x.reshape(-1), 0, False, largest)[1]
            return index.reshape([1] * x.dim()) if keepdim else index
        return _extreme_with_index(x, _dim_of(x, dim), keepdim, largest)[1]

    decomposition.__name__ = "argmax" if largest else "argmin"
    return decomposition


argmax, argmin = _arg_extreme(True), _arg_extreme(False)


def prod_dim(x: torch.Tensor, dim: int, keepdim: bool = False, *, dtype=None):
    """``prod`` over the one dimension of a 0-d tensor: the tensor (integers and bools widened to
    int64, as eager's product)."""
    if x.dim() != 0:
        return NotImplemented
    if dtype is None:
        dtype = torch.int64 if (not x.is_floating_point() and not x.is_complex()) else x.dtype
    return x.to(dtype)


#: Up to this many elements along the dimension, ``cumprod`` multiplies in eager's order.
CUMPROD_SEQUENTIAL_LIMIT = 64


def cumprod(x: torch.Tensor, dim: int, *, dtype=None) -> torch.Tensor:
    """``cumprod`` along ``dim``: up to :data:`CUMPROD_SEQUENTIAL_LIMIT` elements, the running
    product in eager's order (element ``i`` is element ``i - 1`` times ``x[i]``), so overflow,
    underflow and ``inf * 0`` fall where eager's do; longer dimensions as the product over a
    triangle (element ``i`` multiplies the elements ``j <= i``, the others replaced by 1), which
    agrees with eager for finite products only. Half types multiply in float32 and round once;
    integers and bools give int64 (eager's rules)."""
    out_dtype = dtype or (torch.int64 if not x.is_floating_point() else x.dtype)
    compute = torch.float32 if out_dtype in _HALF else out_dtype
    if x.dim() == 0:
        return x.to(out_dtype)
    d = _dim_of(x, dim)
    n = x.shape[d]
    moved = x.to(compute).movedim(d, -1)
    if n == 0:
        product = moved
    elif n <= CUMPROD_SEQUENTIAL_LIMIT:
        running = [moved[..., 0]]
        for i in range(1, n):
            running.append(running[-1] * moved[..., i])
        product = torch.stack(running, -1)
    else:
        rows = moved.unsqueeze(-2).expand(*moved.shape[:-1], n, n)
        positions = torch.arange(n, device=x.device)
        keep = positions.unsqueeze(0) <= positions.unsqueeze(1)  # [i, j]: j <= i
        product = torch.where(keep, rows, torch.ones_like(rows)).prod(-1)
    return product.movedim(-1, d).to(out_dtype)


def _cumulative_extreme(largest: bool):
    def decomposition(x: torch.Tensor, dim: int):
        """``cummax`` / ``cummin`` along ``dim`` over a triangle (as :func:`cumprod`'s long dimensions): each
        position's value is the extreme of the elements up to it, its index the last of them that
        equals it (eager's ties), and from a NaN on, NaN with the last NaN's index (eager's rule).
        Bools compare as 0/1 integers."""
        if x.dim() == 0:
            return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
        d = _dim_of(x, dim)
        n = x.shape[d]
        work = x.to(torch.int32) if x.dtype == torch.bool else x
        moved = work.movedim(d, -1)
        rows = moved.unsqueeze(-2).expand(*moved.shape[:-1], n, n)  # [..., i, j]: element j
        positions = torch.arange(n, device=x.device)
        keep = positions.unsqueeze(0) <= positions.unsqueeze(1)  # [i, j]: j <= i
        fill = torch.full_like(rows, _extreme(work.dtype, largest=not largest))
        masked = torch.where(keep, rows, fill)
        values = masked.amax(-1) if largest else masked.amin(-1)
        chosen = keep & (rows == values.unsqueeze(-1))
        if work.is_floating_point():
            nans = keep & torch.isnan(rows)
            any_nan = nans.any(-1)
            values = torch.where(any_nan, torch.full_like(values, math.nan), values)
            chosen = torch.where(any_nan.unsqueeze(-1), nans, chosen)
        indices = torch.where(chosen, positions, torch.full_like(positions, -1)).amax(-1)
        values = values.movedim(-1, d)
        return (values.to(torch.bool) if x.dtype == torch.bool else values), indices.movedim(-1, d)

    decomposition.__name__ = "cummax" if largest else "cummin"
    return decomposition


cummax, cummin = _cumulative_extreme(True), _cumulative_extreme(False)


def narrow_copy(x: torch.Tensor, dim: int, start: int, length: int) -> torch.Tensor:
    """``narrow_copy``: the slice, copied."""
    d = _dim_of(x, dim)
    start = start + x.shape[d] if start < 0 else start
    return aten.slice.Tensor(x, d, start, start + length).clone()


def unfold(x: torch.Tensor, dimension: int, size: int, step: int):
    """``unfold`` of a 0-d tensor (window of size 0 or 1): its one element in a new dimension."""
    if x.dim() != 0:
        return NotImplemented
    return x.reshape([1]).clone() if size == 1 else x.reshape([1])[:0].clone()


# --- scatters of a slice -----------------------------------------------------------------------------


def slice_scatter(x: torch.Tensor, src: torch.Tensor, dim: int = 0, start=None, end=None, step: int = 1):
    """``slice_scatter``: ``x`` with ``src`` in place of the slice ``start:end:step`` of ``dim``,
    a select between ``x`` and ``src`` gathered along ``dim``."""
    d = _dim_of(x, dim)
    n = x.shape[d]
    start, end, _ = slice(start, end, step).indices(n)
    if x.dim() == 0 or src.numel() == 0:
        return x.clone()
    positions = torch.arange(n, device=x.device)
    inside = (positions >= start) & (positions < end) & ((positions - start) % step == 0)
    index = torch.clamp((positions - start) // step, 0, src.shape[d] - 1)
    gathered = torch.index_select(src, d, index)
    shape = [1] * x.dim()
    shape[d] = n
    return torch.where(inside.reshape(shape), gathered, x)


def _scatter_at(x: torch.Tensor, positions: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``x`` with ``src`` written at the flat ``positions`` (one per element of ``src``)."""
    flat = x.reshape(-1).clone()
    flat = aten.index_put.default(flat, [positions.reshape(-1)], src.reshape(-1).to(x.dtype))
    return flat.reshape(x.shape)


def diagonal_scatter(x: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """``diagonal_scatter``: ``x`` with ``src`` on the diagonal; the diagonal's flat positions are
    the diagonal of ``arange(numel)`` shaped as ``x``."""
    positions = torch.arange(x.numel(), device=x.device).reshape(x.shape).diagonal(offset, dim1, dim2)
    return _scatter_at(x, positions, src)


def as_strided_scatter(x: torch.Tensor, src: torch.Tensor, size, stride, storage_offset=None):
    """``as_strided_scatter`` of a contiguous ``x``: ``src`` written at the storage positions of the
    strided view, computed from ``size``, ``stride`` and the offset with ``arange``. A
    non-contiguous ``x`` keeps the op."""
    if not x.is_contiguous():
        return NotImplemented
    positions = torch.full((), int(storage_offset or 0), dtype=torch.int64, device=x.device)
    for n, step in zip(size, stride):
        positions = positions.unsqueeze(-1) + torch.arange(n, device=x.device) * step
    return _scatter_at(x, positions, src)


# --- reductions into positions ------------------------------------------------------------------------

#: The largest (index elements x destination length) a scatter reduction is written as a comparison
#: of every index with every destination position; a larger one keeps the op.
SCATTER_ONE_HOT_LIMIT = 1 << 22


def _extreme(dtype: torch.dtype, largest: bool):
    if dtype.is_floating_point:
        return math.inf if largest else -math.inf
    info = torch.iinfo(dtype)
    return info.max if largest else info.min


def scatter_reduce(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *,
                   include_self: bool = True):
    """``scatter_reduce`` (``sum``, ``prod``, ``mean``, ``amax``, ``amin``): each destination
    position ``i`` along ``dim`` reduces the ``src`` elements whose index is ``i``, found by comparing
    every index with every position (a one-hot mask, ``index.numel() * x.shape[dim]`` elements, so
    only up to :data:`SCATTER_ONE_HOT_LIMIT`; beyond it the op is kept). Positions no index names
    keep ``x``; ``include_self`` folds ``x`` into the others. Half types reduce in float32 and round
    once; bools reduce as 0/1 integers (sum and amax: or; prod and amin: and); an integer mean rounds
    down, as eager's kernel divides."""
    if x.dim() == 0:
        return scatter_reduce(x.reshape(1), 0, index.reshape(1), src.reshape(1), reduce,
                              include_self=include_self).reshape(())
    d = _dim_of(x, dim)
    n = x.shape[d]
    if index.numel() * n > SCATTER_ONE_HOT_LIMIT or index.dim() != x.dim():
        return NotImplemented
    dtype = x.dtype
    compute = torch.float32 if dtype in _HALF else torch.int32 if dtype == torch.bool else dtype
    values = src.to(compute)
    for k, size in enumerate(index.shape):  # src is read over the index's extent only
        if values.shape[k] != size:
            values = aten.slice.Tensor(values, k, 0, size)
    hits = index.unsqueeze(-1) == torch.arange(n, device=x.device)  # index shape + [n]
    values = values.unsqueeze(-1)
    if reduce in ("sum", "mean"):
        reduced = torch.where(hits, values, torch.zeros_like(values)).sum(d)
    elif reduce == "prod":
        reduced = torch.where(hits, values, torch.ones_like(values)).prod(d)
    elif reduce in ("amax", "amin"):
        fill = torch.full_like(values, _extreme(compute, largest=reduce == "amin"))
        reduced = torch.where(hits, values, fill)
        reduced = reduced.amax(d) if reduce == "amax" else reduced.amin(d)
    else:
        return NotImplemented
    count = hits.sum(d)
    reduced, count = reduced.movedim(-1, d), count.movedim(-1, d)
    padding = []  # where the index covers less than x along other dimensions: no contribution
    for k in reversed(range(x.dim())):
        padding += [0, x.shape[k] - reduced.shape[k]]
    if any(padding):
        reduced = torch.constant_pad_nd(reduced, padding, 0)
        count = torch.constant_pad_nd(count, padding, 0)
    base = x.to(compute)
    touched = count > 0
    if reduce == "sum":
        out = torch.where(touched, base + reduced if include_self else reduced, base)
    elif reduce == "prod":  # (the padding is 0, not prod's identity: untouched positions are selected)
        out = torch.where(touched, base * reduced if include_self else reduced, base)
    elif reduce == "amax":
        out = torch.where(touched, torch.maximum(base, reduced) if include_self else reduced, base)
    elif reduce == "amin":
        out = torch.where(touched, torch.minimum(base, reduced) if include_self else reduced, base)
    else:  # mean
        total = base + reduced if include_self else reduced
        divisor = count + 1 if include_self else torch.clamp(count, min=1)
        if compute.is_floating_point:
            mean = total / divisor.to(compute)
        else:  # floor division as truncation and a step down: torch-mlir lowers an integer floor
            # division through float64, which IREE runs in float32 (wrong past 2^24); the divisor
            # is positive, so a negative total with a remainder rounds one further down
            divisor = divisor.to(compute)
            truncated = torch.div(total, divisor, rounding_mode="trunc")
            mean = truncated - ((truncated * divisor != total) & (total < 0)).to(compute)
        out = torch.where(touched, mean, base)
    return out != 0 if dtype == torch.bool else out.to(dtype)


def scatter_with_reduce(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *, reduce: str):
    """``scatter(..., reduce="add" | "multiply")``: ``scatter_reduce`` with ``x`` included."""
    name = {"add": "sum", "multiply": "prod"}.get(reduce)
    if name is None:
        return NotImplemented
    return scatter_reduce(x, dim, index, src, name, include_self=True)


def index_reduce(x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, reduce: str, *,
                 include_self: bool = True):
    """``index_reduce``: ``scatter_reduce`` with the one-dimensional index spread over ``source``'s
    other dimensions."""
    if x.dim() == 0:
        return index_reduce(x.reshape(1), 0, index.reshape(-1), source.reshape(1), reduce,
                            include_self=include_self).reshape(())
    d = _dim_of(x, dim)
    shape = [1] * source.dim()
    shape[d] = index.numel()
    spread = index.reshape(shape).expand(source.shape)
    return scatter_reduce(x, d, spread, source, reduce, include_self=include_self)


# --- products ----------------------------------------------------------------------------------------


def addmv(x: torch.Tensor, mat: torch.Tensor, vec: torch.Tensor, *, beta=1, alpha=1) -> torch.Tensor:
    """``addmv`` of half types: the product and the sum in float32, rounded once (eager's CPU kernel
    accumulates in float32; the probe found torch's own decomposition off by a bfloat16 step).
    Other types keep the op."""
    if x.dtype not in _HALF:
        return NotImplemented
    half = x.dtype
    product = torch.mv(mat.float(), vec.float())
    out = product * alpha if alpha != 1 else product
    if beta != 0:
        out = out + (x.float() * beta if beta != 1 else x.float())
    return out.to(half)


def addbmm(x: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor, *, beta=1, alpha=1) -> torch.Tensor:
    """``addbmm``: ``beta * x + alpha * sum_i b1[i] @ b2[i]`` (torch-mlir stopped at its scalar
    operands); half types in float32, rounded once."""
    dtype = x.dtype
    compute = torch.float32 if dtype in _HALF else dtype
    if not dtype.is_floating_point:  # eager truncates the scalars to the integer type
        alpha, beta = int(alpha), int(beta)
    product = torch.bmm(b1.to(compute), b2.to(compute)).sum(0)
    out = product * alpha if alpha != 1 else product
    if beta != 0:
        out = out + (x.to(compute) * beta if beta != 1 else x.to(compute))
    return out.to(dtype)


def dist(a: torch.Tensor, b: torch.Tensor, p=2) -> torch.Tensor:
    """``dist``: the ``p``-norm of the difference (the vector norm accumulates half types in float32)."""
    return torch.linalg.vector_norm(a - b, float(p))


# --- searching ---------------------------------------------------------------------------------------


def searchsorted(sorted_sequence: torch.Tensor, values, *, out_int32: bool = False, right: bool = False,
                 side=None, sorter=None):
    """``searchsorted``: the insertion point of each value is the number of sequence elements below
    it (``right``: at or below it), counted with a comparison against every element of its row.
    Linear in the row's length per value. A ``sorter`` keeps the op."""
    if sorter is not None:
        return NotImplemented
    right = right or side == "right"
    if not isinstance(values, torch.Tensor):
        values = torch.scalar_tensor(values, dtype=sorted_sequence.dtype, device=sorted_sequence.device)
    dtype = torch.promote_types(sorted_sequence.dtype, values.dtype)
    seq, vals = sorted_sequence.to(dtype), values.to(dtype)
    if seq.dim() == 1:
        flat = vals.reshape(-1, 1)
        below = (seq.unsqueeze(0) <= flat) if right else (seq.unsqueeze(0) < flat)
        counts = below.sum(-1).reshape(vals.shape)
    else:
        below = (seq.unsqueeze(-2) <= vals.unsqueeze(-1)) if right else (seq.unsqueeze(-2) < vals.unsqueeze(-1))
        counts = below.sum(-1)
    return counts.to(torch.int32 if out_int32 else torch.int64)


def rewrites() -> dict:
    """``{op: decomposition}`` for :func:`reference.lowering.decompositions.extra_decompositions`."""
    table = {
        aten.empty_permuted.default: empty_permuted,
        aten.new_empty_strided.default: new_empty_strided,
        aten.fmax.default: fmax,
        aten.fmin.default: fmin,
        aten.copysign.Tensor: copysign,
        aten.copysign.Scalar: copysign,
        aten.angle.default: angle,
        aten.hypot.default: hypot,
        aten.erfc.default: erfc,
        aten.special_erfcx.default: erfcx,
        aten.special_log_ndtr.default: log_ndtr,
        aten.erfinv.default: erfinv,
        aten.special_ndtri.default: ndtri,
        aten.i0.default: i0,
        aten.special_i0e.default: i0e,
        aten.special_i1.default: i1,
        aten.special_i1e.default: i1e,
        aten.special_modified_bessel_i0.default: i0,
        aten.special_modified_bessel_i1.default: i1,
        aten.reciprocal.default: reciprocal,
        aten.erf.default: erf,
        aten.lgamma.default: lgamma,
        aten.digamma.default: digamma,
        aten.polygamma.default: polygamma,
        aten.any.dims: any_dims,
        aten.max.dim: max_dim,
        aten.min.dim: min_dim,
        aten.prod.dim_int: prod_dim,
        aten.cumprod.default: cumprod,
        aten.cummax.default: cummax,
        aten.cummin.default: cummin,
        aten.narrow_copy.default: narrow_copy,
        aten.slice_scatter.default: slice_scatter,
        aten.diagonal_scatter.default: diagonal_scatter,
        aten.as_strided_scatter.default: as_strided_scatter,
        aten.scatter_reduce.two: scatter_reduce,
        aten.scatter.reduce: scatter_with_reduce,
        aten.index_reduce.default: index_reduce,
        aten.addmv.default: addmv,
        aten.addbmm.default: addbmm,
        aten.dist.default: dist,
        aten.searchsorted.Tensor: searchsorted,
        aten.searchsorted.Scalar: searchsorted,
    }
    for fn in table.values():
        fn.falls_back = True  # where one declines, the table's earlier entry for the op (if any) decides
    return table
