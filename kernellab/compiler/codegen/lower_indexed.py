"""Lowering of the ops whose shared-memory addresses come from data: tt.gather (read an element chosen by an
index) and tt.histogram (count into a bin chosen by a value). Both go through the op's scratch buffer:
write, bar.sync, (count, bar.sync,) read."""
from __future__ import annotations

import llvmlite.ir as ir

from ..gpu.scratch import mem_bytes
from .lower_shape import _from_mem, store_linear
from .lowering_core import I32, I64, KernelLowering, _cint, handles, memty


def _as_i32(lw: KernelLowering, v, t):
    """An integer register as i32 (sign- or zero-extended by its dtype, or truncated)."""
    if v.type.width == 32:
        return v
    if v.type.width > 32:
        return lw.b.trunc(v, I32)
    return lw.b.sext(v, I32) if t.kind == "int" else lw.b.zext(v, I32)


@handles("tt.gather")
def _gather(lw: KernelLowering, op):
    """The source tile goes to scratch in row-major order; each result register then reads the element at
    its own coordinates with the axis coordinate replaced by its index, wrapped to the axis size (a power
    of 2: an `and`), so no index can read outside the tile."""
    src, idx, res = op.operands[0], op.operands[1], op.results[0]
    elem = src.type.scalar
    size = mem_bytes(elem)
    axis, n = op.attrs["axis"], src.type.shape[op.attrs["axis"]]
    store_linear(lw, op, lw.regs(src), src.type.layout, src.type.shape, elem)
    lw.barrier()
    out = []
    for v, ix in zip(lw.regs(idx), lw.reg_indices(idx.type.layout, idx.type.shape)):
        coords = list(ix)
        coords[axis] = lw.b.and_(_as_i32(lw, v, idx.type.scalar), _cint(n - 1))
        p = lw.smem_ptr(op, lw.b.mul(lw.linear_index(coords, src.type.shape), _cint(size)))
        out.append(_from_mem(lw, lw.b.load(p, typ=memty(elem)), elem))
    lw.put(res, out)


@handles("tt.histogram")
def _histogram(lw: KernelLowering, op):
    """Zero num_bins i32 counters in scratch, bar.sync, one shared-memory atomic add per counted element
    (representative copies only, in range, mask on), bar.sync, read the counters in the result's layout."""
    x, res = op.operands[0], op.results[0]
    mask = op.operands[1] if len(op.operands) > 1 else None
    bins = op.attrs["num_bins"]
    b = lw.b
    positions = lw.reg_indices(res.type.layout, res.type.shape)
    for ix in positions:  # copies of an element store the same zero
        b.store(_cint(0), lw.smem_ptr(op, b.mul(ix[0], _cint(4))))
    lw.barrier()
    t = x.type.scalar
    wide = I64 if t.bits > 32 else I32
    valid = lw.reg_valid(x.type.layout, x.type.shape)
    masks = lw.regs(mask) if mask is not None else None
    for r, v in enumerate(lw.regs(x)):
        w = v if v.type.width == wide.width else (b.sext(v, wide) if t.kind == "int" else b.zext(v, wide))
        ok = b.icmp_unsigned("<", w, ir.Constant(wide, bins))  # negative values are huge unsigned: not counted
        if masks is not None:
            ok = b.and_(ok, masks[r])
        if valid is not None:
            ok = b.and_(ok, valid[r])
        with b.if_then(ok):
            bin32 = b.trunc(w, I32) if wide is I64 else w
            b.atomic_rmw("add", lw.smem_ptr(op, b.mul(bin32, _cint(4))), _cint(1), "monotonic")
    lw.barrier()
    lw.put(res, [b.load(lw.smem_ptr(op, b.mul(ix[0], _cint(4))), typ=I32) for ix in positions])
