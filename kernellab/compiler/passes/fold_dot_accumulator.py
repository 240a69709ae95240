"""Fold an addition of a dot's result into the dot's accumulator.

`acc += tl.dot(a, b)` builds `tt.dot a, b, 0` and adds its result to `acc`; `tl.dot(a, b, acc)` gives
the same sum to the tensor cores, which then accumulate in their registers with no separate add
and no second accumulator-sized tile live across the loop (the first form spills at 128x256 tiles).
So `x + dot(a, b, 0)` and `dot(a, b, 0) + x` become `dot(a, b, x)` when the dot's accumulator is a
zero constant and the add is the dot's only user. The tensor cores round the sum once instead of
twice, as Triton's own combine pass does for the same text.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..rewrite import const_attr, insert_before, replace_op

NAME = "fold_dot_accumulator"
DESCRIPTION = "x + dot(a, b, 0) -> dot(a, b, x): an add after a dot becomes the dot's accumulator"

_ADDS = ("arith.addf", "arith.addi")


def _is_zero(v) -> bool:
    a = const_attr(v)
    return a is not None and not isinstance(a, bool) and a == 0


def _foldable_dot(v, add: Op) -> Op | None:
    """The dot defining `v` if it starts from a zero accumulator and `add` is its only user."""
    dot = v.defining_op
    if dot is None or dot.name != "tt.dot" or dot.block is not add.block:
        return None
    if not _is_zero(dot.operands[2]) or len(v.uses) != 1 or v.uses[0] is not add:
        return None
    return dot


def _fold(add: Op) -> bool:
    x, y = add.operands
    for dot_value, other in ((y, x), (x, y)):
        dot = _foldable_dot(dot_value, add)
        if dot is None or other.type != dot.result.type:
            continue
        a, b = dot.operands[:2]
        new = Op("tt.dot", [a, b, other], [dot.result.type], dict(dot.attrs), (), dot.loc, [add.result.hint])
        insert_before(add, new)
        replace_op(add, [new.result])
        dot.erase()
        return True
    return False


def _visit(block, stats: dict):
    for op in list(block.ops):
        for r in op.regions:
            _visit(r, stats)
        if op.name in _ADDS and _fold(op):
            stats["folded"] += 1


def run(module: Module) -> dict:
    stats = {"folded": 0}
    for fn in module.functions:
        _visit(fn.body, stats)
    return stats
