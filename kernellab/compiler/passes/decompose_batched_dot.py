"""Split a batched dot into one 2-D dot per batch entry.

`tl.dot` on [B, M, K] x [B, K, N] tiles means B independent products. The tensor-core lowering
(`accelerate_matmul`, mma and wgmma layouts) works on 2-D tiles, so before layouts are assigned the
batch is taken apart: the batch axis is moved last (`tt.trans`), halved with `tt.reshape` + `tt.split`
until each piece is one [M, K] tile, the B products are formed as 2-D dots, and the results are put
back together by the same steps in reverse (`tt.join`, `tt.reshape`, `tt.trans`). Every dimension of a
tile is a power of two, so the halving always ends at single entries. The interpreter runs the 3-D
dot as it is; this rewrite changes how the GPU computes it, not what it computes.

By default (KERNELLAB_BATCHED_SPLIT=0 gives the old split at the dot) the batch is taken apart where the values come
from instead of at the dot (H200, heldout_texts3's bmm_3d_dot: 0.01-0.02x Triton split at the dot, 0.94-18.9x here):
- a loop-carried accumulator (`acc = tl.dot(a, b, acc)` in a K loop, the dot's result yielded as the next `acc`):
  the loop carries the B per-entry accumulators, each in the layout of its own 2-D dot, put back together once after
  the loop. Without it the [B, M, N] accumulator is carried in a blocked layout and taken apart and put back every
  iteration: two conversions of the whole accumulator through shared memory an iteration (32 KB each way at 2x64x64
  f32) and, at 4 warps, 255 registers and 9.4 KB of spills (heldout_texts3's bmm_3d_dot, benchmarks/NOTES.md).
- an operand loaded only for the dot (`tt.load` of a [B, M, K] pointer tile made of ranges, splats, broadcasts,
  expand_dims and elementwise math): B loads of 2-D tiles whose pointers, mask and `other` are the batch entries of
  the original ones, rebuilt from the same math without the batch dimension (`_slice`). The 2-D loads are what the
  pipelining passes (cp.async stages, wgmma operands in shared memory) take, where the split of a loaded 3-D tile is
  a conversion through shared memory an iteration and leaves the loads unpipelined.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..ops import is_elementwise
from ..rewrite import const_attr, drop_for_iter_args, extend_for_iter_args, insert_before, make_constant, replace_op
from ..switches import switch
from ..types import TensorType
from . import dce

SPLIT_KNOB = "KERNELLAB_BATCHED_SPLIT"


def split_enabled() -> bool:
    """Batched dots are taken apart at their loads and loop-carried accumulators unless KERNELLAB_BATCHED_SPLIT=0
    (part of the compile caches' keys through runtime/codegen_env.py)."""
    return switch(SPLIT_KNOB, True)


class _NoSlice(Exception):
    pass


def _after(op: Op, memo: dict) -> Op:
    """The op before which the next copy made from `op` goes: after `op` and the copies made from it before."""
    last = memo.get(("after", id(op)), op)
    block = last.block
    return block.ops[block.ops.index(last) + 1]


def _slice(v, j: int, memo: dict):
    """Entry j along dimension 0 of tensor `v` (a scalar for a 1-D `v`), rebuilt from the ops that made `v` without
    that dimension, each right after the op it copies; a size-1 dimension 0 gives the same entry for every j.
    Raises _NoSlice where `v` is not made of ranges, splats, constants, broadcasts, expand_dims and elementwise
    ops (a load, a loop-carried value, an argument tensor)."""
    t = v.type
    if not isinstance(t, TensorType):
        return v
    j = 0 if t.shape[0] == 1 else j
    key = (id(v), j)
    if key in memo:
        return memo[key]
    op = v.defining_op
    if op is None:
        res = _slice_carried(v, j, memo)
        memo[key] = res
        return res
    if len(op.results) != 1 or op.regions:
        raise _NoSlice
    rest = list(t.shape[1:])
    out_t = TensorType(rest, t.scalar) if rest else t.scalar
    name = op.name

    def emit(opname, operands, attrs=None):
        new = Op(opname, operands, [out_t], dict(attrs if attrs is not None else op.attrs), (), op.loc)
        insert_before(_after(op, memo), new)
        memo[("after", id(op))] = new
        return new.result

    if name == "tt.expand_dims":
        axis = op.attrs["axis"]
        if axis == 0:
            res = op.operands[0]
        else:
            src = _slice(op.operands[0], j, memo)
            res = emit("tt.splat", [src], {}) if not isinstance(src.type, TensorType) else \
                emit("tt.expand_dims", [src], {"axis": axis - 1})
    elif name == "tt.broadcast":
        src = _slice(op.operands[0], j, memo)
        if not isinstance(src.type, TensorType):
            res = emit("tt.splat", [src], {}) if rest else src
        elif list(src.type.shape) == rest:
            res = src
        else:
            res = emit("tt.broadcast", [src], {})
    elif name == "tt.splat":
        res = emit("tt.splat", [op.operands[0]], {}) if rest else op.operands[0]
    elif name == "tt.make_range":
        if rest:
            raise _NoSlice
        res = emit("arith.constant", [], {"value": int(op.attrs["start"]) + j})
    elif name == "arith.constant":
        res = emit("arith.constant", [], op.attrs)
    elif is_elementwise(name):
        operands = [_slice(o, j, memo) for o in op.operands]
        if any(isinstance(o.type, TensorType) != bool(rest) for o in operands if o is not None):
            raise _NoSlice
        res = emit(name, operands)
    else:
        raise _NoSlice
    memo[key] = res
    return res


def _slice_carried(v, j: int, memo: dict):
    """Entry j of a loop-carried tile (a pointer tile advanced each iteration: `ptrs += BK`): a new iter arg
    starting at entry j of the init and yielding entry j of the update, both rebuilt by `_slice`."""
    body = v.owner
    loop = getattr(body, "parent", None)
    if loop is None or loop.name != "scf.for" or v.index == 0 or v.type.shape[0] == 1:
        raise _NoSlice
    i = v.index - 1
    init = loop.operands[3 + i]
    y = body.terminator
    if not isinstance(init.type, TensorType) or init.defining_op is None:
        raise _NoSlice
    start = _slice(init, j, memo)
    arg = body.add_arg(TensorType(v.type.shape[1:], v.type.scalar))
    memo[(id(v), j)] = arg
    try:
        nxt = _slice(y.operands[i], j, memo)
    except _NoSlice:
        del memo[(id(v), j)]
        body.args.pop()
        raise
    y.operands.append(nxt)
    nxt.uses.append(y)
    extend_for_iter_args(loop, [start])
    memo.setdefault("carried", {})[id(v)] = v
    return arg


def _drop_dead_carried(memo: dict) -> None:
    """The loop-carried tiles whose entries replaced them: dropped where nothing but their own update uses them."""
    for v in memo.get("carried", {}).values():
        body = v.owner
        loop = body.parent
        if not any(a is v for a in body.args):
            continue
        i = v.index - 1
        y = body.terminator
        upd = y.operands[i].defining_op
        if loop.results[i].uses or upd is None or upd.block is not body or upd.result.uses != [y] or \
                [u for u in v.uses if u is not upd and u is not y]:
            continue
        y.set_operand(i, v)
        upd.erase()
        drop_for_iter_args(loop, [i])


def _can_slice(v, seen: set) -> bool:
    """Whether `_slice` can rebuild every entry of `v` (checked first, so that a load is either taken apart whole or
    left as it is, with nothing made for it)."""
    t = v.type
    if not isinstance(t, TensorType) or id(v) in seen:
        return True
    seen.add(id(v))
    op = v.defining_op
    if op is None:
        body = v.owner
        loop = getattr(body, "parent", None)
        if loop is None or loop.name != "scf.for" or v.index == 0 or t.shape[0] == 1:
            return False
        init = loop.operands[3 + v.index - 1]
        return isinstance(init.type, TensorType) and init.defining_op is not None and _can_slice(init, seen) and \
            _can_slice(body.terminator.operands[v.index - 1], seen)
    if len(op.results) != 1 or op.regions:
        return False
    if op.name == "tt.make_range":
        return len(t.shape) == 1
    if op.name in ("tt.splat", "arith.constant"):
        return True
    if op.name in ("tt.expand_dims", "tt.broadcast") or is_elementwise(op.name):
        return all(_can_slice(o, seen) for o in op.operands)
    return False


def _load_entries(v) -> list | None:
    """B 2-D loads for a [B, ...] tile `v` loaded only to be taken apart here (None where it is not such a load or
    its operands are not sliceable); the original load is left for the caller to erase."""
    load = v.defining_op
    if load is None or load.name != "tt.load" or not isinstance(load.operands[0].type, TensorType) or \
            any(u.name != "tt.dot" for u in v.uses) or len({id(u) for u in v.uses}) != 1:
        return None
    B = v.type.shape[0]
    seen: set = set()
    if not all(_can_slice(o, seen) for o in load.operands):
        return None
    memo: dict = {}
    try:
        parts = [[_slice(o, j, memo) for o in load.operands] for j in range(B)]
    except _NoSlice:  # not expected after _can_slice; what was made is dead and swept
        return None
    loads = [insert_before(load, Op("tt.load", ops, [TensorType(v.type.shape[1:], v.type.scalar)], dict(load.attrs),
                                    (), load.loc)).result for ops in parts]
    _CARRIED.append(memo)
    return loads


_CARRIED: list = []  # the memos of the loads taken apart, whose carried tiles may be dropped once the loads are

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


def _entries(anchor: Op, acc, out_t) -> list:
    """The accumulator's B entries as 2-D values, made before `anchor`."""
    value = const_attr(acc)
    if value is not None:  # a splat accumulator (usually zero): one 2-D constant serves every entry
        return [make_constant(anchor, TensorType(out_t.shape[1:], out_t.scalar), value)] * out_t.shape[0]
    return _unstack(anchor, acc)


def _operand_entries(dot: Op, at_loads: bool):
    """The B entries of the dot's operands (taken from their loads where `at_loads` and they can be), and the
    loads so replaced."""
    a, b = dot.operands[:2]
    dead = []

    def entries(v):
        parts = _load_entries(v) if at_loads else None
        if parts is None:
            return _unstack(dot, v)
        dead.append(v.defining_op)
        return parts

    a_parts = entries(a)
    b_parts = a_parts if b is a else entries(b)
    return a_parts, b_parts, dead


def _dots(dot: Op, a_parts, b_parts, accs) -> list:
    out_t = dot.result.type
    return [_emit(dot, "tt.dot", [ai, bi, ci], [TensorType(ci.type.shape, out_t.scalar)], dict(dot.attrs)).result
            for ai, bi, ci in zip(a_parts, b_parts, accs)]


def _erase_dead(loads) -> None:
    """The loads taken apart, then the loop-carried pointer tiles only they used."""
    for load in loads:
        if not load.result.uses:
            load.erase()
    while _CARRIED:
        _drop_dead_carried(_CARRIED.pop())


def _decompose(dot: Op, at_loads: bool = False) -> None:
    accs = _entries(dot, dot.operands[2], dot.result.type)
    a_parts, b_parts, dead = _operand_entries(dot, at_loads)
    replace_op(dot, [_stack(dot, _dots(dot, a_parts, b_parts, accs))])
    _erase_dead(dead)


def _carried(dot: Op):
    """(loop, iter-arg index) where `dot` accumulates into a loop-carried value: its accumulator is an iter arg of
    the scf.for whose body holds the dot, used by the dot only, and the dot's result is only yielded, in that
    iter arg's slot. None otherwise."""
    acc = dot.operands[2]
    body = dot.block
    loop = body.parent if body is not None else None
    if loop is None or loop.name != "scf.for" or acc.owner is not body or acc.index == 0:
        return None
    i = acc.index - 1
    y = body.terminator
    if acc.uses != [dot] or dot.result.uses != [y] or y.operands.count(dot.result) != 1 or \
            y.operands[i] is not dot.result:
        return None
    return loop, i


def _decompose_carried(dot: Op, loop: Op, i: int) -> None:
    """The loop carries the B entries of iter arg i instead of it: their inits taken apart before the loop, one
    2-D dot each in the body, yielded in new slots, put back together after the loop for the old result's users."""
    out_t = dot.result.type
    body = loop.regions[0]
    inits = _entries(loop, loop.operands[3 + i], out_t)
    # the operands first: taking a carried pointer tile apart adds iter args (and rebuilds the loop) itself
    a_parts, b_parts, dead = _operand_entries(dot, at_loads=True)
    args = [body.add_arg(TensorType(out_t.shape[1:], out_t.scalar)) for _ in inits]
    products = _dots(dot, a_parts, b_parts, args)
    y = body.terminator
    old_arg = dot.operands[2]
    y.set_operand(i, old_arg)  # the old slot passes its value through (dropped below)
    dot.erase()
    for p in products:
        y.operands.append(p)
        p.uses.append(y)
    loop = extend_for_iter_args(body.parent, inits)
    block = loop.block
    after = block.ops[block.ops.index(loop) + 1]
    stacked = _stack(after, loop.results[-len(inits):])
    loop.results[i].replace_all_uses_with(stacked)
    drop_for_iter_args(loop, [i])
    _erase_dead(dead)


def run(module: Module, options=None) -> dict:
    stats = {"batched_dots": 0}
    split = split_enabled()
    for fn in module.functions:
        dots = [op for op in fn.walk() if op.name == "tt.dot" and len(op.result.type.shape) == 3]
        for dot in dots:
            where = _carried(dot) if split else None
            if where is not None:
                _decompose_carried(dot, *where)
                stats["carried_per_entry"] = stats.get("carried_per_entry", 0) + 1
            else:
                _decompose(dot, at_loads=split)
            stats["batched_dots"] += 1
        if split and stats["batched_dots"]:
            dce.sweep_block(fn.body)  # the 3-D tiles and index math the entries replaced
    return stats
