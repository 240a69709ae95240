"""Fold ops whose operands are all `arith.constant` into one `arith.constant`.

Constants in the tile IR are scalars or tensors filled with one value, so every fold is a scalar
computation whose result fills the result type. The computation is the op's evaluator from the
catalogue (`ops.evaluator`, defined in `op_eval`), the very function the interpreter runs, so a
folded kernel computes what the unfolded one does. Only ops the catalogue marks `folds` (exact in
every dtype) are folded: transcendental math (`exp`, `sin`, ...) is not, the GPU's approximations
would disagree with the folded value. The catalogue's `refuses` leaves alone what traps or is
undefined at run time: integer division or remainder by zero, `INT_MIN / -1`, and float-to-int
conversions of NaN, infinities or out-of-range values. Ops that only move elements (`tt.splat`,
`tt.broadcast`, ...) of a filled constant give that constant in the new shape.
"""
from __future__ import annotations

import struct

import numpy as np

from .. import ops
from ..ir import Module, Op
from ..rewrite import float_const, int_const, is_attached, make_constant, replace_op
from ..types import DType, float32

NAME = "constant_fold"
DESCRIPTION = "evaluate ops whose operands are all constants (wrapping ints, IEEE floats)"


_PACK = {"f16": ("<e", "<H"), "f32": ("<f", "<I"), "f64": ("<d", "<Q")}


def float_to_bits(x: float, t: DType) -> int:
    if t.ir == "bf16":
        return float_to_bits(x, float32) >> 16
    f, i = _PACK[t.ir]
    return struct.unpack(i, struct.pack(f, x))[0]


def bits_to_float(b: int, t: DType) -> float:
    if t.ir == "bf16":
        return bits_to_float((b & 0xFFFF) << 16, float32)
    f, i = _PACK[t.ir]
    return struct.unpack(f, struct.pack(i, b & ((1 << t.bits) - 1)))[0]


def to_numpy(value, t: DType):
    """A Python constant as the interpreter carries it: a NumPy scalar of `t`'s carrier type."""
    if t.kind == "bool":
        return np.bool_(bool(value))
    if t.is_int():
        return np.array(int(value) & ((1 << t.bits) - 1), dtype=f"u{t.itemsize}").view(t.np)[()]
    return t.np.type(value)


def from_numpy(x, t: DType):
    """The Python constant of a NumPy scalar result of type `t`."""
    if t.kind == "bool":
        return bool(x)
    if t.is_int():
        return int(x)
    return float(x)


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
    info = ops.info(op.name)
    if not (info.moves_only or (info.folds and info.evaluator is not None)):
        return None
    vals = [_scalar(v) for v in op.operands]
    if any(v is None for v in vals):
        return None
    rt = op.results[0].type.scalar
    if not isinstance(rt, DType):
        return None
    if info.moves_only:
        return [vals[0]]
    types = [v.type.scalar for v in op.operands]
    args = [to_numpy(v, t) for v, t in zip(vals, types)]
    if ops.refuses(op.name, types, rt, op.attrs, args):
        return None
    with np.errstate(all="ignore"):
        r = ops.evaluator(op.name, types, rt, op.attrs)(*args)
    return [from_numpy(np.asarray(r)[()], rt)]


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
