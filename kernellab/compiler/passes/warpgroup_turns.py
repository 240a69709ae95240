"""Attention with two warpgroups (8 warps, sm_90): drop the CTA-wide barriers from the loop
`pipeline_dot_operands` pipelined, and let the warpgroups take turns on the tensor cores.

There, every iteration waits for its stage with cp.async.wait_group + bar.sync and, after the scores' wgmma,
meets every warp at a bar.sync before refilling the stage the previous iteration read. Here instead the copies
into a stage complete on the stage's "full" mbarrier (cp.async.mbarrier.arrive.noinc, every thread), each warp
releases a stage on its "empty" mbarrier once its wgmmas have read it, and the warpgroups take turns on the
tensor cores (named barriers 1 and 2), so one's softmax runs under the other's matrix products:

    before:    full and empty mbarriers; copies of stages 0 .. S-2, each followed by async_arrive(full)
               warpgroup_turn(start)                                   # warpgroup 0 goes first
    body i:    mbarrier_wait(full, stage i % S) + fence.proxy.async
               q kT {wgmma_async}; warpgroup_turn(pass); dot_wait      # the other warpgroup's turn
               mbarrier_arrive(empty, stage (i-1) % S) unless i = 0    # p v of i-1 has read it
               softmax
               mbarrier_wait(empty, stage (i-1) % S); copies of iteration i+S-1; async_arrive(full)
               warpgroup_turn(wait); p v {wgmma_async}                  # this warpgroup's turn
    after:     dot_wait; warpgroup_turn(finish); async_wait(0); mbarrier_inval

A loop qualifies when its two wgmma dots (scores, then `acc = tl.dot(p, v, f(acc))` kept in flight) split
their rows between the warpgroups (mma [8, 1]), read every operand from registers or from the stages the
pipeline fills (cp.async, not TMA), and no other op of the body needs a CTA-wide barrier (shared-memory scratch
for a cross-warp reduction or a layout conversion, a debug barrier): that would deadlock against the turns.
Measured on the H200: with one warpgroup, or in the matmul loop, the mbarriers cost 2-6% against bar.sync, so
those keep bar.sync.
"""
from __future__ import annotations

from ..gpu.scratch import scratch_bytes, wgmma_staging
from ..ir import Module, Op
from ..rewrite import move_before
from ..types import int1
from .dot_stages import I32, Builder, PipelinedLoop, mbarrier_ring, next_op, pipelined_loops

NAME = "warpgroup_turns"
DESCRIPTION = "attention on two warpgroups: mbarriers instead of CTA barriers, turns on the tensor cores"


def pass_turn_before_wait(dot: Op, loc) -> None:
    """Issue `dot` without waiting, pass the tensor-core turn to the other warpgroup, then wait for the dot's
    result (its users read the wait's): the step both warpgroup_turns and warp_specialize's turns take."""
    dot.attrs["wgmma_async"] = True
    nxt = Builder(next_op(dot), loc)
    nxt.op("ttg.warpgroup_turn", [], [], {"kind": "pass"})
    done = nxt.op("ttg.dot_wait", [dot.result], [dot.result.type], {"pending": 0}, [dot.result.hint]).result
    dot.result.replace_all_uses_with(done)
    done.defining_op.set_operand(0, dot.result)


def _chain(loop: PipelinedLoop):
    """(scores dot, p·v dot, the CTA barrier before the refill) when the pipeline kept attention's second wgmma
    in flight, else None."""
    dots = loop.dots
    if len(dots) != 2 or dots[0].attrs.get("wgmma_async") or not dots[1].attrs.get("wgmma_async"):
        return None
    barrier = next_op(next_op(dots[0]))  # the scores dot, the wait that retires the previous p·v, the barrier
    return (dots[0], dots[1], barrier) if barrier.name == "ttg.barrier" else None


def _apart(loop: PipelinedLoop, barrier: Op) -> bool:
    """Whether the warpgroups never need to meet in the loop (see the module's docstring)."""
    for d in loop.dots:
        if list(d.attrs.get("mma", ())) != [8, 1] or any(enc is not None for enc in wgmma_staging(d)):
            return False
    return not any(o is not loop.for_op and o is not barrier and o.name != "tt.dot" and
                   (o.name in ("ttg.barrier", "tt.debug_barrier") or scratch_bytes(o)[0]) for o in loop.for_op.walk())


def _advance_ops(loop: PipelinedLoop, refill: list) -> list:
    """The ops after the refill that compute the addresses of the next refill (the loop-carried values it reads,
    one iteration on), in body order."""
    body, ids = loop.body, {id(o) for o in refill}
    slots = (loop.read_slot, loop.write_slot)
    ahead = [a for a in body.args[1:] if all(a is not s for s in slots) and any(id(u) in ids for u in a.uses)]
    y = body.terminator
    need, work = set(), [y.operands[body.args.index(a) - 1] for a in ahead]
    while work:
        d = work.pop().defining_op
        if d is None or d.block is not body or id(d) in need or id(d) in ids:
            continue
        need.add(id(d))
        work.extend(d.operands)
    start = body.ops.index(refill[-1])
    return [o for o in body.ops[start:] if id(o) in need]


def _take_turns(loop: PipelinedLoop, first: Op, second: Op, barrier: Op, num_warps: int) -> None:
    loc, body, stages = loop.loc, loop.body, loop.stages
    iv, lb = body.args[0], loop.for_op.operands[0]
    at = Builder(next_op(loop.allocs[-1]), loc)
    full = mbarrier_ring(at, stages, "full_bars", count=num_warps * 32, purpose="full")
    empty = mbarrier_ring(at, stages, "empty_bars", count=num_warps, purpose="empty")
    for fill in loop.prologue_fills:  # every thread's copies into the stage arrive on its full mbarrier
        _arrive_when_copied(Builder(next_op(fill.commit), loc), full, fill.slot)
    phase = body.add_arg(I32, "phase")
    # parity of the release the write stage waits for: that of iteration i-1's tile; at i = 0 it is 1, the phase
    # before a fresh mbarrier's first, which counts as completed (the stage was never read)
    empty_phase = body.add_arg(I32, "empty_phase")
    # the stage's tiles have landed: its full mbarrier instead of wait_group + bar.sync
    top = Builder(loop.top_wait, loc)
    bar = top.op("ttg.memdesc_index", [full, loop.read_slot], [full.type.tile()]).result
    top.op("ttg.mbarrier_wait", [bar, phase], [], {"fence_proxy": True})
    loop.top_wait.erase()
    # q kT is issued without waiting; the turn passes to the other warpgroup before its wait
    pass_turn_before_wait(first, loc)
    # each warp releases the stage right after the wait instead of the barrier; the refill waits for every warp's
    # release only after the softmax, right before p v: by then the other warpgroup has usually released it too
    refill = body.ops[body.ops.index(barrier) + 1:body.ops.index(loop.body_fill.commit) + 1]
    advance = _advance_ops(loop, refill)
    rel = Builder(barrier, loc)
    bar = rel.op("ttg.memdesc_index", [empty, loop.write_slot], [empty.type.tile()]).result
    not_first = rel.op("arith.cmpi", [iv, lb], [int1], {"predicate": "ne"}).result
    rel.op("ttg.mbarrier_arrive", [bar, not_first], [])
    barrier.erase()
    reads = [o for o in body.ops if o.name == "ttg.memdesc_index" and o.result.uses == [second]]
    later = Builder(min(reads, key=body.ops.index) if reads else second, loc)
    later.op("ttg.mbarrier_wait", [bar, empty_phase], [])
    for op in refill:
        move_before(op, later.anchor)
    _arrive_when_copied(later, full, loop.write_slot)
    # the turn comes after the copies: a warpgroup waiting for it has already started the next tiles
    later.op("ttg.warpgroup_turn", [], [], {"kind": "wait"})
    for op in advance:
        move_before(op, later.anchor)
    # both parities flip each time their stage wraps
    nexts = []
    for slot, p in ((loop.read_slot, phase), (loop.write_slot, empty_phase)):
        sel, at_end, one = loop.rotation(slot)
        end = Builder(next_op(sel), loc)
        flipped = end.op("arith.xori", [p, one], [I32]).result
        nexts.append(end.op("arith.select", [at_end, flipped, p], [I32]).result)
    pre = Builder(loop.for_op, loc)
    loop.carry([pre.const(0), pre.const(1)], nexts)
    Builder(loop.for_op, loc).op("ttg.warpgroup_turn", [], [], {"kind": "start"})  # warpgroup 0 goes first
    drain = loop.drain()
    Builder(drain, loc).op("ttg.warpgroup_turn", [], [], {"kind": "finish"})
    after = Builder(next_op(drain), loc)  # after the drain's bar.sync: no thread polls them
    after.op("ttg.mbarrier_inval", [full], [])
    after.op("ttg.mbarrier_inval", [empty], [])


def _arrive_when_copied(bld: Builder, full, slot) -> None:
    """Every thread's copies into stage `slot` so far count as one arrival on its full mbarrier once they land."""
    bld.op("ttg.async_arrive", [bld.op("ttg.memdesc_index", [full, slot], [full.type.tile()]).result], [])


def run(module: Module, options=None) -> dict:
    stats = {"warpgroup_turns": 0}
    if getattr(options, "arch", 90) < 90:
        return stats
    num_warps = getattr(options, "num_warps", 4)
    for loop in pipelined_loops(module):
        chain = _chain(loop)
        if (chain is None or any(a.attrs.get("fill") == "tma" or a.attrs.get("operand") == "side" for a in loop.allocs)
                or not _apart(loop, chain[2])):
            continue
        _take_turns(loop, *chain, num_warps)
        stats["warpgroup_turns"] += 1
    return stats
