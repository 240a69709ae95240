"""Split a batched dot into one 2-D dot per batch entry.

`tl.dot` on [B, M, K] x [B, K, N] tiles means B independent products. The tensor-core lowering
(`accelerate_matmul`, mma and wgmma layouts) works on 2-D tiles, so before layouts are assigned the
batch is taken apart: the batch axis is moved last (`tt.trans`), halved with `tt.reshape` + `tt.split`
until each piece is one [M, K] tile, the B products are formed as 2-D dots, and the results are put
back together by the same steps in reverse (`tt.join`, `tt.reshape`, `tt.trans`). Every dimension of a
tile is a power of two, so the halving always ends at single entries. The interpreter runs the 3-D
dot as it is; this rewrite changes how the GPU computes it, not what it computes.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..rewrite import const_attr, insert_before, make_constant, replace_op
from ..types import TensorType

NAME = "decompose_batched_dot"
DESCRIPTION = "a dot of [B,M,K] x [B,K,N] tiles -> B 2-D dots (batch taken apart with split, put back with join)"


def _emit(anchor: Op, name: str, operands, result_types, attrs=None) -> Op:
    return insert_before(anchor, Op(name, operands, result_types, attrs or {}, (), anchor.loc))


def _unstack(anchor: Op, v) -> list:
    """[B, *rest] -> B values of shape rest, in batch order."""
    t = v.type
    rank = len(t.shape)
    order = list(range(1, rank)) + [0]
    moved = _emit(anchor, "tt.trans", [v], [TensorType([t.shape[o] for o in order], t.scalar)], {"order": order})
    return _halve(anchor, moved.result)


def _halve(anchor: Op, v) -> list:
    """[*rest, B] -> B values of shape rest: entry 2j+s comes from half s, entry j of it."""
    *rest, b = v.type.shape
    if b == 1:
        return [_emit(anchor, "tt.reshape", [v], [TensorType(rest, v.type.scalar)]).result]
    pairs = _emit(anchor, "tt.reshape", [v], [TensorType(rest + [b // 2, 2], v.type.scalar)]).result
    half_t = TensorType(rest + [b // 2], v.type.scalar)
    split = _emit(anchor, "tt.split", [pairs], [half_t, half_t])
    evens, odds = _halve(anchor, split.results[0]), _halve(anchor, split.results[1])
    return [x for pair in zip(evens, odds) for x in pair]


def _stack(anchor: Op, values: list):
    """B values of shape rest -> [B, *rest] (the inverse of _unstack)."""
    last = _join(anchor, values)
    rank = len(last.type.shape)
    order = [rank - 1] + list(range(rank - 1))
    t = last.type
    return _emit(anchor, "tt.trans", [last], [TensorType([t.shape[o] for o in order], t.scalar)],
                 {"order": order}).result


def _join(anchor: Op, values: list):
    """B values of shape rest -> [*rest, B], entry b from values[b]."""
    rest = list(values[0].type.shape)
    scalar = values[0].type.scalar
    if len(values) == 1:
        return _emit(anchor, "tt.reshape", [values[0]], [TensorType(rest + [1], scalar)]).result
    evens, odds = _join(anchor, values[0::2]), _join(anchor, values[1::2])
    half = len(values) // 2
    joined = _emit(anchor, "tt.join", [evens, odds], [TensorType(rest + [half, 2], scalar)]).result
    return _emit(anchor, "tt.reshape", [joined], [TensorType(rest + [2 * half], scalar)]).result


def _decompose(dot: Op) -> None:
    a, b, acc = dot.operands[:3]
    out_t = dot.result.type
    value = const_attr(acc)
    if value is not None:  # a splat accumulator (usually zero): one 2-D constant serves every entry
        accs = [make_constant(dot, TensorType(out_t.shape[1:], out_t.scalar), value)] * out_t.shape[0]
    else:
        accs = _unstack(dot, acc)
    a_parts = _unstack(dot, a)
    b_parts = a_parts if b is a else _unstack(dot, b)
    products = []
    for ai, bi, ci in zip(a_parts, b_parts, accs):
        t = TensorType(ci.type.shape, out_t.scalar)
        products.append(_emit(dot, "tt.dot", [ai, bi, ci], [t], dict(dot.attrs)).result)
    replace_op(dot, [_stack(dot, products)])


def run(module: Module, options=None) -> dict:
    stats = {"batched_dots": 0}
    for fn in module.functions:
        dots = [op for op in fn.walk() if op.name == "tt.dot" and len(op.result.type.shape) == 3]
        for dot in dots:
            _decompose(dot)
            stats["batched_dots"] += 1
    return stats
