"""Split a loop's pointer arithmetic into a loop-invariant tile and a scalar that changes per iteration.

Users write the same K loop two ways: pointers advanced each step (`a_ptrs += BK`) or rebuilt from the
loop counter (`offs_k = k * BK + tl.arange(0, BK)`; `a_ptr + offs_m[:, None] * sam + offs_k[None, :]`).
The second form recomputes a whole tile of offsets per iteration: every element's multiply and add, in
registers, inside the loop (SASS of a 128x256 matmul: dispatch stalls on that arithmetic were 38% of the
loop's stalls, 0.90x the first form). Here such a pointer is rewritten as

    addptr(P0, splat(s))   with P0 loop-invariant (hoisted by licm) and s a scalar of the iteration,

by distributing over `+`, `-`, `*` by a uniform invariant (a splat or a constant), `expand_dims`,
`broadcast` and `addptr`: `(splat(k*BK) + r) * splat(sbk)` becomes `r * sbk` (invariant) plus the scalar
`k*BK*sbk`. Integer arithmetic wraps, so distributing is exact; regrouping the terms of one `addptr`
changes an address only where the original sum overflowed 32 bits, which was already a wrong address.
Only the pointers of loads and stores are rewritten, and only where at least two tile ops depend on the
iteration (a pointer already in the split form is left alone).
"""
from __future__ import annotations

from ..ir import Module, Op, Value
from ..ops import info, is_loop, is_pure
from ..rewrite import const_attr, insert_before, is_defined_inside
from ..types import PointerType, TensorType

NAME = "split_loop_offsets"
DESCRIPTION = "a loop's pointer tile = loop-invariant tile + splat of a per-iteration scalar"

_INV = "invariant"
_VAR = "scalar"
_SHAPE_OPS = ("tt.expand_dims", "tt.broadcast")


def _is_int_tile(v: Value) -> bool:
    return isinstance(v.type, TensorType) and not isinstance(v.type.scalar, PointerType) and v.type.scalar.is_int()


class _Splitter:
    """Plans and builds the split of values inside one loop."""

    def __init__(self, loop: Op):
        self.loop = loop
        self.plans: dict = {}

    # ---------------------------------------------------------------- analysis
    def plan(self, v: Value):
        """_INV (loop-invariant), (_VAR, scalar), (op, ...) for a splittable op, or None."""
        key = id(v)
        if key not in self.plans:
            self.plans[key] = self._plan(v)
        return self.plans[key]

    def _plan(self, v: Value):
        if not is_defined_inside(v, self.loop):
            return _INV
        op = v.defining_op
        if op is None or not isinstance(v.type, TensorType):
            return None
        if op.name == "tt.splat":
            s = op.operands[0]
            if not is_defined_inside(s, self.loop):
                return _INV
            return (_VAR, s) if not isinstance(s.type, PointerType) and s.type.is_int() else None
        subs = [self.plan(x) for x in op.operands]
        if any(p is None for p in subs):
            return None
        if all(p is _INV for p in subs):
            return _INV if self._speculatable(op) else None
        if op.name in ("arith.addi", "arith.subi") and _is_int_tile(v):
            return (op,)
        if op.name == "arith.muli" and _is_int_tile(v):
            for i in (0, 1):
                if subs[i] is _INV and self._uniform_scalar_known(op.operands[i]):
                    return (op, i)
            return None
        if op.name in _SHAPE_OPS:
            return (op,)
        if op.name == "tt.addptr" and subs[0] is not None:
            return (op,)
        return None

    @staticmethod
    def _speculatable(op: Op) -> bool:
        return not op.regions and is_pure(op) and not info(op.name).traps and not info(op.name).terminator

    @staticmethod
    def _uniform_scalar_known(v: Value) -> bool:
        op = v.defining_op
        if op is None:
            return False
        return op.name == "tt.splat" or (op.name == "arith.constant" and const_attr(v) is not None)

    def depth(self, plan) -> int:
        """How many tile ops of the original expression depend on the iteration."""
        if plan is _INV or plan is None or plan[0] == _VAR:
            return 0
        op = plan[0]
        return 1 + sum(self.depth(self.plan(x)) for x in op.operands)

    # ---------------------------------------------------------------- building
    def build(self, v: Value, anchor: Op):
        """(invariant tile or None, per-iteration scalar or None) with v == invariant + splat(scalar)."""
        p = self.plan(v)
        if p is _INV:
            return v, None
        if p[0] == _VAR:
            return None, p[1]
        op = p[0]
        loc = op.loc
        if op.name in _SHAPE_OPS:
            inv, var = self.build(op.operands[0], anchor)
            if inv is not None:
                inv = self._emit(anchor, op.name, [inv], op.result.type, loc, dict(op.attrs))
            return inv, var
        if op.name == "tt.addptr":
            (pi, pv), (oi, ov) = self.build(op.operands[0], anchor), self.build(op.operands[1], anchor)
            if pi is None:
                return None, None
            inv = pi if oi is None else self._emit(anchor, "tt.addptr", [pi, oi], op.result.type, loc)
            return inv, self._combine(anchor, "arith.addi", pv, ov, loc)
        if op.name == "arith.muli":
            u = op.operands[p[1]]
            inv, var = self.build(op.operands[1 - p[1]], anchor)
            if inv is not None:
                inv = self._emit(anchor, "arith.muli", [inv, u], op.result.type, loc)
            if var is not None:
                var = self._emit(anchor, "arith.muli", [var, self._scalar_of(u, anchor)], var.type, loc)
            return inv, var
        (ai, av), (bi, bv) = self.build(op.operands[0], anchor), self.build(op.operands[1], anchor)
        if op.name == "arith.subi" and ai is None and bi is not None:
            ai = self._zero(anchor, op.result.type, loc)
        if op.name == "arith.subi" and av is None and bv is not None:
            av = self._zero(anchor, bv.type, loc)
        return self._combine(anchor, op.name, ai, bi, loc), self._combine(anchor, op.name, av, bv, loc)

    def _combine(self, anchor, name, a, b, loc):
        if a is None or b is None:
            return a if b is None else b
        if a.type != b.type:
            raise _Mismatch
        return self._emit(anchor, name, [a, b], a.type, loc)

    def _scalar_of(self, u: Value, anchor: Op) -> Value:
        op = u.defining_op
        if op.name == "tt.splat":
            return op.operands[0]
        return self._emit(anchor, "arith.constant", [], u.type.scalar, op.loc, {"value": const_attr(u)})

    def _zero(self, anchor, type, loc):
        return self._emit(anchor, "arith.constant", [], type, loc, {"value": 0})

    @staticmethod
    def _emit(anchor, name, operands, type, loc, attrs=None) -> Value:
        op = Op(name, operands, [type], attrs or {}, (), loc)
        insert_before(anchor, op)
        return op.result


class _Mismatch(Exception):
    """Offsets of two integer widths meet: left as written."""


def _innermost_loop(op: Op) -> Op | None:
    block = op.block
    while block is not None and block.parent is not None:
        if is_loop(block.parent.name):
            return block.parent
        block = block.parent.block
    return None


def _rewrite(root: Op, splitters: dict) -> bool:
    loop = _innermost_loop(root)
    if loop is None:
        return False
    ptr = root.operands[0]
    if not isinstance(ptr.type, TensorType) or not isinstance(ptr.type.scalar, PointerType):
        return False
    sp = splitters.setdefault(id(loop), _Splitter(loop))
    plan = sp.plan(ptr)
    if plan is None or plan is _INV or plan[0] == _VAR or plan[0].name != "tt.addptr" or sp.depth(plan) < 2:
        return False
    try:
        inv, var = sp.build(ptr, root)
    except _Mismatch:
        return False
    if inv is None or var is None:
        return False
    offsets = _Splitter._emit(root, "tt.splat", [var], TensorType(ptr.type.shape, var.type), root.loc)
    root.set_operand(0, _Splitter._emit(root, "tt.addptr", [inv, offsets], ptr.type, ptr.defining_op.loc))
    return True


def run(module: Module) -> dict:
    stats = {"split": 0}
    for fn in module.functions:
        splitters: dict = {}
        for op in list(fn.body.ops):
            for inner in list(op.walk()):
                if inner.name in ("tt.load", "tt.store") and _rewrite(inner, splitters):
                    stats["split"] += 1
    return stats
