"""tt.inline_asm (tl.inline_asm_elementwise) -> LLVM inline assembly, one call per `pack` registers.

Each thread runs the user's PTX once for every group of `pack` of its elements (groups are taken in
register order: which elements share a call is unspecified, as in Triton). Elements narrower than 32 bits
travel packed: as many as fit in 32 bits (at most `pack`) are one operand or result register. Several
result registers come back as an LLVM struct.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..types import TensorType
from .lower_map import operand_columns
from .lowering_core import KernelLowering, LoweringError, handles, llty


def _per_register(t, pack: int) -> int:
    """How many elements of scalar type `t` share one asm operand register."""
    bits = 64 if t.is_ptr() else t.bits
    return max(1, min(pack, 32 // bits)) if bits < 32 else 1


def _pack(b, vals, t, per):
    """`vals` (one element each) as ceil(len / per) registers of per * bits bits."""
    if per == 1:
        return list(vals)
    ety = llty(t)
    out = []
    for i in range(0, len(vals), per):
        chunk = vals[i:i + per]
        vec = ir.Constant(ir.VectorType(ety, per), ir.Undefined)
        for j, v in enumerate(chunk):
            vec = b.insert_element(vec, v, ir.Constant(ir.IntType(32), j))
        out.append(b.bitcast(vec, ir.IntType(per * t.bits)))
    return out


def _unpack(b, regs, t, per, n):
    if per == 1:
        return list(regs)[:n]
    ety = llty(t)
    out = []
    for r in regs:
        vec = b.bitcast(r, ir.VectorType(ety, per))
        out.extend(b.extract_element(vec, ir.Constant(ir.IntType(32), j)) for j in range(per))
    return out[:n]


@handles("tt.inline_asm")
def _inline_asm(lw: KernelLowering, op):
    b = lw.b
    pack = int(op.attrs.get("pack", 1))
    asm, constraints = op.attrs["asm"], op.attrs["constraints"]
    side_effect = not op.attrs.get("pure", False)
    n, cols = operand_columns(lw, op)
    in_types = [v.type.scalar for v in op.operands]
    out_types = [r.type.scalar for r in op.results]
    in_per = [_per_register(t, pack) for t in in_types]
    out_per = [_per_register(t, pack) for t in out_types]
    groups = -(-n // pack)
    outs = [[] for _ in op.results]
    for g in range(groups):
        idx = [min(g * pack + k, n - 1) for k in range(pack)]  # a short last group repeats its last element
        args = []
        for col, t, per in zip(cols, in_types, in_per):
            args += _pack(b, [col[i] for i in idx], t, per)
        ret_regs = []
        for t, per in zip(out_types, out_per):
            ty = llty(t) if per == 1 else ir.IntType(per * t.bits)
            ret_regs += [ty] * (-(-pack // per))
        if not ret_regs:
            raise LoweringError("inline_asm_elementwise needs at least one result")
        ret_ty = ret_regs[0] if len(ret_regs) == 1 else ir.LiteralStructType(ret_regs)
        fty = ir.FunctionType(ret_ty, [a.type for a in args])
        call = b.asm(fty, asm, constraints, args, side_effect)
        regs = [call] if len(ret_regs) == 1 else [b.extract_value(call, i) for i in range(len(ret_regs))]
        pos = 0
        for k, (t, per) in enumerate(zip(out_types, out_per)):
            count = -(-pack // per)
            vals = _unpack(b, regs[pos:pos + count], t, per, pack)
            pos += count
            take = min(pack, n - g * pack)
            outs[k].extend(vals[:take])
    for r, vals in zip(op.results, outs):
        lw.put(r, vals if isinstance(r.type, TensorType) else vals[0])
