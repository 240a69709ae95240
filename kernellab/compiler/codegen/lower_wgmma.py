"""`tl.dot` on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a), emitted as inline PTX (LLVM has no
intrinsic for it).

Warpgroup g (warps 4g..4g+3) computes rows 64g..64g+63 of the tile with one m64nNk16 instruction per
16 of K; each thread's N/2 accumulators are exactly its registers in the #mma layout with every warp
along M. Both operands are read from swizzled shared memory through 64-bit matrix descriptors: a
pipelined stage (`!memdesc`), or a register tile staged here into the dot's scratch. The sequence is
wgmma.fence, the k-steps, commit, and a wait that takes the accumulators as operands so LLVM cannot
read them before the tensor cores have written them.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..gpu.scratch import wgmma_staging
from ..gpu.smem_layout import descriptor_fields
from .lower import F32, I8, I32, I64, VOID, KernelLowering, _cint, handles
from .lower_async import fence_proxy_async, store_tile, tile_byte_offset


def _stage_swizzled(lw: KernelLowering, v, t, base: int):
    """Store a register tile into scratch at `base` in the swizzled encoding `t` (16-byte runs stay whole)."""
    b = lw.b
    store_tile(lw, v, lw.regs(v), lambda r, c: b.add(_cint(base), tile_byte_offset(lw, t, r, c)), t.scalar.bits // 8)


def _descriptor(lw: KernelLowering, tile_off, t, k_major: bool, k0: int, wg_rows):
    """The i64 matrix descriptor reading 16 k from k0 (and, for A, warpgroup `wg_rows`' 64 rows)."""
    b = lw.b
    start, lbo, sbo, mode = descriptor_fields(t, k_major, k0, 0)
    addr = b.add(tile_off, _cint(start))
    if wg_rows is not None:
        per_wg = descriptor_fields(t, k_major, 0, 64)[0] - descriptor_fields(t, k_major, 0, 0)[0]
        addr = b.add(addr, b.mul(wg_rows, _cint(per_wg)))
    smem_addr = b.ptrtoint(b.gep(lw.smem, [addr], source_etype=I8), I32)
    lo = b.zext(b.lshr(b.and_(smem_addr, _cint(0x3FFFF)), _cint(4)), I64)
    const = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (mode << 62)
    return b.or_(lo, ir.Constant(I64, const))


def dot_wgmma(lw: KernelLowering, op):
    b = lw.b
    a_v, b_v, c_v = op.operands
    M, K = a_v.type.shape
    N = b_v.type.shape[1]
    ty = a_v.type.scalar.name
    sa, sb = wgmma_staging(op)
    base = op.attrs.get("smem_offset", 0)
    if sa is not None:
        _stage_swizzled(lw, a_v, sa, base)
    if sb is not None:
        _stage_swizzled(lw, b_v, sb, base + (sa.tile_bytes if sa is not None else 0))
    if sa is not None or sb is not None:
        fence_proxy_async(lw)  # generic-proxy stores, read next by the async proxy
        lw.barrier()
    a_t = sa or a_v.type
    b_t = sb or b_v.type
    a_off = _cint(base) if sa is not None else lw.get(a_v)
    b_off = _cint(base + (sa.tile_bytes if sa is not None else 0)) if sb is not None else lw.get(b_v)
    a_kmajor = a_t.order[0] == 1   # A [M][K], K contiguous
    b_kmajor = b_t.order[0] == 0   # B stored [N][K], K contiguous
    wg = b.lshr(lw.warp, _cint(2))
    n_acc = N // 2
    acc = list(lw.regs(c_v))
    assert len(acc) == n_acc, (len(acc), n_acc)
    outs = ", ".join(f"${i}" for i in range(n_acc))
    asm = (f"{{ .reg .pred p; setp.ne.b32 p, ${n_acc + 2}, 0; "
           f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{ty}.{ty} {{{outs}}}, ${n_acc}, ${n_acc + 1}, p, 1, 1, "
           f"{0 if a_kmajor else 1}, {0 if b_kmajor else 1}; }}")
    cons = ",".join(["=f"] * n_acc + ["l", "l", "r"] + [str(i) for i in range(n_acc)])
    fty = ir.FunctionType(ir.LiteralStructType([F32] * n_acc), [I64, I64, I32] + [F32] * n_acc)
    b.asm(ir.FunctionType(VOID, []), "wgmma.fence.sync.aligned;", "~{memory}", [], side_effect=True)
    for k0 in range(0, K, 16):
        da = _descriptor(lw, a_off, a_t, a_kmajor, k0, wg)
        db = _descriptor(lw, b_off, b_t, b_kmajor, k0, None)
        out = b.asm(fty, asm, cons, [da, db, _cint(1)] + acc, side_effect=True)
        acc = [b.extract_value(out, i) for i in range(n_acc)]
    b.asm(ir.FunctionType(VOID, []), "wgmma.commit_group.sync.aligned;", "~{memory}", [], side_effect=True)
    if op.attrs.get("wgmma_async"):
        # the group stays in flight: the ttg.dot_wait that the pipeliner put after this dot ties the registers
        lw.put(op.results[0], acc)
    else:
        lw.put(op.results[0], wgmma_wait(lw, acc, 0))


def wgmma_wait(lw: KernelLowering, acc: list, pending: int) -> list:
    """wgmma.wait_group taking the accumulators as tied operands: their values after it are the ones the
    tensor cores wrote, and LLVM cannot move a read of them above the wait."""
    b = lw.b
    n = len(acc)
    ty = ir.FunctionType(ir.LiteralStructType([F32] * n), [F32] * n)
    out = b.asm(ty, f"wgmma.wait_group.sync.aligned {pending};", ",".join(["=f"] * n + [str(i) for i in range(n)]),
                acc, side_effect=True)
    return [b.extract_value(out, i) for i in range(n)]


@handles("ttg.dot_wait")
def _dot_wait(lw: KernelLowering, op):
    lw.put(op.result, wgmma_wait(lw, list(lw.regs(op.operands[0])), int(op.attrs.get("pending", 0))))
