"""Mark integer and boolean element ops whose result is the same on several of a thread's registers.

`offs < n` with `offs = i + tl.arange(0, BLOCK)` and `n` a multiple of 16 (argument specialization) is
constant over aligned blocks of 16 elements. A thread holding 4 consecutive elements needs one compare, not
four (Liger's cross-entropy loop: 33 compares per thread and iteration where Triton has 9); a thread holding
rows r, r+8, r+16, ... of a 64-row tile (a matmul's K mask on its B operand) needs one per 16 rows. The axis
analysis gives each value's constancy per dimension; this pass writes `uniform_blocks = [b0, b1, ...]` on ops
whose result is constant over aligned blocks of b_d elements along each dimension d, chosen so that, for every
thread, registers whose offsets agree on `offset // b_d` hold elements of one block; codegen computes the first
register of each block and reuses it for the others.
"""
from __future__ import annotations

from ..gpu.axis_info import AxisAnalysis
from ..gpu.layouts import Blocked, Slice
from ..ir import Module
from ..ops import is_elementwise
from ..types import PointerType, TensorType

NAME = "share_uniform_runs"
DESCRIPTION = "integer/mask ops constant over blocks of a thread's registers are computed once per block"


def _block(const: int, spt: int, extent: int) -> int:
    """The block along one dim over which registers may share a value constant over aligned `const` blocks.
    A thread's part of the index is a multiple of `spt` below `extent` (spt*tpw*wpc) and its registers sit at
    r*extent + e (e < spt): a block within one run of spt (const <= spt), or one spanning whole extents
    (const >= extent), holds the same registers for every thread; in between, runs of spt still do."""
    const &= -const  # a power of two dividing it: blocks of any divisor are constant too
    b = const if const <= spt or const >= extent else spt & -spt
    return b if b >= 2 else 1


def _blocks(op, axis: AxisAnalysis):
    res = op.results[0]
    t = res.type
    if not isinstance(t, TensorType) or isinstance(t.scalar, PointerType):
        return None
    lay = t.layout
    if isinstance(lay, Blocked):
        dims = (lay.spt, lay.tpw, lay.wpc)
    elif isinstance(lay, Slice) and isinstance(lay.parent, Blocked) and axis.div_runs:
        # KERNELLAB_DIV_RUNS=1: a slice of a blocked layout places its kept dims' registers as the parent does
        # (rope_pairs' `pos = (rows // H) % S` over a 16-row tile, two rows a thread: one division, not two)
        p, keep = lay.parent, [d for d in range(lay.parent.rank) if d != lay.dim]
        dims = tuple(tuple(f[d] for d in keep) for f in (p.spt, p.tpw, p.wpc))
    else:
        return None
    if not (t.scalar.is_int() or t.scalar.kind == "bool"):
        return None
    const = axis[res].const
    if len(const) != len(t.shape):  # values the analysis does not track at this rank
        return None
    blocks = tuple(_block(min(c, n), s, s * tp * w) for c, n, s, tp, w in zip(const, t.shape, *dims))
    return blocks if any(b > 1 for b in blocks) else None


def run(module: Module, options) -> dict:
    stats = {"marked": 0}
    for fn in module.functions:
        axis = AxisAnalysis(fn)
        for op in fn.walk():
            if len(op.results) == 1 and not op.regions and is_elementwise(op.name) and op.name != "arith.constant":
                blocks = _blocks(op, axis)
                if blocks:
                    op.attrs["uniform_blocks"] = list(blocks)
                    stats["marked"] += 1
    return stats
