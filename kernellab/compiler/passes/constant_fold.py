"""Fold ops whose operands are all `arith.constant` into one `arith.constant`.

Constants in the tile IR are scalars or tensors filled with one value, so every fold is a scalar
computation whose result fills the result type. Integer ops wrap to the type's bit width (signed or
unsigned per the op, normalized to the result type's range); signed division truncates toward
zero (C). Division or remainder by zero, `INT_MIN / -1`, and float-to-int conversions of NaN or
out-of-range values are left alone (they trap or are undefined at run time). Float ops are
computed in double precision and rounded once to the result type (exact for + - * / sqrt, fmod
and conversions); bf16 is rounded to nearest even like the hardware does. Transcendental math
ops (`exp`, `sin`, ...) are not folded: the GPU's approximations would disagree with the folded
value. `tt.make_range`, loads and other non-constant producers are never folded.
"""
from __future__ import annotations

import math
import struct

from ..ir import Module, Op
from ..rewrite import (
    float_const,
    int_const,
    int_to_float,
    is_attached,
    make_constant,
    replace_op,
    round_float,
    wrap_int,
)
from ..types import DType, float32

NAME = "constant_fold"
DESCRIPTION = "evaluate ops whose operands are all constants (wrapping ints, IEEE floats)"

_INF = float("inf")


class _NoFold(Exception):
    """This op must not be folded (trapping or undefined at run time)."""


# ---------------------------------------------------------------------------------------------
# Numeric helpers


def _signed(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >= 1 << (bits - 1) else x


def _unsigned(x: int, bits: int) -> int:
    return x & ((1 << bits) - 1)


_PACK = {"f16": ("<e", "<H"), "f32": ("<f", "<I"), "f64": ("<d", "<Q")}


def float_to_bits(x: float, t: DType) -> int:
    if t.name == "bf16":
        return float_to_bits(x, float32) >> 16
    f, i = _PACK[t.name]
    return struct.unpack(i, struct.pack(f, x))[0]


def bits_to_float(b: int, t: DType) -> float:
    if t.name == "bf16":
        return bits_to_float((b & 0xFFFF) << 16, float32)
    f, i = _PACK[t.name]
    return struct.unpack(f, struct.pack(i, b & ((1 << t.bits) - 1)))[0]




# ---------------------------------------------------------------------------------------------
# Integer ops: operands as Python ints in their type's range; return the unwrapped result


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _int_binary(name: str, a: int, b: int, bits: int) -> int:
    sa, sb, ua, ub = _signed(a, bits), _signed(b, bits), _unsigned(a, bits), _unsigned(b, bits)
    if name in ("divsi", "remsi"):
        if sb == 0 or (sa == -(1 << (bits - 1)) and sb == -1 and bits > 1):
            raise _NoFold
        q = _tdiv(sa, sb)
        return q if name == "divsi" else sa - q * sb
    if name in ("divui", "remui"):
        if ub == 0:
            raise _NoFold
        return ua // ub if name == "divui" else ua % ub
    if name == "shli":
        return 0 if ub >= bits else ua << ub
    if name == "shrui":
        return 0 if ub >= bits else ua >> ub
    if name == "shrsi":
        return sa >> min(ub, bits - 1)
    simple = {
        "addi": lambda: ua + ub, "subi": lambda: ua - ub, "muli": lambda: ua * ub,
        "andi": lambda: ua & ub, "ori": lambda: ua | ub, "xori": lambda: ua ^ ub,
        "maxsi": lambda: max(sa, sb), "minsi": lambda: min(sa, sb),
        "maxui": lambda: max(ua, ub), "minui": lambda: min(ua, ub),
    }
    if name in simple:
        return simple[name]()
    raise _NoFold


_CMPI = {
    "eq": (None, lambda a, b: a == b), "ne": (None, lambda a, b: a != b),
    "slt": (True, lambda a, b: a < b), "sle": (True, lambda a, b: a <= b),
    "sgt": (True, lambda a, b: a > b), "sge": (True, lambda a, b: a >= b),
    "ult": (False, lambda a, b: a < b), "ule": (False, lambda a, b: a <= b),
    "ugt": (False, lambda a, b: a > b), "uge": (False, lambda a, b: a >= b),
}


def _cmpi(pred: str, a: int, b: int, bits: int) -> bool:
    if pred not in _CMPI:
        raise _NoFold
    signed, fn = _CMPI[pred]
    conv = _unsigned if signed is False else _signed
    return fn(conv(a, bits), conv(b, bits))


_CMPF = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}


def _cmpf(pred: str, a: float, b: float) -> bool:
    if pred == "true":
        return True
    if pred == "false":
        return False
    if pred == "ord":
        return a == a and b == b
    if pred == "uno":
        return a != a or b != b
    kind, rel = pred[:1], pred[1:]
    if kind not in ("o", "u") or rel not in _CMPF:
        raise _NoFold
    if a != a or b != b:
        return kind == "u"
    return _CMPF[rel](a, b)


# ---------------------------------------------------------------------------------------------
# Float ops: operands as doubles exactly representable in their type; result before rounding


def _max(a: float, b: float, propagate_nan: bool) -> float:
    if a != a or b != b:
        if propagate_nan:
            return math.nan
        return b if a != a else a
    if a == b == 0:
        return a if math.copysign(1, a) > 0 else b  # +0 beats -0
    return max(a, b)


def _min(a: float, b: float, propagate_nan: bool) -> float:
    if a != a or b != b:
        if propagate_nan:
            return math.nan
        return b if a != a else a
    if a == b == 0:
        return a if math.copysign(1, a) < 0 else b  # -0 beats +0
    return min(a, b)


def _div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or a != a:
            return math.nan
        return math.copysign(_INF, a) * math.copysign(1, b)
    return a / b


def _fmod(a: float, b: float) -> float:
    if a != a or b != b or a in (_INF, -_INF) or b == 0:
        return math.nan
    return math.fmod(a, b)


def _sqrt(a: float) -> float:
    if a != a or a < 0:
        return math.nan
    return math.sqrt(a) if a != _INF else a


def _add(a: float, b: float) -> float:
    if a in (_INF, -_INF) and b in (_INF, -_INF) and a != b:
        return math.nan
    return a + b


def _mul(a: float, b: float) -> float:
    if (a in (_INF, -_INF) and b == 0) or (b in (_INF, -_INF) and a == 0):
        return math.nan
    return a * b


_FLOAT_BINARY = {
    "addf": _add, "subf": lambda a, b: _add(a, -b), "mulf": _mul, "divf": _div, "remf": _fmod,
    "maxnumf": lambda a, b: _max(a, b, False), "minnumf": lambda a, b: _min(a, b, False),
    "maximumf": lambda a, b: _max(a, b, True), "minimumf": lambda a, b: _min(a, b, True),
}


def _floor_ceil(a: float, up: bool) -> float:
    if a != a or a in (_INF, -_INF) or a == 0:
        return a
    r = float(math.ceil(a) if up else math.floor(a))
    return math.copysign(r, a) if r == 0 else r


_FLOAT_UNARY = {
    "arith.negf": lambda a: -a, "math.absf": abs, "math.floor": lambda a: _floor_ceil(a, False),
    "math.ceil": lambda a: _floor_ceil(a, True), "tt.precise_sqrt": _sqrt,
}

# Ops whose single operand is a filled constant and whose result is the same value in another shape.
_SHAPE_OPS = ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans")


# ---------------------------------------------------------------------------------------------


def _scalar(v):
    """A constant operand's value (int or float) or None."""
    t = v.type.scalar
    if not isinstance(t, DType):
        return None
    return int_const(v) if t.is_int() else float_const(v)


def fold(op: Op) -> list | None:
    """The scalar values of `op`'s results if it folds, else None."""
    if op.regions or len(op.results) != 1 or not op.operands:
        return None
    vals = [_scalar(v) for v in op.operands]
    if any(v is None for v in vals):
        return None
    rt = op.results[0].type.scalar
    if not isinstance(rt, DType):
        return None
    try:
        return [_fold(op, vals, rt)]
    except _NoFold:
        return None


def _fold(op: Op, vals: list, rt: DType):
    name = op.name
    dialect, _, short = name.partition(".")
    src = op.operands[0].type.scalar
    if name in _SHAPE_OPS:
        return vals[0]
    if name == "arith.select":
        return vals[1] if vals[0] else vals[2]
    if name == "arith.cmpi":
        return _cmpi(op.attrs.get("predicate"), vals[0], vals[1], src.bits)
    if name == "arith.cmpf":
        return _cmpf(op.attrs.get("predicate"), vals[0], vals[1])
    if dialect == "arith" and short in _FLOAT_BINARY and rt.is_floating():
        return round_float(_FLOAT_BINARY[short](vals[0], vals[1]), rt)
    if name == "tt.precise_divf":
        return round_float(_div(vals[0], vals[1]), rt)
    if name in _FLOAT_UNARY and rt.is_floating():
        return round_float(_FLOAT_UNARY[name](vals[0]), rt)
    if dialect == "arith" and len(vals) == 2 and rt.is_int() and src.is_int():
        return _int_result(_int_binary(short, vals[0], vals[1], src.bits), rt)
    if name == "math.absi" and rt.is_int():
        return _int_result(abs(_signed(vals[0], src.bits)), rt)
    if name == "tt.umulhi" and rt.is_int():
        return _int_result((_unsigned(vals[0], src.bits) * _unsigned(vals[1], src.bits)) >> src.bits, rt)
    if dialect == "arith" and len(vals) == 1:
        return _cast(short, vals[0], src, rt)
    raise _NoFold


def _int_result(x: int, rt: DType):
    return wrap_int(x, rt)


def _cast(short: str, a, src: DType, rt: DType):
    if short == "extsi" and src.is_int() and rt.is_int():
        return wrap_int(_signed(a, src.bits), rt)
    if short == "extui" and src.is_int() and rt.is_int():
        return wrap_int(_unsigned(a, src.bits), rt)
    if short == "trunci" and src.is_int() and rt.is_int():
        return wrap_int(a, rt)
    if short == "sitofp" and src.is_int() and rt.is_floating():
        return int_to_float(_signed(a, src.bits), rt)
    if short == "uitofp" and src.is_int() and rt.is_floating():
        return int_to_float(_unsigned(a, src.bits), rt)
    if short in ("fptosi", "fptoui") and src.is_floating() and rt.is_int():
        if a != a or a in (_INF, -_INF):
            raise _NoFold
        n = int(a)  # truncates toward zero
        lo, hi = (-(1 << (rt.bits - 1)), (1 << (rt.bits - 1)) - 1) if short == "fptosi" else (0, (1 << rt.bits) - 1)
        if not lo <= n <= hi:
            raise _NoFold
        return wrap_int(n, rt)
    if short in ("extf", "truncf") and src.is_floating() and rt.is_floating():
        return round_float(a, rt)
    if short == "bitcast" and src.bits == rt.bits:
        bits = float_to_bits(a, src) if src.is_floating() else _unsigned(a, src.bits)
        return bits_to_float(bits, rt) if rt.is_floating() else wrap_int(bits, rt)
    raise _NoFold


def run(module: Module) -> dict:
    stats = {"folded": 0}
    for fn in module.functions:
        for op in list(fn.walk()):
            if op.name == "arith.constant" or not is_attached(op):
                continue
            values = fold(op)
            if values is None:
                continue
            news = [make_constant(op, r.type, v, r.hint) for r, v in zip(op.results, values)]
            replace_op(op, news)
            stats["folded"] += 1
    return stats
