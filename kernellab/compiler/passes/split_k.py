"""Split a kernel's dot loop over grid z (split-K), for launches with too few programs to fill the GPU.

A skinny matmul (16x4096x4096 with 128x256 tiles) has 16 programs on 132 SMs; each walks all of K. Here
program_id(2) = s takes iterations [lo_s, hi_s) of the one top-level loop (carried pointers start advanced by
lo_s steps), writes its partial accumulator tile to a workspace, and bumps a per-tile counter (acq_rel, gpu
scope) after a barrier. The split that arrives last sums the S partials in split order (deterministic: the same
sum whoever arrives last), resets the counter for the next launch and runs the original epilogue on the sum
(when the epilogue stores the accumulator under one mask, the sum goes chunk by chunk, skipping chunks the mask
leaves out and reading several partials at once: see _chunked_sum).
One launch, no second kernel. The workspace and counters are two parameters appended to the kernel; the runtime
(kernellab/runtime/split_k.py) allocates them, picks S and launches grid (x, y, S).

The pipeline runs this pass only for the split variant of a specialization (the runtime asks for it when the
launch's grid is small): a kernel it refuses keeps its IR, and the stats say why. Safe only when
- one top-level loop; its only carried tensor that reaches the epilogue is a dot accumulator starting from zeros
  (f32 / i32), its other carried values (pointers, integers, block pointers) are advanced by a loop-invariant step
  (or not at all) and dead after it;
- nothing before the loop or in it writes memory or has a side effect (stores, atomics, prints, asserts);
- the kernel never reads program_id / num_programs of axis 2 (the launch's grid z is 1: the runtime checks);
- the loop's step is a positive constant.
The stats carry what the runtime needs: the accumulator's shape and dtype, and the trip count as an expression
over the kernel's integer parameters (compiler/trip_count.py; None when it depends on the program: `auto` then does
not split).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..ir import Block, Builder, Function, Module, Op, Value
from ..ops import info, is_pure
from ..rewrite import const_attr, int_const, is_inside
from ..trip_count import trip_count
from ..types import PointerType, TensorType, float32, int1, int32, int64

NAME = "split_k"
DESCRIPTION = ("split the dot loop over grid z: each split writes its partial tile, the last to arrive sums them "
               "in order and runs the epilogue")

WORKSPACE, COUNTERS = "splitk_workspace", "splitk_counters"
# The last split's sum (see _chunked_sum): row chunks of about this many elements, this many partials in flight.
# KERNELLAB_SPLIT_K_REDUCE=simple: one whole partial tile a step instead (to compare).
CHUNK_ELEMS, UNROLL = 2048, 8
REDUCE_KNOB = "KERNELLAB_SPLIT_K_REDUCE"
_CONTROL = ("scf.yield", "scf.if", "scf.for", "scf.while", "scf.condition")


class Refused(Exception):
    """Why a kernel cannot be split (the pass's stats say it; the runtime launches the kernel unsplit)."""


def _writes(op: Op) -> bool:
    """Whether `op` (not a control-flow op) has an effect besides reading memory."""
    return not (is_pure(op) or info(op.name).memory == "read")


def _find_loop(fn: Function) -> Op:
    loops = [op for op in fn.body.ops if op.name in ("scf.for", "scf.while")]
    if len(loops) != 1 or loops[0].name != "scf.for":
        raise Refused(f"{len(loops)} top-level loops (one scf.for needed)")
    return loops[0]


def _check_effects(fn: Function, loop: Op):
    for op in fn.walk():
        if op.name in ("tt.get_program_id", "tt.get_num_programs") and op.attrs.get("axis") == 2:
            raise Refused("the kernel reads program_id / num_programs of axis 2")
    for op in fn.body.ops[:fn.body.ops.index(loop)]:
        if any(_writes(o) for o in op.walk() if o.name not in _CONTROL):
            raise Refused(f"{op.name} before the loop has a side effect (it would run once per split)")
    for op in loop.walk():
        if op is not loop and op.name not in _CONTROL and _writes(op):
            raise Refused(f"the loop body has a side effect ({op.name})")


def _is_zeros(v: Value) -> bool:
    a = const_attr(v)
    return a is not None and not isinstance(a, bool) and a == 0 and isinstance(v.type, TensorType) \
        and v.type.scalar in (float32, int32)


def _accumulator(loop: Op, body: Block, yields: list) -> int:
    """The iter-arg index of the one dot accumulator (zeros in; each dot's result feeds only the next dot or the
    yield)."""
    found = []
    for i, arg in enumerate(body.args[1:]):
        v = arg
        while len(v.uses) == 1 and v.uses[0].name == "tt.dot" and v.uses[0].block is body \
                and v.uses[0].operands[2] is v and v.uses[0].operands[0] is not v and v.uses[0].operands[1] is not v:
            v = v.uses[0].result
        if v is not arg and yields[i] is v and len(v.uses) == 1:
            found.append(i)
    if len(found) != 1:
        raise Refused(f"{len(found)} dot accumulators carried by the loop (one needed)")
    i = found[0]
    if not _is_zeros(loop.operands[3 + i]):
        raise Refused("the accumulator does not start from zeros (f32 / i32)")
    return i


def _advance(loop: Op, body: Block, yields: list, i: int):
    """The loop-invariant step a carried value `i` is advanced by each iteration (None: unchanged)."""
    arg, y = body.args[1 + i], yields[i]
    if y is arg:
        return None
    d = y.defining_op
    if d is None or d.block is not body or d.name not in ("tt.addptr", "arith.addi", "tt.advance") \
            or d.operands[0] is not arg or any(is_inside(_block_of(o), loop) for o in d.operands[1:]):
        raise Refused(f"carried value {arg.hint or i} is not advanced by a loop-invariant step")
    if d.name == "tt.advance":  # a block pointer: its offsets (i32 scalars) times lo
        if any(o.type != int32 for o in d.operands[1:]):
            raise Refused(f"block pointer {arg.hint or i} advances by non-i32 offsets")
        return d.name, list(d.operands[1:])
    step = d.operands[1]
    if step.type.scalar not in (int32, int64):
        raise Refused(f"carried value {arg.hint or i} steps by {step.type}")
    return d.name, step


def _block_of(v: Value):
    return v.owner if isinstance(v.owner, Block) else v.defining_op.block


class _B:
    """A Builder with the few ops this pass makes, at one source location."""

    def __init__(self, block: Block, before: Op | None, loc):
        self.b = Builder(block)
        if before is not None:
            self.b.set_insertion_point_before(before)
        self.b.loc = loc

    def op(self, name, operands, t, attrs=None, hint=None):
        return self.b.create(name, operands, [t] if t is not None else [], attrs, hints=[hint] if t else None)

    def v(self, name, operands, t, attrs=None, hint=None) -> Value:
        return self.op(name, operands, t, attrs, hint).result

    def const(self, value, t, hint=None) -> Value:
        return self.v("arith.constant", [], t, {"value": value}, hint)

    def pid(self, axis, num=False, hint=None) -> Value:
        return self.v("tt.get_num_programs" if num else "tt.get_program_id", [], int32, {"axis": axis}, hint)

    def i(self, name, a, b, hint=None) -> Value:
        return self.v("arith." + name, [a, b], a.type, None, hint)


def _tile_offsets(b: _B, shape) -> Value:
    """Row-major element offsets of an accumulator tile (1-D or 2-D)."""
    if len(shape) == 1:
        return b.v("tt.make_range", [], TensorType(shape, int32), {"end": shape[0], "start": 0})
    m, n = shape
    rows = b.v("tt.make_range", [], TensorType((m,), int32), {"end": m, "start": 0})
    cols = b.v("tt.make_range", [], TensorType((n,), int32), {"end": n, "start": 0})
    r = b.v("tt.expand_dims", [rows], TensorType((m, 1), int32), {"axis": 1})
    r = b.i("muli", r, b.const(n, TensorType((m, 1), int32)))
    c = b.v("tt.expand_dims", [cols], TensorType((1, n), int32), {"axis": 0})
    r = b.v("tt.broadcast", [r], TensorType(shape, int32))
    c = b.v("tt.broadcast", [c], TensorType(shape, int32))
    return b.i("addi", r, c, "splitk_offs")


def _slot_ptrs(b: _B, ws: Value, slot: Value, offs: Value, elems: int) -> Value:
    """Pointers to workspace slot `slot` (an i32 index): ws + slot * elems + offs, the slot offset in 64 bits."""
    base = b.i("muli", b.v("arith.extsi", [slot], int64), b.const(elems, int64))
    p = b.v("tt.addptr", [ws, base], ws.type)
    p = b.v("tt.splat", [p], TensorType(offs.type.shape, ws.type))
    return b.v("tt.addptr", [p, offs], p.type)


def _store_mask(acc: Value, moved: set):
    """The mask every epilogue store of the accumulator uses, when the accumulator reaches the stores only through
    elementwise ops of its shape (so the elements outside the mask are never needed); None otherwise."""
    masks, stack, seen = set(), [acc], set()
    while stack:
        v = stack.pop()
        for u in v.uses:
            if id(u) not in moved:
                continue
            if u.name == "tt.store" and u.operands[0] is not v and len(u.operands) == 3 \
                    and id(u.operands[2].defining_op) not in moved and u.operands[2].type.shape == acc.type.shape:
                masks.add(u.operands[2])
            elif info(u.name).elementwise and is_pure(u) and u.results and u.result.type.shape == acc.type.shape:
                if id(u) not in seen:
                    seen.add(id(u))
                    stack.append(u.result)
            else:
                return None
    return next(iter(masks)) if len(masks) == 1 else None


def split(fn: Function) -> dict:
    """Rewrite `fn` for split-K (raises Refused, leaving `fn` as it was)."""
    loop = _find_loop(fn)
    _check_effects(fn, loop)
    body = loop.regions[0]
    yields = body.terminator.operands
    lb, ub, step = loop.operands[:3]
    st = int_const(step)
    if st is None or st <= 0 or lb.type != int32:
        raise Refused("the loop's step is not a positive i32 constant")
    acc_i = _accumulator(loop, body, yields)
    advances = {}
    for i in range(len(yields)):
        if i == acc_i:
            continue
        if loop.results[i].uses:
            raise Refused(f"carried value {body.args[1 + i].hint or i} is used after the loop")
        advances[i] = _advance(loop, body, yields, i)
    if fn.body.terminator is None or fn.body.terminator.name != "tt.return" or fn.body.terminator.operands:
        raise Refused("the kernel does not end in a plain return")
    acc = loop.results[acc_i]
    acc_t = acc.type
    trip = trip_count(loop, fn)

    # the kernel's new parameters: the fp32 / i32 workspace and the i32 counters
    ws = fn.body.add_arg(PointerType(acc_t.scalar), WORKSPACE)
    counters = fn.body.add_arg(PointerType(int32), COUNTERS)
    fn.arg_attrs.extend([{"tt.divisibility": 16}, {"tt.divisibility": 16}])

    # before the loop: this split's iterations [lo, hi) of n, the first r splits one longer
    b = _B(fn.body, loop, loop.loc)
    s, S = b.pid(2, hint="split"), b.pid(2, num=True, hint="splits")
    one, zero = b.const(1, int32), b.const(0, int32)
    n = b.i("subi", ub, lb)
    if st != 1:
        n = b.i("divsi", b.i("addi", n, b.const(st - 1, int32)), b.const(st, int32))
    n = b.i("maxsi", n, zero, "trips")
    q, r = b.i("divsi", n, S), b.i("remsi", n, S)
    s1 = b.i("addi", s, one)
    lo_i = b.i("addi", b.i("muli", s, q), b.i("minsi", s, r), "split_lo")
    hi_i = b.i("addi", b.i("muli", s1, q), b.i("minsi", s1, r), "split_hi")
    stc = b.const(st, int32)
    loop.set_operand(0, b.i("addi", lb, b.i("muli", lo_i, stc)))
    loop.set_operand(1, b.i("addi", lb, b.i("muli", hi_i, stc)))
    for i, adv in advances.items():
        if adv is None:
            continue
        kind, inc = adv
        init = loop.operands[3 + i]
        if kind == "tt.advance":
            new = b.v("tt.advance", [init] + [b.i("muli", o, lo_i) for o in inc], init.type, hint=init.hint)
        elif kind == "tt.addptr":  # pointer offsets in 64 bits: lo * step may pass 2**31 where each step does not
            t = inc.type.scalar
            k = b.v("arith.extsi", [lo_i], int64)
            inc64 = inc if t == int64 else b.v("arith.extsi", [inc], _like(inc, int64))
            k = k if not isinstance(inc.type, TensorType) else b.v("tt.splat", [k], _like(inc, int64))
            new = b.v("tt.addptr", [init, b.i("muli", inc64, k)], init.type, hint=init.hint)
        else:
            k = lo_i if inc.type.scalar == int32 else b.v("arith.extsi", [lo_i], int64)
            k = k if not isinstance(inc.type, TensorType) else b.v("tt.splat", [k], inc.type)
            new = b.v("arith.addi", [init, b.i("muli", inc, k)], init.type, hint=init.hint)
        loop.set_operand(3 + i, new)

    # after the loop: the epilogue's pure ops that do not need the sum stay out (the store mask among them);
    # the rest moves into the last split's branch
    after = fn.body.ops[fn.body.ops.index(loop) + 1:-1]
    tainted, moved = {id(x) for x in loop.results}, []
    for op in after:
        if not op.regions and is_pure(op) and not any(id(v) in tainted for v in op.operands):
            continue
        moved.append(op)
        for o in op.walk():
            tainted.update(id(x) for x in o.results)
    moved_ids = {id(o) for op in moved for o in op.walk()}
    mask = _store_mask(acc, moved_ids)
    ret = fn.body.terminator
    for op in moved:
        fn.body.ops.remove(op)

    shape, elems = acc_t.shape, 1
    for d in shape:
        elems *= d
    b = _B(fn.body, ret, loop.loc)
    tile = b.i("addi", b.pid(0), b.i("muli", b.pid(1), b.pid(0, num=True)), "tile")
    tiles = b.i("muli", b.pid(0, num=True), b.pid(1, num=True), "tiles")
    offs = _tile_offsets(b, shape)
    mine = _slot_ptrs(b, ws, b.i("addi", b.i("muli", s, tiles), tile), offs, elems)
    b.op("tt.store", [mine, acc] + ([mask] if mask is not None else []), None)
    b.op("tt.debug_barrier", [], None)  # every thread's partial is written before thread 0 releases it
    cptr = b.v("tt.addptr", [counters, tile], counters.type)
    old = b.v("tt.atomic_rmw", [cptr, b.const(1, int32)], int32, {"kind": "add", "scope": "gpu", "sem": "acq_rel"},
              "arrived")
    last = b.v("arith.cmpi", [old, b.i("subi", S, b.const(1, int32))], int1, {"predicate": "eq"}, "last")
    then, other = Block(), Block()
    if_op = b.op("scf.if", [last], None)
    if_op.regions = [then, other]
    then.parent = other.parent = if_op
    Builder(other).create("scf.yield", [], [], loc=loop.loc)

    # the last split: sum the partials in split order, reset the counter, run the epilogue on the sum
    t = _B(then, None, loop.loc)
    ctx = _Sum(ws, tile, tiles, S, offs, elems, acc_t, mask)
    chunked = mask is not None and len(shape) == 2 and os.environ.get(REDUCE_KNOB, "chunked") != "simple"
    total = _chunked_sum(t, ctx) if chunked else _simple_sum(t, ctx)
    t.op("tt.store", [cptr, t.const(0, int32)], None)
    for op in moved:
        then.append(op)
        for o in op.walk():
            for k, v in enumerate(o.operands):
                if v is acc:
                    o.set_operand(k, total)
    t.op("scf.yield", [], None)
    return {"split": 1, "acc": [*shape], "acc_dtype": acc_t.scalar.ir, "tile_elems": elems,
            "trip_count": trip, "masked": int(mask is not None), "reduce": "chunked" if chunked else "simple"}


@dataclass
class _Sum:
    """What the last split's sum reads: the workspace, this tile's index, the tile count, S, the tile's element
    offsets and size, the accumulator type and the epilogue's store mask (or None)."""

    ws: Value
    tile: Value
    tiles: Value
    splits: Value
    offs: Value
    elems: int
    acc_t: TensorType
    mask: Value | None


def _zero(acc_t):
    return 0.0 if acc_t.scalar == float32 else 0


def _add(b: _B, x: Value, y: Value) -> Value:
    return b.v("arith.addf" if x.type.scalar == float32 else "arith.addi", [x, y], x.type)


def _region_op(b: _B, name, operands, result_types, attrs, arg_types, hints=None):
    """An op with one region (its block's arguments `arg_types`), built at `b`'s insertion point."""
    body = Block(arg_types, hints)
    op = b.b.create(name, operands, result_types, attrs, [body])
    return op, body


def _if(b: _B, cond: Value) -> Block:
    """`scf.if cond` with no results: its then-block (the else-block only yields)."""
    then, other = Block(), Block()
    op = b.b.create("scf.if", [cond], [], None, [then, other])
    Builder(other).create("scf.yield", [], [], loc=b.b.loc)
    del op
    return then


def _reduce(t: _B, x: Value, combine: str, axis: int, result_type) -> Value:
    """`tt.reduce` of `x` along `axis` with the integer op `combine`."""
    red, body = _region_op(t, "tt.reduce", [x], [result_type], {"axis": axis}, [int32, int32])
    rb = _B(body, None, t.b.loc)
    rb.op("tt.reduce.return", [rb.v(combine, list(body.args), int32)], None)
    return red.results[0]


def _simple_sum(t: _B, c: _Sum) -> Value:
    """sum = 0 + p_0 + ... + p_{S-1}, one whole partial tile a step."""
    red, body = _region_op(t, "scf.for", [t.const(0, int32), c.splits, t.const(1, int32),
                                          t.const(_zero(c.acc_t), c.acc_t)], [c.acc_t], None,
                           [int32, c.acc_t], ["j", "partial_sum"])
    red.results[0].hint = "splitk_sum"
    rb = _B(body, None, t.b.loc)
    j, part = body.args
    ptrs = _slot_ptrs(rb, c.ws, rb.i("addi", rb.i("muli", j, c.tiles), c.tile), c.offs, c.elems)
    extra = [c.mask, rb.const(_zero(c.acc_t), c.acc_t)] if c.mask is not None else []
    x = rb.v("tt.load", [ptrs] + extra, c.acc_t, {"cache": ".cg"})  # from L2: other SMs wrote it
    rb.op("scf.yield", [_add(rb, part, x)], None)
    return red.results[0]


def _chunked_sum(t: _B, c: _Sum) -> Value:
    """The same sum, in the same order, with fewer round trips to L2 where the store mask leaves most of the tile
    out (a skinny M: 16 of 128 rows): the tile is cut into row chunks of about CHUNK_ELEMS elements; chunks without
    a stored element are skipped, and a chunk's partials are read UNROLL at a time (all in flight at once). Where
    more than half the rows are stored, the whole-tile sum (_simple_sum) moves more bytes a round trip: the kernel
    picks one at run time (at most half the tile's rows stored: chunks)."""
    bm, bn = c.acc_t.shape
    ch = min(bm, max(1, CHUNK_ELEMS // bn, bm // 32))
    chunks = bm // ch
    # bit k of `live`: chunk k has an element the epilogue stores
    rows = t.v("tt.make_range", [], TensorType((bm,), int32), {"end": bm, "start": 0})
    rows = t.v("tt.expand_dims", [rows], TensorType((bm, 1), int32), {"axis": 1})
    shift = t.i("divsi", rows, t.const(ch, TensorType((bm, 1), int32)))
    bit = t.i("shli", t.const(1, TensorType((bm, 1), int32)), shift)
    bit = t.v("tt.broadcast", [bit], TensorType((bm, bn), int32))
    bit = t.v("arith.select", [c.mask, bit, t.const(0, TensorType((bm, bn), int32))], bit.type)
    rows_t = TensorType((bm,), int32)
    row_bits = _reduce(t, bit, "arith.ori", 1, rows_t)  # nonzero: the row has a stored element
    live = _reduce(t, row_bits, "arith.ori", 0, int32)
    live.hint = "live_chunks"
    stored = t.v("arith.extui", [t.v("arith.cmpi", [row_bits, t.const(0, rows_t)], TensorType((bm,), int1),
                                     {"predicate": "ne"})], rows_t)
    stored = _reduce(t, stored, "arith.addi", 0, int32)
    stored.hint = "live_rows"
    sparse = t.v("arith.cmpi", [t.i("muli", stored, t.const(2, int32)), t.const(bm, int32)], int1,
                 {"predicate": "sle"}, "sparse")
    then, other = Block(), Block()
    pick = t.b.create("scf.if", [sparse], [c.acc_t], None, [then, other], hints=["splitk_sum"])
    tb, eb = _B(then, None, t.b.loc), _B(other, None, t.b.loc)
    tb.op("scf.yield", [_chunk_sum(tb, c, live, ch, chunks)], None)
    eb.op("scf.yield", [_simple_sum(eb, c)], None)
    return pick.results[0]


def _chunk_sum(t: _B, c: _Sum, live: Value, ch: int, chunks: int) -> Value:
    """Each live chunk's partials summed UNROLL at a time into split 0's slot (already read), then the whole tile
    read back once."""
    bn = c.acc_t.shape[1]
    ct = TensorType((ch, bn), int32)
    r = t.v("tt.make_range", [], TensorType((ch,), int32), {"end": ch, "start": 0})
    r = t.i("muli", t.v("tt.expand_dims", [r], TensorType((ch, 1), int32), {"axis": 1}),
            t.const(bn, TensorType((ch, 1), int32)))
    cols = t.v("tt.make_range", [], TensorType((bn,), int32), {"end": bn, "start": 0})
    cols = t.v("tt.expand_dims", [cols], TensorType((1, bn), int32), {"axis": 0})
    chunk_offs = t.i("addi", t.v("tt.broadcast", [r], ct), t.v("tt.broadcast", [cols], ct), "chunk_offs")
    part_t = TensorType((ch, bn), c.acc_t.scalar)
    one = t.const(1, int32)

    loop, body = _region_op(t, "scf.for", [t.const(0, int32), t.const(chunks, int32), one], [], None, [int32],
                            ["chunk"])
    lb = _B(body, None, t.b.loc)
    k = body.args[0]
    on = lb.i("andi", lb.i("shrui", live, k), one)
    then = _if(lb, lb.v("arith.cmpi", [on, lb.const(0, int32)], int1, {"predicate": "ne"}))
    lb.op("scf.yield", [], None)
    cb = _B(then, None, t.b.loc)
    here = cb.i("addi", chunk_offs, cb.v("tt.splat", [cb.i("muli", k, cb.const(ch * bn, int32))], ct))
    red, rbody = _region_op(cb, "scf.for", [cb.const(0, int32), c.splits, cb.const(UNROLL, int32),
                                            cb.const(_zero(c.acc_t), part_t)], [part_t], None, [int32, part_t],
                            ["j", "chunk_sum"])
    rb = _B(rbody, None, t.b.loc)
    j0, acc = rbody.args
    xs = []
    for u in range(UNROLL):
        j = rb.i("addi", j0, rb.const(u, int32)) if u else j0
        ok = rb.v("tt.splat", [rb.v("arith.cmpi", [j, c.splits], int1, {"predicate": "slt"})],
                  TensorType((ch, bn), int1))
        ptrs = _slot_ptrs(rb, c.ws, rb.i("addi", rb.i("muli", j, c.tiles), c.tile), here, c.elems)
        xs.append(rb.v("tt.load", [ptrs, ok, rb.const(_zero(c.acc_t), part_t)], part_t, {"cache": ".cg"}))
    for x in xs:  # in split order, after every load is issued
        acc = _add(rb, acc, x)
    rb.op("scf.yield", [acc], None)
    cb.op("tt.store", [_slot_ptrs(cb, c.ws, c.tile, here, c.elems), red.results[0]], None)
    cb.op("scf.yield", [], None)
    t.op("tt.debug_barrier", [], None)  # every chunk's sum is in split 0's slot before the tile is read back
    slot0 = _slot_ptrs(t, c.ws, c.tile, c.offs, c.elems)
    return t.v("tt.load", [slot0, c.mask, t.const(_zero(c.acc_t), c.acc_t)], c.acc_t, {"cache": ".cg"},
               "splitk_sum")


def _like(v: Value, elem):
    return TensorType(v.type.shape, elem) if isinstance(v.type, TensorType) else elem


def run(module: Module) -> dict:
    try:
        return split(module.kernel)
    except Refused as e:
        return {"split": 0, "refused": str(e)}
