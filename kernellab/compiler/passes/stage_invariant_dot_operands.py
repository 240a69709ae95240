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
"""
from __future__ import annotations

from ..ir import Module, Op
from .dot_stages import Builder, buffer_type

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
    return stats
