"""`tl.dot_scaled`: a dot of microscaling (MX) operands, composed from integer ops and `tl.dot`.

An MX operand is a tile of small floats (fp4 e2m1 packed two per byte along K, or fp8 e4m3 / e5m2 as
bytes) plus one power-of-two scale per 32 elements along K, stored as a biased exponent byte (e8m0:
value 2**(s - 127), 0xFF is NaN). Hopper has no MX tensor-core instruction, so — as Triton does on
sm_90 — each operand is decoded to a 16-bit float (bf16, or fp16 when either operand is fp16),
multiplied by its scale, and fed to an ordinary `tl.dot` with fp32 accumulation.

The decoding is exact bit arithmetic (no lookup tables): an element's sign, exponent and mantissa
fields are moved into an fp32 bit pattern, with the exponent re-biased; subnormals (exponent field 0)
are mantissa x 2**(1 - bias - mantissa bits). Every MX value is representable in bf16 and fp16, so the
final cast is exact.
"""
from __future__ import annotations

from ..compiler.types import bfloat16, float16, float32, uint8, uint32
from ..errors import SemanticError
from .core import builtin, tensor, unwrap

# format -> (exponent bits, mantissa bits, has inf/NaN encodings like IEEE)
_MX_FORMATS = {"e2m1": (2, 1, False), "e4m3": (4, 3, False), "e5m2": (5, 2, True)}
_PLAIN = {"bf16": bfloat16, "fp16": float16}


def _decode(sem, code: tensor, fmt: str) -> tensor:
    """fp32 values of the small-float codes in `code` (an integer tile holding one code per element)."""
    e_bits, m_bits, ieee = _MX_FORMATS[fmt]
    bias = (1 << (e_bits - 1)) - 1
    width = 1 + e_bits + m_bits
    c = sem.cast(code, uint32)
    sign = sem.binary("<<", sem.binary(">>", c, width - 1), 31)
    exp = sem.binary("&", sem.binary(">>", c, m_bits), (1 << e_bits) - 1)
    man = sem.binary("&", c, (1 << m_bits) - 1)
    normal_bits = sem.binary("|", sem.binary("|", sign, sem.binary("<<", sem.binary("+", exp, 127 - bias), 23)),
                             sem.binary("<<", man, 23 - m_bits))
    normal = sem.cast(normal_bits, float32, bitcast=True)
    sub_mag = sem.binary("*", sem.cast(man, float32), 2.0 ** (1 - bias - m_bits))
    negative = sem.compare("!=", sign, sem.const(0, sign.type), uint32)
    sub = sem.where(negative, sem.unary("-", sub_mag), sub_mag)
    value = sem.where(sem.compare("==", exp, sem.const(0, exp.type), uint32), sub, normal)
    top = (1 << e_bits) - 1
    if ieee:  # e5m2: all-ones exponent is inf (mantissa 0) or NaN
        is_top = sem.compare("==", exp, sem.const(top, exp.type), uint32)
        inf = sem.where(negative, float("-inf"), float("inf"))
        special = sem.where(sem.compare("==", man, sem.const(0, man.type), uint32), inf, float("nan"))
        value = sem.where(is_top, special, value)
    elif fmt == "e4m3":  # e4m3fn: only S.1111.111 is NaN; no infinities
        is_nan = sem.compare("==", sem.binary("&", c, 0x7F), sem.const(0x7F, c.type), uint32)
        value = sem.where(is_nan, float("nan"), value)
    return value


def _unpack_fp4(sem, x: tensor, packed_dim: int) -> tensor:
    """e2m1 pairs packed in bytes along `packed_dim` -> fp32, twice as long there (low nibble first)."""
    lo = _decode(sem, sem.binary("&", x, 0xF), "e2m1")
    hi = _decode(sem, sem.binary(">>", sem.cast(x, uint8, bitcast=True) if x.dtype != uint8 else x, 4), "e2m1")
    pairs = sem.join(lo, hi)  # [..., 2] with the pair last
    rows, cols = x.shape
    if packed_dim == 1:
        return sem.reshape(pairs, (rows, cols * 2))
    return sem.reshape(sem.permute(pairs, (0, 2, 1)), (rows * 2, cols))


def _scale_factor(sem, scale: tensor, k: int, rows: int, side: str = "lhs") -> tensor:
    """A [rows, K/32] tile of e8m0 exponents -> fp32 factors 2**(s-127) repeated over each 32-wide group of K,
    as [rows, K]; 0xFF gives NaN."""
    s = sem.cast(sem.cast(scale, uint8, bitcast=True) if scale.dtype != uint8 else scale, uint32)
    factor = sem.cast(sem.binary("<<", s, 23), float32, bitcast=True)
    factor = sem.where(sem.compare("==", s, sem.const(0xFF, s.type), uint32), float("nan"), factor)
    groups = k // 32
    if tuple(scale.shape) != (rows, groups):
        raise SemanticError(f"tl.dot_scaled: a scale tile must be [{rows}, {groups}] (one exponent per 32 elements "
                            f"of K), got {list(scale.shape)}",
                            triton=f"{side}_scale must be a tensor of shape [{rows}, {groups}]. "
                                   f"Got {[str(d) for d in scale.shape]}")
    spread = sem.broadcast_to(sem.reshape(factor, (rows, groups, 1)), (rows, groups, 32))
    return sem.reshape(spread, (rows, k))


def _operand(sem, x, scale, fmt: str, side: str, comp, k_pack: bool) -> tensor:
    """One operand as a [M, K] (side "lhs") or [K, N] ("rhs") tile of `comp` floats, scaled."""
    x = sem.to_tensor(x)
    if len(x.shape) != 2:
        raise SemanticError(f"tl.dot_scaled: the {side} operand must be a 2-D tile, got shape {list(x.shape)}")
    if fmt in _PLAIN:
        if scale is not None:
            raise SemanticError(f"tl.dot_scaled: a {fmt} {side} operand takes no scale (pass None)")
        value = sem.cast(x, float32) if x.dtype != _PLAIN[fmt] else x
        return sem.cast(value, comp)
    if fmt not in _MX_FORMATS:
        raise SemanticError(f"tl.dot_scaled: {side}_format must be one of e2m1, e4m3, e5m2, bf16, fp16; got {fmt!r}")
    if not k_pack:
        raise SemanticError("tl.dot_scaled: packing along M or N (k_pack=False) is not supported by kernellab yet")
    if x.dtype.bits != 8:
        raise SemanticError(f"tl.dot_scaled: a {fmt} {side} operand holds its codes in bytes (uint8 or an fp8 "
                            f"dtype), got {x.dtype.name}")
    k_dim = 1 if side == "lhs" else 0
    if fmt == "e2m1":
        value = _unpack_fp4(sem, x, k_dim)
    else:
        value = _decode(sem, sem.cast(x, uint8, bitcast=True) if x.dtype != uint8 else x, fmt)
    if scale is not None:
        scale = sem.to_tensor(scale)
        rows, k = (value.shape[0], value.shape[1]) if side == "lhs" else (value.shape[1], value.shape[0])
        factor = _scale_factor(sem, scale, k, rows, side)
        if side == "rhs":
            factor = sem.permute(factor, (1, 0))
        value = sem.binary("*", value, factor)
    return sem.cast(value, comp)


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False, lhs_k_pack=True,
               rhs_k_pack=True, out_dtype=float32, _sem=None):
    """lhs [M, K] x rhs [K, N] with MX operands (see the module docstring); returns fp32 (or `out_dtype`)."""
    lf, rf = unwrap(lhs_format), unwrap(rhs_format)
    comp = float16 if "fp16" in (lf, rf) else bfloat16
    a = _operand(_sem, lhs, unwrap(lhs_scale), lf, "lhs", comp, unwrap(lhs_k_pack))
    b = _operand(_sem, rhs, unwrap(rhs_scale), rf, "rhs", comp, unwrap(rhs_k_pack))
    return _sem.dot(a, b, acc, "ieee", unwrap(out_dtype))


__all__ = ["dot_scaled"]
