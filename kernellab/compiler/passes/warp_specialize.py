"""Warp specialization (sm_90): a producer warpgroup issues the TMA copies of a loop, the num_warps consumer warps
only wait for the stages and compute, in a loop marked `tl.range(..., warp_specialize=True)` (or every qualifying
loop with KERNELLAB_WARP_SPECIALIZE=1).

After `fill_stages_with_tma` the warps that compute also start the copies, S-1 iterations ahead, and meet at a
bar.sync before refilling a stage. Here 4 more warps are launched (Triton's spelling too: num_warps stays the
consumers' count) and the kernel splits at a `ttg.warp_specialize` op placed before the loop:

    before:   (every warp) tensor maps, stage buffers, full mbarriers (one per stage, the TMA bytes complete
              them) and empty mbarriers (num_warps arrivals: every consumer warp has read the stage)
    producer: setmaxnreg.dec; one warp runs the copies' backward slice of the loop (induction variables, block
              pointers and their advances, nothing else); fill number c (counted over the whole kernel, so a
              persistent tile loop continues it) waits for empty[c % S] at parity (c / S + 1) & 1, then
              mbarrier_expect + tma_copy into stage c % S completing on full[c % S]; then it exits
    consumer: setmaxnreg.inc; the loop as it was without its copies: mbarrier_wait(full[read stage], phase),
              the wgmma; where the barrier before the refill was, mbarrier_arrive(empty[stage of i-1]) (its wgmma
              retired by dot_wait 1), and once after the loop for the last stage; every bar.sync after the split
              becomes a named barrier of the consumers' threads (codegen)

The producer issues exactly the fills the consumers wait for (the S-1 run ahead past the end are predicated off,
their empty waits too), so no TMA write is in flight when the consumers finish, and a loop with no iteration waits
for nothing. In a persistent kernel (the marked loop is a tile loop around the pipelined K loop, as in Triton's
tutorial 09) the stage buffers and mbarriers move before the tile loop, which carries the consumers' read stage and
phase from one tile's K loop to the next while the producer's fill count runs on.

Attention's loop (Triton's tutorial 06 on Hopper: `s = q·kT` waited for at once, then `acc = p·v` kept in flight into
the next iteration, K and V filled by TMA) is split the same way: each warp releases the stage of iteration i-1 once
the scores' wait has retired that iteration's p·v. With two consumer warpgroups they also take turns on the tensor
cores as passes/warpgroup_turns.py orders them (q·kT issued async, the turn passed before its wait, taken again
before p·v); why they do not is in the stats (`no_turns`). The tensor work before the split (the query tile's load
and its staging) moves after it, into the consumers.

Consecutive marked loops at the kernel's top level that stage the same tiles (causal attention's off-band and
diagonal key loops) share one split and one ring: the later loops read and fill the first loop's stage buffers, the
producer's fill count and the consumers' read stage, write stage and phase run on from one loop into the next.

This version takes one such loop (or run of loops) per kernel, at the kernel's top level (or its tile loop there),
with one wgmma dot (or attention's two) whose operands TMA fills (Triton on Hopper asks for all-TMA loads too); code
before the split runs in every warp, so no dot, atomic or print may precede it. Why a marked loop was left alone is
in the stats (`not_specialized`). A persistent build whose stages no longer fit next to the epilogue's shared memory
is rebuilt without the producer (runtime/jit.py), before fewer stages are tried.
"""
from __future__ import annotations

import os

from ..gpu.scratch import scratch_bytes, wgmma_staging
from ..ir import Block, Module, Op, Value
from ..ops import info, is_pure
from ..rewrite import extend_for_iter_args, insert_before, int_const, move_before
from ..types import TensorType, int1
from . import dce
from .dot_stages import I32, Builder, mbarrier_ring, next_op
from .warpgroup_turns import pass_turn_before_wait

NAME = "warp_specialize"
DESCRIPTION = "sm_90: a producer warpgroup issues a loop's TMA copies on full/empty mbarriers; the consumers compute"

PRODUCER_WARPS = 4
_FILLS = ("ttg.mbarrier_expect", "ttg.tma_copy")


def env_mode() -> str:
    """KERNELLAB_WARP_SPECIALIZE (part of the disk-cache key, so the same kernels can be timed each way): `1`
    specializes every qualifying TMA dot loop, marked or not; `0` only the loops marked
    `tl.range(..., warp_specialize=True)`; unset (`auto`) also the unmarked loops where it measured faster
    (`_wins_unmarked`). A loop marked `warp_specialize=False` is never specialized but under `1`."""
    v = os.environ.get("KERNELLAB_WARP_SPECIALIZE", "").strip().lower()
    if v in ("", "auto"):
        return "auto"
    return "marked" if v in ("0", "off", "false", "no") else "all"


# unmarked loops specialized by default: attention's online-softmax loop at this many warps (two consumer
# warpgroups taking turns) and at least this head dimension. H200, the descriptor text (benchmarks/attention.py
# --warp-specialize): hd128 at 8 warps ws / no-ws 1.04-1.13; hd64 at 4 warps (one consumer, no turns) 0.74-0.85.
AUTO_WARPS = 8
AUTO_MIN_HEAD_DIM = 128


def _reachable(start: Value, region_op: Op) -> set:
    """ids of the ops inside `region_op` that use `start`, directly or through other such ops."""
    inside = {id(o) for o in region_op.walk()}
    seen, work = set(), [start]
    while work:
        v = work.pop()
        for u in v.uses:
            if id(u) in inside and id(u) not in seen:
                seen.add(id(u))
                work.extend(u.results)
    return seen


def _wins_unmarked(loop: Op, num_warps: int) -> bool:
    """Whether an unmarked pipelined loop is attention's key loop where specialization measured faster: two dots,
    the first's scores reaching the second through a row max and an exponential (online softmax), the first dot's
    K (the head dimension) at least AUTO_MIN_HEAD_DIM, and AUTO_WARPS warps. Matmul loops stay as written: with a
    producer they measured 0.90-1.02 of the unspecialized loop (tutorial 09's TMA kernels, fp8)."""
    if num_warps != AUTO_WARPS:
        return False
    dots = [o for o in loop.walk() if o.name == "tt.dot"]
    if len(dots) != 2 or dots[0].operands[0].type.shape[-1] < AUTO_MIN_HEAD_DIM:
        return False
    after = _reachable(dots[0].result, loop)
    names = {o.name for o in loop.walk() if id(o) in after}
    reduces_max = any(o.name == "tt.reduce" and id(o) in after
                      and any("max" in r.name for r in o.walk() if r is not o) for o in loop.walk())
    return id(dots[1]) in after and bool(names & {"math.exp2", "math.exp"}) and reduces_max


class _Skip(Exception):
    """Why a loop is not specialized."""


def _line(op: Op) -> str:
    return f"line {op.loc.line if op.loc else '?'}"


def _fill_bars(op: Op):
    """The mbarriers a fill op (expect or TMA copy) completes on: the buffer its stage view indexes."""
    d = op.operands[0 if op.name == "ttg.mbarrier_expect" else 3].defining_op
    return d.operands[0] if d is not None and d.name == "ttg.memdesc_index" else None


class _TmaLoop:
    """A loop as `fill_stages_with_tma` leaves it when TMA fills all its stages: the full mbarriers, the carried
    read stage, write stage (the stage of iteration i-1) and phase, the fills before the loop and in it."""

    def __init__(self, for_op: Op):
        self.for_op = for_op
        body = for_op.regions[0]
        self.body = body
        self.stages = for_op.attrs["pipelined_stages"]
        head = body.ops[:2]
        if len(head) < 2 or head[0].name != "ttg.memdesc_index" or head[1].name != "ttg.mbarrier_wait":
            raise _Skip("its stages are filled by cp.async, not TMA (fill_stages_with_tma's no_tma says why)")
        self.bars = head[0].operands[0]
        self.read_slot, self.phase = head[0].operands[1], head[1].operands[1]
        if any(o.name in ("ttg.async_copy", "ttg.async_wait", "ttg.async_arrive") for o in for_op.walk()):
            raise _Skip("some stages are filled by cp.async, not TMA (fill_stages_with_tma's no_tma says why)")
        self.body_fills = [o for o in body.ops if o.name in _FILLS and _fill_bars(o) is self.bars]
        if sum(o.name == "ttg.mbarrier_expect" for o in self.body_fills) != 1:
            raise _Skip("the loop does not refill one stage per iteration")
        expect = self.body_fills[0]
        self.write_slot = expect.operands[0].defining_op.operands[1]
        ops = for_op.block.ops
        self.pre_fills = [o for o in ops[:ops.index(for_op)] if o.name in _FILLS and _fill_bars(o) is self.bars]
        dots = [o for o in body.ops if o.name == "tt.dot" and "mma" in o.attrs]
        self.chain = None  # attention: (q·kT, p·v), the second kept in flight into the next iteration
        if len(dots) == 2:
            first, second = dots
            if first.attrs.get("wgmma_async") or not second.attrs.get("wgmma_async"):
                raise _Skip("2 tensor-core dots in the loop, not attention's chain (scores waited for at once, "
                            "p·v kept in flight)")
            self.chain = (first, second)
            dots = [first]  # the stage is released where the scores' wait retires the previous p·v
        elif len(dots) != 1:
            raise _Skip(f"{len(dots)} tensor-core dots in the loop (one matmul or attention's two supported)")
        self.dot = dots[0]
        if any(o.name == "tt.dot" for o in for_op.walk() if o is not self.dot and o not in (self.chain or ())):
            raise _Skip("another dot in the loop")
        self.overlapped = bool(self.dot.attrs.get("wgmma_async")) or self.chain is not None
        barriers = [o for o in body.ops if o.name == "ttg.barrier"]
        if len(barriers) != 1:
            raise _Skip("the loop has other CTA barriers")
        self.barrier = barriers[0]
        if self.overlapped:
            wait = next_op(self.dot)
            if wait.name != "ttg.dot_wait" or next_op(wait) is not self.barrier or self.final_wait() is None:
                raise _Skip("the wgmma in flight is not retired right before the refill and after the loop")
            if self.chain is not None and wait.operands[0] not in body.args[1:]:
                raise _Skip("the scores' wait does not retire the previous iteration's p·v")
        if any(v not in body.args[1:] for v in (self.read_slot, self.write_slot, self.phase)):
            raise _Skip("the stages are not carried by the loop")

    def arg_index(self, v) -> int:
        """The iter-arg index of a block argument of the body."""
        return self.body.args.index(v) - 1

    def inval(self) -> Op:
        ops = self.for_op.block.ops
        return next(o for o in ops[ops.index(self.for_op) + 1:] if o.name == "ttg.mbarrier_inval" and
                    o.operands[0] is self.bars)

    def final_wait(self):
        """The dot_wait after the loop that retires the last wgmma (overlapped loops), or None."""
        ops = self.for_op.block.ops
        nxt = ops[ops.index(self.for_op) + 1]
        return nxt if nxt.name == "ttg.dot_wait" and nxt.operands[0].owner is self.for_op else None


# ------------------------------------------------------------------------------------------------ the producer

class _Slice:
    """The ops of `seq` (a run of ops of one block, with everything nested in them) that the `roots` need: their
    operands' definitions, the loops and ifs around them, and of those loops only the iter args they need."""

    def __init__(self, seq, roots, outside=()):
        self.inside = {id(o) for top in seq for o in top.walk()} - {id(o) for o in outside}
        self.keep, self.args, self.if_results = set(), {}, {}
        self.work = []
        for r in roots:
            self.need_op(r)
        while self.work:
            self.need_value(self.work.pop())

    def need_op(self, op: Op):
        if id(op) in self.keep or id(op) not in self.inside:
            return
        self.keep.add(id(op))
        parent = op.block.parent if op.block is not None else None
        if parent is not None:
            self.need_op(parent)
        if op.name == "scf.for":
            self.work.extend(op.operands[:3])
        elif op.name == "scf.if":
            self.work.append(op.operands[0])
        elif op.name == "scf.while":
            raise _Skip("the copies' coordinates depend on a while loop")
        else:
            self.work.extend(v for o in op.walk() for v in o.operands)

    def need_value(self, v):
        owner = v.owner
        if isinstance(owner, Op):
            if id(owner) not in self.inside:
                return
            self.need_op(owner)
            if owner.name == "scf.for":
                self.need_iter(owner, v.index)
            elif owner.name == "scf.if":
                kept = self.if_results.setdefault(id(owner), set())
                if v.index not in kept:
                    kept.add(v.index)
                    self.work.extend(r.terminator.operands[v.index] for r in owner.regions)
        elif isinstance(owner, Block) and owner.parent is not None and id(owner.parent) in self.inside:
            self.need_op(owner.parent)
            if owner.parent.name == "scf.for" and v.index > 0:
                self.need_iter(owner.parent, v.index - 1)

    def need_iter(self, for_op: Op, k: int):
        kept = self.args.setdefault(id(for_op), set())
        if k not in kept:
            kept.add(k)
            self.work += [for_op.operands[3 + k], for_op.regions[0].terminator.operands[k]]

    def check(self, seq):
        for top in seq:
            for o in top.walk():
                if id(o) not in self.keep:
                    continue
                if not is_pure(o) and o.name not in _FILLS + ("scf.for", "scf.if"):
                    raise _Skip(f"the copies' coordinates need {o.name} ({_line(o)})")
                kept = self.args if o.name == "scf.for" else self.if_results if o.name == "scf.if" else None
                results = o.results if kept is None else [o.results[k] for k in kept.get(id(o), ())]
                if any(isinstance(r.type, TensorType) for r in results):
                    raise _Skip(f"the copies' coordinates are computed from a tensor ({o.name}, {_line(o)})")

    def clone_into(self, ops, block: Block, mapping: dict, op_map: dict):
        """Append the kept ops of `ops` (copies) to `block`."""
        m = lambda v: mapping.get(id(v), v)  # noqa: E731
        for op in ops:
            if id(op) not in self.keep or info(op.name).terminator:
                continue
            if op.name in ("scf.for", "scf.if"):
                if op.name == "scf.for":
                    ks = sorted(self.args.get(id(op), ()))
                    src = op.regions[0]
                    nb = Block([src.args[0].type] + [src.args[k + 1].type for k in ks],
                               [src.args[0].hint] + [src.args[k + 1].hint for k in ks])
                    mapping[id(src.args[0])] = nb.args[0]
                    for j, k in enumerate(ks):
                        mapping[id(src.args[k + 1])] = nb.args[j + 1]
                    self.clone_into(src.ops, nb, mapping, op_map)
                    nb.append(Op("scf.yield", [m(src.terminator.operands[k]) for k in ks], loc=src.terminator.loc))
                    attrs = {k: v for k, v in op.attrs.items() if k not in ("pipelined_stages", "num_stages",
                                                                             "warp_specialize")}
                    new = Op("scf.for", [m(v) for v in op.operands[:3]] + [m(op.operands[3 + k]) for k in ks],
                             [op.results[k].type for k in ks], attrs, [nb], op.loc, [op.results[k].hint for k in ks])
                else:
                    ks = sorted(self.if_results.get(id(op), ()))
                    regions = []
                    for src in op.regions:
                        nb = Block()
                        self.clone_into(src.ops, nb, mapping, op_map)
                        nb.append(Op("scf.yield", [m(src.terminator.operands[k]) for k in ks]))
                        regions.append(nb)
                    new = Op("scf.if", [m(op.operands[0])], [op.results[k].type for k in ks], dict(op.attrs), regions,
                             op.loc, [op.results[k].hint for k in ks])
                block.append(new)
                for j, k in enumerate(ks):
                    mapping[id(op.results[k])] = new.results[j]
            else:
                new = block.append(op.clone(mapping))
            op_map[id(op)] = new


def _fill_groups(fills) -> list:
    """The fills grouped by stage (each group opens with its mbarrier_expect), in program order."""
    groups = []
    for o in fills:
        if o.name == "ttg.mbarrier_expect":
            groups.append([o])
        elif groups:
            groups[-1].append(o)
    return groups


def _refill(bld: Builder, group, count, stages: int, full, empty) -> None:
    """Fill number `count` into stage count % S: wait until the consumers released it (the parity of the release
    before this fill: a fresh mbarrier's 'previous phase' counts as done), then the expect and the copies."""
    expect = group[0]
    pred = expect.operands[1]
    s = bld.const(stages)
    stage = bld.op("arith.remui", [count, s], [I32]).result
    rounds = bld.op("arith.divui", [count, s], [I32]).result
    one = bld.const(1)
    parity = bld.op("arith.xori", [bld.op("arith.andi", [rounds, one], [I32]).result, one], [I32]).result
    ev = bld.op("ttg.memdesc_index", [empty, stage], [empty.type.tile()]).result
    bld.op("ttg.mbarrier_wait", [ev, parity, pred], [])
    fv = bld.op("ttg.memdesc_index", [full, stage], [full.type.tile()]).result
    expect.set_operand(0, fv)
    for copy in group[1:]:
        buf = copy.operands[2].defining_op.operands[0]
        view = Builder(copy, copy.loc).op("ttg.memdesc_index", [buf, stage], [copy.operands[2].type]).result
        copy.set_operand(2, view)
        copy.set_operand(3, fv)


def _build_producer(ws: Op, seq, sl: _Slice, loops: list, outer, empty) -> None:
    """The producer's region of `ws`: the copies' slice `sl` of `seq`, each fill waiting on its empty mbarrier.
    Several loops (attention's off-band and diagonal key loops) fill one ring: the count runs on from one to the
    next."""
    region = ws.regions[0]
    mapping, op_map = {}, {}
    sl.clone_into(seq, region, mapping, op_map)
    loc, S, full = loops[0].for_op.loc, loops[0].stages, loops[0].bars
    # the fill counter: 0 at the start (non-persistent), else carried by the tile loop
    if outer is not None:
        tiles = op_map[id(outer)]
        g0 = tiles.regions[0].add_arg(I32, "fills")
    else:
        g0 = Builder(region.ops[0], loc).const(0)
    for loop in loops:
        inner = op_map[id(loop.for_op)]
        for s, group in enumerate(_fill_groups([op_map[id(o)] for o in loop.pre_fills])):
            at = Builder(group[0], loc)
            _refill(at, group, at.add(g0, at.const(s)) if s else g0, S, full, empty)
        at = Builder(inner, loc)
        start = at.add(g0, at.const(S - 1))
        body = inner.regions[0]
        g = body.add_arg(I32, "fill")
        (group,) = _fill_groups([op_map[id(o)] for o in loop.body_fills])
        _refill(Builder(group[0], loc), group, g, S, full, empty)
        y = body.terminator
        nxt = Builder(y, loc).add(g, Builder(y, loc).const(1))
        y.operands.append(nxt)
        nxt.uses.append(y)
        inner = extend_for_iter_args(inner, [start])
        if outer is None and loop is loops[-1]:
            break
        # the fills issued: the S-1 the loop's last iterations would have run ahead are predicated off
        after = Builder(next_op(inner), loc)
        g0 = done = after.op("arith.subi", [inner.results[-1], after.const(S - 1)], [I32]).result
    if outer is not None:
        ty = tiles.regions[0].terminator
        ty.operands.append(done)
        done.uses.append(ty)
        extend_for_iter_args(tiles, [Builder(tiles, loc).const(0)])
    # the old stage views and slot rotations are dead now
    dce.sweep_block(region)


# ------------------------------------------------------------------------------------------------ the consumers

def _consume(loop: _TmaLoop, empty) -> None:
    """The consumers' loop: no copies; each warp releases a stage once the wgmma that read it has retired."""
    loc, body = loop.for_op.loc, loop.body
    for o in loop.pre_fills + loop.body_fills:
        o.erase()
    iv, lb, ub = body.args[0], loop.for_op.operands[0], loop.for_op.operands[1]
    rel = Builder(loop.barrier, loc)
    if loop.overlapped:  # dot_wait 1 retired iteration i-1's wgmma, which read the write stage
        ev = rel.op("ttg.memdesc_index", [empty, loop.write_slot], [empty.type.tile()]).result
        rel.op("ttg.mbarrier_arrive", [ev, rel.op("arith.cmpi", [iv, lb], [int1], {"predicate": "ne"}).result], [])
    else:  # the dot waits for its wgmma: the stage it read is free right after it
        rel = Builder(next_op(loop.dot), loc)
        ev = rel.op("ttg.memdesc_index", [empty, loop.read_slot], [empty.type.tile()]).result
        rel.op("ttg.mbarrier_arrive", [ev, rel.op("arith.constant", [], [int1], {"value": 1}).result], [])
    loop.barrier.erase()
    if loop.overlapped:  # the last iteration's stage, once its wgmma has retired (none when the loop ran none)
        after = Builder(next_op(loop.final_wait()), loc)
        last = loop.for_op.results[loop.arg_index(loop.write_slot)]
        ev = after.op("ttg.memdesc_index", [empty, last], [empty.type.tile()]).result
        after.op("ttg.mbarrier_arrive", [ev, after.lt(lb, ub)], [])


def _turns_why_not(loop: _TmaLoop, num_warps: int) -> str | None:
    """Why attention's consumers cannot take turns on the tensor cores (None: they can)."""
    if num_warps != 8:
        return f"{num_warps // 4} consumer warpgroup(s), turns need two"
    if any(list(d.attrs.get("mma", ())) != [8, 1] or any(e is not None for e in wgmma_staging(d)) for d in loop.chain):
        return "the dots do not split their rows between the warpgroups with operands in place"
    for o in loop.for_op.walk():
        if o in (loop.for_op, loop.barrier) or o.name == "tt.dot":
            continue
        if o.name in ("ttg.barrier", "tt.debug_barrier") or scratch_bytes(o)[0]:
            return f"{o.name} ({_line(o)}) needs every consumer warp to meet in the loop"
    return None


def _take_turns(loop: _TmaLoop) -> None:
    """The consumers' two warpgroups take turns on the tensor cores as passes/warpgroup_turns.py orders them (one's
    softmax under the other's matrix products): q·kT is issued without waiting and the turn passes before its wait;
    the turn is taken again right before p·v. The stages' full and empty mbarriers are the producer's already."""
    loc, body = loop.for_op.loc, loop.body
    first, second = loop.chain
    pass_turn_before_wait(first, loc)
    reads = [d for d in (v.defining_op for v in second.operands) if d is not None and d.block is body and
             d.name == "ttg.memdesc_index"]
    Builder(min(reads, key=body.ops.index) if reads else second, loc).op("ttg.warpgroup_turn", [], [],
                                                                         {"kind": "wait"})
    Builder(loop.for_op, loc).op("ttg.warpgroup_turn", [], [], {"kind": "start"})  # warpgroup 0 goes first
    Builder(loop.final_wait(), loc).op("ttg.warpgroup_turn", [], [], {"kind": "finish"})


def _ring(loop: _TmaLoop):
    """(stage buffers in fill order, bytes a stage's expect announces) of a loop's body refill."""
    (group,) = _fill_groups(loop.body_fills)
    return [c.operands[2].defining_op.operands[0] for c in group[1:]], group[0].attrs.get("bytes")


def _share_ring_check(first: _TmaLoop, loop: _TmaLoop) -> None:
    (b1, n1), (b2, n2) = _ring(first), _ring(loop)
    if loop.stages != first.stages or n1 != n2 or [b.type for b in b1] != [b.type for b in b2]:
        raise _Skip(f"the loop at {_line(loop.for_op)} stages other tiles than the first (one ring per producer)")
    if (first.chain is None) != (loop.chain is None) or first.overlapped != loop.overlapped:
        raise _Skip(f"the loop at {_line(loop.for_op)} has another shape of dots than the first")


def _share_ring(first: _TmaLoop, loop: _TmaLoop) -> None:
    """A later loop of the split reads and fills the first loop's stage buffers and mbarriers (shared memory holds
    one ring; the producer's fill count and the consumers' read stage, write stage and phase run on)."""
    b1, _ = _ring(first)
    b2, _ = _ring(loop)
    inval = loop.inval()
    move_before(first.inval(), inval)  # the ring lives until the last loop's end
    inval.erase()
    for old, new in zip(b2 + [loop.bars], b1 + [first.bars]):
        alloc = old.defining_op
        old.replace_all_uses_with(new)
        if not old.uses:
            alloc.erase()
    for k, v in enumerate((loop.read_slot, loop.write_slot, loop.phase)):
        i = loop.arg_index(v)
        loop.for_op.set_operand(3 + i, first.for_op.results[first.arg_index((first.read_slot, first.write_slot,
                                                                              first.phase)[k])])
    loop.bars = first.bars


def _consumers_only(fn, split: Op, sl: _Slice) -> list:
    """Move the tensor work with effects that precedes the split (the query tile's load and its staging into shared
    memory), and what reads it, after it: the producer warps would run it with warp indices past the layouts'
    (stores out of the tile). Pure register values (constants, ranges) stay: dead in the producer.
    Returns those ops (checked: nothing the producer needs reads them)."""
    ops = fn.body.ops
    before = ops[:ops.index(split)]
    moved = set()
    for o in before:
        inner = list(o.walk())
        tensor = any(isinstance(v.type, TensorType) for x in inner for v in list(x.results) + list(x.operands))
        effects = tensor and not all(is_pure(x) for x in inner)
        if (effects or o.name in ("ttg.local_store", "ttg.barrier", "tt.store") or
                any(v.defining_op is not None and id(v.defining_op) in moved for x in inner for v in x.operands)):
            moved.add(id(o))
    for o in before:
        if id(o) in moved and id(o) in sl.keep:
            raise _Skip(f"the copies' coordinates need {o.name} ({_line(o)}), tensor work before the loop")
        if id(o) not in moved and any(id(v.defining_op) in moved for x in o.walk() for v in x.operands
                                      if v.defining_op is not None):
            raise _Skip(f"{o.name} ({_line(o)}) before the loop reads tensor work the producer must not run")
    return [o for o in before if id(o) in moved]


# ------------------------------------------------------------------------------------------------ driver

def _candidates(module: Module, stats: dict, num_warps: int):
    """(marked loop, pipelined TMA loop, chosen by default) triples: the loop itself, or a tile loop around one
    pipelined loop."""
    fn = module.kernel
    mode = env_mode()
    out = []
    for op in fn.body.ops:
        if op.name != "scf.for":
            continue
        inner = [o for o in op.walk() if o.name == "scf.for" and "pipelined_stages" in o.attrs]
        loops = [o for o in op.walk() if o.name == "scf.for"]
        marked = any(o.attrs.get("warp_specialize") for o in loops)
        declined = any(o.attrs.get("warp_specialize") is False for o in loops)
        auto = (not marked and not declined and mode == "auto" and len(inner) == 1
                and (int_const(inner[0].operands[2]) or 0) > 0 and _wins_unmarked(inner[0], num_warps))
        if auto:
            out.append((op, inner[0], True))
            continue
        if not marked and not (mode == "all" and inner):
            continue
        if not inner:
            stats["not_specialized"].append(f"{_line(op)}: no pipelined dot loop (the dot operands are not staged)")
            continue
        if len(inner) > 1:
            stats["not_specialized"].append(f"{_line(op)}: {len(inner)} pipelined loops in it")
            continue
        step = int_const(inner[0].operands[2])
        if step is None or step <= 0:  # pipeline_dot_operands pipelines loops counting down too; the turns test lb < ub
            stats["not_specialized"].append(f"{_line(op)}: the pipelined loop's step is not a positive constant")
            continue
        out.append((op, inner[0], False))
    for op in fn.walk():  # marked loops nested deeper than the kernel's top level (or its tile loop)
        if op.name == "scf.for" and op.attrs.get("warp_specialize") and op.block.parent is not None:
            parent = op.block.parent
            if not (parent.name == "scf.for" and parent.block is fn.body):
                stats["not_specialized"].append(f"{_line(op)}: the loop is nested in another region (the producer "
                                                "must leave once, from the kernel's top level)")
    return out


def _check_before(fn, split: Op):
    """Code before the split runs in every warp, the producer's too: nothing there may act once per warp."""
    for o in fn.walk():
        if o is split:
            return
        if o.name in ("tt.dot", "tt.atomic_rmw", "tt.atomic_cas", "tt.print", "tt.assert"):
            raise _Skip(f"{o.name} before the loop ({_line(o)}) would run in the producer warps too")


def _specialize(module: Module, marked: Op, inners: list, num_warps: int) -> str | None:
    """Split the kernel at `marked` (and the loops after it in `inners`, sharing its ring); returns why attention's
    consumers do not take turns (None: they do, or the loop is a matmul)."""
    fn = module.kernel
    loops = [_TmaLoop(i) for i in inners]
    loop, inner = loops[0], inners[0]
    for other in loops[1:]:
        _share_ring_check(loop, other)
    outer = marked if marked is not inner else None
    if outer is not None and inner.block is not outer.regions[0]:
        raise _Skip("the pipelined loop is not directly in the tile loop's body")
    copies = [o for o in loop.pre_fills + loop.body_fills if o.name == "ttg.tma_copy"]
    allocs = [o.operands[2].defining_op.operands[0].defining_op for o in copies]
    tensormaps = [o.operands[0].defining_op for o in copies]
    if any(t.name == "ttg.make_tensormap" for t in tensormaps):
        raise _Skip("a tensor map is made in the kernel (its base or shape is computed there)")
    bars_alloc = loop.bars.defining_op
    hoist = []  # persistent: the buffers and mbarriers live across the tile loop, made once before it
    if outer is not None:
        for op in tensormaps + allocs + [bars_alloc]:
            if op.block is outer.regions[0] and op not in hoist:
                hoist += [v.defining_op for v in op.operands if v.defining_op is not None and
                          v.defining_op.block is outer.regions[0] and v.defining_op.name == "arith.constant"]
                hoist.append(op)
        seq = [outer]
    else:
        ops = fn.body.ops
        first = min([ops.index(o) for o in loop.pre_fills] + [ops.index(inner)])
        seq = ops[first:ops.index(inners[-1]) + 1]
    roots = [o for lp in loops for o in lp.pre_fills + lp.body_fills]
    shared = [v.defining_op for lp in loops[1:] for v in _ring(lp)[0] + [lp.bars]]  # become the first loop's
    sl = _Slice(seq, roots, outside=hoist + shared)
    sl.check(seq)
    _check_before(fn, seq[0])
    consumers_only = _consumers_only(fn, seq[0], sl)
    no_turns = next((w for w in (_turns_why_not(lp, num_warps) for lp in loops if lp.chain is not None) if w), None)
    # checked: from here on the IR changes
    for other in loops[1:]:
        _share_ring(loop, other)
    if len(loops) > 1:  # the later loops' buffers are the first's now: the slice no longer needs their allocations
        sl = _Slice(seq, roots, outside=hoist)
    if outer is not None:
        inval = loop.inval()
        for op in hoist:
            if op.block is outer.regions[0]:
                move_before(op, outer)
        move_before(inval, next_op(outer))
    else:
        inval = loop.inval()
    at = Builder(next_op(bars_alloc), loop.for_op.loc)
    empty = mbarrier_ring(at, loop.stages, "empty_bars", count=num_warps, purpose="empty")
    Builder(next_op(inval), loop.for_op.loc).op("ttg.mbarrier_inval", [empty], [])
    ws = Op("ttg.warp_specialize", [], [], {"producer_warps": PRODUCER_WARPS}, [Block()], loop.for_op.loc)
    insert_before(seq[0], ws)
    for o in consumers_only:
        move_before(o, seq[0])
    _build_producer(ws, seq, sl, loops, outer, empty)
    # the consumers: the copies go, the release of each stage comes in
    for lp in loops:
        _consume(lp, empty)
        if lp.chain is not None and no_turns is None:
            _take_turns(lp)
    if outer is not None:  # the read stage, the write stage and the phase run on from one tile to the next
        slots = [loop.arg_index(v) for v in (loop.read_slot, loop.write_slot, loop.phase)]
        tiles_body = outer.regions[0]
        pre = Builder(outer, loop.for_op.loc)
        inits = [pre.const(0), pre.const(loop.stages - 1), pre.const(0)]
        y = tiles_body.terminator
        for k in slots:
            a = tiles_body.add_arg(I32, loop.body.args[k + 1].hint)
            loop.for_op.set_operand(3 + k, a)
            r = loop.for_op.results[k]
            y.operands.append(r)
            r.uses.append(y)
        extend_for_iter_args(outer, inits)
    return no_turns


def _split(module: Module, marked: Op, inners: list, num_warps: int, stats: dict) -> None:
    """Specialize (raises _Skip where it cannot) and count it; say why attention's consumers take no turns."""
    no_turns = _specialize(module, marked, inners, num_warps)
    stats["warp_specialized"] += 1
    if no_turns:
        stats["no_turns"] = f"{_line(marked)}: {no_turns}"


def run(module: Module, options=None) -> dict:
    stats = {"warp_specialized": 0, "not_specialized": []}
    arch = getattr(options, "arch", 90)
    num_warps = getattr(options, "num_warps", 4)
    groups = []  # consecutive marked key loops at the kernel's top level (causal attention's two) share a split
    chosen = set()  # ids of the loops specialized by default (unmarked): a refusal there is not the user's concern
    for marked, inner, auto in _candidates(module, stats, num_warps):
        if auto:
            chosen.add(id(marked))
        if groups and marked is inner and groups[-1][0] is groups[-1][1][0] and inner.block is groups[-1][0].block:
            groups[-1][1].append(inner)
        else:
            groups.append((marked, [inner]))
    for marked, inners in groups:
        why = None
        if arch < 90:
            why = f"sm_{arch} has no TMA or setmaxnreg"
        elif not getattr(options, "warp_specialize", True):
            why = ("off for this build: with the stage buffers live across the tile loop the shared memory did not "
                   "fit (see the trace's notes)")
        elif num_warps % 4:
            why = f"num_warps={num_warps} is not a whole number of warpgroups"
        elif (num_warps + PRODUCER_WARPS) * 32 > 1024:
            why = f"num_warps={num_warps} leaves no room for a producer warpgroup (1024 threads per block)"
        elif stats["warp_specialized"]:
            why = "one specialized loop per kernel"
        elif marked.attrs.get("flattened") or inners[0].attrs.get("flattened"):
            why = ("a fused flatten=True nest: its TMA coordinates come from the tile prologue under an scf.if, which "
                   "the producer's slice does not replicate yet")
        by_default = f"{_line(marked)}: attention's key loop at {num_warps} warps"
        if why is None and len(inners) > 1:
            try:
                _split(module, marked, inners, num_warps, stats)
                if id(marked) in chosen:
                    stats["by_default"] = by_default
                continue
            except _Skip as e:  # the first loop alone, then
                stats["not_specialized"] += [f"{_line(o)}: not with the loop before it ({e})" for o in inners[1:]]
                inners = inners[:1]
        if why is None:
            try:
                _split(module, marked, inners, num_warps, stats)
                if id(marked) in chosen:
                    stats["by_default"] = by_default
                continue
            except _Skip as e:
                why = str(e)
        if id(marked) in chosen:
            stats["not_by_default"] = f"{_line(marked)}: {why}"
        else:
            stats["not_specialized"].append(f"{_line(marked)}: {why}")
    if stats["warp_specialized"]:
        dce.run(module)  # the consumers' copy addresses, predicates and stage views are dead now
    if not stats["not_specialized"]:
        del stats["not_specialized"]
    return stats
