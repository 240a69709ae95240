"""The 8-bit float formats: their value grids and the conversions Triton performs on NVIDIA GPUs.

One definition shared by the interpreter (which carries fp8 values as float32 numbers on the format's
grid and stores bytes), the op evaluators (`tt.fp_to_fp`) and the GPU backend (constants).

Formats (Triton's names; exponent bits, mantissa bits, bias, special values):
- f8e4nv  (e4m3fn, OCP):  4, 3, 7:  no infinities; S.1111.111 is NaN; max 448.
- f8e5    (e5m2, OCP):    5, 2, 15: IEEE-like: infinities and NaNs at exponent 31; max 57344.
- f8e4b15 (Triton's):     4, 3, 15: no infinities and no NaN: every byte is a number; max 1.875.
- f8e4b8  (AMD fnuz):     4, 3, 8:  0x80 is the only NaN, no -0, no infinities; max 240.
- f8e5b16 (AMD fnuz):     5, 2, 16: as f8e4b8; max 57344.

Conversions, as Triton 3.6 does them on sm_90 (our spec):
- fp8 -> f16/bf16/f32: exact (every fp8 value is representable).
- f16/bf16/f32 -> e4nv/e5 ("rtne", the default): one round-to-nearest-even of the exact value; results
  beyond the largest finite value, infinities included, saturate to +-max (PTX `cvt.rn.satfinite`);
  NaN stays NaN. "rtz" (f32 -> e5 only): truncation toward zero, finite overflow gives +-max, an
  infinity stays infinite (Triton goes f32 -> f16 -> high byte, both toward zero).
- f16 -> e4b15: |x| clamped to 1.75 (NaN and infinities too, keeping the sign), then the 7 dropped bits
  of the f16 pattern rounded half away from zero; f32 -> e4b15 first rounds to f16 toward zero.
- e4b8/e5b16 (interpreter only): round to nearest even, saturating; NaN -> 0x80; -0 -> +0.
"""
from __future__ import annotations

import numpy as np

# ir name -> (exponent bits, mantissa bits, bias, special-value style)
FORMATS = {
    "f8e4nv": (4, 3, 7, "fn"),
    "f8e5": (5, 2, 15, "ieee"),
    "f8e4b15": (4, 3, 15, "none"),
    "f8e4b8": (4, 3, 8, "fnuz"),
    "f8e5b16": (5, 2, 16, "fnuz"),
}

# Formats Triton's CUDA backend accepts (options.supported_fp8_dtypes on sm_89+); the AMD fnuz ones are rejected.
GPU_SUPPORTED = ("f8e4nv", "f8e5", "f8e4b15")


def is_fp8(t) -> bool:
    return getattr(t, "ir", None) in FORMATS


def _decode_table(fmt: str) -> np.ndarray:
    e, m, bias, style = FORMATS[fmt]
    out = np.empty(256, np.float64)
    for byte in range(256):
        s, ex, man = byte >> 7, (byte >> m) & ((1 << e) - 1), byte & ((1 << m) - 1)
        if ex == 0:
            v = man / (1 << m) * 2.0 ** (1 - bias)
        else:
            v = (1 + man / (1 << m)) * 2.0 ** (ex - bias)
        v = -v if s else v
        if style == "ieee" and ex == (1 << e) - 1:
            v = (-np.inf if s else np.inf) if man == 0 else np.nan
        elif style == "fn" and (byte & 0x7F) == 0x7F:
            v = np.nan
        elif style == "fnuz" and byte == 0x80:
            v = np.nan
        out[byte] = v
    return out.astype(np.float32)


DECODE = {f: _decode_table(f) for f in FORMATS}


def _max_finite(fmt: str) -> float:
    t = DECODE[fmt]
    return float(np.nanmax(np.where(np.isfinite(t), t, np.nan)))


MAX = {f: _max_finite(f) for f in FORMATS}
# The non-negative finite values in increasing order, and their bytes (for encoding).
_MAGS = {}
for _f in FORMATS:
    _t = DECODE[_f][:128].astype(np.float64)
    _ok = np.isfinite(_t)
    _order = np.argsort(_t[_ok], kind="stable")
    _MAGS[_f] = (_t[_ok][_order], np.arange(128, dtype=np.uint8)[_ok][_order])


def decode(fmt: str, bits) -> np.ndarray:
    """Bytes (uint8/int8) -> float32 carriers."""
    return DECODE[fmt][np.asarray(bits).view(np.uint8) if np.asarray(bits).dtype.itemsize == 1
                       else np.asarray(bits).astype(np.uint8)]


def encode(fmt: str, x) -> np.ndarray:
    """float32 carriers (values on the grid; others are first rounded as a cast would) -> uint8 bytes.
    NaN becomes the format's NaN with the value's sign (fnuz: 0x80)."""
    a = np.asarray(x, np.float64)
    style = FORMATS[fmt][3]
    keep = np.isinf(a) if style == "ieee" else np.zeros(a.shape, bool)  # e5's infinities are values
    a = np.where(keep, a, np.asarray(round_to(fmt, a), np.float64))
    mags, codes = _MAGS[fmt]
    mag = np.abs(a)
    nan = a != a
    inf = np.isinf(a)
    idx = np.clip(np.searchsorted(mags, np.where(nan | inf, 0.0, mag)), 0, len(mags) - 1)
    byte = codes[idx].astype(np.uint8)
    sign = np.signbit(a).astype(np.uint8) << np.uint8(7)
    if style == "fnuz":
        sign = np.where(byte == 0, np.uint8(0), sign).astype(np.uint8)
    byte = byte | sign
    if inf.any():  # only e5 has infinities (round_to saturated the others)
        byte = np.where(inf, np.where(a > 0, np.uint8(0x7C), np.uint8(0xFC)), byte)
    if nan.any():
        canon = {"fn": 0x7F, "ieee": 0x7F, "fnuz": 0x80, "none": 0x7F}[style]
        nb = np.uint8(canon) | (sign if style != "fnuz" else np.uint8(0))
        byte = np.where(nan, nb, byte)
    return byte.astype(np.uint8)


def _round_grid(a, man_bits: int, bias: int, rtz: bool):
    """float64 values rounded to a binary format's grid (unbounded exponent above, subnormals below)."""
    with np.errstate(all="ignore"):
        _, e = np.frexp(a)  # a = f * 2**e, 0.5 <= |f| < 1: the leading bit is 2**(e-1)
        lead = np.maximum(e - 1, 1 - bias)
        q = np.ldexp(1.0, (lead - man_bits).astype(np.int64))
        r = (np.trunc(a / q) if rtz else np.rint(a / q)) * q
        return np.where(np.isfinite(a), r, a)


def round_to(fmt: str, x, rounding: str = "rtne") -> np.ndarray:
    """Float values (any NumPy float dtype, bf16 in its float32 carrier) converted to `fmt` as the GPU
    converts them from that precision; returns float32 carriers on the grid. Sources narrower than
    float64 are exact in float64, so this is the single rounding of the true value."""
    a = np.asarray(x, np.float64)
    _, m, bias, style = FORMATS[fmt]
    mx = MAX[fmt]
    r = _round_grid(a, m, bias, rounding == "rtz")
    with np.errstate(invalid="ignore"):
        if rounding == "rtz":  # finite overflow -> max, infinities stay (e5 only has them)
            r = np.where(np.isfinite(a) & (np.abs(r) > mx), np.copysign(mx, a), r)
            if style != "ieee":
                r = np.where(np.isinf(a), np.copysign(mx, a), r)
        else:  # satfinite
            r = np.where(np.abs(r) > mx, np.copysign(mx, a), r)
    if style == "fnuz":
        r = np.where(r == 0, 0.0, r)  # no negative zero
    return r.astype(np.float32)


def f32_to_f16_rtz(x) -> np.ndarray:
    """float32 -> float16 toward zero (PTX cvt.rz.f16.f32): overflow gives +-65504, infinities stay."""
    a = np.asarray(x, np.float64)
    r = _round_grid(a, 10, 15, True)
    r = np.where(np.isfinite(a) & (np.abs(r) > 65504.0), np.copysign(65504.0, a), r)
    return r.astype(np.float16)


def f32_to_bf16_rtz(x) -> np.ndarray:
    """float32 -> bfloat16 toward zero (PTX cvt.rz.bf16.f32), in its float32 carrier: overflow gives +-max,
    infinities and NaN stay."""
    a = np.asarray(x, np.float64)
    mx = 3.3895313892515355e38
    r = _round_grid(a, 7, 127, True)
    r = np.where(np.isfinite(a) & (np.abs(r) > mx), np.copysign(mx, a), r)
    return r.astype(np.float32)


def f16_to_e4b15(x) -> np.ndarray:
    """float16 values -> f8e4b15 carriers, as Triton's NVIDIA conversion does it (see the module doc)."""
    bits = np.asarray(x, np.float16).view(np.uint16).astype(np.uint32)
    sign = bits & 0x8000
    mag = bits & 0x7FFF
    mag = np.where(mag > 0x7C00, 0x3F00, np.minimum(mag, 0x3F00))  # NaN -> 1.75 (min picks the number)
    byte = ((mag + 0x40) >> 7) | (sign >> 8)
    return decode("f8e4b15", byte.astype(np.uint8))


def convert_to(fmt: str, src_ir: str, x, rounding: str = "rtne") -> np.ndarray:
    """A float of IR type `src_ir` (in its interpreter carrier) converted to fp8 `fmt` (float32 carrier)."""
    if fmt == "f8e4b15":
        if src_ir == "f32":
            x = f32_to_f16_rtz(x)
        return f16_to_e4b15(np.asarray(x, np.float16))
    return round_to(fmt, x, rounding)
