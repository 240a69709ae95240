"""Common-subexpression elimination over structured regions.

Two pure, region-free ops with the same name, operands, attributes and result types compute the
same values, so the later one is replaced by the earlier one when the earlier one dominates it: it
comes before it in the same block, or in an enclosing block before the region op that holds it
(values flow into nested regions, never out of them, and never between sibling regions).
Commutative ops also match with their two operands swapped. Attribute values are compared with
their types, so `0`, `0.0`, `-0.0` and `false` stay distinct. Side-effecting ops (loads, atomics,
prints, ...) and ops with regions are never merged. The combine regions of `tt.reduce` /
`tt.scan` are treated as isolated: ops in them are merged among themselves only.
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..ops import info, is_pure

NAME = "cse"
DESCRIPTION = "merge identical pure ops that dominate one another"

def _freeze(v):
    if isinstance(v, (list, tuple)):
        return ("list", tuple(_freeze(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, _freeze(x)) for k, x in v.items())))
    if isinstance(v, float):
        return ("float", repr(v))  # distinguishes -0.0; every NaN is the same NaN
    return (type(v).__name__, v)


def _key(op: Op):
    ids = [id(v) for v in op.operands]
    if info(op.name).commutative and len(ids) == 2:
        ids.sort()
    return (op.name, tuple(ids), _freeze(op.attrs), tuple(r.type for r in op.results))


class _Scope:
    def __init__(self, parent=None):
        self.table: dict = {}
        self.parent = parent

    def find(self, key):
        s = self
        while s is not None:
            hit = s.table.get(key)
            if hit is not None:
                return hit
            s = s.parent
        return None


def _cse_block(block: Block, scope: _Scope, stats: dict, only=None):
    for op in list(block.ops):
        if op.regions:
            # Combine regions of reduce/scan are applied element by element by the backends; keep
            # them self-contained instead of pointing them at values from outside.
            outer = None if info(op.name).combine_region else scope
            for r in op.regions:
                _cse_block(r, _Scope(outer), stats, only)
            continue
        if not op.results or not is_pure(op) or (only is not None and op.name not in only):
            continue
        key = _key(op)
        prev = scope.find(key)
        if prev is None:
            scope.table[key] = op
            continue
        for r, pr in zip(op.results, prev.results):
            r.replace_all_uses_with(pr)
        op.erase()
        stats["merged"] += 1


def run(module: Module, only=None) -> dict:
    """`only`: merge ops of these names alone (a GPU pass reusing this for one kind of op)."""
    stats = {"merged": 0}
    for fn in module.functions:
        _cse_block(fn.body, _Scope(), stats, only)
    return stats
