"""Multi-stage shared-memory buffers and the cp.async copies that fill them (sm_80+).

A `!memdesc` value lowers to one i32: its absolute byte offset in the kernel's shared memory.
`ttg.async_copy` issues one `cp.async` per run of `vec` contiguous elements a thread holds in the
pointer tile's layout (16-byte runs use the L2-only `.cg` variant), writing them where the buffer's
order and row padding put them; a masked-off or predicated-off run copies 0 source bytes, which
fills the destination with zeros without touching global memory.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .lower import I8, I32, I64, VOID, KernelLowering, _cint, handles


@handles("ttg.local_alloc")
def _local_alloc(lw: KernelLowering, op):
    lw.put(op.result, _cint(op.attrs.get("smem_offset", 0)))


@handles("ttg.memdesc_index")
def _memdesc_index(lw: KernelLowering, op):
    buf, slot = op.operands
    stride = buf.type.tile_bytes
    lw.put(op.result, lw.b.add(lw.get(buf), lw.b.mul(lw.get(slot), _cint(stride))))


@handles("ttg.async_copy")
def _async_copy(lw: KernelLowering, op):
    b = lw.b
    ptr_v, view_v, pred_v = op.operands[:3]
    mask_v = op.operands[3] if len(op.operands) > 3 else None
    t = ptr_v.type
    view = view_v.type
    rows, cols = t.shape
    col_major = view.order[0] == 0
    stride = (rows if col_major else cols) + view.pad
    esize = view.scalar.bits // 8
    vec = op.attrs.get("vec", 1)
    nbytes = vec * esize
    ptrs = lw.regs(ptr_v)
    masks = lw.regs(mask_v) if mask_v is not None else None
    idx = lw.reg_indices(t.layout, t.shape)
    valid = lw.reg_valid(t.layout, t.shape)
    base = lw.get(view_v)
    pred = lw.get(pred_v)
    cache = "cg" if nbytes == 16 else "ca"
    if valid is None:
        asm = f"cp.async.{cache}.shared.global [$0], [$1], {nbytes}, $2;"
        fty = ir.FunctionType(VOID, [I32, I64, I32])
        cons = "r,l,r"
    else:  # a layout holding copies of an element: only the representative copy is moved
        asm = (f"{{ .reg .pred p; setp.ne.b32 p, $3, 0; @p cp.async.{cache}.shared.global [$0], [$1], "
               f"{nbytes}, $2; }}")
        fty = ir.FunctionType(VOID, [I32, I64, I32, I32])
        cons = "r,l,r,r"
    for g in range(0, len(ptrs), vec):
        r, c = idx[g]
        lin = b.add(b.mul(c, _cint(stride)), r) if col_major else b.add(b.mul(r, _cint(stride)), c)
        dst = b.ptrtoint(b.gep(lw.smem, [b.add(base, b.mul(lin, _cint(esize)))], source_etype=I8), I32)
        ok = pred if masks is None else b.and_(pred, masks[g])
        src_bytes = b.select(ok, _cint(nbytes), _cint(0))
        args = [dst, b.ptrtoint(ptrs[g], I64), src_bytes]
        if valid is not None:
            args.append(b.zext(valid[g], I32))
        b.asm(fty, asm, cons, args, side_effect=True)


@handles("ttg.async_commit")
def _async_commit(lw: KernelLowering, op):
    lw.b.asm(ir.FunctionType(VOID, []), "cp.async.commit_group;", "", [], side_effect=True)


@handles("ttg.async_wait")
def _async_wait(lw: KernelLowering, op):
    n = int(op.attrs.get("pending", 0))
    lw.b.asm(ir.FunctionType(VOID, []), f"cp.async.wait_group {n};", "~{memory}", [], side_effect=True)
    lw.barrier()

