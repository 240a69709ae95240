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
serializes every wgmma of the kernel (its warning C7514). With KERNELLAB_SIBLING_WGMMA=1 a loop of n such
accumulations side by side (a fused MoE's or a gated MLP's gate and up: `_overlappable_siblings`) keeps all n
in flight the same way: the n dots, one dot_wait(pending = n) per accumulator (one wait_group n), the barrier, the
copies; after the loop a dot_wait(pending = 0) per accumulator. Without it such a pair is taken for attention's
chain below (its first dot waits at once). Attention's pair of wgmma dots (scores, then
`acc = tl.dot(p, v, f(acc))`) keeps the second in flight behind the next iteration's first; the copies follow
its wait. A chain of more than two (attention backward) issues its barrier and copies at the end of the body
instead, after the last dot's issue, so the warps meet while that dot runs (KERNELLAB_CHAIN_COPIES picks either
place, for A/B). Copies for
iterations past the end are predicated off (cp.async with a source size of 0 writes zeros and reads nothing).

An operand qualifies when it is a `tt.load` in the loop body used only by the dot, with fp16/bf16
elements (also fp8, int8 and fp32 where wgmma reads it, fp32 where mma.sync does: a K-major stage with padded rows
that ldmatrix reads, `dot_stages.mma_sync_k_major`), a zero or absent `other`, accesses of 4 to 16
bytes, and an address that only depends on the induction variable, loop invariants and loop-carried
values whose updates are themselves recomputable. wgmma reads 8- and 32-bit operands K-major only, so
an 8-bit tile qualifies when its contiguous dim in global memory is K: A row-major, B [K, N] given as w.T
of a row-major [N, K] w (torch._scaled_mm's layout); an N-contiguous 8-bit B keeps the register path,
which transposes it into shared memory every iteration (Triton 3.6 does the same). An fp32 tile a wgmma
reads as tf32 is always staged K-major (`dot_stages.tf32_wgmma_operand`): one contiguous along M or N is
copied 4 bytes at a time (as Triton). fp32 stages are read as they are: the tensor cores truncate them to
tf32 (Triton's Hopper dots do too; the register path rounds). Otherwise the copies use the load's own
(coalesced) layout; the tile is stored in shared memory contiguous along the same dimension as in global
memory, each row padded by 16 bytes so ldmatrix
reads are free of bank conflicts (swizzled instead where wgmma reads it). Loops that do not qualify keep
the register path and the reason is recorded in the pass's stats.

A 2-D tile the dot reads only after elementwise math (fla's `k * exp2(g_last - g)`: every use a pure op of the
tile's shape, ending at an mma.sync operand) rides in the stages too, as the row vectors below do (`_side_loads`),
and is read back with ld.shared right before its first reader; a loop whose dots read only such tiles is pipelined
for them alone (Triton's pipeliner copies them too and reads them in the dot-operand layout).

Block-pointer loads (`tl.load(block_ptr, boundary_check=...)`, the pointer carried by `tl.advance`) qualify
too: their copies get the tile's addresses and in-bounds mask from `ttg.block_ptr_addresses` (out-of-bounds
runs become zeros, so only padding_option "zero" qualifies), `vec` from the block's strides and offsets
(gpu/block_ptr.py). A tile of a block whose leading dims are 1 (a host descriptor's `[1, M, K]` block, reshaped to
`[M, K]` for the dot, as Liger's mlp loads its input) is an operand too: the load is rewritten to give the 2-D tile
(`_squeeze_load`). Later passes rewrite a loop pipelined here: `fill_stages_with_tma` fills block-pointer
stages by TMA on sm_90, `warpgroup_turns` lets attention's two warpgroups sync on mbarriers and take turns.
"""
from __future__ import annotations

import os

from ..gpu.axis_info import AxisAnalysis
from ..gpu.layouts import Blocked, Slice
from ..gpu.reshape_layout import register_map
from ..gpu.scratch import is_wgmma
from ..ir import Module, Op
from ..ops import info, is_pure
from ..rewrite import captured, extend_for_iter_args, insert_before, int_const, pure_slice, top_level, zero_reset
from ..switches import switch
from ..types import MemDescType, TensorType, int1
from . import dce
from .dot_stages import (
    I32,
    BlockPtrCopies,
    Builder,
    buffer_type,
    copy_tile,
    copyable,
    k_major_why,
    mma_sync_i8,
    mma_sync_k_major,
    tf32_wgmma_operand,
    view_type,
)

NAME = "pipeline_dot_operands"
DESCRIPTION = "multi-buffer the tiles a tensor-core dot reads: cp.async copies num_stages-1 iterations ahead"


def _operand_load(dot: Op, index: int, body, bpc: BlockPtrCopies):
    """(load op, its readers) for the tile feeding dot operand `index`, or (None, reason). The readers are
    (dot, operand index, transposed, [ops to erase]) for every use of the loaded tile: each must end in a
    tensor-core dot operand, through layout conversions and 2-D transposes only (the tutorial's attention
    backward reads kT as B of q·kT and its transpose as B of ds·k), so one stage buffer serves them all."""
    v = dot.operands[index]
    op = v.defining_op
    while op is not None and op.name in ("ttg.convert_layout", "tt.trans") and op.block is body:
        v = op.operands[0]
        op = v.defining_op
    if op is not None and op.name == "tt.reshape" and op.block is body:
        op, why = _squeeze_load(op)
        if why is not None:
            return None, why
    if op is None or op.name != "tt.load" or op.block is not body:
        return None, "not loaded in the loop body"
    readers = []
    why = _readers(op.result, body, False, [], readers)
    if why is not None:
        return None, why
    if len(readers) > 1 and len({is_wgmma(d) for d, *_ in readers}) != 1:
        return None, "the loaded tile is read by a wgmma and an mma.sync dot"
    order = tuple(op.result.type.layout.order) if hasattr(op.result.type.layout, "order") else (1, 0)
    for d, i, transposed, _ in readers:
        why = k_major_why(d, i, tuple(reversed(order)) if transposed else order)
        if why is not None:
            return None, why
    why = copyable(op, bpc, wgmma=is_wgmma(readers[0][0]),
                   k_major=all(mma_sync_k_major(d, op.result.type) for d, *_ in readers),
                   i8=op.result.type.scalar.ir == "i8" and all(mma_sync_i8(d) and not tr for d, _, tr, _ in readers))
    return (op, readers) if why is None else (None, why)


def _squeeze_load(rs: Op) -> Op:
    """`tl.reshape(load(block_ptr), [M, K])` of a block whose leading dims are 1 (a host descriptor's
    `[1, M, K]` tile, as Liger's mlp loads its input): the load is rewritten to give the `[M, K]` tile itself,
    the reshape goes, and the load is then a dot operand like a 2-D one (staged 2-D, filled by TMA with a
    rank-3 map). The same elements in the same order: the dropped dims are at the block's offset, and their
    boundary check stays (an out-of-range index there reads padding); codegen indexes the dropped dims at 0.
    Returns (the load, None), or (the reshape unchanged, why not: None for a reshape of anything else, whose
    reason is then "not loaded in the loop body")."""
    src = rs.operands[0]
    ld = src.defining_op
    if ld is None or ld.name != "tt.load" or ld.block is not rs.block or not ld.operands[0].type.is_block_ptr():
        return rs, None
    s_shape, r_shape = tuple(src.type.shape), tuple(rs.result.type.shape)
    k = len(s_shape) - 2
    if len(r_shape) != 2 or k < 1 or any(d != 1 for d in s_shape[:k]) or s_shape[k:] != r_shape:
        return rs, f"a {list(s_shape)} block-pointer tile reshaped to {list(r_shape)} (only leading 1s may go)"
    if len(src.uses) != 1:
        return rs, f"the {list(s_shape)} tile is also used without the reshape"
    if not isinstance(rs.result.type.layout, Blocked):
        return rs, "the reshaped tile has no blocked layout (its copies take the load's order)"
    attrs = dict(ld.attrs)
    m = register_map(src.type.layout, s_shape, rs.result.type.layout, r_shape)
    if m is None or list(m) != list(range(len(m))):
        attrs.pop("vec", None)  # the runs were counted in the 3-D layout: copies get their own (copy_vec)
    new = Op("tt.load", list(ld.operands), [rs.result.type], attrs, (), ld.loc, [rs.result.hint or src.hint])
    insert_before(ld, new)
    rs.result.replace_all_uses_with(new.result)
    rs.erase()
    ld.erase()
    return new, None


def _readers(v, body, transposed: bool, chain: list, out: list) -> str | None:
    """Collect into `out` the dot operands `v` reaches (see `_operand_load`); why not, when a use is another op."""
    if not v.uses:
        return "the loaded tile is not used"
    for u in v.uses:
        if u.block is not body:
            return "the loaded tile has other users"
        if u.name == "tt.dot" and "mma" in u.attrs:
            slots = [i for i in (0, 1) if u.operands[i] is v]
            if len(slots) != 1 or u.operands[2] is v:
                return "the loaded tile is both operands of a dot"
            out.append((u, slots[0], transposed, list(chain)))
        elif u.name == "ttg.convert_layout" or (u.name == "tt.trans" and list(u.attrs.get("order", [])) == [1, 0]):
            why = _readers(u.result, body, transposed != (u.name == "tt.trans"), chain + [u], out)
            if why is not None:
                return why
        else:
            return "the loaded tile has other users"
    return None


def _stage_type(dot, readers, t, stages: int):
    """The stage buffer of tile `t` that `dot` (one of its readers) reads; a 32-bit tile's encoding depends on
    the operand and transpose of each reader, which must then all agree (None otherwise)."""
    if t.scalar.bits != 32:
        return buffer_type(dot, t, stages)
    types = {buffer_type(d, t, stages, index, transposed) for d, index, transposed, _ in readers}
    return types.pop() if len(types) == 1 else None


def _overlappable_wgmma(body, dots, targets, stages: int):
    """(dot, iter-arg index) when the loop is a plain wgmma accumulation (`acc = tl.dot(a, b, acc)`, both
    tiles pipelined, acc only yielded) that can leave one wgmma in flight across iterations. The copies then
    move to the end of the body, after the wait (wait_group 1) and a barrier: the stage they refill was last
    read by the previous iteration's wgmma, which every warpgroup has finished by then."""
    if stages < 2 or len(dots) != 1 or not is_wgmma(dots[0]) or _half_acc(dots[0]):
        return None
    dot = dots[0]
    if {i for d, i in targets if d is dot} != {0, 1}:
        return None
    acc = dot.operands[2]
    reset = zero_reset(acc)
    if reset is not None and reset[1].block is body and len(acc.uses) == 1:
        acc = reset[1].operands[2]  # a fused loop's `select(tile start, 0, acc)`: wgmma's scale-d (lower_wgmma)
    args = list(body.args[1:])
    if acc not in args or len(acc.uses) != 1:
        return None
    j = args.index(acc)
    y = body.terminator
    if y.operands[j] is not dot.result or dot.result.uses.count(y) != 1 or _epilogue_if(body, dot, y) is False:
        return None
    return dot, j


def sibling_wgmma_enabled() -> bool:
    """KERNELLAB_SIBLING_WGMMA=1 (off by default until timed on the GPU; part of the disk-cache key): a loop of
    several independent wgmma accumulations (see `_overlappable_siblings`) keeps all of them in flight."""
    return switch("KERNELLAB_SIBLING_WGMMA", False)


def _overlappable_siblings(body, dots, targets, stages: int):
    """[(dot, iter-arg index)] in body order when every tensor-core dot of the loop is a plain wgmma accumulation
    of its own (`acc_g = tl.dot(x, wg.T, acc_g); acc_u = tl.dot(x, wu.T, acc_u)`: Liger's fused MoE up-projection
    with SwiGLU, a gated MLP), both operands of each pipelined, each accumulator read by its dot alone and each
    result only yielded. Then no dot needs another's result within the iteration: all are issued, one wait
    (wait_group n, n dots) retires the previous iteration's n groups, whose stages the copies then refill after
    a barrier, and the n groups of this iteration stay in flight into the next (Triton 3.6 pipelines such a loop
    so). Without this the pair is taken for attention's chain (`_overlappable_chain`): the first dot waits at
    once (wait_group 0), so the tensor cores idle while the copies are issued and the second dot is queued."""
    if stages < 2 or len(dots) < 2 or not sibling_wgmma_enabled():
        return None
    y = body.terminator
    args = list(body.args[1:])
    out, seen = [], set()
    ops = list(body.ops)
    for dot in sorted(dots, key=ops.index):
        if not is_wgmma(dot) or _half_acc(dot) or dot.attrs.get("max_num_imprecise_acc") is not None:
            return None
        if {i for d, i in targets if d is dot} != {0, 1}:
            return None
        acc = dot.operands[2]
        if acc not in args or len(acc.uses) != 1 or id(acc) in seen:
            return None
        j = args.index(acc)
        if dot.result.uses != [y] or y.operands[j] is not dot.result:
            return None
        seen.add(id(acc))
        out.append((dot, j))
    return out


def _epilogue_if(body, dot, y):
    """The `scf.if` after `dot` in `body` (a fused loop's tile epilogue) that reads the dot's result besides the
    yield `y`; None when only `y` reads it, False when something else does."""
    users = [u for u in dot.result.uses if u is not y]
    if not users:
        return None
    tops = {id(top_level(u, body)): top_level(u, body) for u in users}
    if len(tops) != 1 or any(u.block is body for u in users):
        return False
    eif = next(iter(tops.values()))
    if eif.name != "scf.if" or body.ops.index(eif) < body.ops.index(dot):
        return False
    return eif


def _half_acc(dot) -> bool:
    """An fp16 accumulator is packed two to a register for wgmma and unpacked after its wait: reading it while
    the group is in flight would serialize every wgmma (C7514), so such a dot waits at once."""
    return dot.result.type.scalar.ir == "f16"


def _overlappable_chain(body, dots, targets, stages: int):
    """(first dot, last dot, iter-arg index) when the loop is attention's pair of wgmma dots: scores
    `s = tl.dot(q, kT)` read at once, then `acc = tl.dot(p, v, f(acc))` whose result is only yielded. The
    second dot then stays in flight into the next iteration, where it runs on the tensor cores behind the
    next scores' dot; the carried acc is read only after that dot's wait. Measured on the H200 (same run):
    one warpgroup (hd64, 4 warps) 0.98-1.02x Triton with the overlap against 0.96-0.99x without; the
    copies right after that wait beat copies at the end of the body (after the second dot's issue).

    With more dots (attention backward: s^T, dV, dP^T, dK per query block), the first and the last play these
    parts: the last accumulation (dK) runs behind the next iteration's first dot, the dots between wait at once;
    the copies then go at the end of the body, after the last dot's issue (`chain_copies_at_end`)."""
    if stages < 2 or len(dots) < 2 or not all(is_wgmma(d) for d in dots):
        return None
    ops = list(body.ops)
    order = sorted(dots, key=ops.index)
    first, second = order[0], order[-1]
    if _half_acc(second) or (second, 1) not in targets:
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
    if any(ops.index(top_level(u, body)) <= at for u in acc.uses):
        return None  # the carried acc is read before the scores' dot: no room for the wait
    return first, second, j


def _retire_at_next_wait(body, dots, stats: dict) -> None:
    """A wgmma accumulation between others (attention backward's dV = p^T·do, followed by dP^T = v·do^T) whose
    result is only yielded need not wait where it is issued: the next dot that waits for every group (wait_group
    0) retires it too. It runs on the tensor cores while that dot is issued; its value is tied after that wait."""
    ops = list(body.ops)
    order = sorted(dots, key=ops.index)
    y = body.terminator
    for i, d in enumerate(order):
        if not is_wgmma(d) or d.attrs.get("wgmma_async") or _half_acc(d) or d.result.uses != [y]:
            continue
        later = next((w for w in order[i + 1:] if is_wgmma(w) and not w.attrs.get("wgmma_async")), None)
        if later is None:
            continue
        d.attrs["wgmma_async"] = True
        done = Builder(body.ops[body.ops.index(later) + 1], d.loc).op(
            "ttg.dot_wait", [d.result], [d.result.type], {"pending": 0}, [d.result.hint]).result
        for k, v in enumerate(y.operands):
            if v is d.result:
                y.set_operand(k, done)
        stats["retired_at_next_wait"] = stats.get("retired_at_next_wait", 0) + 1


def _within(op: Op, region) -> bool:
    return top_level(op, region) is not None


def _derived_from(v, arg, body, depth: int = 8) -> bool:
    """Whether `v` is the block argument `arg` or computed from it by pure ops of the body (acc * alpha)."""
    if v is arg:
        return True
    d = v.defining_op
    if depth == 0 or d is None or d.block is not body or d.regions or not is_pure(d):
        return False
    return any(_derived_from(o, arg, body, depth - 1) for o in d.operands)


def _carried_closure(for_op: Op, slices) -> set | None:
    """Indices of the iter args the address slices need, closed under their own updates; None when an
    update cannot be recomputed from pure ops."""
    body = for_op.regions[0]
    iter_args = body.args[1:]
    yield_op = body.terminator
    pos = {id(a): i for i, a in enumerate(iter_args)}
    need, work = set(), []
    ifs = _fused(for_op)

    def scan(ops):
        for op in ops:
            for v in op.operands + (captured(op) if op.regions else []):
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
        sl = pure_slice(d, body, ifs)
        if sl is None or (d.regions and not (ifs and d.name == "scf.if")) or not is_pure(d):
            return None
        scan(sl + [d])
    return need


def _fused(for_op: Op) -> bool:
    """A loop flatten_loops made: its tile prologue, a pure `scf.if`, may be recomputed for the copies ahead."""
    return bool(for_op.attrs.get("flattened"))


def side_loads_enabled() -> bool:
    """A pipelined loop's row-vector loads (see `_side_loads`) ride in its stages too (on by default: attention
    backward 0.89-0.96x -> 1.01-1.05x Triton on the full rows, H100, 2026-11-26; KERNELLAB_PIPELINE_SIDE_LOADS=0
    turns it off; part of the disk-cache key)."""
    return switch("KERNELLAB_PIPELINE_SIDE_LOADS", True)


def chain_copies_at_end(n_dots: int) -> bool:
    """Where a wgmma chain's copies (and the barrier before them) go: right after the first dot's wait, or at the
    end of the body, after the last dot's issue. KERNELLAB_CHAIN_COPIES=first|end picks one for every chain (part
    of the disk-cache key); `auto` puts them at the end for chains of more than two dots. The default stays
    `first` until `auto` is timed on the GPU (`benchmarks/attention.py --mode bwd` under both values).

    Attention forward (two dots) measured faster with the copies after the first wait. In the backward (four
    dots: s^T, dV, dP^T, dK) that spot is mid-chain: the barrier makes every warp meet while no wgmma is in flight
    (the first dot just retired, the next not yet issued), once per iteration. At the end of the body it meets
    while the last dot (dK / dQ) runs on the tensor cores, as Triton places it. The stage refilled is the one
    iteration i-1 read; every warpgroup has retired those wgmmas at the first dot's wait, before the barrier."""
    v = os.environ.get("KERNELLAB_CHAIN_COPIES", "first").strip().lower()
    if v in ("first", "end"):
        return v == "end"
    return n_dots > 2


def _side_loads(body, taken: set, ifs: bool = False) -> list:
    """The loads of the loop body besides the dots' tiles that the copies can carry too, as (load, address slice,
    the axis the stage adds): row vectors (a 1-D slice of a 2-D layout, 2- or 4-byte elements: the attention
    backward's lse and delta, read next to the scores). Loaded in the body, each costs a global-memory latency
    per iteration that only the dot issued before its use hides (Triton's pipeliner copies them with the tiles
    and reads them back from shared memory). The stage holds the vector as a [1, N] (or [N, 1]) tile, so the
    copy is the 2-D copy of the parent layout, only the representative threads copying."""
    out = []
    for ld in body.ops:
        if ld.name != "tt.load" or id(ld) in taken or ld.attrs.get("volatile"):
            continue
        t = ld.result.type
        if ld.operands[0].type.is_block_ptr() or not isinstance(t, TensorType):
            continue
        if len(t.shape) == 2:
            sl = _operand_math_tile(ld, body, ifs)
            if sl is not None:
                out.append((ld, sl, None))
            continue
        if len(t.shape) != 1:
            continue
        if not isinstance(t.layout, Slice) or t.layout.parent.rank != 2 or t.scalar.is_ptr():
            continue
        size = t.scalar.bits // 8
        if size not in (2, 4) or ld.attrs.get("vec", 1) * size not in (4, 8, 16):
            continue
        if len(ld.operands) > 2:
            other = ld.operands[2].defining_op
            if other is None or other.name != "arith.constant" or other.attrs.get("value") not in (0, 0.0):
                continue
        sl = pure_slice(ld, body, ifs)
        if sl is not None:
            out.append((ld, sl, t.layout.dim))
    return out


def fused_side_loads() -> bool:
    """KERNELLAB_FUSED_SIDE_LOADS (on by default, `0` turns it off; a codegen knob of CODEGEN_ENV): in a loop
    flatten_loops fused (a persistent variant's tile loop with its K loop), side loads whose addresses need the
    tile prologue's `scf.if` ride in the stages too, that `if` recomputed for the copies ahead as the dots' own
    tiles' addresses already are. Without it a persistent W4A16 matmul loads its packed weights and scales in the
    body, unpipelined, where the kernel as written copies them (H200: 0.79x Triton persistent, 1.17x as written;
    H100, with sink_conversions: 0.87 -> 0.94x)."""
    return switch("KERNELLAB_FUSED_SIDE_LOADS", True)


def math_tiles_for_wgmma() -> bool:
    """KERNELLAB_MATH_TILE_WGMMA (on by default, `0` turns it off; part of the compile caches' keys through
    CODEGEN_ENV): `_operand_math_tile` also takes tiles a wgmma reads after math (its register operand, stored to
    shared memory before each wgmma), and 8-bit tiles: a W4A16 matmul's packed weights (`(q >> shift) & 0xF`, cast,
    scaled) then ride in the stages as Triton's pipeliner copies them, instead of one LDG a tile per iteration whose
    latency nothing hides. Safe as the mma.sync case: each stage is refilled after the barrier at the top of the
    iteration (or after the in-flight wgmma's wait and barrier), when every warp has read it back. H200
    (heldout_texts4, 2026-11-27): W4A16 128x128x64/4w 1.15 -> 1.28x Triton, 128x256x64/8w 1.11 -> 1.17x; GPU IR
    unchanged for the idioms' 130 kernels and heldout_texts3's 71. A wgmma operand loaded as it is (no math) is
    not taken: an int8 N-contiguous B staged so left one CTA an SM at 128x128x128/4 stages (0.92x)."""
    return switch("KERNELLAB_MATH_TILE_WGMMA", True)


def _operand_math_tile(ld: Op, body, ifs: bool = False):
    """The address slice of a 2-D tile loaded in the loop body that a tensor-core dot reads only after elementwise
    math (fla's `b_k * exp2(b_gk_last[:, None] - b_gk)`, both tiles): every use, transitively, is a pure op of the
    body with one result of the tile's shape, ending at an mma dot's A or B. None otherwise. Such tiles ride in the
    stages too and are read back with ld.shared where the load was (as Triton's pipeliner copies every load a dot
    operand depends on): loaded in the body, the whole tile sits in registers for a memory latency, beside the
    dot's own operands (chunk_fwd_kernel_h with USE_GK: 255 registers and spills)."""
    t = ld.result.type
    wgmma_too = math_tiles_for_wgmma()
    if not isinstance(t.layout, Blocked) or t.scalar.bits not in ((8, 16, 32) if wgmma_too else (16, 32)):
        return None
    if ld.attrs.get("vec", 1) * t.scalar.bits // 8 not in (4, 8, 16):
        return None
    if len(ld.operands) > 2:
        other = ld.operands[2].defining_op
        if other is None or other.name != "arith.constant" or other.attrs.get("value") not in (0, 0.0):
            return None
    seen, work, dots = set(), [ld.result], 0
    while work:
        v = work.pop()
        for u in v.uses:
            if id(u) in seen:
                continue
            seen.add(id(u))
            if u.block is not body:
                return None
            if u.name == "tt.dot" and "mma" in u.attrs and (wgmma_too or not is_wgmma(u)):
                if u.operands[2] is v or ((is_wgmma(u) or t.scalar.bits == 8) and v is ld.result):
                    return None  # a wgmma or 8-bit operand loaded as it is keeps its own path (an int8
                    # N-contiguous B staged too: 4 stages of 128x128x128 left one CTA an SM, 0.92x, H200 2026-11-27)
                dots += 1
                continue
            if (u.regions or not is_pure(u) or len(u.results) != 1 or not isinstance(u.result.type, TensorType)
                    or tuple(u.result.type.shape) != tuple(t.shape)):
                return None
            work.append(u.result)
    return pure_slice(ld, body, ifs) if dots else None


def _side_vec(ld: Op, axis) -> int:
    """Elements per cp.async of a row vector's copy: what the pointers' contiguity and alignment allow (the load
    itself, issued in the layout its users want, says 1), in runs each thread holds (a wgmma accumulator's columns
    come in pairs), up to 16 bytes."""
    t = ld.result.type
    e = t.scalar.bits // 8
    info = axis[ld.operands[0]]
    v = min(info.contig[0], 16 // e, max(1, info.div[0] // e))
    if len(ld.operands) > 1:
        v = min(v, axis[ld.operands[1]].const[0])
    v = 1 << (max(1, v).bit_length() - 1)
    (dim,) = t.layout.dims_info(t.shape)
    offs = [o[0] for o in t.layout.registers(t.shape)]
    # the copy runs over the registers of the parent layout's [1, N] / [N, 1] tile: runs there too
    shape = list(t.shape)
    shape.insert(t.layout.dim, 1)
    d = 1 - t.layout.dim
    parent = t.layout.parent.registers(tuple(shape))

    def runs(regs, v, at):
        return len(regs) % v == 0 and all(
            regs[k][at] % v == 0 and all(regs[k + i][at] == regs[k][at] + i and
                                         regs[k + i][:at] + regs[k + i][at + 1:] == regs[k][:at] + regs[k][at + 1:]
                                         for i in range(1, v)) for k in range(0, len(regs), v))

    while v > 1:
        if ((dim.lanes == 1 or dim.lane_stride % v == 0) and (dim.warps == 1 or dim.warp_stride % v == 0)
                and runs([(o,) for o in offs], v, 0) and runs(parent, v, d)):
            return v
        v //= 2
    return 1


def index_loads_enabled() -> bool:
    """KERNELLAB_PIPELINE_INDEX_LOADS (on by default, `0` turns it off; a codegen knob of CODEGEN_ENV): a dot
    operand whose address needs a scalar loaded in the loop body (a block-sparse matmul's k-block index,
    `kb = tl.load(KIDX + i)`; a paged KV cache's block number) is pipelined too, the index loaded in registers one
    iteration ahead of the copies it addresses (`_index_loads`). Without it such a loop keeps the register path:
    every iteration loads its tiles into registers and waits a full memory latency before its mma (Triton's
    pipeliner copies the index into shared memory a stage ahead of the tiles). heldout_texts5's h5_bsr_matmul ran at
    0.69-0.85x Triton on the H200 that way. On by default without a GPU timing because it changes no other kernel:
    knob_gpuir_ab.py over the idioms' 130 kernels and heldout_texts .. heldout_texts5 (273 more) changes the GPU IR
    of h5_bsr_matmul's three configs only."""
    return switch("KERNELLAB_PIPELINE_INDEX_LOADS", True)


def _writes_memory(body) -> bool:
    return any("write" in info(op.name).memory for top in body.ops for op in top.walk())


def _index_loads(ld: Op, body, iter_args):
    """(the address slice of `ld`, the index loads it reads) when `ld`'s address is pure but for scalar loads of
    the body (`kb = tl.load(KIDX + i)`) whose own addresses are pure and need only the induction variable and
    loop invariants (no carried value: each index is reloaded for any iteration from `i` alone); else None.
    The slice leaves the index loads out: the copies read their values from registers."""
    carried = {id(a) for a in iter_args}
    leaves, needed, stack = {}, set(), list(ld.operands)
    while stack:
        v = stack.pop()
        d = v.defining_op
        if d is None or d.block is not body or id(d) in needed or id(d) in leaves:
            continue
        if d.name == "tt.load" and not isinstance(d.result.type, TensorType):
            if d.attrs.get("volatile") or d.operands[0].type.is_block_ptr() or d.result.type.is_ptr():
                return None
            sl = pure_slice(d, body)
            if sl is None or any(id(o) in carried for op in sl + [d] for o in op.operands):
                return None
            leaves[id(d)] = d
            continue
        if not is_pure(d) or d.regions:
            return None
        needed.add(id(d))
        stack.extend(d.operands)
    if not leaves:
        return None
    return [d for d in body.ops if id(d) in needed], [d for d in body.ops if id(d) in leaves]


def _load_index(bld: Builder, d: Op, iv, iv_value, runs):
    """Index load `d` for the iteration whose induction variable is `iv_value`, read only where it `runs` (an
    iteration past the end may index past the table: its copies are predicated off, its index is 0)."""
    mapping = {id(iv): iv_value}
    for op in pure_slice(d, d.block):
        insert_before(bld.anchor, op.clone(mapping))
    ptr = mapping.get(id(d.operands[0]), d.operands[0])
    mask = runs
    if len(d.operands) > 1:
        mask = bld.op("arith.andi", [mapping.get(id(d.operands[1]), d.operands[1]), runs], [int1]).result
    t = d.result.type
    other = (mapping.get(id(d.operands[2]), d.operands[2]) if len(d.operands) > 2
             else bld.const(0.0 if t.is_floating() else 0, t))
    attrs = {k: v for k, v in d.attrs.items() if k in ("cache", "evict")}
    return bld.op("tt.load", [ptr, mask, other], [t], attrs, [d.result.hint], loc=d.loc).result


def _expand(bld: Builder, v, axis: int):
    """A 1-D tensor as the [1, N] / [N, 1] tile of its parent layout."""
    t = v.type
    shape = list(t.shape)
    shape.insert(axis, 1)
    return bld.op("tt.expand_dims", [v], [TensorType(tuple(shape), t.elem, t.layout.parent)], {"axis": axis}).result


def _issue(bld: Builder, plans, bufs, slot, mapping, pred, bpc: BlockPtrCopies, axes=()):
    """Clone each operand's address computation under `mapping` and start its copy into `slot`; one commit
    group for all. `axes`: for each plan after the dots' tiles, (the axis its row vector's stage adds, the copy's
    vector width)."""
    axes = [None] * (len(plans) - len(axes)) + list(axes)
    for (ld, sl), buf, side in zip(plans, bufs, axes):
        for op in sl:
            if id(op.results[0]) not in mapping:
                insert_before(bld.anchor, op.clone(mapping))
        ptrs = mapping.get(id(ld.operands[0]), ld.operands[0])
        view = bld.op("ttg.memdesc_index", [buf, slot], [buf.type.tile()], loc=ld.loc).result
        mask = mapping.get(id(ld.operands[1]), ld.operands[1]) if len(ld.operands) > 1 else None
        if side is not None:
            axis, vec = side
            if axis is not None:
                ptrs = _expand(bld, ptrs, axis)
                mask = _expand(bld, mask, axis) if mask is not None else None
            bld.op("ttg.async_copy", [ptrs, view, pred] + ([mask] if mask is not None else []), [], {"vec": vec},
                   loc=ld.loc)
            continue
        copy_tile(bld, ld, ptrs, view, pred, bpc, mask)
    bld.op("ttg.async_commit", [], [])


def _advance(bld: Builder, for_op: Op, carried, mapping) -> dict:
    """The carried values one iteration later: each update's computation cloned under `mapping`."""
    body = for_op.regions[0]
    iter_args, yield_op = body.args[1:], body.terminator
    inner = dict(mapping)
    nxt = {}
    for i in sorted(carried):
        y = yield_op.operands[i]
        d = y.defining_op
        if d is not None and d.block is body:
            for op in pure_slice(d, body, _fused(for_op)) + [d]:
                if id(op.results[0]) not in inner:
                    insert_before(bld.anchor, op.clone(inner))
        nxt[id(iter_args[i])] = inner.get(id(y), mapping.get(id(y), y))
    return nxt


def _runs(bld: Builder, iv, ub, step: int):
    """Whether iteration `iv` of the loop runs: iv < ub, or iv > ub for a negative step (torchao's int8 matmul counts
    its K loop down, `range(K, 0, -BLOCK_K)`)."""
    if step > 0:
        return bld.lt(iv, ub)
    return bld.op("arith.cmpi", [iv, ub], [int1], {"predicate": "sgt"}).result


def _pipeline(for_op: Op, stages: int, stats: dict, bpc: BlockPtrCopies) -> None:
    body = for_op.regions[0]
    dots = [op for op in body.ops if op.name == "tt.dot" and "mma" in op.attrs]
    if not dots:
        return
    why = []
    step = int_const(for_op.operands[2])
    if stages < 2:
        why.append("num_stages < 2")
    if step is None or step == 0:
        why.append("the loop step is not a non-zero constant")
    plans, readers, targets = [], [], []  # targets: (dot, operand index) reading each buffer
    index_loads = []  # scalar loads the tiles' addresses read: loaded in registers one iteration ahead
    seen = set()
    for dot in dots:
        for index in (0, 1):
            if dot.operands[index].type.is_memdesc():
                continue  # already in shared memory (staged once before the loop)
            ld, rd = _operand_load(dot, index, body, bpc)
            name = f"line {dot.loc.line if dot.loc else '?'} operand {'ab'[index]}"
            if ld is None:
                why.append(f"{name}: {rd}")
                continue
            if id(ld) in seen:
                continue  # another reader of a tile planned already
            sl = pure_slice(ld, body, _fused(for_op))
            t = ld.result.type
            if t.scalar.bits == 32 and not all(tf32_wgmma_operand(d, t) or mma_sync_k_major(d, t) for d, *_ in rd):
                why.append(f"{name}: fp32 elements read by a dot other than a tf32 wgmma or mma.sync")
                continue
            if _stage_type(dot, rd, t, 2) is None:
                why.append(f"{name}: its contiguous extent cannot be swizzled for wgmma")
                continue
            if sl is None and index_loads_enabled() and not _writes_memory(body):
                found = _index_loads(ld, body, body.args[1:])
                if found is not None:
                    sl = found[0]
                    index_loads += [d for d in found[1] if d not in index_loads]
            if sl is None:
                why.append(f"{name}: its address needs a value the loop cannot recompute")
                continue
            seen.add(id(ld))
            plans.append((ld, sl))
            readers.append(rd)
            targets.append((dot, index))
    reads = [(d, i) for rd in readers for d, i, *_ in rd]  # every (dot, operand) a buffer feeds
    carried = _carried_closure(for_op, plans)
    fused_ifs = _fused(for_op) and fused_side_loads()
    side = _side_loads(body, seen, fused_ifs) if carried is not None and side_loads_enabled() else []
    if not plans:  # without a dot operand copied straight to its stage, only tiles a dot reads after math ride
        side = [s for s in side if s[2] is None]
    n_dot = len(plans)
    if side:  # unless their addresses need a carried value the copies cannot recompute
        with_side = _carried_closure(for_op, plans + [(ld, sl) for ld, sl, _ in side])
        side = side if with_side is not None else []
        carried = with_side if side else carried
    plans += [(ld, sl) for ld, sl, _ in side]
    if side:
        fresh = AxisAnalysis(bpc.fn)  # of the IR as it is now (earlier loops rewritten)
        axes = [(axis, _side_vec(ld, fresh) if axis is not None else ld.attrs.get("vec", 1))
                for ld, _, axis in side]
    else:
        axes = []
    if plans and carried is None:
        why.append("a loop-carried address update cannot be recomputed")
    if stages < 2 or step is None or step == 0 or not plans or carried is None:
        stats["skipped"].append("; ".join(why))
        return
    stats["skipped"].extend(why)

    loc = for_op.loc
    lb, ub = for_op.operands[0], for_op.operands[1]
    iv, iter_args = body.args[0], body.args[1:]
    yield_op = body.terminator
    overlap = _overlappable_wgmma(body, dots, reads, stages)
    siblings = None if overlap is not None else _overlappable_siblings(body, dots, reads, stages)
    chain_overlap = (None if overlap is not None or siblings is not None
                     else _overlappable_chain(body, dots, reads, stages))
    in_flight = []  # (dot, iter-arg index) of every wgmma left in flight at the end of the body
    ahead = stages - 1  # iterations the copies run ahead
    pre = Builder(for_op, loc)
    bufs = []
    for (ld, _), rd, (dot, index) in zip(plans, readers, targets):
        buf_t = _stage_type(dot, rd, ld.result.type, stages)
        bufs.append(pre.op("ttg.local_alloc", [], [buf_t], {"stages": stages, "operand": "ab"[index]},
                           [f"{'ab'[index]}_stages"], loc=ld.loc).result)
    for ld, _, axis in side:  # a dense [1, N] / [N, 1] tile per stage, a 2-D tile in its load's order
        t = ld.result.type
        shape = list(t.shape)
        if axis is not None:
            shape.insert(axis, 1)
        order = (1, 0) if axis is not None else tuple(t.layout.order)
        bufs.append(pre.op("ttg.local_alloc", [], [MemDescType((stages, *shape), t.scalar, order)],
                           {"stages": stages, "operand": "side"}, ["side_stages"], loc=ld.loc).result)
    # prologue: stages 0 .. ahead-1 hold iterations 0 .. ahead-1
    state = {id(a): init for a, init in zip(iter_args, for_op.operands[3:])}
    for s in range(ahead):
        iv_s = lb if s == 0 else pre.add(lb, pre.const(s * step, lb.type))
        mapping = dict(state)
        mapping[id(iv)] = iv_s
        slot = pre.const(s)
        runs = _runs(pre, iv_s, ub, step)
        for d in index_loads:
            mapping[id(d.result)] = _load_index(pre, d, iv, iv_s, runs)
        _issue(pre, plans, bufs, slot, mapping, runs, bpc, axes)
        state.update(_advance(pre, for_op, carried, mapping))
    # the indices of iteration `ahead`, carried into the first iteration (whose copies are for it)
    iv_next = pre.add(lb, pre.const(ahead * step, lb.type))
    runs_next = _runs(pre, iv_next, ub, step)
    index_inits = [_load_index(pre, d, iv, iv_next, runs_next) for d in index_loads]
    # the loop carries: the address state S-1 iterations ahead, the stage to read and the stage to write
    ahead_args = {}
    for i in sorted(carried):
        a = iter_args[i]
        ahead_args[i] = body.add_arg(a.type, (a.hint or "v") + "_ahead")
    read_slot = body.add_arg(I32, "read_stage")
    write_slot = body.add_arg(I32, "write_stage")
    index_args = [body.add_arg(d.result.type, (d.result.hint or "index") + "_ahead") for d in index_loads]
    inits = ([state[id(iter_args[i])] for i in sorted(carried)] + [pre.const(0), pre.const(ahead % stages)]
             + index_inits)

    top = Builder(body.ops[0], loc)
    index_next = []
    if index_loads:  # first thing in the body: the next iteration's copies' indices, a whole iteration early
        iv_far = top.add(iv, top.const((ahead + 1) * step, iv.type))
        runs_far = _runs(top, iv_far, ub, step)
        index_next = [_load_index(top, d, iv, iv_far, runs_far) for d in index_loads]
        stats["index_loads"] = stats.get("index_loads", 0) + len(index_loads)
    top.op("ttg.async_wait", bufs, [], {"pending": ahead - 1})
    at = top
    if overlap is not None:
        # the wgmma stays in flight into the next iteration: at most one group pending at the end of the body
        dot, j = overlap
        dot.attrs["wgmma_async"] = True
        eif = _epilogue_if(body, dot, yield_op)
        at = Builder(eif or yield_op, loc)
        done = at.op("ttg.dot_wait", [dot.result], [dot.result.type], {"pending": 1}, [dot.result.hint]).result
        yield_op.set_operand(j, done)
        if eif:  # a fused loop's tile epilogue reads the accumulator: every group retired first thing in it
            for region in eif.regions:
                users = [u for u in dot.result.uses if _within(u, region)]
                if not users:
                    continue
                fin = Builder(region.ops[0], loc).op("ttg.dot_wait", [done], [done.type], {"pending": 0},
                                                     [dot.result.hint]).result
                for u in users:
                    for k, v in enumerate(u.operands):
                        if v is dot.result:
                            u.set_operand(k, fin)
        stats["overlapped_wgmma"] = stats.get("overlapped_wgmma", 0) + 1
        in_flight = [overlap]
        # the copies go after the wait and a barrier: then every warpgroup's previous wgmma has finished
        # reading the stage they refill, so they still run S-1 iterations ahead (measured on the H200: issued
        # before the wgmma, S-2 ahead, 128x256x64 ran at 550 TFLOP/s instead of 710)
        at.op("ttg.barrier", [], [], {"reason": "every warpgroup's previous wgmma has read the stage refilled next"})
    elif siblings is not None:
        # every dot stays in flight into the next iteration: after the last one's issue, one wait leaves this
        # iteration's groups pending (the previous iteration's are retired: the stages they read can be refilled)
        at = Builder(yield_op, loc)
        for dot, j in siblings:
            dot.attrs["wgmma_async"] = True
            # the first wait is wait_group n; the others, right after it, only tie their accumulators (lower_wgmma)
            done = at.op("ttg.dot_wait", [dot.result], [dot.result.type], {"pending": len(siblings)},
                         [dot.result.hint]).result
            yield_op.set_operand(j, done)
        at.op("ttg.barrier", [], [], {"reason": "every warpgroup's previous wgmmas have read the stages refilled next"})
        stats["overlapped_wgmma"] = stats.get("overlapped_wgmma", 0) + 1
        stats["sibling_wgmma"] = stats.get("sibling_wgmma", 0) + len(siblings)
        in_flight = siblings
    elif chain_overlap is not None:
        # attention: the second dot (p v) stays in flight behind the next iteration's first dot (q kT); the
        # first dot's wait retires both, then a barrier, then the copies refill the stage both read
        first, second, j = chain_overlap
        second.attrs["wgmma_async"] = True
        acc = body.args[1 + j]
        at = Builder(body.ops[body.ops.index(first) + 1], loc)
        done = at.op("ttg.dot_wait", [acc], [acc.type], {"pending": 0}, [acc.hint]).result
        acc.replace_all_uses_with(done)
        done.defining_op.set_operand(0, acc)
        if chain_copies_at_end(len(dots)):
            # the barrier and the copies after the last dot's issue: the warps meet while it runs
            at = Builder(yield_op, loc)
            stats["chain_copies_at_end"] = stats.get("chain_copies_at_end", 0) + 1
        at.op("ttg.barrier", [], [], {"reason": "every warpgroup's previous wgmmas have read the stage refilled next"})
        in_flight = [(second, j)]
        stats["overlapped_wgmma"] = stats.get("overlapped_wgmma", 0) + 1
        _retire_at_next_wait(body, dots, stats)
    iv_ahead = at.add(iv, at.const(ahead * step, iv.type))
    mapping = {id(iter_args[i]): ahead_args[i] for i in carried}
    mapping[id(iv)] = iv_ahead
    for d, a in zip(index_loads, index_args):
        mapping[id(d.result)] = a
    _issue(at, plans, bufs, write_slot, mapping, _runs(at, iv_ahead, ub, step), bpc, axes)
    nxt = _advance(at, for_op, carried, mapping)
    for buf, (ld, _, axis) in zip(bufs[n_dot:], side):  # read back from the stage where it was loaded
        b = Builder(ld, ld.loc)
        if axis is None:  # a whole tile: right before its first reader (its ld.shared kept live no longer, not
            # above the barriers of the conversions between: there all of fla's b_k and b_gk were live at once)
            pos = {id(o): i for i, o in enumerate(body.ops)}
            b = Builder(min((u for u in ld.result.uses), key=lambda u: pos[id(u)]), ld.loc)
        view = b.op("ttg.memdesc_index", [buf, read_slot], [buf.type.tile()]).result
        val = b.op("ttg.local_load", [view], [ld.result.type], {}, [ld.result.hint]).result
        ld.result.replace_all_uses_with(val)
        ld.erase()
    if side:
        stats["side_loads"] = stats.get("side_loads", 0) + len(side)
    for buf, (ld, _), rd in zip(bufs, plans, readers):
        erase = []
        for dot, index, transposed, chain in rd:
            view_t = view_type(buf.type.tile(), transposed)
            view = Builder(dot, loc).op("ttg.memdesc_index", [buf, read_slot], [view_t], loc=dot.loc).result
            dot.set_operand(index, view)
            erase += [op for op in reversed(chain) if op not in erase]
        for op in sorted(erase, key=lambda o: -body.ops.index(o)):
            if all(not r.uses for r in op.results):
                op.erase()
        ld.erase()
    if index_loads:  # the body's own index loads: dead once the copies read the carried ones (DCE keeps loads)
        for op in reversed(list(body.ops)):
            if op.results and not op.regions and is_pure(op) and all(not r.uses for r in op.results):
                op.erase()
        for d in index_loads:
            if not d.result.uses:
                d.erase()
    end = Builder(yield_op, loc)
    one, last = end.const(1), end.const(stages - 1)
    new_slots = []
    for slot in (read_slot, write_slot):
        at_end = end.op("arith.cmpi", [slot, last], [int1], {"predicate": "eq"}).result
        new_slots.append(end.op("arith.select", [at_end, end.const(0), end.add(slot, one)], [I32]).result)
    for v in [nxt[id(iter_args[i])] for i in sorted(carried)] + new_slots + index_next:
        yield_op.operands.append(v)
        v.uses.append(yield_op)

    new = extend_for_iter_args(for_op, inits)
    new.attrs["pipelined_stages"] = stages
    # after the loop: drain the copies still in flight (predicated-off ones included) before the
    # buffers' addresses can be reused
    after = new.block.ops[new.block.ops.index(new) + 1]
    for _, j in in_flight:
        # the last wgmmas may still be running: wait for them first thing after the loop (later, with other code
        # in between, ptxas serializes every wgmma of the kernel: its warning C7514); the first wait retires
        # all, the next ones only tie their accumulators
        res = new.results[j]
        fin = Builder(after, loc).op("ttg.dot_wait", [res], [res.type], {"pending": 0}, [res.hint])
        res.replace_all_uses_with(fin.result)
        fin.set_operand(0, res)
    Builder(after, loc).op("ttg.async_wait", list(bufs), [], {"pending": 0})
    stats["pipelined"] += 1
    stats["buffers"] += len(bufs)


def run(module: Module, options=None) -> dict:
    arch = getattr(options, "arch", 90)
    default_stages = getattr(options, "num_stages", 3)
    stats = {"pipelined": 0, "buffers": 0, "skipped": []}
    if arch < 80:
        stats["skipped"].append(f"sm_{arch} has no cp.async")
        return stats
    bpc = BlockPtrCopies(module, options)
    for op in list(module.kernel.walk()):
        if op.name == "scf.for" and op.block is not None:
            _pipeline(op, int(op.attrs.get("num_stages", default_stages)), stats, bpc)
    if stats["pipelined"]:
        dce.run(module)  # the register path's address arithmetic is dead now
    return stats
