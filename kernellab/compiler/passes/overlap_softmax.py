"""Attention's softmax under the warpgroup's own p·v (sm_90, FlashAttention-3's intra-warpgroup overlap): the
scores' wgmma of key block j+1 and the p·v of block j are issued back to back, and the softmax of block j+1 runs
while p·v still computes. Off by default: KERNELLAB_ATTN_OVERLAP=1 turns it on (part of the disk-cache key).

It rewrites the consumers' key loop as `warp_specialize` leaves it (the stages filled by the producer, two
wgmma dots: scores waited for at once, p·v kept in flight into the next iteration):

    body j:    wait full[j]; s = q·kT_j {async}; [pass the turn]; wait (s, and p·v of j-1); release stage j-1
               softmax of s: m, p, alpha, l; acc' = acc * alpha; p16 = p
               [wait for the turn]; acc = p16·v_j + acc' {async}

The p·v of one iteration moves into the next, right behind the next scores (software pipelining by one stage,
loop peeled at both ends):

    prologue:  if lb < ub: wait full[lb]; s = q·kT_lb; [pass]; wait; softmax of s (acc' from the loop's acc)
    body j:    (j from lb + step) wait full[j]; [wait for the turn]
               s = q·kT_j {async}; acc = p16_{j-1}·v_{j-1} + acc'_{j-1} {async}; [pass the turn]
               wait s (one group still in flight: p·v)      <- the softmax of s runs under p·v
               softmax of s ... wait p·v right before its first use (acc * alpha); release stage j-1
    epilogue:  if lb < ub: [wait for the turn]; acc = p16·v + acc' {waited}; release the last stage

So the loop carries the scaled accumulator acc' and the probabilities p16 (fp16, the A operand in registers) instead
of a wgmma in flight, and nothing is in flight across the loop's back edge or the peeled ifs. Each warpgroup still
takes its turn once per iteration (its scores and the previous p·v in one turn, as FlashAttention-3 orders them),
and releases every stage exactly once, after the wgmma that read V there retired. With one consumer warpgroup (no
turns) the scores' wgmma, synchronous there, is issued asynchronously and waited for behind p·v.

This is FlashAttention-3's order (its Algorithm 2). The other way to pipeline by one stage, the scores of j+1 issued
before the softmax of j, keeps two fp32 score tiles live beside the accumulator and p16 of the p·v in flight: at
hd128 with 64-row warpgroups and 128 keys, 64 + 64 + 64 + 32 registers per thread before any address or row
statistic, past the consumers' 232. Here one score tile is live (hd128/8 warps: 186 registers used, 184 without the
pass); a loop whose estimate (accumulator, p16 and scores per thread, plus REGISTER_MARGIN) exceeds the consumers'
setmaxnreg budget is left alone.

ptxas moves `wgmma.wait_group` (like bar.sync and mbarrier arrives) above register-only math into the first latency
bubble: the wait for p·v placed after the softmax landed after the row max's first shuffle, before every exp2. The
wait therefore takes the carried softmax results (row max, row sum: the sum adds up every exponential) as extra
operands, which codegen/lower_wgmma.pin_before_wait stores under a predicate that never holds; ptxas keeps a wait
after a shared-memory store it depends on.

Why a loop was left alone is in the stats (`not_overlapped`). The pass runs in GPU lowering only: the interpreter
executes the tile IR, which it does not touch.
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..ops import is_pure
from ..rewrite import extend_for_iter_args, insert_before, move_before, top_level
from ..switches import switch
from ..types import TensorType, int1
from .dot_stages import I32, Builder, next_op

NAME = "overlap_softmax"
DESCRIPTION = "sm_90 attention: the next scores' and the previous p·v wgmma issued together, the softmax under p·v"


def enabled() -> bool:
    """KERNELLAB_ATTN_OVERLAP=1 turns the pass on (default off until timed on the GPU)."""
    return switch("KERNELLAB_ATTN_OVERLAP", False)


class _Skip(Exception):
    """Why a loop is left as it is."""


def _line(op: Op) -> str:
    return f"line {op.loc.line if op.loc else '?'}"


def _turn(op, kind: str) -> bool:
    return op is not None and op.name == "ttg.warpgroup_turn" and op.attrs.get("kind") == kind


# registers per thread the estimate leaves for addresses, row statistics and temporaries (hd128, 8 warps: 160
# estimated, 186 used)
REGISTER_MARGIN = 48


def _registers(v, num_warps: int, bits: int = 32) -> int:
    """32-bit registers per consumer thread that tensor `v` takes (its elements spread over the warps)."""
    n = 1
    for d in v.type.shape:
        n *= d
    return -(-n * bits // 32 // (num_warps * 32))


class _Loop:
    """The consumers' key loop read back: its two dots, their waits, the stage release, the turns."""

    def __init__(self, for_op: Op, num_warps: int = 8):
        self.for_op = f = for_op
        self.body = body = f.regions[0]
        ops = body.ops
        if len(ops) < 3 or ops[0].name != "ttg.memdesc_index" or ops[1].name != "ttg.mbarrier_wait":
            raise _Skip("the loop does not open with the wait for its stage (not a warp-specialized consumer loop)")
        self.full, self.read_slot = ops[0].operands
        dots = [o for o in ops if o.name == "tt.dot"]
        if len(dots) != 2 or any(o.name == "tt.dot" for o in f.walk() if o.block is not body):
            raise _Skip("not attention's two dots")
        self.first, self.second = first, second = dots
        if "mma" not in first.attrs or not second.attrs.get("wgmma_async"):
            raise _Skip("p·v is not an asynchronous wgmma kept in flight")
        y = body.terminator
        if second.result.uses != [y]:
            raise _Skip("p·v's result is read in the loop (only the next iteration may wait for it)")
        self.k = y.operands.index(second.result)  # the accumulator's slot among the iter args
        acc_arg = body.args[self.k + 1]
        self.s_wait = None  # one warpgroup (no turns): the scores' wgmma waits for itself
        if first.attrs.get("wgmma_async"):
            waits = [u for u in first.result.uses]
            if len(waits) != 1 or waits[0].name != "ttg.dot_wait" or int(waits[0].attrs.get("pending", 0)) != 0:
                raise _Skip("the scores are not waited for once, at once")
            self.s_wait = waits[0]
        if len(acc_arg.uses) != 1 or acc_arg.uses[0].name != "ttg.dot_wait" or acc_arg.uses[0].block is not body:
            raise _Skip("the carried accumulator is not waited for once in the loop")
        self.acc_wait = acc_arg.uses[0]
        i_first, i_second = ops.index(first), ops.index(second)
        if (self.s_wait is not None and not ops.index(self.s_wait) < i_second) or \
                not i_first < ops.index(self.acc_wait) < i_second:
            raise _Skip("the waits do not precede p·v")
        self.turn_pass = next_op(first) if _turn(next_op(first), "pass") else None
        prev = ops[i_second - 1]
        if prev.name == "ttg.memdesc_index" and prev.result.uses == [second] and prev.operands[1] is self.read_slot:
            self.v_view, prev = prev, ops[i_second - 2]
        else:
            raise _Skip("p·v does not read V from the stage the loop waited for")
        self.turn_wait = prev if _turn(prev, "wait") else None
        if (self.turn_pass is None) != (self.turn_wait is None):
            raise _Skip("the turns are not taken around both dots")
        a, _, c = second.operands
        from ..codegen.lower_warp_specialize import registers

        # under the softmax: the accumulator and p (A operand) of the p·v in flight, and the scores
        need = _registers(c, num_warps) + _registers(a, num_warps, 16) + _registers(first.result, num_warps)
        budget = registers(num_warps)[2]
        if need + REGISTER_MARGIN > budget:
            raise _Skip(f"about {need + REGISTER_MARGIN} registers per thread with p·v in flight under the softmax, "
                        f"{budget} available")
        for v in (a, c):
            d = v.defining_op
            if d is None or d.block is not body or ops.index(d) > i_second:
                raise _Skip("p·v's operands are not computed in the loop before it")
        # the release of the stage the previous iteration read: arrive(empty[write], iv != lb)
        arrives = [o for o in ops if o.name == "ttg.mbarrier_arrive"]
        if len(arrives) != 1:
            raise _Skip("the loop does not release one stage per iteration")
        self.arrive = arrives[0]
        ev, pred = self.arrive.operands
        self.ev_op, self.pred_op = ev.defining_op, pred.defining_op
        if (self.ev_op is None or self.ev_op.name != "ttg.memdesc_index" or self.pred_op is None
                or self.pred_op.block is not body or ev.uses != [self.arrive] or pred.uses != [self.arrive]):
            raise _Skip("the stage release is not the one warp_specialize makes")
        self.empty, self.write_slot = self.ev_op.operands
        if self.write_slot not in body.args[1:] or self.read_slot not in body.args[1:]:
            raise _Skip("the stages are not carried by the loop")
        moved = {id(o) for o in (first, second, self.s_wait, self.acc_wait, self.arrive, self.ev_op, self.pred_op,
                                 self.v_view, self.turn_pass, self.turn_wait, ops[0], ops[1]) if o is not None}
        for o in ops[:-1]:
            if id(o) not in moved and not is_pure(o):
                raise _Skip(f"{o.name} ({_line(o)}) in the loop has effects the reordering could move")
        for o in ops[i_second + 1:-1]:
            if not is_pure(o) or any(isinstance(r.type, TensorType) for r in o.results):
                raise _Skip(f"{o.name} ({_line(o)}) after p·v is not the stage rotation")
        # after the loop: [finish], the final wait on the accumulator, the release of the last stage
        outer = f.block.ops
        after = outer[outer.index(f) + 1:]
        nxt = after[0] if after else None
        self.finish = nxt if _turn(nxt, "finish") else None
        waits = [u for u in f.results[self.k].uses if u.name == "ttg.dot_wait"]
        if len(waits) != 1 or len(f.results[self.k].uses) != 1:
            raise _Skip("the loop's accumulator is not waited for once after it")
        self.final_wait = waits[0]
        ws = f.results[body.args.index(self.write_slot) - 1]
        last = [u for u in ws.uses if u.name == "ttg.memdesc_index" and u.operands[0] is self.empty]
        if len(last) != 1 or len(last[0].result.uses) != 1 or last[0].result.uses[0].name != "ttg.mbarrier_arrive":
            raise _Skip("the last stage is not released after the loop")
        self.last_ev, self.last_arrive = last[0], last[0].result.uses[0]


def _softmax_results(lp: _Loop, wait: Op) -> list:
    """The loop-carried tensors the body computes from the scores before `wait` (the running row max and sum)."""
    body = lp.body
    ops = body.ops
    before = {id(o) for o in ops[:ops.index(wait)]}
    seen, work = set(), [lp.s_wait.result]
    while work:  # the ops that read the scores, directly or not
        for u in work.pop().uses:
            t = top_level(u, body) if u.block is not None else None
            if t is not None and id(t) not in seen and id(t) in before:
                seen.add(id(t))
                work.extend(t.results)
    y = body.terminator
    return [v for i, v in enumerate(y.operands) if i != lp.k and isinstance(v.type, TensorType)
            and v.defining_op is not None and id(v.defining_op) in seen]


def _prologue(lp: _Loop, has) -> Op:
    """`if lb < ub`: the first iteration's scores and softmax; yields the iter args for the loop (the accumulator's
    slot: acc' scaled, not yet multiplied with v), then p16 and the stage it read."""
    f, body = lp.for_op, lp.body
    inits = f.operands[3:]
    skip = {id(o) for o in (lp.second, lp.v_view, lp.turn_wait, lp.acc_wait, lp.arrive, lp.ev_op, lp.pred_op,
                            body.terminator) if o is not None}
    then = Block()
    m = {id(body.args[0]): f.operands[0]}
    m.update({id(a): v for a, v in zip(body.args[1:], inits)})
    m[id(lp.acc_wait.result)] = inits[lp.k]
    for o in body.ops:
        if id(o) not in skip:
            then.append(o.clone(m))
    y = body.terminator
    a, _, c = lp.second.operands
    outs = [m.get(id(v), v) for v in y.operands]
    outs[lp.k] = m[id(c)]
    then.append(Op("scf.yield", outs + [m[id(a)], m[id(lp.read_slot)]], loc=y.loc))
    other = Block()
    zero = other.append(Op("arith.constant", [], [a.type], {"value": 0.0}, loc=f.loc)).result
    other.append(Op("scf.yield", list(inits) + [zero, inits[body.args.index(lp.read_slot) - 1]], loc=f.loc))
    types = [v.type for v in inits] + [a.type, I32]
    op = Op("scf.if", [has], types, {}, [then, other], f.loc,
            [r.hint for r in f.results] + ["p_first", "first_stage"])
    insert_before(f, op)
    return op


def _overlap(lp: _Loop) -> None:
    f, body, loc = lp.for_op, lp.body, lp.for_op.loc
    lb, ub, step = f.operands[:3]
    pre = Builder(f, loc)
    has = pre.op("arith.cmpi", [lb, ub], [int1], {"predicate": "slt"}).result
    pro = _prologue(lp, has)
    lb1 = Builder(f, loc).add(lb, step)
    # the body: p·v of the previous iteration right behind the scores, inside one turn
    a, _, c = lp.second.operands
    p_prev = body.add_arg(a.type, "p_prev")
    stage_prev = body.add_arg(I32, "stage_prev")
    acc_arg = body.args[lp.k + 1]
    ops = body.ops
    if lp.turn_wait is not None:
        move_before(lp.turn_wait, lp.first)
    anchor = lp.turn_pass if lp.turn_pass is not None else next_op(lp.first)
    move_before(lp.v_view, anchor)
    lp.v_view.set_operand(1, stage_prev)
    move_before(lp.second, anchor)
    lp.second.set_operand(0, p_prev)
    lp.second.set_operand(2, acc_arg)
    if lp.s_wait is None:  # the scores' wgmma issued without waiting, waited for behind p·v
        lp.first.attrs["wgmma_async"] = True
        lp.s_wait = Op("ttg.dot_wait", [lp.first.result], [lp.first.result.type], {}, (), loc,
                       [lp.first.result.hint])
        insert_before(next_op(anchor) if anchor is lp.turn_pass else anchor, lp.s_wait)
        lp.first.result.replace_all_uses_with(lp.s_wait.result)
        lp.s_wait.set_operand(0, lp.first.result)
    lp.s_wait.attrs["pending"] = 1  # p·v stays in flight under the softmax
    # p·v waited for right before the softmax first reads the accumulator, then its stage released
    w = lp.acc_wait
    w.set_operand(0, lp.second.result)
    users = [top_level(u, body) for u in w.result.uses]
    first_use = min(users, key=ops.index) if users else body.terminator
    move_before(w, first_use)
    # ptxas would hoist the wait to the softmax's first latency bubble: it is pinned after the carried softmax
    # values (the row sum adds up every exponential), see codegen/lower_wgmma.pin_before_wait
    for v in _softmax_results(lp, w):
        w.operands.append(v)
        v.uses.append(w)
    for o in (lp.arrive, lp.ev_op, lp.pred_op):
        o.erase()
    rel = Builder(body.terminator, loc)
    ev = rel.op("ttg.memdesc_index", [lp.empty, stage_prev], [lp.empty.type.tile()]).result
    rel.op("ttg.mbarrier_arrive", [ev, rel.op("arith.constant", [], [int1], {"value": 1}).result], [])
    # the yield: acc' (scaled, before p·v), p16 and this iteration's stage
    y = body.terminator
    y.set_operand(lp.k, c)
    for v in (a, lp.read_slot):
        y.operands.append(v)
        v.uses.append(y)
    n = len(f.operands) - 3
    f.set_operand(0, lb1)
    for i in range(n):
        f.set_operand(3 + i, pro.results[i])
    new = extend_for_iter_args(f, [pro.results[n], pro.results[n + 1]])
    lp.for_op = new
    # the epilogue: the last p·v (none when the loop ran no iteration)
    acc_last, p_last, stage_last = new.results[lp.k], new.results[n], new.results[n + 1]
    then = Block()
    if lp.turn_wait is not None:
        then.append(Op("ttg.warpgroup_turn", [], [], {"kind": "wait"}, loc=loc))
    view = then.append(Op("ttg.memdesc_index", [lp.v_view.operands[0], stage_last], [lp.v_view.result.type],
                          loc=lp.v_view.loc)).result
    pv = then.append(Op("tt.dot", [p_last, view, acc_last], [lp.second.result.type], dict(lp.second.attrs), (),
                        lp.second.loc, [lp.second.result.hint])).result
    done = then.append(Op("ttg.dot_wait", [pv], [pv.type], {"pending": 0}, loc=loc, result_hints=[pv.hint])).result
    ev = then.append(Op("ttg.memdesc_index", [lp.empty, stage_last], [lp.empty.type.tile()], loc=loc)).result
    one = then.append(Op("arith.constant", [], [int1], {"value": 1}, loc=loc)).result
    then.append(Op("ttg.mbarrier_arrive", [ev, one], [], loc=loc))
    then.append(Op("scf.yield", [done], loc=loc))
    other = Block()
    other.append(Op("scf.yield", [acc_last], loc=loc))
    epi = Op("scf.if", [has], [pv.type], {}, [then, other], loc, [pv.hint])
    insert_before(lp.finish if lp.finish is not None else next_op(new), epi)
    lp.final_wait.set_operand(0, epi.result)
    # the old release of the last stage after the loop: the epilogue's now
    pred = lp.last_arrive.operands[1].defining_op
    lp.last_arrive.erase()
    lp.last_ev.erase()
    if pred is not None and not pred.results[0].uses:
        pred.erase()


def run(module: Module, options=None) -> dict:
    stats = {"overlapped": 0}
    if not enabled() or getattr(options, "arch", 90) < 90:
        return stats
    why = []
    fn = module.kernel
    for op in list(fn.walk()):
        if op.name != "scf.for" or "pipelined_stages" not in op.attrs or op.block is None:
            continue
        if not any(o.name == "ttg.warp_specialize" for o in op.block.ops):
            continue
        try:
            lp = _Loop(op, getattr(options, "num_warps", 4))
        except _Skip as e:
            why.append(f"{_line(op)}: {e}")
            continue
        _overlap(lp)
        stats["overlapped"] += 1
    if why:
        stats["not_overlapped"] = why
    return stats
