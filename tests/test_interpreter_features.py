"""Language features on the CPU interpreter (CPU tensors), each against an independent reference.

Many `tl.*` functions were covered only by tests/test_gpu_features.py, which skips without CUDA. Here
each runs through the frontend and the interpreter on fresh random inputs from a seeded
torch.Generator (never zeros or ramps), into outputs poisoned with NaN or a sentinel so that an element
the kernel leaves unwritten fails the comparison. References are torch / NumPy in float64, or exact
Python integers wrapped to the output's width. Also here: compile-time `**` and keyword-only /
positional-only parameters, which the frontend must evaluate and bind like Python does.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

# kernels the GPU tests run too
from .test_gpu_features import _affine_combine, _max_combine, atomic_kernel, math_kernel  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # "no CUDA: running on the interpreter"

SENTINEL = {torch.int32: -777777, torch.int64: -77777777777, torch.uint32: 0xDEADBEEF}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def poison(shape, dtype: torch.dtype) -> torch.Tensor:
    """An output buffer whose unwritten elements show: NaN for floats, a sentinel for integers."""
    value = float("nan") if dtype.is_floating_point else SENTINEL[dtype]
    return torch.full((shape,) if isinstance(shape, int) else tuple(shape), value, dtype=dtype)


def randn(g, *shape, dtype=torch.float32, scale=1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def uniform(g, lo, hi, *shape, dtype=torch.float32) -> torch.Tensor:
    return (lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=torch.float64)).to(dtype)


def ints(g, shape, dtype: torch.dtype, lo=None, hi=None) -> torch.Tensor:
    """Random integers of `dtype` in [lo, hi], by default over the dtype's whole range."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    info = torch.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    if hi - lo >= 2**63 - 1:  # all of int64: two 32-bit halves (randint's bound would overflow)
        top = torch.randint(-2**31, 2**31, shape, generator=g, dtype=torch.int64)
        return (top << 32) | torch.randint(0, 2**32, shape, generator=g, dtype=torch.int64)
    return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dtype)


def wrap(v: int, bits: int = 32, signed: bool = True) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


def as_int64(t: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(t.numpy().astype(np.int64))


def check(out: torch.Tensor, ref, atol=0.0, rtol=0.0, what=""):
    """`out` against the reference: exact for integers and for tolerances of 0; NaN matches only NaN."""
    ref = torch.as_tensor(ref)
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    if out.is_floating_point():
        torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
        return
    o, r = as_int64(out), as_int64(ref) if ref.dtype != torch.int64 else ref
    bad = o != r
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} differ, first at "
                           f"{tuple(bad.nonzero()[0].tolist())}: got {o[bad][0].item()}, expected {r[bad][0].item()}")


@kl.jit
def _store2(ptr, val):
    """Store a 2-D tile contiguously (row-major)."""
    A = val.shape[0]
    B = val.shape[1]
    tl.store(ptr + tl.arange(0, A)[:, None] * B + tl.arange(0, B)[None, :], val)


@kl.jit
def _load2(ptr, A: tl.constexpr, B: tl.constexpr):
    return tl.load(ptr + tl.arange(0, A)[:, None] * B + tl.arange(0, B)[None, :])


# ============================================================================================ compile-time **


@kl.jit
def pow_kernel(O, F, N: tl.constexpr, E: tl.constexpr, HALF: tl.constexpr):
    SQ = N ** 2                              # constexpr ** int
    r = tl.arange(0, 2 ** E)                 # a power as a shape: 2 ** E elements
    K = N
    K **= 2                                  # augmented, on a Python int
    tl.store(O + r, r * SQ + K + 3 ** 2 + (-2) ** 3)
    tl.store(F + tl.arange(0, 2), tl.full((2,), HALF ** 2 + 2.0 ** -1 + N ** -1, tl.float32))


def test_pow_of_compile_time_values():
    """`**` on constexprs and literals folds in Python (int ** int stays an int, a negative exponent
    gives a float) and can feed shapes."""
    N, E, HALF = 7, 4, 0.5
    out, f = poison(2 ** E, torch.int32), poison(2, torch.float32)
    pow_kernel[(1,)](out, f, N=N, E=E, HALF=HALF)
    r = torch.arange(2 ** E, dtype=torch.int64)
    check(out, r * N ** 2 + N ** 2 + 9 - 8, what="integer powers")
    check(f, torch.full((2,), HALF ** 2 + 0.5 + 1 / N, dtype=torch.float64), atol=1e-7, rtol=1e-7,
          what="float powers")


# ============================================================================================ parameter kinds


@kl.jit
def _affine(x, /, y, *, SCALE: tl.constexpr = 3, bias=0.5):
    """A device function with a positional-only, a keyword-only constexpr and a keyword-only runtime parameter."""
    return x * SCALE + y + bias


@kl.jit
def kwonly_kernel(X, Y, O, /, n, *, BLOCK: tl.constexpr, SCALE: tl.constexpr = 2, shift=0.0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    y = tl.load(Y + offs, mask=m)
    tl.store(O + offs, _affine(x, y, SCALE=SCALE + 1, bias=shift) + _affine(x, y), mask=m)


@pytest.mark.parametrize("kwargs, scale, shift", [({}, 2, 0.0), ({"shift": 1.25}, 2, 1.25),
                                                  ({"SCALE": 5, "shift": -3.5}, 5, -3.5)],
                         ids=["defaults", "runtime-kwonly", "both-kwonly"])
def test_keyword_only_and_positional_only_parameters(kwargs, scale, shift):
    """Keyword-only parameters (constexpr or runtime, with defaults) and positional-only ones bind in a
    kernel and in a @jit device function exactly as Python binds them."""
    n, g = 300, gen(11)
    x, y = randn(g, n), randn(g, n)
    out = poison(n, torch.float32)
    kwonly_kernel[(3,)](x, y, out, n, BLOCK=128, **kwargs)
    xd, yd = x.double(), y.double()
    ref = (xd * (scale + 1) + yd + shift) + (xd * 3 + yd + 0.5)
    check(out, ref, atol=1e-5, rtol=1e-6, what="kw-only / pos-only binding")


def test_positional_only_parameter_rejects_a_keyword():
    x = torch.zeros(4)
    with pytest.raises(kl.CompilationError, match="positional only"):
        kwonly_kernel[(1,)](x, x, O=x, n=4, BLOCK=4)


# ============================================================================================ elementwise math


def _nonzero(g, n, dtype):
    signs = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return (signs * uniform(g, 0.25, 8.0, n, dtype=torch.float64)).to(dtype)


# fn: (x maker, y maker, float64 reference, {dtype: (rtol, atol)}); a tolerance of 0 means correctly rounded
MATH = {
    "rsqrt": (lambda g, n, d: torch.exp(uniform(g, -6, 10, n, dtype=torch.float64)).to(d), None,
              lambda x, y, w: torch.rsqrt(x), {torch.float32: (2e-7, 0), torch.float64: (1e-15, 0),
                                               torch.float16: (1e-3, 0)}),
    "erf": (lambda g, n, d: uniform(g, -3, 3, n, dtype=d), None, lambda x, y, w: torch.special.erf(x),
            {torch.float32: (1e-6, 1e-7), torch.float64: (1e-15, 1e-16), torch.float16: (1e-3, 1e-3)}),
    "fma": (lambda g, n, d: randn(g, n, dtype=d, scale=3), None, lambda x, y, w: x * y + w,
            {torch.float32: (1e-6, 1e-6), torch.float64: (1e-15, 1e-13), torch.float16: (1e-3, 2e-3)}),
    "sigmoid": (lambda g, n, d: uniform(g, -12, 12, n, dtype=d), None, lambda x, y, w: torch.sigmoid(x),
                {torch.float32: (1e-6, 1e-7), torch.float64: (1e-15, 1e-16), torch.float16: (4e-3, 1e-4)}),
    "fdiv": (lambda g, n, d: randn(g, n, dtype=d, scale=5), _nonzero, lambda x, y, w: x / y,
             {torch.float32: (2e-7, 0)}),
    "fdiv_ieee": (lambda g, n, d: randn(g, n, dtype=d, scale=5), _nonzero, lambda x, y, w: x / y,
                  {torch.float32: (0, 0)}),
    "div_rn": (lambda g, n, d: randn(g, n, dtype=d, scale=5), _nonzero, lambda x, y, w: x / y,
               {torch.float32: (0, 0), torch.float64: (0, 0)}),
}
MATH_CASES = [(fn, d) for fn, spec in MATH.items() for d in spec[3]]
N_MATH = 1000


@pytest.mark.parametrize("fn, dtype", MATH_CASES, ids=[f"{fn}-{str(d)[6:]}" for fn, d in MATH_CASES])
def test_math(fn, dtype):
    make_x, make_y, ref_fn, tols = MATH[fn]
    g = gen(100 + MATH_CASES.index((fn, dtype)))
    x = make_x(g, N_MATH, dtype)
    y = (make_y or (lambda g, n, d: randn(g, n, dtype=d, scale=3)))(g, N_MATH, dtype)
    w = randn(g, N_MATH, dtype=dtype, scale=3)
    z = poison(N_MATH, dtype)
    math_kernel[(4,)](x, y, w, z, N_MATH, FN=fn, BLOCK=256)
    ref = ref_fn(x.double(), y.double(), w.double())
    rtol, atol = tols[dtype]
    if rtol == 0 and atol == 0:  # correctly rounded: the float64 result rounded once
        check(z, ref.to(dtype), what=fn)
    else:
        check(z, ref, atol=atol, rtol=rtol, what=f"{fn} {dtype}")


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint32])
def test_umulhi(dtype):
    """The high 32 bits of the exact 64-bit product of the operands' unsigned bits, for int32 too (Triton
    lowers tl.umulhi to libdevice's __nv_umulhi); the result keeps the operands' dtype."""
    g = gen(7 if dtype == torch.int32 else 8)
    x, y = ints(g, N_MATH, dtype), ints(g, N_MATH, dtype)
    x[:4] = torch.tensor([-1, 0, 1, -2**31] if dtype == torch.int32 else [2**32 - 1, 0, 1, 2**31], dtype=torch.int64)
    y[:4] = x[:4]
    z = poison(N_MATH, dtype)
    math_kernel[(4,)](x, y, x, z, N_MATH, FN="umulhi", BLOCK=256)
    xs, ys = as_int64(x).tolist(), as_int64(y).tolist()
    signed = dtype == torch.int32
    m = (1 << 32) - 1
    check(z, torch.tensor([wrap(((a & m) * (b & m)) >> 32, 32, signed) for a, b in zip(xs, ys)]), what="umulhi")


@kl.jit
def clamp_kernel(X, LO, HI, O, n, PROP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    tl.store(O + offs, tl.clamp(x, tl.load(LO + offs, mask=m), tl.load(HI + offs, mask=m), propagate_nan=PROP),
             mask=m)


@pytest.mark.parametrize("dtype, prop", [(torch.float32, tl.PropagateNan.NONE), (torch.float32, tl.PropagateNan.ALL),
                                         (torch.int32, tl.PropagateNan.NONE)], ids=["f32", "f32-propagate-nan", "i32"])
def test_clamp(dtype, prop):
    """clamp(x, lo, hi) = min(max(x, lo), hi): a NaN loses to a number unless propagate_nan=ALL."""
    n, g = 700, gen(21)
    if dtype.is_floating_point:
        x, lo, hi = randn(g, n, scale=4), randn(g, n, scale=2) - 1, randn(g, n, scale=2) + 1
        x[::17] = float("nan")
        lo[5::23] = float("nan")
    else:
        x, lo, hi = ints(g, n, dtype), ints(g, n, dtype, -2**30, 0), ints(g, n, dtype, 0, 2**30)
    out = poison(n, dtype)
    clamp_kernel[(3,)](x, lo, hi, out, n, PROP=prop, BLOCK=256)
    xd, lod, hid = x.double(), lo.double(), hi.double()
    if prop:
        ref = torch.minimum(torch.maximum(xd, lod), hid)
    else:
        ref = torch.fmin(torch.fmax(xd, lod), hid)
    check(out, ref, what="clamp")


# ============================================================================================ reductions


@kl.jit
def xor_argmin_kernel(X, XR0, XR1, XRA, AM0, AM1, AMA, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    tl.store(XR0 + tl.arange(0, N), tl.xor_sum(x, axis=0))
    tl.store(XR1 + tl.arange(0, M), x.xor_sum(1))
    tl.store(XRA, tl.xor_sum(x))
    tl.store(AM0 + tl.arange(0, N), tl.argmin(x, axis=0))
    tl.store(AM1 + tl.arange(0, M), x.argmin(1))
    tl.store(AMA, tl.argmin(tl.ravel(x), 0))


@pytest.mark.parametrize("M, N", [(8, 32), (16, 4)])
def test_xor_sum_and_argmin(M, N):
    """xor_sum over each axis and the whole tile; argmin over values with many ties picks the lowest index."""
    g = gen(31 + M)
    x = ints(g, (M, N), torch.int32)
    x[::2] = x[::2] % 5  # rows of small values: argmin ties
    outs = [poison(N, torch.int32), poison(M, torch.int32), poison(1, torch.int32), poison(N, torch.int32),
            poison(M, torch.int32), poison(1, torch.int32)]
    xor_argmin_kernel[(1,)](x, *outs, M=M, N=N)
    xn = x.numpy()
    refs = [np.bitwise_xor.reduce(xn, 0), np.bitwise_xor.reduce(xn, 1), [np.bitwise_xor.reduce(xn.ravel())],
            np.argmin(xn, 0), np.argmin(xn, 1), [np.argmin(xn.ravel())]]
    for k, (out, ref) in enumerate(zip(outs, refs)):
        check(out, torch.tensor(np.asarray(ref, np.int64)), what=f"output {k}")


@kl.jit
def argmin_float_kernel(X, AM0, AM1, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    tl.store(AM0 + tl.arange(0, N), tl.argmin(x, 0))
    tl.store(AM1 + tl.arange(0, M), tl.argmin(x, 1, tie_break_left=True))


def test_argmin_float_with_ties():
    M, N = 16, 64
    g = gen(41)
    x = (torch.round(randn(g, M, N, scale=2) * 2) / 2).float()  # multiples of 0.5: ties
    a0, a1 = poison(N, torch.int32), poison(M, torch.int32)
    argmin_float_kernel[(1,)](x, a0, a1, M=M, N=N)
    check(a0, torch.from_numpy(np.argmin(x.double().numpy(), 0)), what="argmin axis 0")
    check(a1, torch.from_numpy(np.argmin(x.double().numpy(), 1)), what="argmin axis 1")


# ============================================================================================ scans


@kl.jit
def cumprod_kernel(X, CP, CPR, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    x = _load2(X, M, N)
    _store2(CP, tl.cumprod(x, AXIS))
    _store2(CPR, x.cumprod(AXIS, reverse=True))


def _ref_cumprod(x: torch.Tensor, axis: int, reverse: bool) -> torch.Tensor:
    """float64 products, or exact products modulo 2^32 for int32."""
    if reverse:
        return _ref_cumprod(x.flip(axis), axis, False).flip(axis)
    if x.is_floating_point():
        return torch.cumprod(x.double(), axis)
    p = np.cumprod(x.numpy().astype(np.int64).astype(np.uint64), axis=axis)  # wraps modulo 2^64
    return torch.from_numpy((p & np.uint64(0xFFFFFFFF)).astype(np.int64)).apply_(wrap)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod(axis, dtype):
    M, N = 8, 32
    g = gen(51 + axis)
    if dtype.is_floating_point:  # values near +-1: products stay finite
        x = uniform(g, 0.8, 1.25, M, N) * torch.where(torch.rand(M, N, generator=g) < 0.5, -1.0, 1.0)
    else:
        x = ints(g, (M, N), dtype) | 1  # odd: wrapping products never become 0
    cp, cpr = poison((M, N), dtype), poison((M, N), dtype)
    cumprod_kernel[(1,)](x, cp, cpr, M=M, N=N, AXIS=axis)
    tol = 1e-5 if dtype.is_floating_point else 0
    check(cp, _ref_cumprod(x, axis, False), atol=tol, rtol=tol, what="cumprod")
    check(cpr, _ref_cumprod(x, axis, True), atol=tol, rtol=tol, what="reverse cumprod")


@kl.jit
def scan_kernel(A, B, F, HA, HB, RMAX, HF, N: tl.constexpr):
    a = tl.load(A + tl.arange(0, N))
    b = tl.load(B + tl.arange(0, N))
    ha, hb = tl.associative_scan((a, b), 0, _affine_combine)
    tl.store(HA + tl.arange(0, N), ha)
    tl.store(HB + tl.arange(0, N), hb)
    tl.store(RMAX + tl.arange(0, N), tl.associative_scan(b, 0, _max_combine, reverse=True))
    f = tl.load(F + tl.arange(0, N))
    _, hf = tl.associative_scan((f * 0 + 0.5, f), 0, _affine_combine)
    tl.store(HF + tl.arange(0, N), hf)


@pytest.mark.parametrize("N", [16, 128])
def test_associative_scan(N):
    """A two-operand, non-commutative combine (a linear recurrence) on int32 (exact, wrapping) and
    float32, and a reverse max scan."""
    g = gen(61 + N)
    a, b, f = ints(g, N, torch.int32), ints(g, N, torch.int32), randn(g, N)
    ha, hb, rmax, hf = poison(N, torch.int32), poison(N, torch.int32), poison(N, torch.int32), poison(N, torch.float32)
    scan_kernel[(1,)](a, b, f, ha, hb, rmax, hf, N=N)
    pa, h, hf_ref, refs_a, refs_b, refs_f = 1, 0, 0.0, [], [], []
    for at, bt, ft in zip(a.tolist(), b.tolist(), f.double().tolist()):
        pa, h, hf_ref = wrap(pa * at), wrap(h * at + bt), hf_ref * 0.5 + ft  # h_t = a_t * h_{t-1} + b_t
        refs_a.append(pa)
        refs_b.append(h)
        refs_f.append(hf_ref)
    check(ha, torch.tensor(refs_a), what="product component")
    check(hb, torch.tensor(refs_b), what="linear recurrence")
    check(rmax, torch.from_numpy(np.maximum.accumulate(b.numpy()[::-1])[::-1].astype(np.int64)), what="reverse max")
    check(hf, torch.tensor(refs_f, dtype=torch.float64), atol=1e-5, rtol=1e-5, what="float recurrence")


# ============================================================================================ shapes


@kl.jit
def permute_cat_kernel(X, Y, O_PERM, O_CAT, O_CAT1, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    y = _load2(Y, M, N)
    p = tl.permute(tl.reshape(x, (M, N // 4, 4)), (2, 0, 1))  # (4, M, N // 4)
    i = tl.arange(0, 4)[:, None, None]
    j = tl.arange(0, M)[None, :, None]
    k = tl.arange(0, N // 4)[None, None, :]
    tl.store(O_PERM + i * (M * (N // 4)) + j * (N // 4) + k, p)
    _store2(O_CAT, tl.cat(x, y.permute(1, 0).permute(1, 0) * 2))
    tl.store(O_CAT1 + tl.arange(0, 2 * N), tl.cat(tl.load(X + tl.arange(0, N)), tl.load(Y + tl.arange(0, N))))


def test_permute_and_cat():
    M, N = 8, 16
    g = gen(71)
    x, y = randn(g, M, N, scale=10), randn(g, M, N, scale=10)
    perm, cat, cat1 = poison((4, M, N // 4), torch.float32), poison((2 * M, N), torch.float32), poison(2 * N, torch.float32)
    permute_cat_kernel[(1,)](x, y, perm, cat, cat1, M=M, N=N)
    check(perm, x.reshape(M, N // 4, 4).permute(2, 0, 1).contiguous(), what="permute")
    check(cat, torch.cat([x, y * 2]), what="cat 2-D")
    check(cat1, torch.cat([x.reshape(-1)[:N], y.reshape(-1)[:N]]), what="cat 1-D")


# ============================================================================================ atomics


ATOMICS = [("and", torch.int32), ("or", torch.int32), ("xor", torch.int32), ("xor", torch.int64),
           ("min", torch.int32), ("min", torch.uint32), ("min", torch.float32), ("xchg", torch.int32),
           ("xchg", torch.float32)]
_UFUNC = {"min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
N_ATOMIC = 600


def _atomic_args(kind, dtype, slots, seed):
    g = gen(seed)
    if dtype.is_floating_point:
        p0, v = randn(g, slots, scale=100), randn(g, N_ATOMIC, scale=100)
    else:
        p0, v = ints(g, slots, dtype), ints(g, N_ATOMIC, dtype)
    idx = (ints(g, N_ATOMIC, torch.int32, 0, slots - 1) if slots < N_ATOMIC
           else torch.randperm(N_ATOMIC, generator=g).to(torch.int32))
    mask = (torch.rand(N_ATOMIC, generator=g) < 0.8).to(torch.int32)
    return p0, idx, v, mask


@pytest.mark.parametrize("contended", [False, True], ids=["distinct", "contended"])
@pytest.mark.parametrize("kind, dtype", ATOMICS, ids=[f"{k}-{str(d)[6:]}" for k, d in ATOMICS])
def test_atomic_rmw(kind, dtype, contended):
    """Masked vector atomics. On distinct addresses each returns the initial value and leaves op(initial,
    v); on 8 contended addresses the final values are the order-free reduction (for xchg: the old values
    and the final value are the initial and written values, each used once, in some order)."""
    slots = 8 if contended else N_ATOMIC
    p0, idx, v, mask = _atomic_args(kind, dtype, slots, seed=81 + ATOMICS.index((kind, dtype)) * 2 + contended)
    p, old = p0.clone(), poison(N_ATOMIC, dtype)
    atomic_kernel[(3,)](p, idx, v, mask, old, N_ATOMIC, KIND=kind, BLOCK=256)
    sel = mask.numpy() != 0
    idx_s, v_s = idx.numpy()[sel].astype(np.int64), v.numpy()[sel]
    wide = np.float64 if dtype.is_floating_point else np.int64
    p0n, old_s = p0.numpy().astype(wide), old.numpy()[sel].astype(wide)
    if kind == "xchg":
        for s in range(slots):
            lanes = idx_s == s
            went_in = sorted([p0n[s]] + v_s[lanes].astype(wide).tolist())
            came_out = sorted(old_s[lanes].tolist() + [p.numpy().astype(wide)[s]])
            assert went_in == came_out, f"slot {s}: {went_in} went in, {came_out} came out"
    else:
        acc = p0.numpy().copy()
        _UFUNC[kind].at(acc, idx_s, v_s)
        check(p, torch.from_numpy(acc.astype(wide)), what=f"atomic_{kind} result")
    check(old[torch.from_numpy(~sel)], poison(int((~sel).sum()), dtype), what="masked-off lanes stay poisoned")
    if not contended:  # each lane saw its address's initial value
        check(old[torch.from_numpy(sel)], torch.from_numpy(p0n[idx_s]), what="old values")


# ============================================================================================ compile-time debugging


@kl.jit
def static_kernel(O, BLOCK: tl.constexpr, TAG: tl.constexpr):
    tl.static_assert(BLOCK % 4 == 0, "BLOCK must be a multiple of 4")
    tl.static_assert(BLOCK ** 2 > BLOCK)
    tl.static_print("tag", TAG, "block", BLOCK, BLOCK ** 2)
    print(f"{TAG}: {BLOCK // 4} quarters")
    tl.store(O + tl.arange(0, BLOCK), tl.full((BLOCK,), BLOCK // 4, tl.int32))


def test_static_print_and_static_assert(capsys):
    """static_print runs once, at compile time, with constexpr values; print() is Triton's device_print, so it
    prints at run time from every program (`pid (x, y, z) text`); static_assert that holds compiles away, and
    one that fails is a CompilationError quoting its message."""
    tag = f"run{np.random.default_rng().integers(1 << 30)}"  # a fresh constexpr: compiles now
    out = poison(16, torch.int32)
    static_kernel[(3,)](out, BLOCK=16, TAG=tag)
    static_kernel[(3,)](out, BLOCK=16, TAG=tag)  # cached: no second print
    printed = capsys.readouterr().out
    assert printed.count(f"tag {tag} block 16 256\n") == 1, printed
    assert [printed.count(f"pid ({p}, 0, 0) {tag}: 4 quarters\n") for p in range(3)] == [2, 2, 2], printed
    check(out, torch.full((16,), 4))
    with pytest.raises(kl.CompilationError, match="BLOCK must be a multiple of 4"):
        static_kernel[(1,)](poison(2, torch.int32), BLOCK=2, TAG=tag)


# ============================================================================================ random numbers


def philox_ref(key: int, c0, c1, c2, c3, rounds=10):
    """Philox-4x32 (Salmon et al., SC'11) in NumPy uint64 arithmetic: key = a 64-bit seed's halves."""
    m = np.uint64(0xFFFFFFFF)
    c = [np.asarray(w, dtype=np.int64).astype(np.uint64) & m for w in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(key & 0xFFFFFFFF), np.uint64(key >> 32 & 0xFFFFFFFF)
    for _ in range(rounds):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return c


def test_philox_reference_known_answers():
    """The reference against Random123's known-answer vectors for Philox4x32-10."""
    for key, ctr, want in [(0, [0, 0, 0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
                           (0xFFFFFFFF_FFFFFFFF, [0xFFFFFFFF] * 4, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
                           (0x299F31D0_A4093822, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
                            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]:
        got = [int(w[0]) for w in philox_ref(key, *[[v] for v in ctr])]
        assert got == want, [hex(w) for w in got]


@kl.jit
def philox_kernel(C, W, R4, U, seed, base, n, ROUNDS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    c0 = tl.load(C + offs, mask=m)
    c1 = tl.load(C + n + offs, mask=m)
    c2 = tl.load(C + 2 * n + offs, mask=m)
    c3 = tl.load(C + 3 * n + offs, mask=m)
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, c2, c3, ROUNDS)
    tl.store(W + offs, w0.to(tl.int32, bitcast=True), mask=m)
    tl.store(W + n + offs, w1.to(tl.int32, bitcast=True), mask=m)
    tl.store(W + 2 * n + offs, w2.to(tl.int32, bitcast=True), mask=m)
    tl.store(W + 3 * n + offs, w3.to(tl.int32, bitcast=True), mask=m)
    r0, r1, r2, r3 = tl.randint4x(seed, base + offs, ROUNDS)  # int64 offsets when base is
    tl.store(R4 + offs, r0.to(tl.int32, bitcast=True), mask=m)
    tl.store(R4 + n + offs, r1.to(tl.int32, bitcast=True), mask=m)
    tl.store(R4 + 2 * n + offs, r2.to(tl.int32, bitcast=True), mask=m)
    tl.store(R4 + 3 * n + offs, r3.to(tl.int32, bitcast=True), mask=m)
    tl.store(U + offs, tl.rand(seed, base + offs, ROUNDS), mask=m)


@pytest.mark.parametrize("seed, base, rounds", [(12345, 0, 10), (2**40 + 7, 2**33 + 5, 10), (987654321, 1000, 7)],
                         ids=["int32-offsets", "int64-seed-and-offsets", "7-rounds"])
def test_philox_and_randint4x(seed, base, rounds):
    """tl.philox on random counters, and tl.randint4x / tl.rand (counter = the offset's two 32-bit
    halves), bitwise against the NumPy Philox."""
    n, g = 700, gen(91 + rounds)
    c = ints(g, 4 * n, torch.int32)
    w, r4, u = poison(4 * n, torch.int32), poison(4 * n, torch.int32), poison(n, torch.float32)
    philox_kernel[(3,)](c, w, r4, u, seed, base, n, ROUNDS=rounds, BLOCK=256)
    to_i32 = lambda words: torch.from_numpy(np.concatenate(words).astype(np.uint32).view(np.int32).astype(np.int64))
    check(w, to_i32(philox_ref(seed, *c.reshape(4, n).numpy(), rounds=rounds)), what="philox")
    offs = base + np.arange(n, dtype=np.int64)
    zero = np.zeros(n, np.int64)
    words = philox_ref(seed, offs & 0xFFFFFFFF, offs >> 32, zero, zero, rounds=rounds)
    check(r4, to_i32(words), what="randint4x")
    check(u, torch.from_numpy(uniform_ref(words[0])), what="rand")


def uniform_ref(words):
    """Triton's uint_to_uniform_float of 32-bit words in NumPy float32: read signed, x < 0 -> -x - 1, * 2^-31."""
    x = words.astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return (x.astype(np.float32) * np.float32(4.6566127342e-10)).astype(np.float64)
