"""Software-pipeline the tiles a loop's tensor-core `dot` reads: copy them from global memory
straight into multi-buffered shared memory with cp.async, `num_stages - 1` iterations ahead.

Without this pass every iteration loads its tiles into registers, waits for them, writes them to
shared memory and only then runs the mma: the tensor cores idle for a full memory latency per
iteration. Here, for a loop `for i in range(lb, ub, step)` with S = num_stages stages:

    prologue:  for s in 0 .. S-2: async_copy(tiles of iteration s -> stage s); async_commit
    body i:    async_wait(pending = S-2) + bar.sync     # iteration i's tiles have landed
               async_copy(tiles of iteration i+S-1 -> stage (i+S-1) % S); async_commit
               dot(stage i % S, ...)                     # the math overlaps S-1 copies in flight
    after:     async_wait(pending = 0)                   # nothing writes the buffers any more

The stage written at iteration i is the one the dot read at iteration i-1; the bar.sync of the wait
proves every warp has finished that dot.

A plain wgmma accumulation (`acc = tl.dot(a, b, acc)`) keeps one wgmma group in flight instead:

    body i:    async_wait(pending = S-2) + bar.sync
               dot(stage i % S) {wgmma_async}; dot_wait(pending = 1)   # iteration i-1's wgmma is done
               bar.sync                                                 # ... in every warpgroup
               async_copy(tiles of iteration i+S-1 -> stage (i-1) % S); async_commit
    after:     dot_wait(pending = 0); async_wait(pending = 0)

The final dot_wait comes first after the loop: with other code between the loop and it, ptxas
serializes every wgmma of the kernel (its warning C7514). Copies for iterations past the end are predicated off
(cp.async with a source size of 0 writes zeros and reads nothing).

An operand qualifies when it is a `tt.load` in the loop body used only by the dot, with fp16/bf16
elements, a zero or absent `other`, accesses of 4 to 16 bytes, and an address that only depends on
the induction variable, loop invariants and loop-carried values whose updates are themselves
recomputable. The copies use the load's own (coalesced) layout; the tile is stored in shared memory
contiguous along the same dimension as in global memory, each row padded by 16 bytes so ldmatrix
reads are free of bank conflicts. Loops that do not qualify keep the register path and the reason is
recorded in the pass's stats.

Block-pointer loads (`tl.load(block_ptr, boundary_check=...)`, the pointer carried by `tl.advance`) qualify
too: their copies get the tile's addresses and in-bounds mask from `ttg.block_ptr_addresses` (out-of-bounds
runs become zeros, so only padding_option "zero" qualifies), `vec` from the block's strides and offsets
(gpu/block_ptr.py). On sm_90, a block-pointer tile of a swizzled wgmma stage whose tensor the host can describe
(base, shape and strides are kernel arguments, 16-byte aligned) is filled by TMA instead:

    before:    tensor maps (kernel parameters), one mbarrier per stage
    issue:     mbarrier_expect(stage's bytes) + tma_copy(tiles -> stage)          # one thread
    body i:    mbarrier_wait(stage i % S, phase) [+ bar.sync unless a wgmma overlaps]
    after:     mbarrier_inval

The phase parity is carried by the loop and flips each time the read stage wraps. Why an operand keeps
cp.async is recorded in the stats (`no_tma`).

Attention with two warpgroups (8 warps, sm_90) drops the CTA-wide barriers from its loop: the copies into a
stage complete on the stage's "full" mbarrier (cp.async.mbarrier.arrive.noinc, every thread), each warp
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

A tile loaded once outside any loop and read only by tensor-core dots (attention's queries) is copied
into a one-stage buffer where it was loaded, so it neither occupies registers nor gets staged again by
every dot.
"""
from __future__ import annotations

from ..gpu import block_ptr
from ..gpu.axis_info import AxisAnalysis
from ..gpu.layouts import Blocked, default_blocked
from ..gpu.scratch import MMA_PAD, _numel, is_wgmma, scratch_bytes, wgmma_staging
from ..gpu.smem_layout import swizzled
from ..ir import Module, Op
from ..ops import is_pure
from ..rewrite import extend_for_iter_args, insert_before, int_const, pure_slice
from ..types import DTYPES, MemDescType, PointerType, TensorType, int1
from . import dce

NAME = "pipeline_dot_operands"
DESCRIPTION = "multi-buffer the tiles a tensor-core dot reads: cp.async copies num_stages-1 iterations ahead"

I32 = DTYPES["i32"]
I64 = DTYPES["i64"]


class _BlockPtrs:
    """Block-pointer loads (`tl.load(block_ptr, boundary_check=...)`): the vector width and layout of their
    cp.async copies, and whether a TMA tensor map can fill their stages instead (sm_90, swizzled stages)."""

    def __init__(self, module: Module, options):
        self.fn = module.kernel
        self.num_warps = getattr(options, "num_warps", 4)
        self.arch = getattr(options, "arch", 90)
        self.use_tma = getattr(options, "tma", True)
        self._axis = None
        self._vec: dict = {}

    @property
    def axis(self) -> AxisAnalysis:
        if self._axis is None:
            self._axis = AxisAnalysis(self.fn)
        return self._axis

    def vec_and_why(self, ld: Op):
        if id(ld) not in self._vec:
            vec, why = block_ptr.copy_vec(ld, self.axis)
            t = ld.result.type
            vec = min(vec, max(1, _numel(t.shape) // (32 * self.num_warps)))  # no more than a thread holds
            if why is None and vec * t.scalar.bits // 8 < 4:
                why = f"{vec * t.scalar.bits // 8}-byte runs per thread (cp.async moves 4, 8 or 16 bytes)"
            self._vec[id(ld)] = (vec, why)
        return self._vec[id(ld)]

    def why_not(self, ld: Op) -> str | None:
        pad = ld.attrs.get("padding", "zero")
        if pad != "zero":
            return f'padding_option="{pad}" (cp.async and TMA fill out-of-bounds elements with zeros)'
        return self.vec_and_why(ld)[1]

    def tma(self, ld: Op, buf_t: MemDescType):
        """(tensor-map operands, "") when TMA can fill this load's stages, else (None, why not)."""
        if self.arch < 90:
            return None, f"sm_{self.arch} has no TMA"
        if not self.use_tma:
            return None, "TMA disabled (enable_tma=False)"
        if not buf_t.swizzle:
            return None, "the dot reads padded rows (mma.sync); TMA fills swizzled wgmma stages only"
        t = ld.result.type
        if t.shape[t.layout.order[1]] > 256:
            return None, "the tile is over 256 rows (a TMA box dim holds at most 256)"
        return block_ptr.tma_operands(ld, self.fn.args, self.axis)

    def tensormap(self, bld: "_Builder", ld: Op, operands, buf_t: MemDescType, hint: str):
        """The `ttg.tensormap` a TMA copy of this tile reads: the kernel arguments (or constants) that describe
        the whole tensor; the box is one swizzle atom wide (all of the tile's rows)."""
        host = [v if v.defining_op is None else bld.const(v.defining_op.attrs["value"], I64) for v in operands]
        t = ld.result.type
        box = [buf_t.swizzle // (t.scalar.bits // 8), t.shape[t.layout.order[1]]]
        return bld.op("ttg.tensormap", host, [I64], {"box": box, "swizzle": buf_t.swizzle}, [hint],
                      loc=ld.loc).result

    def copy(self, bld: "_Builder", ld: Op, bp, view, pred):
        """cp.async of a block pointer's tile: its addresses and bounds mask in a layout holding `vec`
        contiguous elements per thread, then the copy (out-of-bounds runs become zeros)."""
        t = ld.result.type
        vec = self.vec_and_why(ld)[0]
        layout = default_blocked(t.shape, self.num_warps, order=t.layout.order, spt_fast=vec)
        addr = bld.op("ttg.block_ptr_addresses", [bp], [TensorType(t.shape, PointerType(t.scalar), layout),
                                                        TensorType(t.shape, int1, layout)],
                      {"boundary_check": list(ld.attrs.get("boundary_check", []))}, loc=ld.loc)
        bld.op("ttg.async_copy", [addr.results[0], view, pred, addr.results[1]], [], {"vec": vec}, loc=ld.loc)


def _copyable(ld: Op, bps: _BlockPtrs) -> str | None:
    """Why cp.async cannot move this load's tile into shared memory, or None when it can."""
    if ld.attrs.get("volatile"):
        return "volatile load"
    t = ld.result.type
    if t.scalar.ir not in ("f16", "bf16"):
        return f"{t.scalar.ir} elements"
    if ld.operands[0].type.is_block_ptr():
        return bps.why_not(ld)
    if not isinstance(t.layout, Blocked):
        return "the load has no blocked layout"
    vec = ld.attrs.get("vec", 1)
    if vec * 2 not in (4, 8, 16):
        return f"{vec * 2}-byte accesses (cp.async moves 4, 8 or 16 bytes)"
    if len(ld.operands) > 2:
        other = ld.operands[2].defining_op
        if other is None or other.name != "arith.constant" or other.attrs.get("value") not in (0, 0.0):
            return "a non-zero `other` (cp.async fills masked-off elements with zeros)"
    return None


def _operand_load(dot: Op, index: int, body, bps: _BlockPtrs):
    """(load op, [ops to erase]) feeding dot operand `index` directly, or (None, reason)."""
    v = dot.operands[index]
    chain = []
    op = v.defining_op
    if op is not None and op.name == "ttg.convert_layout" and op.block is body:
        if len(op.result.uses) != 1:
            return None, "the converted tile has other users"
        chain.append(op)
        v = op.operands[0]
        op = v.defining_op
    if op is None or op.name != "tt.load" or op.block is not body:
        return None, "not loaded in the loop body"
    if len(op.result.uses) != 1:
        return None, "the loaded tile has other users"
    why = _copyable(op, bps)
    return (op, chain) if why is None else (None, why)


def _stage_invariant_operands(module: Module, stats: dict, bps: _BlockPtrs) -> None:
    """A tile loaded once and only read by tensor-core dots (attention's q) is copied into shared memory
    once, right where it was loaded, instead of being held in registers and staged again by every dot."""
    for ld in list(module.kernel.walk()):
        if ld.name != "tt.load" or ld.block is None or not ld.result.uses:
            continue
        uses = ld.result.uses
        if not all(u.name == "tt.dot" and "mma" in u.attrs for u in uses):
            continue
        slots = {i for u in uses for i, v in enumerate(u.operands[:2]) if v is ld.result}
        if len(slots) != 1 or any(u.operands[0] is u.operands[1] for u in uses):
            continue
        if _in_a_loop(ld) or _copyable(ld, bps) is not None:
            continue  # loads that run every iteration are the pipeliner's; the others stay in registers
        index = slots.pop()
        t = ld.result.type
        buf_t = _buffer_type(uses[0], t, 1)
        if buf_t is None or any(_buffer_type(u, t, 1) != buf_t for u in uses):
            continue
        bld = _Builder(ld, ld.loc)
        buf = bld.op("ttg.local_alloc", [], [buf_t], {"stages": 1, "operand": "ab"[index]},
                     [f"{'ab'[index]}_tile"]).result
        view = bld.op("ttg.memdesc_index", [buf, bld.const(0)], [buf.type.tile()]).result
        true = bld.op("arith.constant", [], [int1], {"value": True}).result
        if ld.operands[0].type.is_block_ptr():
            bps.copy(bld, ld, ld.operands[0], view, true)
        else:
            operands = [ld.operands[0], view, true]
            if len(ld.operands) > 1:
                operands.append(ld.operands[1])
            bld.op("ttg.async_copy", operands, [], {"vec": ld.attrs.get("vec", 1)})
        bld.op("ttg.async_commit", [], [])
        bld.op("ttg.async_wait", [buf], [], {"pending": 0})
        for u in list(uses):
            u.set_operand(index, view)
        ld.erase()
        stats["staged_once"] += 1
        stats["buffers"] += 1


def _overlappable_wgmma(body, dots, targets, stages: int):
    """(dot, iter-arg index) when the loop is a plain wgmma accumulation (`acc = tl.dot(a, b, acc)`, both
    tiles pipelined, acc only yielded) that can leave one wgmma in flight across iterations. The copies then
    move to the end of the body, after the wait (wait_group 1) and a barrier: the stage they refill was last
    read by the previous iteration's wgmma, which every warpgroup has finished by then."""
    if stages < 2 or len(dots) != 1 or not is_wgmma(dots[0]):
        return None
    dot = dots[0]
    if {i for d, i in targets if d is dot} != {0, 1}:
        return None
    acc = dot.operands[2]
    args = list(body.args[1:])
    if acc not in args or len(acc.uses) != 1:
        return None
    j = args.index(acc)
    y = body.terminator
    if dot.result.uses != [y] or y.operands[j] is not dot.result:
        return None
    return dot, j


def _overlappable_chain(body, dots, targets, stages: int):
    """(first dot, second dot, iter-arg index) when the loop is attention's pair of wgmma dots: scores
    `s = tl.dot(q, kT)` read at once, then `acc = tl.dot(p, v, f(acc))` whose result is only yielded. The
    second dot then stays in flight into the next iteration, where it runs on the tensor cores behind the
    next scores' dot; the carried acc is read only after that dot's wait. Measured on the H200 (same run):
    one warpgroup (hd64, 4 warps) 0.98-1.02x Triton with the overlap against 0.96-0.99x without; the
    copies right after that wait beat copies at the end of the body (after the second dot's issue)."""
    if stages < 2 or len(dots) != 2 or not all(is_wgmma(d) for d in dots):
        return None
    ops = list(body.ops)
    first, second = sorted(dots, key=ops.index)
    if any(d not in (first, second) for d, _ in targets) or (second, 1) not in targets:
        return None
    y = body.terminator
    if second.result.uses != [y]:
        return None
    j = next((i for i, v in enumerate(y.operands) if v is second.result), None)
    if j is None or j >= len(body.args) - 1:
        return None
    acc = body.args[1 + j]
    if acc in first.operands or not _derived_from(second.operands[2], acc, body):
        return None
    at = ops.index(first)
    if any(ops.index(_top_level(u, body)) <= at for u in acc.uses):
        return None  # the carried acc is read before the scores' dot: no room for the wait
    return first, second, j


def _top_level(op: Op, body) -> Op:
    while op.block is not body:
        op = op.block.parent
    return op


def _derived_from(v, arg, body, depth: int = 8) -> bool:
    """Whether `v` is the block argument `arg` or computed from it by pure ops of the body (acc * alpha)."""
    if v is arg:
        return True
    d = v.defining_op
    if depth == 0 or d is None or d.block is not body or d.regions or not is_pure(d):
        return False
    return any(_derived_from(o, arg, body, depth - 1) for o in d.operands)


def _buffer_type(dot: Op, t, stages: int):
    """The shared-memory encoding the dot reads this tile in: swizzled for wgmma, padded rows for ldmatrix
    (None when wgmma cannot read it)."""
    shape = (stages,) + tuple(t.shape)
    if is_wgmma(dot):
        return swizzled(shape, t.scalar, tuple(t.layout.order))
    return MemDescType(shape, t.scalar, tuple(t.layout.order), MMA_PAD)


def _in_a_loop(op: Op) -> bool:
    b = op.block
    while b is not None and b.parent is not None:
        if b.parent.name in ("scf.for", "scf.while"):
            return True
        b = b.parent.block
    return False


def _carried_closure(for_op: Op, slices) -> set | None:
    """Indices of the iter args the address slices need, closed under their own updates; None when an
    update cannot be recomputed from pure ops."""
    body = for_op.regions[0]
    iter_args = body.args[1:]
    yield_op = body.terminator
    pos = {id(a): i for i, a in enumerate(iter_args)}
    need, work = set(), []

    def scan(ops):
        for op in ops:
            for v in op.operands:
                if id(v) in pos and pos[id(v)] not in need:
                    need.add(pos[id(v)])
                    work.append(pos[id(v)])

    for ld, sl in slices:
        scan(sl + [ld])
    while work:
        i = work.pop()
        y = yield_op.operands[i]
        d = y.defining_op
        if d is None or d.block is not body:
            continue
        sl = pure_slice(d, body)
        if sl is None or d.regions or not is_pure(d):
            return None
        scan(sl + [d])
    return need


class _Builder:
    """Create ops before an anchor, with the loop's location."""

    def __init__(self, anchor: Op, loc):
        self.anchor, self.loc = anchor, loc

    def op(self, name, operands, types, attrs=None, hints=None, loc=None):
        o = Op(name, operands, types, attrs or {}, (), loc or self.loc, hints)
        insert_before(self.anchor, o)
        return o

    def const(self, value, t=I32):
        return self.op("arith.constant", [], [t], {"value": value}).result

    def add(self, a, b):
        return self.op("arith.addi", [a, b], [a.type]).result

    def lt(self, a, b):
        return self.op("arith.cmpi", [a, b], [int1], {"predicate": "slt"}).result


def _issue(bld: _Builder, plans, bufs, slot, mapping, pred, bps: _BlockPtrs, tma=None):
    """Clone each operand's address computation under `mapping` and start its copy into `slot`: cp.async
    (one commit group for all), or TMA for the stages `tma = (mbarriers, tensor map per plan or None)` names,
    announced to the stage's mbarrier first."""
    bars, descs = tma if tma is not None else (None, [None] * len(plans))
    bar = None
    for (ld, sl), buf, desc in zip(plans, bufs, descs):
        for op in sl:
            if id(op.results[0]) not in mapping:
                insert_before(bld.anchor, op.clone(mapping))
        ptrs = mapping.get(id(ld.operands[0]), ld.operands[0])
        if desc is not None and bar is None:
            bar = bld.op("ttg.memdesc_index", [bars, slot], [bars.type.tile()]).result
            nbytes = sum(_numel(p[0].result.type.shape) * p[0].result.type.scalar.bits // 8
                         for p, d in zip(plans, descs) if d is not None)
            bld.op("ttg.mbarrier_expect", [bar, pred], [], {"bytes": nbytes})
        view = bld.op("ttg.memdesc_index", [buf, slot], [buf.type.tile()], loc=ld.loc).result
        if desc is not None:
            bld.op("ttg.tma_copy", [desc, ptrs, view, bar, pred], [], loc=ld.loc)
        elif ld.operands[0].type.is_block_ptr():
            bps.copy(bld, ld, ptrs, view, pred)
        else:
            operands = [ptrs, view, pred]
            if len(ld.operands) > 1:
                operands.append(mapping.get(id(ld.operands[1]), ld.operands[1]))
            bld.op("ttg.async_copy", operands, [], {"vec": ld.attrs.get("vec", 1)}, loc=ld.loc)
    if any(d is None for d in descs):
        bld.op("ttg.async_commit", [], [])



def _advance(bld: _Builder, for_op: Op, carried, mapping) -> dict:
    """The carried values one iteration later: each update's computation cloned under `mapping`."""
    body = for_op.regions[0]
    iter_args, yield_op = body.args[1:], body.terminator
    inner = dict(mapping)
    nxt = {}
    for i in sorted(carried):
        y = yield_op.operands[i]
        d = y.defining_op
        if d is not None and d.block is body:
            for op in pure_slice(d, body) + [d]:
                if id(op.results[0]) not in inner:
                    insert_before(bld.anchor, op.clone(inner))
        nxt[id(iter_args[i])] = inner.get(id(y), mapping.get(id(y), y))
    return nxt




def _warpgroups_apart(for_op: Op, dots, targets) -> bool:
    """Whether the loop can run with two warpgroups that never meet: 8 warps, each dot splitting its rows between
    the warpgroups (mma [8, 1]) and staging no operand the pipeline does not fill, and no other op of the body
    needing a CTA-wide barrier (shared-memory scratch for a cross-warp reduction or a layout conversion, a debug
    barrier), which would deadlock against the turns."""
    for d in dots:
        if list(d.attrs.get("mma", ())) != [8, 1]:
            return False
        if any(enc is not None and (d, i) not in targets for i, enc in enumerate(wgmma_staging(d))):
            return False
    erased = {id(ld) for (d, i) in targets for ld in [d.operands[i].defining_op] if ld is not None}
    return not any(o is not for_op and o.name != "tt.dot" and id(o) not in erased and
                   (o.name in ("ttg.barrier", "tt.debug_barrier") or scratch_bytes(o)[0]) for o in for_op.walk())


def _arrive_when_copied(bld: _Builder, full, slot) -> None:
    """Every thread's copies into stage `slot` so far count as one arrival on its full mbarrier once they land."""
    bld.op("ttg.async_arrive", [bld.op("ttg.memdesc_index", [full, slot], [full.type.tile()]).result], [])


def _release_and_acquire(at: _Builder, acquire: _Builder, empty, write_slot, empty_phase, iv, lb) -> None:
    """Each warp releases the stage its previous iteration read (none at the first iteration) at `at`, and waits
    at `acquire` until every warp has released it, before refilling it."""
    bar = at.op("ttg.memdesc_index", [empty, write_slot], [empty.type.tile()]).result
    not_first = at.op("arith.cmpi", [iv, lb], [int1], {"predicate": "ne"}).result
    at.op("ttg.mbarrier_arrive", [bar, not_first], [])
    acquire.op("ttg.mbarrier_wait", [bar, empty_phase], [])


def _pipeline(for_op: Op, stages: int, stats: dict, bps: _BlockPtrs) -> None:
    body = for_op.regions[0]
    dots = [op for op in body.ops if op.name == "tt.dot" and "mma" in op.attrs]
    if not dots:
        return
    why = []
    step = int_const(for_op.operands[2])
    if stages < 2:
        why.append("num_stages < 2")
    if step is None or step <= 0:
        why.append("the loop step is not a positive constant")
    plans, chains, targets = [], [], []  # targets: (dot, operand index) reading each buffer
    for dot in dots:
        for index in (0, 1):
            if dot.operands[index].type.is_memdesc():
                continue  # already in shared memory (staged once before the loop)
            ld, chain = _operand_load(dot, index, body, bps)
            name = f"line {dot.loc.line if dot.loc else '?'} operand {'ab'[index]}"
            if ld is None:
                why.append(f"{name}: {chain}")
                continue
            sl = pure_slice(ld, body)
            if _buffer_type(dot, ld.result.type, 2) is None:
                why.append(f"{name}: its contiguous extent cannot be swizzled for wgmma")
                continue
            if sl is None:
                why.append(f"{name}: its address needs a value the loop cannot recompute")
                continue
            plans.append((ld, sl))
            chains.append(chain)
            targets.append((dot, index))
    carried = _carried_closure(for_op, plans) if plans else None
    if plans and carried is None:
        why.append("a loop-carried address update cannot be recomputed")
    if stages < 2 or step is None or step <= 0 or not plans or carried is None:
        stats["skipped"].append("; ".join(why))
        return
    stats["skipped"].extend(why)

    loc = for_op.loc
    lb, ub = for_op.operands[0], for_op.operands[1]
    iv, iter_args = body.args[0], body.args[1:]
    yield_op = body.terminator
    overlap = _overlappable_wgmma(body, dots, targets, stages)
    chain_overlap = None if overlap is not None else _overlappable_chain(body, dots, targets, stages)
    ahead = stages - 1  # iterations the copies run ahead
    pre = _Builder(for_op, loc)
    bufs, descs = [], []
    for (ld, _), (dot, index) in zip(plans, targets):
        buf_t = _buffer_type(dot, ld.result.type, stages)
        desc = None
        if ld.operands[0].type.is_block_ptr():
            operands, why = bps.tma(ld, buf_t)
            if operands is None:
                stats.setdefault("no_tma", []).append(f"line {dot.loc.line if dot.loc else '?'} operand "
                                                      f"{'ab'[index]}: {why}")
            else:
                desc = bps.tensormap(pre, ld, operands, buf_t, f"{'ab'[index]}_tensormap")
        attrs = {"stages": stages, "operand": "ab"[index]}
        if desc is not None:
            attrs["fill"] = "tma"
        bufs.append(pre.op("ttg.local_alloc", [], [buf_t], attrs, [f"{'ab'[index]}_stages"], loc=ld.loc).result)
        descs.append(desc)
    bars = None
    if any(d is not None for d in descs):
        bars = pre.op("ttg.mbarrier_alloc", [], [MemDescType((stages, 1, 1), I64, (1, 0))], {"stages": stages},
                      ["stage_bars"]).result
        stats["tma"] = stats.get("tma", 0) + sum(d is not None for d in descs)
    tma = (bars, descs) if bars is not None else None
    cp_bufs = [b for b, d in zip(bufs, descs) if d is None]
    rings = None
    if bps.arch >= 90 and tma is None and chain_overlap is not None and _warpgroups_apart(for_op, dots, targets):
        # attention with two warpgroups: every thread's copies into a stage complete on its "full" mbarrier, and
        # each warp releases a stage on its "empty" mbarrier once its wgmmas have read it, so no CTA-wide bar.sync
        # is left in the loop and the warpgroups can take turns (below). Measured on the H200: with one warpgroup,
        # or in the matmul loop, the mbarriers cost 2-6% against bar.sync, so those keep bar.sync
        full = pre.op("ttg.mbarrier_alloc", [], [MemDescType((stages, 1, 1), I64, (1, 0))],
                      {"stages": stages, "count": bps.num_warps * 32, "purpose": "full"}, ["full_bars"]).result
        empty = pre.op("ttg.mbarrier_alloc", [], [MemDescType((stages, 1, 1), I64, (1, 0))],
                       {"stages": stages, "count": bps.num_warps, "purpose": "empty"}, ["empty_bars"]).result
        rings = (full, empty)
        stats["mbarrier_sync"] = stats.get("mbarrier_sync", 0) + 1
    # prologue: stages 0 .. ahead-1 hold iterations 0 .. ahead-1
    state = {id(a): init for a, init in zip(iter_args, for_op.operands[3:])}
    for s in range(ahead):
        iv_s = lb if s == 0 else pre.add(lb, pre.const(s * step, lb.type))
        mapping = dict(state)
        mapping[id(iv)] = iv_s
        slot = pre.const(s)
        _issue(pre, plans, bufs, slot, mapping, pre.lt(iv_s, ub), bps, tma)
        if rings is not None:
            _arrive_when_copied(pre, rings[0], slot)
        state.update(_advance(pre, for_op, carried, mapping))
    # the loop carries: the address state S-1 iterations ahead, the stage to read and the stage to write
    ahead_args = {}
    for i in sorted(carried):
        a = iter_args[i]
        ahead_args[i] = body.add_arg(a.type, (a.hint or "v") + "_ahead")
    read_slot = body.add_arg(I32, "read_stage")
    write_slot = body.add_arg(I32, "write_stage")
    inits = [state[id(iter_args[i])] for i in sorted(carried)] + [pre.const(0), pre.const(ahead)]
    phase = empty_phase = None
    if tma is not None or rings is not None:  # parity of the phase the read stage completes next: flips at each wrap
        phase = body.add_arg(I32, "phase")
        inits.append(pre.const(0))
    if rings is not None:
        # parity of the release the write stage waits for: that of iteration i-1's tile; at i = 0 it is 1, the
        # phase before a fresh mbarrier's first, which counts as completed (the stage was never read)
        empty_phase = body.add_arg(I32, "empty_phase")
        inits.append(pre.const(1))

    first = body.ops[0]
    top = _Builder(first, loc)
    if tma is not None:
        bar = top.op("ttg.memdesc_index", [bars, read_slot], [bars.type.tile()]).result
        top.op("ttg.mbarrier_wait", [bar, phase], [])
    if rings is not None:
        bar = top.op("ttg.memdesc_index", [rings[0], read_slot], [rings[0].type.tile()]).result
        top.op("ttg.mbarrier_wait", [bar, phase], [], {"fence_proxy": True})
    elif cp_bufs:
        top.op("ttg.async_wait", cp_bufs, [], {"pending": ahead - 1})
    elif overlap is None:
        top.op("ttg.barrier", [], [], {"reason": "every warp has finished reading the stage refilled next"})
    at = top
    if overlap is not None:
        # the wgmma stays in flight into the next iteration: at most one group pending at the end of the body
        dot, j = overlap
        dot.attrs["wgmma_async"] = True
        at = _Builder(yield_op, loc)
        done = at.op("ttg.dot_wait", [dot.result], [dot.result.type], {"pending": 1}, [dot.result.hint]).result
        yield_op.set_operand(j, done)
        stats["overlapped_wgmma"] = stats.get("overlapped_wgmma", 0) + 1
        # the copies go after the wait and a barrier: then every warpgroup's previous wgmma has finished
        # reading the stage they refill, so they still run S-1 iterations ahead (measured on the H200: issued
        # before the wgmma, S-2 ahead, 128x256x64 ran at 550 TFLOP/s instead of 710)
        at.op("ttg.barrier", [], [], {"reason": "every warpgroup's previous wgmma has read the stage refilled next"})
    elif chain_overlap is not None:
        # attention: the second dot (p v) stays in flight behind the next iteration's first dot (q kT); the
        # first dot's wait retires both, then a barrier, then the copies refill the stage both read
        first, second, j = chain_overlap
        second.attrs["wgmma_async"] = True
        acc = body.args[1 + j]
        at = _Builder(body.ops[body.ops.index(first) + 1], loc)
        done = at.op("ttg.dot_wait", [acc], [acc.type], {"pending": 0}, [acc.hint]).result
        acc.replace_all_uses_with(done)
        done.defining_op.set_operand(0, acc)
        if rings is not None:
            # each warp releases the stage right after the wait; the refill waits for every warp's release only
            # after the softmax, right before p v: by then the other warpgroup has usually released it too
            later = _Builder(second, loc)
            _release_and_acquire(at, later, rings[1], write_slot, empty_phase, iv, lb)
            at = later
            # the two warpgroups take turns on the tensor cores: p v of one iteration and q kT of the next are one
            # turn, and the other warpgroup's softmax runs meanwhile (the turn is taken after the copies)
            stats["warpgroup_turns"] = stats.get("warpgroup_turns", 0) + 1
            # q kT is issued without waiting; the turn passes before its wait
            first.attrs["wgmma_async"] = True
            nxt_op = _Builder(body.ops[body.ops.index(first) + 1], loc)
            nxt_op.op("ttg.warpgroup_turn", [], [], {"kind": "pass"})
            s_done = nxt_op.op("ttg.dot_wait", [first.result], [first.result.type], {"pending": 0},
                               [first.result.hint]).result
            first.result.replace_all_uses_with(s_done)
            s_done.defining_op.set_operand(0, first.result)
            pre.op("ttg.warpgroup_turn", [], [], {"kind": "start"})
        else:
            at.op("ttg.barrier", [], [],
                  {"reason": "every warpgroup's previous wgmmas have read the stage refilled next"})
        overlap = (second, j)
        stats["overlapped_wgmma"] = stats.get("overlapped_wgmma", 0) + 1
    iv_ahead = at.add(iv, at.const(ahead * step, iv.type))
    mapping = {id(iter_args[i]): ahead_args[i] for i in carried}
    mapping[id(iv)] = iv_ahead
    _issue(at, plans, bufs, write_slot, mapping, at.lt(iv_ahead, ub), bps, tma)
    if rings is not None:
        _arrive_when_copied(at, rings[0], write_slot)
        # the turn comes after the copies: a warpgroup waiting for it has already started the next tiles
        _Builder(chain_overlap[1], loc).op("ttg.warpgroup_turn", [], [], {"kind": "wait"})
    nxt = _advance(at, for_op, carried, mapping)
    for buf, (ld, _), chain, (dot, index) in zip(bufs, plans, chains, targets):
        view = _Builder(dot, loc).op("ttg.memdesc_index", [buf, read_slot], [buf.type.tile()], loc=dot.loc).result
        dot.set_operand(index, view)
        for op in chain:
            op.erase()
        ld.erase()
    end = _Builder(yield_op, loc)
    one, last = end.const(1), end.const(stages - 1)
    new_slots = []
    for slot in (read_slot, write_slot):
        at_end = end.op("arith.cmpi", [slot, last], [int1], {"predicate": "eq"}).result
        new_slots.append(end.op("arith.select", [at_end, end.const(0), end.add(slot, one)], [I32]).result)
        if phase is not None and slot is read_slot:
            flipped = end.op("arith.xori", [phase, one], [I32]).result
            phase_next = end.op("arith.select", [at_end, flipped, phase], [I32]).result
        if empty_phase is not None and slot is write_slot:
            flipped = end.op("arith.xori", [empty_phase, one], [I32]).result
            empty_next = end.op("arith.select", [at_end, flipped, empty_phase], [I32]).result
    if phase is not None:
        new_slots.append(phase_next)
    if empty_phase is not None:
        new_slots.append(empty_next)
    for v in [nxt[id(iter_args[i])] for i in sorted(carried)] + new_slots:
        yield_op.operands.append(v)
        v.uses.append(yield_op)

    new = extend_for_iter_args(for_op, inits)
    new.attrs["pipelined_stages"] = stages
    # after the loop: drain the copies still in flight (predicated-off ones included) before the
    # buffers' addresses can be reused
    after = new.block.ops[new.block.ops.index(new) + 1]
    if overlap is not None:
        # the last wgmma may still be running: wait for it first thing after the loop (later, with other code
        # in between, ptxas serializes every wgmma of the kernel: its warning C7514)
        res = new.results[overlap[1]]
        fin = _Builder(after, loc).op("ttg.dot_wait", [res], [res.type], {"pending": 0}, [res.hint])
        res.replace_all_uses_with(fin.result)
        fin.set_operand(0, res)
        if rings is not None:
            _Builder(after, loc).op("ttg.warpgroup_turn", [], [], {"kind": "finish"})
    _Builder(after, loc).op("ttg.async_wait", list(bufs), [], {"pending": 0})
    for ring in [bars] if rings is None else list(rings):  # after the wait's bar.sync: no thread polls them
        if ring is not None:
            _Builder(after, loc).op("ttg.mbarrier_inval", [ring], [])
    stats["pipelined"] += 1
    stats["buffers"] += len(bufs)


def run(module: Module, options=None) -> dict:
    arch = getattr(options, "arch", 90)
    default_stages = getattr(options, "num_stages", 3)
    stats = {"pipelined": 0, "staged_once": 0, "buffers": 0, "skipped": []}
    if arch < 80:
        stats["skipped"].append(f"sm_{arch} has no cp.async")
        return stats
    bps = _BlockPtrs(module, options)
    _stage_invariant_operands(module, stats, bps)
    for op in list(module.kernel.walk()):
        if op.name == "scf.for" and op.block is not None:
            _pipeline(op, int(op.attrs.get("num_stages", default_stages)), stats, bps)
    if stats["pipelined"] or stats["staged_once"]:
        dce.run(module)  # the register path's address arithmetic is dead now
    return stats
