"""Rebuild elementwise math on operands already converted to the layout its result is converted to.

An epilogue that stores a tile and math on it (Liger's fused MoE up-projection: `pre_gate`, `pre_up`, then
`silu(gate) * up`) converts `gate` and `up` from the accumulator's layout to the store's for their stores, then runs
the SwiGLU in the accumulator's layout and converts its result too: three shared-memory round trips where two do.
Here, for a conversion of a value computed by pure elementwise ops (with constants and scalars) from values that
already have a conversion to the same layout earlier in the same block, those ops are rebuilt in that layout on the
converted values, and the conversion goes (Triton 3.6 keeps the math after the conversions in this kernel). Taken
only where a thread holds as many elements of the tile in the one layout as in the other (the math costs the same)
and every leaf of the chain is converted already (no new conversion). KERNELLAB_REUSE_CONVERSIONS=1 turns it on
(off by default until timed on the GPU; part of the disk-cache key).
"""
from __future__ import annotations

from ..ir import Module, Op
from ..ops import is_elementwise, is_pure
from ..rewrite import insert_before
from ..switches import switch
from ..types import TensorType

NAME = "reuse_conversions"
DESCRIPTION = "rebuild elementwise math on operands already converted to the layout its result is converted to"
KNOB = "KERNELLAB_REUSE_CONVERSIONS"
_MAX_OPS = 32


def enabled() -> bool:
    return switch(KNOB, False)


def _per_thread(t: TensorType, layout) -> int | None:
    try:
        return len(layout.registers(list(t.shape)))
    except Exception:  # a layout that cannot say: not taken
        return None


class _Chain:
    """The elementwise ops between a converted value and its leaves (values converted already, constants,
    scalars), in the order they are defined."""

    def __init__(self, converted: dict, layout):
        self.converted, self.layout = converted, layout
        self.ops: list = []
        self.leaves = 0

    def collect(self, v) -> bool:
        if not isinstance(v.type, TensorType) or v.type.layout == self.layout:
            return True
        if id(v) in self.converted:
            self.leaves += 1
            return True
        op = v.defining_op
        if op is None or op.regions or len(op.results) != 1 or not is_pure(op):
            return False
        if op in self.ops:
            return True
        if op.name != "arith.constant" and not is_elementwise(op.name):
            return False
        if len(self.ops) >= _MAX_OPS:
            return False
        if not all(self.collect(o) for o in op.operands):
            return False
        self.ops.append(op)
        return True


def _rewrite(conv: Op, converted: dict) -> bool:
    src, layout = conv.operands[0], conv.result.type.layout
    if not isinstance(src.type, TensorType) or src.type.layout == layout:
        return False
    a, b = _per_thread(src.type, src.type.layout), _per_thread(src.type, layout)
    if a is None or a != b:
        return False
    chain = _Chain(converted, layout)
    if id(src) in converted or not chain.collect(src) or chain.leaves == 0 or not chain.ops:
        return False
    built: dict = {}

    def value(v):
        if not isinstance(v.type, TensorType) or v.type.layout == layout:
            return v
        if id(v) in built:
            return built[id(v)]
        return converted[id(v)]

    for op in chain.ops:  # defined before their users: rebuilt in that order, right before the conversion
        clone = Op(op.name, [value(o) for o in op.operands], [op.result.type.with_layout(layout)], dict(op.attrs),
                   loc=op.loc, result_hints=[op.result.hint])
        insert_before(conv, clone)
        built[id(op.result)] = clone.result
    conv.result.replace_all_uses_with(built[id(src)])
    conv.erase()
    for op in reversed(chain.ops):  # the math left in the old layout, now unread
        if op.block is not None and not op.result.uses:
            op.erase()
    return True


def run(module: Module, options=None) -> dict:
    if not enabled():
        return {}
    reused = 0
    for fn in module.functions:
        for op in list(fn.walk()):
            if op.name != "ttg.convert_layout" or op.block is None:
                continue
            block = op.block
            converted = {}
            for prev in block.ops[:block.ops.index(op)]:
                if prev.name == "ttg.convert_layout" and prev.result.type.layout == op.result.type.layout:
                    converted.setdefault(id(prev.operands[0]), prev.result)
            if converted and _rewrite(op, converted):
                reused += 1
    return {"reused": reused} if reused else {}
