"""Merge layout conversions of one value into one layout: the later ones read the first's result.

remove_layout_conversions rebuilds each use's chain on its own, so a row vector broadcast into two products
(rotary's `cos` in `x0 * cos - x1 * sin` and `x0 * sin + x1 * cos`) is converted once per product: each a
shared-memory round trip with its barriers. A conversion is pure, so the first of two equal ones in a block (or
in a block enclosing the other's) serves both. Nothing is hoisted: only conversions already dominated merge.
"""
from __future__ import annotations

from ..ir import Module

NAME = "merge_conversions"
DESCRIPTION = "merge equal layout conversions of one value (the first one, where it dominates, serves all)"


def _encloses(block, op) -> bool:
    b = op.block
    while b is not None:
        if b is block:
            return True
        b = b.parent.block if b.parent is not None else None
    return False


def run(module: Module, options=None) -> dict:
    merged = 0
    order = {id(op): i for i, op in enumerate(module.kernel.walk())}
    first: dict = {}
    for op in list(module.kernel.walk()):
        if op.name != "ttg.convert_layout" or op.block is None:
            continue
        key = (id(op.operands[0]), str(op.result.type))
        prev = first.get(key)
        if prev is not None and prev.block is not None and order[id(prev)] < order[id(op)] and \
                _encloses(prev.block, op):
            op.result.replace_all_uses_with(prev.result)
            op.erase()
            merged += 1
        else:
            first[key] = op
    return {"merged": merged} if merged else {}
