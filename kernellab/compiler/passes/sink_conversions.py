"""Sink a layout conversion into the one `scf.if` region that holds all its uses.

A loop flatten_loops fused (a persistent variant's tile loop with its K loop) computes a tile's epilogue values
(store offsets, masks) in its prologue `scf.if` and carries them through the iterations; the epilogue, an `scf.if`
taken once a tile, reads them in the store's layout. The conversions to that layout sit where remove_layout_conversions
left them, at the top of the body: each a shared-memory round trip between barriers, every iteration, for values
read once a tile (the persistent W4A16 matmul: four conversions and two barriers an iteration). A conversion is pure,
so moved into that region, right before its first reader there, it runs only when the region does. Only conversions
whose uses are all inside one region of one `scf.if` of the conversion's own block; never into a loop.

On by default (KERNELLAB_SINK_CONVERSIONS=0 turns it off; a codegen knob of CODEGEN_ENV). H100, heldout_texts4's W4A16
at 64x64x128 / 4 warps, auto-persistent: 0.79 -> 0.87x Triton (0.94 with pipeline_dot_operands' fused side loads);
the corpus matmul's persistent rows unchanged; no GPU IR of the idioms' 130 kernels or the held-out screens changes
(plain kernels seldom convert for one branch only).
"""
from __future__ import annotations

from ..ir import Module
from ..rewrite import branch_of_uses, move_before, top_level
from ..switches import switch

NAME = "sink_conversions"
DESCRIPTION = "move a layout conversion into the scf.if region that holds all its uses (run only when it is taken)"
KNOB = "KERNELLAB_SINK_CONVERSIONS"


def enabled() -> bool:
    return switch(KNOB, True)


def _sink_once(fn) -> int:
    moved = 0
    for op in list(fn.walk()):
        if op.name != "ttg.convert_layout" or not op.result.uses:
            continue
        region = branch_of_uses(op)
        if region is None:
            continue
        pos = {id(o): i for i, o in enumerate(region.ops)}
        move_before(op, min((top_level(u, region) for u in op.result.uses), key=lambda t: pos[id(t)]))
        moved += 1
    return moved


def run(module: Module, options=None) -> dict:
    if not enabled():
        return {}
    total = 0
    while True:  # a conversion read only by a sunk one follows it in the next round
        moved = _sink_once(module.kernel)
        total += moved
        if not moved:
            break
    return {"sunk": total} if total else {}
