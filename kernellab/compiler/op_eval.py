"""What every elementwise op computes: one NumPy evaluator per op, the single definition that the
constant folder and the interpreter both call (one table, two users, as tinygrad's `exec_alu`).

Values are NumPy arrays or scalars in the interpreter's carriers: each dtype's own NumPy type, bf16
carried in float32 (rounded to bf16 after every op that produces it), i1 as bool. An evaluator
factory takes the operand and result dtypes and the op's attributes and returns `fn(*xs)`.

Semantics are Triton's on the GPU (LLVM lowered by NVPTX), decided here once:
- integers wrap; `divsi`/`remsi` round toward zero (C); a zero divisor gives all ones (quotient)
  and the dividend (remainder), `INT_MIN / -1` gives `INT_MIN` (remainder 0) -- the folder refuses
  both (`refuses`), the GPU's value there is unspecified;
- shifts read the amount as unsigned: an amount >= the bit width gives 0 (`shrsi`: the sign fill),
  as PTX's shl/shr clamp it;
- `umulhi` is the high half of the unsigned double-width product (libdevice `__nv_umulhi`);
- float -> int truncates toward zero and saturates (NaN -> 0) like PTX `cvt.rzi`; 8-bit results
  saturate to 16 bits and keep the low byte, as NVPTX lowers them (`cvt.rzi.s16` then a byte store);
- `maxnumf`/`minnumf` return the non-NaN operand, `maximumf`/`minimumf` propagate NaN, and both
  order -0 below +0;
- conversions to bf16 round once, from any source type; conversions with an fp8 side (`tt.fp_to_fp`)
  are Triton's on sm_90: see fp8.py;
- transcendental functions are evaluated in float64 and rounded once to the result type.
"""
from __future__ import annotations

import math

import numpy as np

from . import fp8

_SIGNED = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
F32, F64, BOOL = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.bool_)


def poison_value(elem):
    """What `ub.poison` holds when evaluated (its contents are undefined; on the GPU any bits): NaN for floats,
    the bytes 0x7f.. for integers and pointers, so a value that was never defined shows (and a poison pointer
    faults when dereferenced)."""
    if getattr(elem, "kind", None) == "float":
        return float("nan")
    return 0x7F7F7F7F7F7F7F7F


def _out(r):
    """A 0-d result as a NumPy scalar (so scalars stay scalars)."""
    return r[()] if isinstance(r, np.ndarray) and r.ndim == 0 else r


# ---------------------------------------------------------------------------------------------
# bf16: carried in float32 whose low 16 bits are zero


def round_bf16(x):
    """float32/float64/float16 values rounded once to the nearest bf16 (ties to even), as float32.
    Wider sources are first rounded to float32 *to odd*, which makes the second rounding exact."""
    a = np.asarray(x)
    if a.dtype == F64:
        a = _f64_to_f32_odd(a)
    a = np.asarray(a, F32)
    u = a.view(np.uint32)
    r = (u + ((u >> 16) & 1) + np.uint32(0x7FFF)) & np.uint32(0xFFFF0000)
    nan = a != a
    if nan.any():
        r = np.where(nan, (u | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), r)
    return _out(r.view(np.float32))


def _f64_to_f32_odd(a):
    """float64 -> float32 rounding toward zero, the lowest bit set when inexact (round to odd)."""
    with np.errstate(all="ignore"):
        f = a.astype(F32)
        back = f.astype(F64)
        inexact = (back != a) & (a == a)
        too_far = inexact & (np.abs(back) > np.abs(a))
        bits = f.view(np.uint32).copy()
        bits = np.where(too_far, bits - np.uint32(1), bits)  # one step toward zero (inf -> FLT_MAX too)
        bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.astype(np.uint32).view(np.float32)


def _int_to_bf16(x, signed: bool):
    """Integers -> bf16 rounded once: shrink to 24 significant bits with a sticky bit, then round."""
    a = np.asarray(x)
    if a.dtype.itemsize <= 2 or (a.dtype.itemsize == 4):
        return round_bf16(a.astype(F64))  # exact in float64
    neg = a < 0 if signed else np.zeros(a.shape, bool)
    mag = np.where(neg, (~a.view(np.uint64)) + np.uint64(1), a.view(np.uint64)).astype(np.uint64)
    _, e = np.frexp(mag.astype(F64))
    shift = np.maximum(e - 24, 0).astype(np.uint64)
    lost = mag & ((np.uint64(1) << shift) - np.uint64(1))
    kept = (mag >> shift) | (lost != 0).astype(np.uint64)
    val = np.ldexp(kept.astype(F64), shift.astype(np.int64))  # exact: at most 24 significant bits
    return round_bf16(np.where(neg, -val, val))


# ---------------------------------------------------------------------------------------------
# Integers: operands viewed signed or unsigned; i1 computed in 8 bits (true is -1 when signed)


class _Int:
    """How to view an integer dtype: signed / unsigned NumPy views, the bit width and the way back."""

    def __init__(self, t):
        self.bits = t.bits
        self.out = t.np
        if t.kind == "bool":
            self.s = lambda x: -np.asarray(x).astype(np.int8)
            self.u = lambda x: np.asarray(x).astype(np.uint8)
            self.back = lambda r: _out((np.asarray(r) & 1).astype(BOOL))
            self.sdt, self.udt = _SIGNED[1], _UNSIGNED[1]
        else:
            sdt, udt = _SIGNED[t.itemsize], _UNSIGNED[t.itemsize]
            self.sdt, self.udt = sdt, udt
            self.s = lambda x: np.asarray(x).view(sdt)
            self.u = lambda x: np.asarray(x).view(udt)
            out = self.out
            self.back = lambda r: _out(np.asarray(r).view(out))

    @property
    def smin(self):
        return -(1 << (self.bits - 1))


def _int_op(fn, view):
    """An integer binary op computed on the `view` ('s' or 'u') of both operands, wrapping."""
    def make(ins, out, attrs):
        iv = _Int(ins[0])
        get = iv.s if view == "s" else iv.u

        def f(a, b):
            return iv.back(fn(get(a), get(b)))
        return f
    return make


def _shift(kind):
    def make(ins, out, attrs):
        iv = _Int(ins[0])
        bits = iv.bits

        def f(a, b):
            amount = iv.u(b)
            big = amount >= bits
            small = np.where(big, 0, amount).astype(iv.udt)
            if kind == "shli":
                r = np.where(big, iv.udt.type(0), iv.u(a) << small)
            elif kind == "shrui":
                r = np.where(big, iv.udt.type(0), iv.u(a) >> small)
            else:
                r = iv.s(a) >> np.where(big, bits - 1, small).astype(iv.sdt)
            return iv.back(np.asarray(r).astype(iv.sdt if kind == "shrsi" else iv.udt))
        return f
    return make


def _division(kind):
    signed = kind in ("divsi", "remsi")

    def make(ins, out, attrs):
        iv = _Int(ins[0])

        def f(a, b):
            x, y = (iv.s(a), iv.s(b)) if signed else (iv.u(a), iv.u(b))
            zero = y == 0
            bad = zero | ((x == iv.smin) & (y == -1)) if signed and iv.bits > 1 else zero
            safe = np.where(bad, 1, y).astype(x.dtype)
            rem = np.fmod(x, safe)  # C remainder: the dividend's sign
            if kind.startswith("div"):
                q = (x - rem) // safe
                if signed:
                    q = np.where(zero, -1, np.where(bad, x, q))  # INT_MIN / -1 wraps to INT_MIN
                else:
                    q = np.where(zero, iv.udt.type(-1 & ((1 << iv.bits) - 1)), q)
                r = q
            else:
                r = np.where(zero, x, np.where(bad, 0, rem))
            return iv.back(np.asarray(r).astype(x.dtype))
        return f
    return make


def _division_refuses(ins, out, attrs, a, b):
    """Integer division the folder must leave alone: a zero divisor or INT_MIN / -1."""
    iv = _Int(ins[0])
    if int(iv.u(b)) == 0:
        return True
    return iv.bits > 1 and int(iv.s(a)) == iv.smin and int(iv.s(b)) == -1


def _umulhi(ins, out, attrs):
    iv = _Int(ins[0])
    bits = iv.bits

    def f(a, b):
        x, y = iv.u(a), iv.u(b)
        if bits <= 32:
            r = (x.astype(np.uint64) * y.astype(np.uint64)) >> np.uint64(bits)
            return iv.back(r.astype(iv.udt))
        m32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
        xl, xh, yl, yh = x & m32, x >> s32, y & m32, y >> s32
        ll, lh, hl, hh = xl * yl, xl * yh, xh * yl, xh * yh
        mid = (ll >> s32) + (lh & m32) + (hl & m32)
        return iv.back(hh + (lh >> s32) + (hl >> s32) + (mid >> s32))
    return f


def _absi(ins, out, attrs):
    iv = _Int(ins[0])
    return lambda a: iv.back(np.abs(iv.s(a)).astype(iv.sdt))


_CMPI = {"eq": (np.equal, "u"), "ne": (np.not_equal, "u"), "slt": (np.less, "s"), "sle": (np.less_equal, "s"),
         "sgt": (np.greater, "s"), "sge": (np.greater_equal, "s"), "ult": (np.less, "u"),
         "ule": (np.less_equal, "u"), "ugt": (np.greater, "u"), "uge": (np.greater_equal, "u")}


def _cmpi(ins, out, attrs):
    fn, view = _CMPI[attrs["predicate"]]
    t = ins[0]
    if not hasattr(t, "kind"):  # pointers: addresses are int64
        return lambda a, b: _out(fn(np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64)))
    iv = _Int(t)
    get = iv.s if view == "s" else iv.u
    return lambda a, b: _out(fn(get(a), get(b)))


# ---------------------------------------------------------------------------------------------
# Floats


def _float_binary(fn):
    def make(ins, out, attrs):
        return lambda a, b: fn(a, b)
    return make


def _signed_zero_minmax(fn, is_max):
    """np.fmax/np.fmin/np.maximum/np.minimum with -0 ordered below +0 (as PTX min/max do)."""
    def g(a, b):
        r = fn(a, b)
        a_, b_ = np.asarray(a), np.asarray(b)
        zeros = (a_ == 0) & (b_ == 0)
        if np.any(zeros):
            pick = (a_ + b_) if is_max else -((-a_) + (-b_))
            r = np.where(zeros, pick, r).astype(np.asarray(r).dtype)
        return _out(np.asarray(r))
    return g


def _one(a, b):
    return np.logical_or(np.less(a, b), np.greater(a, b))


_CMPF = {
    "oeq": np.equal, "one": _one, "olt": np.less, "ole": np.less_equal, "ogt": np.greater,
    "oge": np.greater_equal, "ueq": lambda a, b: np.logical_not(_one(a, b)), "une": np.not_equal,
    "ult": lambda a, b: np.logical_not(np.greater_equal(a, b)),
    "ule": lambda a, b: np.logical_not(np.greater(a, b)),
    "ugt": lambda a, b: np.logical_not(np.less_equal(a, b)),
    "uge": lambda a, b: np.logical_not(np.less(a, b)),
    "ord": lambda a, b: np.logical_not(np.logical_or(np.isnan(a), np.isnan(b))),
    "uno": lambda a, b: np.logical_or(np.isnan(a), np.isnan(b)),
    "true": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
    "false": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
}


def _cmpf(ins, out, attrs):
    fn = _CMPF[attrs["predicate"]]
    return lambda a, b: _out(np.asarray(fn(a, b)))


def _select(ins, out, attrs):
    return lambda c, a, b: (a if c else b) if np.ndim(c) == 0 else np.where(c, a, b)


def in_float64(fn):
    """A float function evaluated in float64 (the caller rounds once to the result type)."""
    def make(ins, out, attrs):
        def f(*xs):
            return fn(*[np.asarray(x, F64) for x in xs])
        return f
    return make


def native(fn):
    """A float function that is exact in the operands' own type (negation, floor, copysign, ...)."""
    def make(ins, out, attrs):
        return fn
    return make


def _torch(name):
    """A torch.special function on float64 (erf, erfc: NumPy has none)."""
    def fn(x):
        import torch

        t = torch.from_numpy(np.ascontiguousarray(np.asarray(x, F64)))
        return getattr(torch.special, name)(t).numpy()
    return fn


def round_half_away(x):
    """C `round`: halfway cases away from zero."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.copysign(1.0, x), t)


def rsqrt(x):
    with np.errstate(all="ignore"):
        return 1.0 / np.sqrt(x)


def exp10(x):
    return np.power(10.0, x)


def predicate(fn):
    """A float test that gives an int32 0/1 (libdevice's isnan/isinf/... return int)."""
    def make(ins, out, attrs):
        return lambda x: _out(np.asarray(fn(x)).astype(np.int32))
    return make


def _fma(ins, out, attrs):
    def f(a, b, c):
        return np.asarray(a, F64) * np.asarray(b, F64) + np.asarray(c, F64)
    return f


# ---------------------------------------------------------------------------------------------
# Conversions


def _float_to_int(kind):
    def make(ins, out, attrs):
        if out.kind == "bool":
            return lambda x: _out(np.not_equal(np.trunc(np.asarray(x, F64)), 0))
        signed = kind == "fptosi"
        sat_bits = max(out.bits, 16)  # NVPTX computes 8-bit results in 16-bit registers
        lo, hi = (-(1 << (sat_bits - 1)), (1 << (sat_bits - 1)) - 1) if signed else (0, (1 << sat_bits) - 1)
        dt = (_SIGNED if signed else _UNSIGNED)[sat_bits // 8]
        out_np = out.np

        def f(x):
            xf = np.asarray(x, F64)
            t = np.where(xf != xf, 0.0, np.clip(np.trunc(xf), float(lo), float(hi)))
            r = t.astype(dt)
            if sat_bits == 64:  # float(hi) rounds up to 2**63 / 2**64: clamp it back
                r = np.where(t >= float(hi), dt.type(hi), r).astype(dt)
            return _out(r.astype(out_np) if out_np.itemsize < dt.itemsize else r.view(out_np))
        return f
    return make


def _float_to_int_refuses(ins, out, attrs, x):
    """float -> int the folder leaves alone: NaN, infinities and values outside the result's range."""
    v = float(x)
    if v != v or v in (math.inf, -math.inf):
        return True
    n = int(v)
    signed = out.kind == "int"
    lo, hi = (-(1 << (out.bits - 1)), (1 << (out.bits - 1)) - 1) if signed else (0, (1 << out.bits) - 1)
    return not lo <= n <= hi


def _int_to_float(kind):
    def make(ins, out, attrs):
        iv = _Int(ins[0])
        get = iv.s if kind == "sitofp" else iv.u
        if out.ir == "bf16":
            signed = kind == "sitofp"
            return lambda x: _int_to_bf16(get(x), signed)
        dt = out.np
        return lambda x: _out(get(x).astype(dt))
    return make


def _ext_int(kind):
    def make(ins, out, attrs):
        iv = _Int(ins[0])
        get = iv.s if kind == "extsi" else iv.u
        dt = out.np
        return lambda x: _out(get(x).astype(dt))
    return make


def _trunci(ins, out, attrs):
    if out.kind == "bool":
        return lambda x: _out((np.asarray(x) & 1).astype(BOOL))
    dt = out.np
    return lambda x: _out(np.asarray(x).astype(dt))


def _float_cast(ins, out, attrs):
    src, dt = ins[0], out.np
    if out.ir == "bf16":
        return lambda x: round_bf16(np.asarray(x, F64 if src.ir == "f64" else F32))
    return lambda x: _out(np.asarray(x).astype(dt))


def _bf16_bits(x):
    """The bits of a bf16 carrier (already bf16-exact: the top half, NaN payloads kept)."""
    return (np.asarray(x, F32).view(np.uint32) >> 16).astype(np.uint16)


def _fp_to_fp(ins, out, attrs):
    """`tt.fp_to_fp`: conversions with an fp8 side (fp8 carriers are float32 on the format's grid), and float32
    to float16 / bfloat16 toward zero (fp_downcast_rounding="rtz")."""
    src = ins[0]
    if fp8.is_fp8(out):
        rounding = attrs.get("rounding", "rtne")
        return lambda x: _out(fp8.convert_to(out.ir, src.ir, x, rounding))
    if out.ir == "f16" and not fp8.is_fp8(src):  # float32 -> float16 toward zero
        return lambda x: _out(fp8.f32_to_f16_rtz(x))
    if out.ir == "bf16" and not fp8.is_fp8(src):  # float32 -> bfloat16 toward zero
        return lambda x: _out(fp8.f32_to_bf16_rtz(x))
    dt = out.np  # fp8 -> f16 / bf16 (float32 carrier) / f32: exact
    return lambda x: _out(np.asarray(x, F32).astype(dt))


def _bitcast(ins, out, attrs):
    src = ins[0]
    dt = out.np
    if fp8.is_fp8(src) and fp8.is_fp8(out):
        return lambda x: _out(fp8.decode(out.ir, fp8.encode(src.ir, x)))
    if fp8.is_fp8(src):
        return lambda x: _out(fp8.encode(src.ir, x).view(dt))
    if fp8.is_fp8(out):
        return lambda x: _out(fp8.decode(out.ir, x))
    if src.ir == "bf16":
        return lambda x: _out(_bf16_bits(x).view(dt))
    if out.ir == "bf16":
        return lambda x: _out((np.asarray(x).view(np.uint16).astype(np.uint32) << 16).view(np.float32))
    if src.kind == "bool" or out.kind == "bool":
        return lambda x: _out(np.asarray(x).astype(dt))
    return lambda x: _out(np.asarray(x).view(dt))


# ---------------------------------------------------------------------------------------------
# Ops that move or count elements (not elementwise): the interpreter's definition, one place


def gather(src, index, axis: int):
    """`tt.gather`: src's elements picked along `axis` by `index` (same rank; other dims equal). An index
    outside the axis wraps modulo its size (a power of 2), as the GPU lowering masks it: Triton leaves it
    undefined, and a wrapped read can never fault."""
    n = np.shape(src)[axis]
    idx = np.asarray(index).astype(np.int64) & (n - 1)
    return np.take_along_axis(np.asarray(src), idx, axis=axis)


def histogram(values, num_bins: int, mask=None):
    """`tt.histogram`: how often each of 0 .. num_bins-1 occurs among `values` (i32 counts); masked-off
    values and values outside that range (negative ones included) are not counted."""
    v = np.asarray(values)
    ok = (v >= 0) & (v < num_bins) if v.dtype.kind == "i" else v < num_bins
    if mask is not None:
        ok &= np.asarray(mask, bool)
    return np.bincount(v[ok].astype(np.int64), minlength=num_bins).astype(np.int32)


# ---------------------------------------------------------------------------------------------
# The table the catalogue (ops.py) points at: op name -> evaluator factory

EVALUATORS = {
    "arith.addi": _int_op(np.add, "u"), "arith.subi": _int_op(np.subtract, "u"),
    "arith.muli": _int_op(np.multiply, "u"), "arith.andi": _int_op(np.bitwise_and, "u"),
    "arith.ori": _int_op(np.bitwise_or, "u"), "arith.xori": _int_op(np.bitwise_xor, "u"),
    "arith.maxsi": _int_op(np.maximum, "s"), "arith.minsi": _int_op(np.minimum, "s"),
    "arith.maxui": _int_op(np.maximum, "u"), "arith.minui": _int_op(np.minimum, "u"),
    "arith.shli": _shift("shli"), "arith.shrsi": _shift("shrsi"), "arith.shrui": _shift("shrui"),
    "arith.divsi": _division("divsi"), "arith.remsi": _division("remsi"),
    "arith.divui": _division("divui"), "arith.remui": _division("remui"),
    "tt.umulhi": _umulhi, "math.absi": _absi,
    "arith.cmpi": _cmpi, "arith.cmpf": _cmpf, "arith.select": _select,
    "arith.addf": _float_binary(np.add), "arith.subf": _float_binary(np.subtract),
    "arith.mulf": _float_binary(np.multiply), "arith.divf": _float_binary(np.divide),
    "tt.precise_divf": _float_binary(np.divide), "arith.remf": _float_binary(np.fmod),
    "arith.maxnumf": _float_binary(_signed_zero_minmax(np.fmax, True)),
    "arith.minnumf": _float_binary(_signed_zero_minmax(np.fmin, False)),
    "arith.maximumf": _float_binary(_signed_zero_minmax(np.maximum, True)),
    "arith.minimumf": _float_binary(_signed_zero_minmax(np.minimum, False)),
    "arith.negf": native(np.negative), "math.absf": native(np.abs), "math.floor": native(np.floor),
    "math.ceil": native(np.ceil), "math.fma": _fma,
    "arith.extsi": _ext_int("extsi"), "arith.extui": _ext_int("extui"), "arith.trunci": _trunci,
    "arith.sitofp": _int_to_float("sitofp"), "arith.uitofp": _int_to_float("uitofp"),
    "arith.fptosi": _float_to_int("fptosi"), "arith.fptoui": _float_to_int("fptoui"),
    "arith.extf": _float_cast, "arith.truncf": _float_cast, "arith.bitcast": _bitcast,
    "tt.fp_to_fp": _fp_to_fp,
}

REFUSALS = {
    "arith.divsi": _division_refuses, "arith.remsi": _division_refuses,
    "arith.divui": _division_refuses, "arith.remui": _division_refuses,
    "arith.fptosi": _float_to_int_refuses, "arith.fptoui": _float_to_int_refuses,
}

erf = _torch("erf")
erfc = _torch("erfc")
erfinv = _torch("erfinv")
lgamma = _torch("gammaln")


def _at_infinity(fn, at_pos_inf, at_neg_inf):
    """torch.special's Bessel functions give NaN at +-inf; C (libdevice, hence Triton on the GPU) gives the
    limits: j0, j1, y0, y1 -> 0 at +inf, i0 -> inf, i1 -> +-inf (y0/y1 of -inf stay NaN)."""
    def at(x):
        a = np.asarray(x, F64)
        r = np.asarray(fn(a))
        return np.where(a == np.inf, at_pos_inf, np.where(a == -np.inf, at_neg_inf, r))
    return at


def _mpmath(kind, order):
    """Bessel J/Y of integer order to double precision through mpmath (installed with torch): torch.special's
    bessel_j0/j1/y0/y1 are only single-precision accurate (absolute errors near 5e-7), too coarse for f64."""
    def fn(x):
        import mpmath

        f = getattr(mpmath, kind)
        a = np.asarray(x, F64)
        out = np.full(a.shape, np.nan)
        ok = np.isfinite(a) & ((a > 0) if kind == "bessely" else True)
        out[ok] = [float(f(order, float(v))) for v in a[ok]]
        if kind == "bessely":
            out[a == 0] = -np.inf
        return out
    return fn


erfcx = _torch("erfcx")


def ndtr(x):
    """The standard normal CDF as erfc(-x / sqrt 2) / 2: accurate far into the lower tail (torch's float64 ndtr
    underflows to 0 below about -8.3)."""
    return erfc(-np.asarray(x, F64) / np.sqrt(2.0)) / 2.0


ndtri = _torch("ndtri")


def erfcinv(x):
    """The inverse of erfc: erfinv(1 - x) (1 - x is exact for x in [0.5, 2]; below, torch's ndtri keeps the tail)."""
    x = np.asarray(x, F64)
    with np.errstate(all="ignore"):
        return np.where(x < 0.5, -ndtri(x / 2) / np.sqrt(2.0), erfinv(1.0 - x))


def sinpi(x):
    """sin(pi x), the argument reduced exactly to [-1/2, 1/2] first (where pi * r loses no relative accuracy), and
    exact zeros at the integers (with x's sign)."""
    x = np.asarray(x, F64)
    with np.errstate(all="ignore"):
        r = x - 2.0 * np.round(x / 2.0)  # [-1, 1], exact
        r = np.where(np.abs(r) > 0.5, np.copysign(1.0, r) - r, r)  # sin(pi - t) = sin(t), exact
        return np.where(~np.isfinite(x), np.nan, np.where(np.trunc(x) == x, np.copysign(0.0, x), np.sin(np.pi * r)))


def cospi(x):
    """cos(pi x) = sin(pi (1/2 - |r|)) for the exactly reduced |r| in [0, 1]: accurate near the zeros too."""
    x = np.abs(np.asarray(x, F64))
    with np.errstate(all="ignore"):
        r = np.abs(x - 2.0 * np.round(x / 2.0))
        return np.where(np.isinf(x), np.nan, np.sin(np.pi * (0.5 - r)))


def fast_pow(x, y):
    """CUDA's __powf: exp2(y * log2(x)), so a negative base gives NaN and pow(0, 0) NaN (where C's pow gives a
    value): the interpreter computes what the intrinsic defines, at float64 precision."""
    x, y = np.asarray(x, F64), np.asarray(y, F64)
    with np.errstate(all="ignore"):
        return np.exp2(y * np.log2(x))


def logb(x):
    """The unbiased exponent of x as a float: floor(log2 |x|) (-inf at 0, +inf at +-inf, NaN at NaN)."""
    x = np.asarray(x, F64)
    m, e = np.frexp(x)
    with np.errstate(all="ignore"):
        return np.where(x == 0, -np.inf, np.where(np.isfinite(x), e - 1.0, np.abs(x)))


def saturate(x):
    """Clamp to [0, 1]; NaN gives 0 (CUDA's __saturatef)."""
    x = np.asarray(x)
    return np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 1.0)).astype(x.dtype)


def _remainder_one(x, y):
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or y == 0:
        return math.nan
    return x if math.isinf(y) else math.remainder(x, y)


def ieee_remainder(x, y):
    """C `remainder`: x - n * y with n = x / y rounded to the nearest integer, ties to even; exact (Python's
    math.remainder), NaN where C's is (x infinite, y zero)."""
    return np.vectorize(_remainder_one, otypes=[F64])(np.asarray(x, F64), np.asarray(y, F64))


def fdim(x, y):
    """C `fdim`: x - y where x > y, else +0 (NaN in, NaN out)."""
    x, y = np.asarray(x, F64), np.asarray(y, F64)
    with np.errstate(all="ignore"):
        return np.where(np.isnan(x) | np.isnan(y), np.nan, np.where(x > y, x - y, 0.0))


bessel_j0 = _at_infinity(_mpmath("besselj", 0), 0.0, 0.0)
bessel_j1 = _at_infinity(_mpmath("besselj", 1), 0.0, -0.0)
bessel_y0 = _at_infinity(_mpmath("bessely", 0), 0.0, np.nan)
bessel_y1 = _at_infinity(_mpmath("bessely", 1), 0.0, np.nan)
bessel_i0 = _at_infinity(_torch("i0"), np.inf, np.inf)
bessel_i1 = _at_infinity(_torch("i1"), np.inf, -np.inf)


def _gamma(v: float) -> float:
    """C tgamma: +-0 -> +-inf, poles (negative integers) and -inf -> NaN, overflow -> inf."""
    import math

    if v != v or v == -math.inf:
        return math.nan
    if v == math.inf:
        return math.inf
    if v == 0:
        return math.copysign(math.inf, v)
    if v < 0 and v == int(v):
        return math.nan
    try:
        return math.gamma(v)
    except OverflowError:
        return math.inf


def tgamma(x):
    """Gamma(x), with its sign (lgamma gives only the magnitude's log)."""
    a = np.asarray(x, dtype=np.float64)
    return np.vectorize(_gamma, otypes=[np.float64])(a) if a.size else a
