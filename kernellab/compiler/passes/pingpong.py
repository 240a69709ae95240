"""FlashAttention-3's ping-pong, its last piece (sm_90): in a warp-specialized loop whose two consumer warpgroups take
turns on the tensor cores, only warpgroup 0 polls the stage's "full" mbarrier; warpgroup 1 learns that the stage has
landed from the turn itself. Off by default: KERNELLAB_ATTN_PINGPONG=1 turns it on (part of the disk-cache key).

What is already there (and stays): `warp_specialize` (or `warpgroup_turns` for cp.async loops) makes attention's two
consumer warpgroups alternate on named barriers 1 and 2 (`ttg.warpgroup_turn`: warpgroup 1's wgmmas are issued
while warpgroup 0 runs its softmax and back), and `overlap_softmax` (KERNELLAB_ATTN_OVERLAP=1) moves the p·v of
block j-1 into the turn of the scores of block j. Both are FA3's schedule (`warp_scheduler_barrier_sync/arrive`,
hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp) in its two forms. What FA3 does beside it, and this pass adds: its
consumers wait for a K or V stage only in warpgroup 0 (`if (!UseSchedulerBarrier || warp_group_idx == 0)
consumer_wait(...)`), since the turns order the warpgroups:

    warpgroup 0:   ... wait full[j] ... [turn k] ... reads of stage j ... pass (turn k to warpgroup 1)
    warpgroup 1:   ...  (skipped)   ... [turn k: after warpgroup 0's pass k] ... reads of stage j ...

A wait qualifies when the next turn op after it in its block is
  - `pass`: the wait lies inside a turn (k); warpgroup 0 passed turn k only after its own wait, and warpgroup 1 holds
    turn k from before the wait on (the form `warp_specialize` leaves: wait, q·kT, pass), or
  - `wait` with no dot between: the stage is read only after the turn is taken, which warpgroup 0 passed after its
    own wait (the form `overlap_softmax` leaves: wait full[j], take the turn, q·kT_j and p·v_{j-1}, pass).
Both warpgroups run the same turns in the same order (the loop bounds do not depend on the warpgroup), so turn k
is the same program point in both. The mbarrier's completion, observed by warpgroup 0's threads, reaches warpgroup
1 through the named barrier (bar.arrive releases, bar.sync acquires); the stage is read by wgmma (async proxy), as
the TMA wrote it. Waits whose copies were cp.async (`fence_proxy`: every thread fences its own generic-proxy view)
and the producer's waits are left alone.

The mark is the wait's attribute `warpgroup = 0` (codegen predicates the poll on `warp / 4 == 0`).

The turn is taken where the schedule puts it only if ptxas leaves it there: it hoists `bar.sync` above register-only
math into the first latency bubble (see codegen/lower_wgmma.pin_before_wait), and a warpgroup that takes its next
turn right after the scores' wait holds it through its own softmax, so the other warpgroup's softmax can no longer
run under it. (Seen on the CPU: with KERNELLAB_REDUCE_TREE=1 the consumer loop's `BAR.SYNC` of the turn moved from
after the last MUFU.EX2 to right after the scores' wait.) So a turn `wait` in a loop body also takes as operands the
row statistics the body carries to the next iteration and computes before it (the new row max and row sum: the sum
adds up every exponential of the softmax); codegen stores them under a predicate that never holds right before the
bar.sync, which keeps it after the softmax. With overlap_softmax the turn is taken at the top of the body, before
any of them: nothing to pin.

It applies where
the kernel is warp-specialized, has two consumer warpgroups (8 warps) taking turns (a `start` turn before the
waits) and at least two dots between the start and the finish turn (attention's scores and p·v); every other
kernel is unchanged. Why a turn-taking region was left alone is in the stats (`not_pingponged`).
"""
from __future__ import annotations

from ..ir import Module, Op
from ..switches import switch
from ..types import TensorType, float32

NAME = "pingpong"
DESCRIPTION = "sm_90 attention ping-pong: the turns tell warpgroup 1 a stage has landed (only warpgroup 0 polls it)"


def enabled() -> bool:
    """KERNELLAB_ATTN_PINGPONG=1 turns the pass on (default off until timed on the GPU)."""
    return switch("KERNELLAB_ATTN_PINGPONG", False)


def _line(op: Op) -> str:
    return f"line {op.loc.line if op.loc else '?'}"


def _turn(op: Op, *kinds) -> bool:
    return op.name == "ttg.warpgroup_turn" and (not kinds or op.attrs.get("kind") in kinds)


def _full_ring_wait(op: Op) -> bool:
    """A consumer's wait on a stage's full mbarrier that a TMA copy completes (not an empty one, no proxy fence)."""
    if op.name != "ttg.mbarrier_wait" or op.attrs.get("fence_proxy") or len(op.operands) > 2:
        return False
    idx = op.operands[0].defining_op
    alloc = idx.operands[0].defining_op if idx is not None and idx.name == "ttg.memdesc_index" else None
    return alloc is not None and alloc.name == "ttg.mbarrier_alloc" and alloc.attrs.get("purpose") != "empty"


def _covered(wait: Op) -> bool:
    """Whether the turns order warpgroup 1's reads of the stage after warpgroup 0's wait (the module's docstring)."""
    ops = wait.block.ops
    between = []
    for o in ops[ops.index(wait) + 1:]:
        if _turn(o):
            if o.attrs.get("kind") == "pass":
                return True
            return o.attrs.get("kind") == "wait" and not any(d.name == "tt.dot" for b in between for d in b.walk())
        if any(_turn(d) for d in o.walk()):  # a turn nested in control flow: no claim about it
            return False
        between.append(o)
    return False


def _row_statistics(turn: Op) -> list:
    """The values to take the turn after: 1-D float tensors the loop body yields that it computes before `turn`
    (not a dot's result)."""
    ops = turn.block.ops
    y = ops[-1]
    if y.name != "scf.yield" or turn.operands:
        return []
    before = {id(o) for o in ops[:ops.index(turn)]}
    out = []
    for v in y.operands:
        d = v.defining_op
        t = v.type
        if (d is not None and id(d) in before and d.name not in ("tt.dot", "ttg.dot_wait") and
                isinstance(t, TensorType) and len(t.shape) == 1 and t.scalar == float32
                and all(v is not o for o in out)):
            out.append(v)
    return out


def _regions(block_ops: list):
    """(start, finish, ops between) of each turn-taking run in a block."""
    start = None
    for i, o in enumerate(block_ops):
        if _turn(o, "start"):
            start = i
        elif _turn(o, "finish") and start is not None:
            yield block_ops[start], o, block_ops[start + 1:i]
            start = None


def run(module: Module, options=None) -> dict:
    stats = {"pingponged": 0, "waits_for_warpgroup0": 0, "turns_pinned": 0}
    if not enabled() or getattr(options, "arch", 90) < 90 or getattr(options, "num_warps", 4) != 8:
        return stats
    fn = module.kernel
    if not any(o.name == "ttg.warp_specialize" for o in fn.walk()):
        return stats
    why = []
    blocks = {id(o.block): o.block for o in fn.walk() if _turn(o, "start")}
    for block in blocks.values():
        for start, _finish, inside in list(_regions(list(block.ops))):
            nested = [d for o in inside for d in o.walk()]
            if sum(d.name == "tt.dot" for d in nested) < 2:
                why.append(f"{_line(start)}: fewer than two dots take turns")
                continue
            waits = [d for d in nested if _full_ring_wait(d)]
            marked = [w for w in waits if _covered(w)]
            if not marked:
                why.append(f"{_line(start)}: no full-stage wait that a turn covers")
                continue
            for w in marked:
                w.attrs["warpgroup"] = 0
            for t in [d for d in nested if _turn(d, "wait")]:
                pins = _row_statistics(t)
                if pins:
                    for v in pins:
                        t.operands.append(v)
                        v.uses.append(t)
                    stats["turns_pinned"] += 1
            stats["pingponged"] += 1
            stats["waits_for_warpgroup0"] += len(marked)
    if why:
        stats["not_pingponged"] = why
    return stats
