"""Store a value in the layout it was computed in where that layout writes whole sectors, not through shared memory.

assign_layouts gives each store the widest vector its addresses allow (16 bytes a thread). A value narrower than
what it was computed from (fp8 or bf16 results of f32 math) is then converted through shared memory into that
layout, unless remove_layout_conversions could compute its whole chain there; where it could not (the chain
passes a reduction or a load also used elsewhere: torchao's fp8 weight quantization, `y = (x / max|x|)` to fp8)
the conversion stays, 18 KB of shared memory and two barriers for a 128x128 tile. Triton stores such a value in
its own layout (its stores take their value's layout): narrower vectors, but no round trip. This pass does the
same where the value's layout keeps the access coalesced: the same fastest dimension, at least 4 contiguous bytes
a thread, and each warp's run along it a whole number of 32-byte sectors (or the whole row). The addresses and
mask are rebuilt in that layout (remove_layout_conversions' rematerialization), never converted.

KERNELLAB_STORE_SECTOR_VECTORS=1 (default off until timed on a GPU; part of the compile caches' keys through
runtime/codegen_env.py): also each store *instruction* must write whole sectors. Where the value's layout holds a
longer run a thread than the store's vector (bf16 results in the [1, 16] layout of a u8 mask's 16-byte loads,
stored 8 elements = 16 bytes at a time), every thread's run takes two or more vector stores and each of them writes
half of each 32-byte sector its warp touches: twice the L2 write requests of the wanted layout (whose run is the
vector). Such a store keeps its conversion, as Triton's stores do (heldout_texts4's bias-dropout-residual backward
at 32x128 / 4 warps and 64x256 / 8 warps, 0.73 and 0.87 of Triton's speed on the H200, stores its `dx` so).
"""
from __future__ import annotations

from ..gpu.layouts import Blocked
from ..gpu.scratch import _numel
from ..ir import Module, Op
from ..switches import switch
from ..types import TensorType
from .remove_layout_conversions import Remat, _sweep, recomputable

NAME = "store_in_value_layout"
DESCRIPTION = "store a converted value in its own layout where that writes whole sectors (no shared-memory trip)"


SECTOR_VECTORS_KNOB = "KERNELLAB_STORE_SECTOR_VECTORS"


def sector_vectors_enabled() -> bool:
    return switch(SECTOR_VECTORS_KNOB, False)


def _splits_runs(src, want, vec: int) -> bool:
    """Whether a store of `vec` elements an instruction splits each thread's run of `src` over several
    instructions (each writing part of every sector) where the wanted layout's run is one instruction."""
    f = want.order[0]
    return src.spt[src.order[0]] > vec >= want.spt[f]


def _writes_sectors(lay, shape, ebytes: int) -> bool:
    if not isinstance(lay, Blocked):
        return False
    f = lay.order[0]
    run = lay.spt[f] * ebytes
    row = lay.tpw[f] * run
    return run >= 4 and (row % 32 == 0 or lay.tpw[f] * lay.spt[f] >= shape[f])


def _candidate(op: Op, threads: int):
    if op.name != "tt.store" or op.operands[0].type.is_block_ptr() or not isinstance(op.operands[1].type, TensorType):
        return None
    conv = op.operands[1].defining_op
    if conv is None or conv.name != "ttg.convert_layout":
        return None
    src, want = conv.operands[0].type.layout, op.operands[1].type.layout
    shape = op.operands[1].type.shape
    elem = op.operands[1].type.scalar
    ebytes = max(1, getattr(elem, "bits", 32) // 8)
    if not isinstance(want, Blocked) or not isinstance(src, Blocked) or src.order[0] != want.order[0]:
        return None
    if not _writes_sectors(src, shape, ebytes):
        return None
    if sector_vectors_enabled() and _splits_runs(src, want, op.attrs.get("vec", 1)):
        return None
    others = [v for i, v in enumerate(op.operands) if i != 1 and isinstance(v.type, TensorType)]
    if not all(recomputable(v, src, threads) for v in others):
        return None
    return conv, src


def run(module: Module, options) -> dict:
    threads = 32 * options.num_warps
    moved = 0
    for op in list(module.kernel.walk()):
        found = _candidate(op, threads)
        if found is None:
            continue
        conv, src = found
        for i, v in enumerate(op.operands):
            if i == 1:
                op.set_operand(1, conv.operands[0])
            elif isinstance(v.type, TensorType):
                r = Remat(threads=threads)
                if not r.can(v, src):
                    r = Remat(narrow=_numel(v.type.shape) // 2, threads=threads)
                op.set_operand(i, r.build(v, src, op))
        f = src.order[0]
        op.attrs["vec"] = max(1, min(op.attrs.get("vec", 1), src.spt[f]))
        if not conv.result.uses:
            conv.erase()
        moved += 1
    if moved:
        _sweep(module)
    return {"stores_in_value_layout": moved} if moved else {}
