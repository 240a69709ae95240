"""Loop-invariant code motion.

Moves ops out of `scf.for` and `scf.while` bodies to just before the loop when every operand is
defined outside the loop. Inner loops are processed first, so an op can climb out of several
loops. Only ops that are pure and have no regions move; since a loop may run zero times, an op is
moved only if executing it speculatively is harmless, which rules out integer division and
remainder (a zero divisor traps on the GPU) unless the divisor is a constant that cannot trap.
Loads, stores, atomics and prints never move, nor do ops nested inside an `scf.if` in the loop. A loop with
`disable_licm` (Triton's hint on `tl.range` and `tl.condition`) keeps its code; codegen passes the hint on to LLVM.
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..ops import info, is_loop, is_pure
from ..rewrite import int_const, is_defined_inside, move_before

NAME = "licm"
DESCRIPTION = "hoist loop-invariant pure ops out of scf.for / scf.while bodies"



def _speculatable(op: Op) -> bool:
    if op.regions or not is_pure(op) or info(op.name).terminator:
        return False
    if info(op.name).traps:
        d = int_const(op.operands[1])
        if d is None or d == 0:
            return False
        if op.name in ("arith.divsi", "arith.remsi") and d == -1 and op.operands[1].type.scalar.bits > 1:
            return False  # INT_MIN / -1 overflows
    return True


def _hoist_from(loop: Op, stats: dict):
    for region in loop.regions:
        for op in list(region.ops):
            if _speculatable(op) and not any(is_defined_inside(v, loop) for v in op.operands):
                move_before(op, loop)
                stats["hoisted"] += 1


def _visit(block: Block, stats: dict):
    for op in list(block.ops):
        for r in op.regions:
            _visit(r, stats)
        if is_loop(op.name) and not op.attrs.get("disable_licm"):  # tl.range(..., disable_licm=True) keeps its code
            _hoist_from(op, stats)


def run(module: Module) -> dict:
    stats = {"hoisted": 0}
    for fn in module.functions:
        _visit(fn.body, stats)
    return stats
