"""Local simplifications, applied until nothing changes.

Integers: `x+0`, `x-0`, `x*1`, `x*0`, `x/1`, `x%1`, `x-x`, `x^x`, `x&x`, `x|x`, `x&0`, `x&-1`,
`x|0`, `x^0`, shifts by 0, `min/max(x, x)`, `cmpi x, x`. Floats only where IEEE agrees for every
input: `x + (-0.0)`, `x - (+0.0)`, `x * 1.0`, `x / 1.0`, `-(-x)`, `min/max(x, x)`; never `x + 0.0`
(wrong for -0.0) nor `x * 0.0` (wrong for NaN, inf and negatives).
Selects: constant condition, equal arms, `select(c, true, false)`.
Shapes: broadcast/reshape to the same type, trans by the identity (or two transposes composing to
it), broadcast/reshape/expand_dims/trans of a splat become one splat, broadcast of a broadcast and
reshape of a reshape (or of an expand_dims) become one op; a reshape that only inserts size-1 dimensions
becomes expand_dims. Casts to the same type, `trunci(ext(x))` and `truncf(extf(x))`
back to x's type, chains of the same extension, `bitcast(bitcast(x))`, `tt.addptr p, 0`, `tt.hint`
without hints; a hint with hints is read wherever its operand is (Triton's hints annotate the value).
Control flow: `scf.if` on a constant condition (the taken region is inlined), `scf.if` results
yielded the same outer value by both arms, `scf.for` iter args passed through unchanged (result =
init; the carried value is then dropped), and `scf.for` with constant bounds running zero times
(results = inits) or once (body inlined).
Dead ops left behind are DCE's job.
"""
from __future__ import annotations

from collections import Counter

from ..gpu.reshape_layout import unit_dim_plan
from ..ir import Module, Op, Value
from ..rewrite import (
    drop_for_iter_args,
    float_const,
    inline_block_before,
    insert_before,
    int_const,
    is_attached,
    is_defined_inside,
    make_constant,
    replace_op,
    wrap_int,
)
from ..types import DType, TensorType

NAME = "canonicalize"
DESCRIPTION = "local algebraic, shape, cast and control-flow simplifications (IEEE-safe)"

_MAX_ROUNDS = 32


def _is_float(v: Value) -> bool:
    t = v.type.scalar
    return isinstance(t, DType) and t.is_floating()


def _is_int(v: Value) -> bool:
    t = v.type.scalar
    return isinstance(t, DType) and t.is_int()


def _ones(v: Value) -> int:
    return wrap_int(-1, v.type.scalar)


def _fconst_is(v: Value, x: float) -> bool:
    """`v` is the float constant `x`, sign of zero included."""
    c = float_const(v)
    return c is not None and c == x and (x != 0 or str(c) == str(x))


def _replace(op: Op, v: Value) -> bool:
    replace_op(op, [v])
    return True


def _replace_const(op: Op, value) -> bool:
    replace_op(op, [make_constant(op, op.result.type, value, op.result.hint)])
    return True


# ---------------------------------------------------------------------------------------------
# Arithmetic


def _int_binary(op: Op) -> bool:
    a, b = op.operands
    if not _is_int(op.result):
        return False
    ca, cb = int_const(a), int_const(b)
    short = op.name[len("arith."):]
    if short == "addi":
        if cb == 0:
            return _replace(op, a)
        if ca == 0:
            return _replace(op, b)
    elif short == "subi":
        if cb == 0:
            return _replace(op, a)
        if a is b:
            return _replace_const(op, 0)
    elif short == "muli":
        if cb == 1:
            return _replace(op, a)
        if ca == 1:
            return _replace(op, b)
        if ca == 0 or cb == 0:
            return _replace_const(op, 0)
    elif short in ("divsi", "divui"):
        if cb == 1:
            return _replace(op, a)
    elif short in ("remsi", "remui"):
        if cb == 1:
            return _replace_const(op, 0)
    elif short == "andi":
        if ca == 0 or cb == 0:
            return _replace_const(op, 0)
        if cb == _ones(b) or a is b:
            return _replace(op, a)
        if ca == _ones(a):
            return _replace(op, b)
    elif short == "ori":
        if cb == 0 or a is b:
            return _replace(op, a)
        if ca == 0:
            return _replace(op, b)
    elif short == "xori":
        if cb == 0:
            return _replace(op, a)
        if ca == 0:
            return _replace(op, b)
        if a is b:
            return _replace_const(op, 0)
    elif short in ("shli", "shrsi", "shrui"):
        if cb == 0:
            return _replace(op, a)
    elif short in ("maxsi", "maxui", "minsi", "minui"):
        if a is b:
            return _replace(op, a)
    return False


def _float_binary(op: Op) -> bool:
    a, b = op.operands
    if not _is_float(op.result):
        return False
    short = op.name[len("arith."):]
    if short == "addf":
        if _fconst_is(b, -0.0):
            return _replace(op, a)
        if _fconst_is(a, -0.0):
            return _replace(op, b)
    elif short == "subf":
        if _fconst_is(b, 0.0):
            return _replace(op, a)
    elif short == "mulf":
        if _fconst_is(b, 1.0):
            return _replace(op, a)
        if _fconst_is(a, 1.0):
            return _replace(op, b)
    elif short == "divf":
        if _fconst_is(b, 1.0):
            return _replace(op, a)
    elif short in ("maxnumf", "minnumf", "maximumf", "minimumf"):
        if a is b:
            return _replace(op, a)
    return False


_INT_BINARY = {"arith." + n for n in "addi subi muli divsi divui remsi remui andi ori xori shli shrsi shrui "
                                     "maxsi maxui minsi minui".split()}
_FLOAT_BINARY = {"arith." + n for n in "addf subf mulf divf maxnumf minnumf maximumf minimumf".split()}
_CMPI_SELF = {"eq": True, "sle": True, "sge": True, "ule": True, "uge": True,
              "ne": False, "slt": False, "sgt": False, "ult": False, "ugt": False}


def _negf(op: Op) -> bool:
    inner = op.operands[0].defining_op
    if inner is not None and inner.name == "arith.negf":
        return _replace(op, inner.operands[0])
    return False


def _cmpi(op: Op) -> bool:
    a, b = op.operands
    pred = op.attrs.get("predicate")
    if a is b and pred in _CMPI_SELF:
        return _replace_const(op, _CMPI_SELF[pred])
    return False


def _select(op: Op) -> bool:
    c, a, b = op.operands
    cc = int_const(c)
    if cc is not None:
        return _replace(op, a if cc else b)
    if a is b:
        return _replace(op, a)
    t = op.result.type
    if t == c.type and t.scalar.ir == "i1" and int_const(a) == 1 and int_const(b) == 0:
        return _replace(op, c)
    return False


# ---------------------------------------------------------------------------------------------
# Shapes, casts, pointers


def _splat_of(v: Value) -> Value | None:
    d = v.defining_op
    return d.operands[0] if d is not None and d.name == "tt.splat" else None


def _resplat(op: Op, scalar: Value) -> bool:
    new = Op("tt.splat", [scalar], [op.result.type], {}, (), op.loc, [op.result.hint])
    insert_before(op, new)
    return _replace(op, new.result)


def _shape(op: Op) -> bool:
    x = op.operands[0]
    t = op.result.type
    if op.name in ("tt.broadcast", "tt.reshape") and x.type == t:
        return _replace(op, x)
    if op.name == "tt.trans":
        order = list(op.attrs.get("order") or [])
        if order == list(range(len(order))) and x.type == t:
            return _replace(op, x)
    s = _splat_of(x)
    if s is not None and isinstance(t, type(x.type)) and t.shape:
        return _resplat(op, s)
    d = x.defining_op
    if d is not None and (d.name == op.name and op.name in ("tt.broadcast", "tt.reshape")
                          or op.name == "tt.reshape" and d.name == "tt.expand_dims"):
        op.set_operand(0, d.operands[0])
        return True
    if op.name == "tt.reshape":
        return _reshape_to_expand_dims(op)
    if d is not None and d.name == "tt.trans" and op.name == "tt.trans":
        inner, outer = list(d.attrs.get("order") or []), list(op.attrs.get("order") or [])
        if len(inner) == len(outer):
            composed = [inner[i] for i in outer]
            if composed == list(range(len(composed))):
                return _replace(op, d.operands[0])
            op.attrs["order"] = composed
            op.set_operand(0, d.operands[0])
            return True
    return False


def _reshape_to_expand_dims(op: Op) -> bool:
    """A reshape that only inserts size-1 dimensions is a chain of expand_dims, which every later stage
    understands (axis analysis, layouts: a reduction's result expands back into its parent layout)."""
    x, t = op.operands[0], op.result.type
    if not isinstance(x.type, TensorType) or not isinstance(t, TensorType) or not x.type.shape:
        return False
    plan = unit_dim_plan(x.type.shape, t.shape)
    if plan is None or plan[0] or not plan[1]:
        return False
    v = x
    for axis in plan[1]:
        shape = list(v.type.shape)
        shape.insert(axis, 1)
        v = insert_before(op, Op("tt.expand_dims", [v], [TensorType(shape, t.scalar)], {"axis": axis},
                                 (), op.loc)).result
    return _replace(op, v)


_SAME_TYPE_CASTS = {"arith." + n for n in ("extsi", "extui", "trunci", "extf", "truncf", "bitcast")}


def _cast(op: Op) -> bool:
    x = op.operands[0]
    t = op.result.type
    if x.type == t:
        return _replace(op, x)
    d = x.defining_op
    if d is None:
        return False
    if op.name == "arith.trunci" and d.name in ("arith.extsi", "arith.extui") and d.operands[0].type == t:
        return _replace(op, d.operands[0])
    if op.name == "arith.truncf" and d.name == "arith.extf" and d.operands[0].type == t:
        return _replace(op, d.operands[0])
    if op.name in ("arith.extsi", "arith.extui", "arith.extf", "arith.bitcast") and d.name == op.name:
        if op.name == "arith.bitcast" and d.operands[0].type == t:
            return _replace(op, d.operands[0])
        op.set_operand(0, d.operands[0])
        return True
    return False


def _addptr(op: Op) -> bool:
    p, off = op.operands
    if int_const(off) == 0 and p.type == op.result.type:
        return _replace(op, p)
    return False


def _hint(op: Op) -> bool:
    if not any(op.attrs.get(k) for k in ("multiple_of", "max_contiguous")):
        return _replace(op, op.operands[0])
    return _hint_the_value(op)


def _hint_the_value(op: Op) -> bool:
    """A hint is a promise about its operand's value, wherever it is read: Triton's multiple_of / max_contiguous
    set attributes on the value's defining op, so `tl.max_contiguous(tl.multiple_of(offs, 16), 16)` with its
    result unused still makes the later loads through `offs` vector loads. The hint moves right after the
    operand's definition (the top of the block for a block argument) and every other read of the operand reads
    the hint; once that holds, nothing changes."""
    x = op.operands[0]
    others = [u for u in {id(u): u for u in x.uses}.values() if u is not op]
    if not others:
        return False
    d = x.defining_op
    block = d.block if d is not None else x.owner
    if block is None or op.block is None:
        return False
    op.block.ops.remove(op)
    block.insert(block.ops.index(d) + 1 if d is not None else 0, op)
    h = op.results[0]
    for u in others:
        n = sum(v is x for v in u.operands)
        u.operands = [h if v is x else v for v in u.operands]
        x.uses = [w for w in x.uses if w is not u]
        h.uses.extend([u] * n)
    return True


# ---------------------------------------------------------------------------------------------
# Control flow


def _scf_if(op: Op) -> bool:
    cc = int_const(op.operands[0])
    if cc is not None:
        region = op.regions[0] if cc else (op.regions[1] if len(op.regions) > 1 else None)
        if region is None or not region.ops:
            if op.results:
                return False  # malformed: results without a yield
            op.erase()
            return True
        replace_op(op, inline_block_before(region, op, []))
        return True
    if len(op.regions) < 2:
        return False
    yt, ye = op.regions[0].terminator, op.regions[1].terminator
    if yt is None or ye is None:
        return False
    changed = False
    for i, r in enumerate(op.results):
        if not r.uses or i >= len(yt.operands) or i >= len(ye.operands):
            continue
        a, b = yt.operands[i], ye.operands[i]
        if a is b and not is_defined_inside(a, op):
            r.replace_all_uses_with(a)
            changed = True
        elif (r.type.scalar == r.type and getattr(r.type, "ir", None) == "i1" and int_const(a) == 1
              and int_const(b) == 0):
            r.replace_all_uses_with(op.operands[0])
            changed = True
    return changed


def _scf_for(op: Op) -> bool:
    lb, ub, step = op.operands[:3]
    inits = op.operands[3:]
    body = op.regions[0]
    clb, cub, cstep = int_const(lb), int_const(ub), int_const(step)
    if None not in (clb, cub, cstep) and cstep > 0:
        if clb >= cub:  # runs zero times
            replace_op(op, inits)
            return True
        if cub - clb <= cstep and wrap_int(clb + cstep, lb.type.scalar) == clb + cstep:  # runs once
            replace_op(op, inline_block_before(body, op, [lb] + inits))
            return True
    y = body.terminator
    if y is None or y.name != "scf.yield" or len(y.operands) != len(inits):
        return False
    passthrough = []
    for i, init in enumerate(inits):
        arg, res, yv = body.args[i + 1], op.results[i], y.operands[i]
        if yv is not arg and yv is not init:
            continue
        # The carried value never changes: it is the init on every iteration and after the loop.
        res.replace_all_uses_with(init)
        arg.replace_all_uses_with(init)
        passthrough.append(i)
    if not passthrough:
        return False
    drop_for_iter_args(op, passthrough)
    return True


_PATTERNS = {
    "arith.negf": _negf,
    "arith.cmpi": _cmpi,
    "arith.select": _select,
    "tt.broadcast": _shape,
    "tt.reshape": _shape,
    "tt.trans": _shape,
    "tt.expand_dims": _shape,
    "tt.addptr": _addptr,
    "tt.hint": _hint,
    "scf.if": _scf_if,
    "scf.for": _scf_for,
}
_PATTERNS.update({n: _int_binary for n in _INT_BINARY})
_PATTERNS.update({n: _float_binary for n in _FLOAT_BINARY})
_PATTERNS.update({n: _cast for n in _SAME_TYPE_CASTS})


def run(module: Module) -> dict:
    counts: Counter = Counter()
    for fn in module.functions:
        for _ in range(_MAX_ROUNDS):
            changed = False
            for op in list(fn.walk()):
                pattern = _PATTERNS.get(op.name)
                if pattern is None or not is_attached(op):
                    continue
                if pattern(op):
                    counts[op.name] += 1
                    changed = True
            if not changed:
                break
    return {"simplified": sum(counts.values()), **dict(sorted(counts.items()))}
