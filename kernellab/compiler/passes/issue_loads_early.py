"""Issue global loads before the shared-memory round trips that precede them, outside loops.

A layout conversion, a cross-warp reduction or scan, a split or join through shared memory is a `bar.sync` in
the code; neither LLVM nor ptxas moves a global load above one. In straight-line code a load written after such an
op therefore waits its whole latency after the barrier, where it could have been in flight during it. A decode
step (mamba-3's step kernel: a dozen small loads, a state tile, a few conversions) spends most of its time so.

Each load outside a loop body moves, with the index math that computes its addresses, to just before the first
such op it can pass: one that none of its operands depends on, with no store, atomic, call, barrier, loop or
branch in between (a load never passes a write, so it reads what it read before). Only loads of at most
`MAX_PER_THREAD` elements a thread move: the value then lives across the barrier, in registers. Loops are left to
the pipeliners.

KERNELLAB_LOADS_PAST_DIVISION=1 (default off until timed on a GPU; part of the compile caches' keys through
runtime/codegen_env.py): a load whose address math holds a 64-bit integer division or remainder by a value not
known at compile time (`BIAS + offs % N` with int64 offsets) moves, with that math, above the pure ops between it
and the load before it (that load's consumers: its bf16 -> f32 unpacking), in loop bodies too, at any size. LLVM's
NVPTX backend splits such a division into a branch (a 32-bit divide where both operands fit, else a call); neither
LLVM nor ptxas moves work across it, so a consumer of the earlier load written above the division waits for that
load's data before the second load's address is known: two memory latencies in a row, where Triton's code (its
LLVM pipeline happens to put the unpacking after the division) has both loads in flight. heldout_texts4's
persistent bias + GELU (a grid-stride loop, `offs % N` for the bias) was 0.92 of Triton's speed at 1024 / 4 warps
with its SASS otherwise the same as Triton's.
"""
from __future__ import annotations

from ..gpu.scratch import _numel, scratch_bytes
from ..ir import Block, Module, Op
from ..ops import is_loop, is_pure
from ..switches import switch
from ..types import TensorType

NAME = "issue_loads_early"
DESCRIPTION = "start global loads before the barriers of earlier shared-memory round trips (straight-line code)"

MAX_PER_THREAD = 8

DIVISION_KNOB = "KERNELLAB_LOADS_PAST_DIVISION"
_DIVISIONS = ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui")


def past_division_enabled() -> bool:
    return switch(DIVISION_KNOB, False)


def _branching_division(op: Op) -> bool:
    """A 64-bit integer division or remainder by a value not known at compile time: LLVM's NVPTX lowering tests
    the operands' high halves and branches (BypassSlowDivision)."""
    if op.name not in _DIVISIONS:
        return False
    elem = getattr(op.result.type, "scalar", op.result.type)
    if getattr(elem, "bits", 0) != 64:
        return False
    d = op.operands[1].defining_op
    while d is not None and d.name == "tt.splat":
        d = d.operands[0].defining_op
    return d is None or d.name != "arith.constant"


def _round_trip(op: Op) -> bool:
    """An op whose lowering writes shared memory, waits at a barrier and reads it back."""
    return not op.regions and scratch_bytes(op)[0] > 0


def _small(load: Op, threads: int) -> bool:
    t = load.result.type
    return not isinstance(t, TensorType) or _numel(t.shape) <= MAX_PER_THREAD * threads


def _movable(op: Op) -> bool:
    """Pure straight-line work a load may carry along (its addresses) or pass."""
    return not op.regions and is_pure(op)


def _hoist(block: Block, i: int, past_pure: bool = False) -> bool:
    """Move the load at block.ops[i] (with its address slice) before the earliest round trip it can pass; with
    `past_pure`, before the earliest pure op or load it can pass."""
    ops = block.ops
    load = ops[i]
    needed = {id(o) for o in load.operands}
    slice_ops, target = [(i, load)], None
    for j in range(i - 1, -1, -1):
        op = ops[j]
        if any(id(r) in needed for r in op.results):
            if not _movable(op) or _round_trip(op):
                break  # the load depends on it
            slice_ops.append((j, op))
            needed.update(id(o) for o in op.operands)
            continue
        if op.name == "tt.load":
            continue  # loads pass loads
        if not _movable(op):
            break  # a store, atomic, barrier, call, loop or branch: nothing moves above it
        if _round_trip(op) or past_pure:
            target = j
    if past_pure and target is not None:
        # a load the moved math does not need goes below it too: its unpacking (the load's lowering splits its
        # vector into elements right there) would otherwise sit before the division's branch
        while target > 0 and ops[target - 1].name == "tt.load" and \
                not any(id(r) in needed for r in ops[target - 1].results):
            target -= 1
    if target is None:
        return False
    if past_pure and not any(_branching_division(op) for j, op in slice_ops if j > target):
        return False
    anchor = ops[target]
    # only what lies below the anchor moves (up, in program order); address math above it stays where it is
    for _, op in reversed([(j, op) for j, op in slice_ops if j > target]):
        block.ops.remove(op)
        block.insert(block.ops.index(anchor), op)
    return True


def _blocks(block: Block, in_loop: bool, loops_too: bool = False):
    """The blocks under `block`, those inside loops only with `loops_too`."""
    if loops_too or not in_loop:
        yield block
    for op in block.ops:
        for region in op.regions:
            yield from _blocks(region, in_loop or is_loop(op.name), loops_too)


def _hoist_loads(module: Module, takes, loops_too: bool = False, past_pure: bool = False) -> int:
    """`_hoist` every non-volatile load that `takes(load)` accepts, block by block; how many moved."""
    moved = 0
    for block in list(_blocks(module.kernel.body, False, loops_too)):
        i = 0
        while i < len(block.ops):
            op = block.ops[i]
            if op.name == "tt.load" and not op.attrs.get("volatile") and takes(op) and \
                    _hoist(block, i, past_pure=past_pure):
                moved += 1
                i = block.ops.index(op) + 1
                continue
            i += 1
    return moved


def run(module: Module, options=None) -> dict:
    threads = 32 * getattr(options, "num_warps", 4)
    moved = _hoist_loads(module, lambda op: _small(op, threads))
    # KERNELLAB_LOADS_PAST_DIVISION: each load whose moving address math holds a branching division goes above the
    # pure ops between it and the load before it, in every block
    past = _hoist_loads(module, lambda op: True, loops_too=True, past_pure=True) if past_division_enabled() else 0
    out = {"loads_moved": moved} if moved else {}
    if past:
        out["loads_past_division"] = past
    return out
