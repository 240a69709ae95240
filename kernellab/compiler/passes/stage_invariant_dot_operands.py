"""Copy a tile that is loaded once and only read by tensor-core dots (attention's queries) into shared memory,
right where it is loaded: a one-stage buffer filled by cp.async and waited for at once.

Left in registers, such a tile would occupy them for the whole kernel and be staged into shared memory again by
every dot that reads it (every iteration of attention's key loop). A tile qualifies when it is loaded outside
any loop, every user is an mma dot reading it as the same operand, and cp.async can copy it (the conditions of
`dot_stages.copyable`). Runs before `pipeline_dot_operands`, which then finds those operands in shared memory
already and pipelines only the others.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..types import int1
from . import dce
from .dot_stages import BlockPtrCopies, Builder, buffer_type, copy_tile, copyable

NAME = "stage_invariant_dot_operands"
DESCRIPTION = "copy tiles loaded once and read only by tensor-core dots into shared memory once (cp.async)"


def _in_a_loop(op: Op) -> bool:
    b = op.block
    while b is not None and b.parent is not None:
        if b.parent.name in ("scf.for", "scf.while"):
            return True
        b = b.parent.block
    return False


def run(module: Module, options=None) -> dict:
    stats = {"staged_once": 0}
    arch = getattr(options, "arch", 90)
    if arch < 80:
        stats["skipped"] = [f"sm_{arch} has no cp.async"]
        return stats
    bpc = BlockPtrCopies(module, options)
    for ld in list(module.kernel.walk()):
        if ld.name != "tt.load" or ld.block is None or not ld.result.uses:
            continue
        uses = ld.result.uses
        if not all(u.name == "tt.dot" and "mma" in u.attrs for u in uses):
            continue
        slots = {i for u in uses for i, v in enumerate(u.operands[:2]) if v is ld.result}
        if len(slots) != 1 or any(u.operands[0] is u.operands[1] for u in uses):
            continue
        if _in_a_loop(ld) or copyable(ld, bpc) is not None:
            continue  # loads that run every iteration are the pipeliner's; the others stay in registers
        index = slots.pop()
        t = ld.result.type
        buf_t = buffer_type(uses[0], t, 1)
        if buf_t is None or any(buffer_type(u, t, 1) != buf_t for u in uses):
            continue
        bld = Builder(ld, ld.loc)
        buf = bld.op("ttg.local_alloc", [], [buf_t], {"stages": 1, "operand": "ab"[index]},
                     [f"{'ab'[index]}_tile"]).result
        view = bld.op("ttg.memdesc_index", [buf, bld.const(0)], [buf.type.tile()]).result
        true = bld.op("arith.constant", [], [int1], {"value": True}).result
        copy_tile(bld, ld, ld.operands[0], view, true, bpc, ld.operands[1] if len(ld.operands) > 1 else None)
        bld.op("ttg.async_commit", [], [])
        bld.op("ttg.async_wait", [buf], [], {"pending": 0})
        for u in list(uses):
            u.set_operand(index, view)
        ld.erase()
        stats["staged_once"] += 1
    if stats["staged_once"]:
        dce.run(module)  # what only the register tile needed (its `other`) is dead now
    return stats
