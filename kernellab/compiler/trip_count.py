"""A top-level loop's trip count as an expression over the kernel's integer parameters, for what a launch decides
from its arguments: the passes that make a launch-time variant of a dot kernel (passes/split_k.py,
passes/make_persistent.py) record it in their stats as `trip_count`, and the runtime evaluates it for a launch's
arguments (runtime/split_k.py splits only long dot loops, runtime/persistent.py's auto keeps only short ones).

An expression is ["arg", i] (the kernel's i-th parameter), ["const", n] or [op, a, b] with op one of add, sub, mul,
div, rem (C division, as the kernel computes them), min, max. Indices are the kernel's parameters as compiled: a
variant's appended parameters come after them, so the kernel as written's launch arguments evaluate it.
"""
from __future__ import annotations

from .ir import Function, Op, Value
from .rewrite import int_const
from .types import int32, int64

_OPS = {"arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul", "arith.divsi": "div", "arith.remsi": "rem",
        "arith.minsi": "min", "arith.maxsi": "max"}


def expr_of(v: Value, fn: Function):
    """`v` (an integer scalar) as an expression over `fn`'s parameters; None if it reads anything else (the program
    id, memory) or is computed inside a region."""
    if v.owner is fn.body:
        return ["arg", v.index] if v.type in (int32, int64) else None
    n = int_const(v)
    if n is not None and v.type in (int32, int64):
        return ["const", n]
    d = v.defining_op
    if d is None or d.block is not fn.body or d.name not in _OPS:
        return None
    parts = [expr_of(o, fn) for o in d.operands]
    return None if any(p is None for p in parts) else [_OPS[d.name], *parts]


def trip_count(loop: Op, fn: Function):
    """How many iterations the scf.for `loop` (at the top level of `fn`) runs, as an expression: cdiv of the bounds'
    distance by the constant step, at least 0. None where a bound is not an expression over the parameters or the
    step is not a nonzero constant."""
    lb, ub, st = loop.operands[:3]
    step = int_const(st)
    lb_e, ub_e = expr_of(lb, fn), expr_of(ub, fn)
    if step is None or step == 0 or lb_e is None or ub_e is None:
        return None
    span = ["sub", ub_e, lb_e] if step > 0 else ["sub", lb_e, ub_e]
    s = abs(step)
    n = span if s == 1 else ["div", ["add", span, ["const", s - 1]], ["const", s]]
    return ["max", n, ["const", 0]]


def evaluate(expr, args) -> int:
    """The value of an expression for a launch's arguments (`args[i]` for ["arg", i])."""
    op = expr[0]
    if op == "arg":
        return int(args[expr[1]])
    if op == "const":
        return expr[1]
    a, b = (evaluate(e, args) for e in expr[1:])
    if op in ("div", "rem"):
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q if op == "div" else a - q * b
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}[op]
