"""Remove layout conversions that cost shared-memory round trips.

A conversion of a value computed only from scalars by cheap ops (ranges, splats, constants,
broadcasts, index arithmetic, pointer offsets) is removed by recomputing that chain directly in the
wanted layout. Conversions to the layout the value already has, and chains of conversions, go too.
"""
from __future__ import annotations

from ..gpu.layouts import Slice
from ..ir import Module, Op
from ..ops import is_pure
from ..types import TensorType

NAME = "remove_layout_conversions"
DESCRIPTION = "drop layout conversions by recomputing cheap index math in the wanted layout"

_REMAT = {"tt.make_range", "tt.splat", "arith.constant", "tt.broadcast", "tt.expand_dims", "tt.addptr", "tt.hint"}
_REMAT_PREFIX = ("arith.",)
_MAX_CHAIN = 48


def _cheap(op: Op) -> bool:
    return (op is not None and not op.regions and is_pure(op)
            and (op.name in _REMAT or op.name.startswith(_REMAT_PREFIX)))


class Remat:
    def __init__(self):
        self.memo: dict = {}
        self.budget = 0

    def can(self, v, layout) -> bool:
        """Whether `v` can be recomputed in `layout` without any conversion."""
        if not isinstance(v.type, TensorType):
            return True
        if v.type.layout == layout:
            return True
        op = v.defining_op
        self.budget += 1
        if self.budget > _MAX_CHAIN or op is None or not _cheap(op) or len(op.results) != 1:
            return False
        if op.name == "tt.expand_dims":
            return self.can(op.operands[0], Slice(op.attrs["axis"], layout))
        if op.name == "ttg.convert_layout":
            return False
        return all(self.can(o, layout) for o in op.operands)

    def build(self, v, layout, before: Op):
        if not isinstance(v.type, TensorType) or v.type.layout == layout:
            return v
        key = (id(v), str(layout))
        if key in self.memo:
            return self.memo[key]
        op = v.defining_op
        if op.name == "tt.expand_dims":
            operands = [self.build(op.operands[0], Slice(op.attrs["axis"], layout), before)]
        else:
            operands = [self.build(o, layout, before) for o in op.operands]
        clone = Op(op.name, operands, [v.type.with_layout(layout)], dict(op.attrs), loc=op.loc,
                   result_hints=[v.hint])
        before.block.insert(before.block.ops.index(before), clone)
        self.memo[key] = clone.result
        return clone.result


def run(module: Module, options=None) -> dict:
    removed = rematerialized = 0
    changed = True
    while changed:
        changed = False
        for op in list(module.kernel.walk()):
            if op.name != "ttg.convert_layout" or op.block is None:
                continue
            src, want = op.operands[0], op.result.type.layout
            if src.type.layout == want:
                op.result.replace_all_uses_with(src)
                op.erase()
                removed += 1
                changed = True
                continue
            producer = src.defining_op
            if producer is not None and producer.name == "ttg.convert_layout":
                op.set_operand(0, producer.operands[0])
                changed = True
                continue
            r = Remat()
            if r.can(src, want):
                new = r.build(src, want, op)
                op.result.replace_all_uses_with(new)
                op.erase()
                rematerialized += 1
                changed = True
        # drop what the rematerialization left unused
        for op in reversed(list(module.kernel.walk())):
            if op.block is not None and op.results and all(not r.uses for r in op.results) and is_pure(op) \
                    and not op.regions:
                op.erase()
    left = sum(1 for op in module.kernel.walk() if op.name == "ttg.convert_layout")
    return {"removed": removed, "rematerialized": rematerialized, "remaining": left}
