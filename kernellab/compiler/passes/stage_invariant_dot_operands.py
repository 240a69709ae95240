"""Store a tile that is loaded once and only read by tensor-core dots into shared memory, right where it is loaded:
the load stays a (vectorized) global load into registers, a `ttg.local_store` writes it into a one-stage buffer,
and one `ttg.barrier` before the first dot that reads it orders the stores before the reads.

This is what Triton does for the operands of a dot outside a pipelined loop (ld.global, st.shared, then ldmatrix or
wgmma from shared memory), and what its test_dot checks in the PTX (`ld.global.v4`). cp.async stays the pipeliner's:
with nothing to overlap, copying through registers costs the same and keeps the loads' own form. Storing at the
load frees the registers at once: left to the dot, both operand tiles would stay live up to it, and a tile read by
a loop's dots (attention's queries) would be staged again by every iteration. A tile qualifies when it is loaded
outside any loop, every user is an mma dot reading it as the same operand, and its elements are 16-bit (the
encodings `dot_stages.buffer_type` makes for ldmatrix and wgmma). Runs before `pipeline_dot_operands`, which then
finds those operands in shared memory already and pipelines only the others.

Any other register tile that wgmma dots inside a loop read as one operand, made before the loop and read by nothing
else (attorch's flash-attention forward scales and casts q there; fp32 tiles, tf32-rounded as the dot's own
staging rounds them), is stored the same way just before the loop, in the encoding the dot would stage it in every
iteration: Triton keeps such a tile in shared memory too (local_alloc before the loop, local_load in it). Held in
registers across the loop it cost attorch's fp32 forward (128x64 queries, 4 warps) 64 registers per thread: 255
registers and 1524 bytes spilled, Triton 200 and none.
"""
from __future__ import annotations

from ..gpu.scratch import a_from_registers, is_wgmma, wgmma_kind
from ..gpu.smem_layout import swizzled
from ..ir import Module, Op
from ..ops import is_loop
from .dot_stages import Builder, buffer_type, mma_sync_k_major, tf32_wgmma_operand, view_type

NAME = "stage_invariant_dot_operands"
DESCRIPTION = "store tiles loaded once and read only by tensor-core dots into shared memory once (st.shared)"
REASON = "the dot operands stored above are in shared memory"


def _in_a_loop(op: Op) -> bool:
    b = op.block
    while b is not None and b.parent is not None:
        if b.parent.name in ("scf.for", "scf.while"):
            return True
        b = b.parent.block
    return False


def _first_in(block, ops):
    """The first of `ops` in `block`'s op order, climbing out of nested regions (None when none is inside)."""
    pos = {}
    for op in ops:
        o = op
        while o is not None and o.block is not block:
            o = o.block.parent if o.block is not None else None
        if o is not None:
            pos[id(o)] = o
    return next((o for o in block.ops if id(o) in pos), None)


def run(module: Module, options=None) -> dict:
    stats = {"staged_once": 0}
    arch = getattr(options, "arch", 90)
    if arch < 80:
        stats["skipped"] = [f"sm_{arch}: no mma.sync m16n8k16 to read the tiles"]
        return stats
    for ld in list(module.kernel.walk()):
        if ld.name != "tt.load" or ld.block is None or not ld.result.uses:
            continue
        uses = list(ld.result.uses)
        if not all(u.name == "tt.dot" and "mma" in u.attrs for u in uses):
            continue
        slots = {i for u in uses for i, v in enumerate(u.operands[:2]) if v is ld.result}
        if len(slots) != 1 or any(u.operands[0] is u.operands[1] for u in uses):
            continue
        t = ld.result.type
        if _in_a_loop(ld) or t.scalar.ir not in ("f16", "bf16"):
            continue  # loads that run every iteration are the pipeliner's; the others stay in registers
        index = slots.pop()
        buf_t = buffer_type(uses[0], t, 1)
        if buf_t is None or any(buffer_type(u, t, 1) != buf_t for u in uses):
            continue
        after = ld.block.ops[ld.block.ops.index(ld) + 1]
        bld = Builder(after, ld.loc)
        buf = bld.op("ttg.local_alloc", [], [buf_t], {"stages": 1, "operand": "ab"[index], "fill": "registers"},
                     [f"{'ab'[index]}_tile"]).result
        view = bld.op("ttg.memdesc_index", [buf, bld.const(0)], [buf.type.tile()]).result
        bld.op("ttg.local_store", [ld.result, view], [])
        first = _first_in(ld.block, uses)
        prev = ld.block.ops[ld.block.ops.index(first) - 1]
        if not (prev.name == "ttg.barrier" and prev.attrs.get("reason") == REASON):
            Builder(first, ld.loc).op("ttg.barrier", [], [], {"reason": REASON})
        for u in uses:
            u.set_operand(index, view)
        stats["staged_once"] += 1
    _stage_tf32_loads(module, stats)
    _store_invariant_operands(module, stats)
    return stats


def _tf32_readers(v, chain: list, out: list) -> bool:
    """Collect into `out` the (dot, operand index, transposed, chain of ops to erase) that tile `v` reaches through
    layout conversions and 2-D transposes; False when a use is anything else or not a tf32 wgmma operand."""
    if not v.uses:
        return False
    for u in v.uses:
        if u.name == "tt.dot" and "mma" in u.attrs:
            slots = [i for i in (0, 1) if u.operands[i] is v]
            if len(slots) != 1 or u.operands[2] is v or not (tf32_wgmma_operand(u, v.type)
                                                              or mma_sync_k_major(u, v.type)):
                return False
            if slots[0] == 0 and a_from_registers(u):
                return False
            out.append((u, slots[0], sum(o.name == "tt.trans" for o in chain) % 2 == 1, list(chain)))
        elif u.name == "ttg.convert_layout" or (u.name == "tt.trans" and list(u.attrs.get("order", [])) == [1, 0]):
            if not _tf32_readers(u.result, chain + [u], out):
                return False
        else:
            return False
    return True


def _stage_tf32_loads(module: Module, stats: dict):
    """An fp32 tile loaded outside any loop and read only by tf32 dots (wgmma or mma.sync, through layout conversions
    and transposes) is stored into a K-major one-stage buffer right after its load, tf32-rounded as the dot's own
    staging rounds it: Liger's neighborhood-attention q.k^T held both 64x64 fp32 tiles in registers up to the
    dot (93 registers, Triton 66, which stores each tile at its load); fla's chunk_gla_bwd_kernel_inter (mma.sync at
    2 warps) held its [64, 64] v and do tiles up to the dots."""
    for ld in list(module.kernel.walk()):
        if ld.name != "tt.load" or ld.block is None or _in_a_loop(ld) or ld.result.type.scalar.ir != "f32":
            continue
        readers: list = []
        if not _tf32_readers(ld.result, [], readers):
            continue
        t = ld.result.type
        if not all(tf32_wgmma_operand(d, t) for d, *_ in readers) and not _held_across_tiles(ld, readers):
            continue
        types = {buffer_type(d, t, 1, i, tr) for d, i, tr, _ in readers}
        if len(types) != 1 or None in types:
            continue
        buf_t = types.pop()
        index = readers[0][1]
        bld = Builder(ld.block.ops[ld.block.ops.index(ld) + 1], ld.loc)
        buf = bld.op("ttg.local_alloc", [], [buf_t], {"stages": 1, "operand": "ab"[index], "fill": "registers"},
                     [f"{'ab'[index]}_tile"]).result
        zero = bld.const(0)
        view = bld.op("ttg.memdesc_index", [buf, zero], [buf.type.tile()]).result
        bld.op("ttg.local_store", [ld.result, view], [], {"tf32": True})
        dots = [d for d, *_ in readers]
        first = _first_in(ld.block, dots)
        prev = ld.block.ops[ld.block.ops.index(first) - 1]
        if not (prev.name == "ttg.barrier" and prev.attrs.get("reason") == REASON):
            Builder(first, ld.loc).op("ttg.barrier", [], [], {"reason": REASON})
        erase = []
        for dot, i, transposed, chain in readers:
            vt = view_type(buf.type.tile(), transposed)
            dot.set_operand(i, view if not transposed else
                            Builder(dot, dot.loc).op("ttg.memdesc_index", [buf, zero], [vt]).result)
            erase += [op for op in reversed(chain) if op not in erase]
        for op in erase:
            if all(not r.uses for r in op.results):
                op.erase()
        stats["staged_once"] += 1


def _held_across_tiles(ld: Op, readers) -> bool:
    """Whether the tile of `ld` would stay in registers across another dot before an mma.sync reads it (fla's
    chunk_gla_bwd_kernel_inter loads v, do, h and dh, then runs do.h and v.dh: v is held across the first). Only then
    does an mma.sync operand go to shared memory at its load: otherwise the dot's own staging stores it about as
    early, and a buffer of its own (with the scratch of the conversions around it) cost fla's chunk_gla_fwd_kernel_o
    at 2 warps 112 bytes of spills where it had none."""
    first = _first_in(ld.block, [d for d, *_ in readers])
    ops = ld.block.ops
    for op in ops[ops.index(ld) + 1:ops.index(first)] if first is not None else []:
        for inner in op.walk():
            if inner.name == "tt.dot":
                return True
    return False


def _loop_holding(op: Op, block):
    """The loop op of `block` that `op` is nested in, or None when `op` is not inside a loop of `block`."""
    cur = op
    while cur.block is not None and cur.block is not block:
        cur = cur.block.parent
        if cur is None:
            return None
    return cur if cur is not op and cur.block is block and is_loop(cur.name) else None


def _staging_type(dot: Op, index: int, t):
    """One stage of the swizzled encoding a wgmma dot stages register operand `index` in (gpu.scratch.wgmma_staging):
    A K-major; B N-contiguous for 16-bit types, else K-major."""
    order = (1, 0) if index == 0 or not wgmma_kind(dot).k_major_only else (0, 1)
    return swizzled((1,) + tuple(t.shape), t.scalar, order)


def _store_invariant_operands(module: Module, stats: dict):
    """Register tiles that wgmma dots inside a loop read as one operand, made before the loop and read by nothing
    else: stored into a one-stage buffer just before the (first) loop, one barrier after; the dots read the buffer."""
    stats["stored_once"] = 0
    done = set()
    for dot in list(module.kernel.walk()):
        if dot.name != "tt.dot" or "mma" not in dot.attrs or not is_wgmma(dot):
            continue
        for index in (0, 1):
            v = dot.operands[index]
            d = v.defining_op
            if id(v) in done or d is None or d.block is None or v.type.is_memdesc():
                continue
            if index == 0 and a_from_registers(dot):
                continue  # wgmma reads A from registers (attention's probabilities)
            uses = list(v.uses)  # (the store added below becomes a use too)
            if not all(u.name == "tt.dot" and "mma" in u.attrs and is_wgmma(u) and u.operands[index] is v
                       and u.operands[1 - index] is not v for u in uses):
                continue
            loops = [_loop_holding(u, d.block) for u in uses]
            if any(lp is None for lp in loops):
                continue  # a dot after the definition outside any loop reads it once: its own staging is as good
            t = v.type
            buf_t = _staging_type(dot, index, t)
            if any(_staging_type(u, index, t) != buf_t for u in uses):
                continue
            first = min(loops, key=d.block.ops.index)
            bld = Builder(first, d.loc)
            buf = bld.op("ttg.local_alloc", [], [buf_t], {"stages": 1, "operand": "ab"[index], "fill": "registers"},
                         [f"{'ab'[index]}_tile"]).result
            view = bld.op("ttg.memdesc_index", [buf, bld.const(0)], [buf.type.tile()]).result
            bld.op("ttg.local_store", [v, view], [], {"tf32": t.scalar.ir == "f32" and wgmma_kind(dot).ptx == "tf32"})
            bld.op("ttg.barrier", [], [], {"reason": REASON})
            for u in uses:
                u.set_operand(index, view)
            done.add(id(v))
            stats["stored_once"] += 1
