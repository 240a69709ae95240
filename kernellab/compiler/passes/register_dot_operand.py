"""Compute a tf32 mma.sync dot's A operand in the accumulator layout, so the dot takes its fragments from registers.

An A operand that a loop computes by elementwise math from tiles it reads out of shared memory (fla's
chunk_fwd_kernel_h with USE_GK: `b_k * exp2(b_gk_last[:, None] - b_gk)`, both tiles read back from pipeline
stages) used to be computed in its load's blocked layout, then stored into the dot's scratch (st.shared), a barrier,
and read back by ldmatrix. The barrier kept every element live at once: all 64 values of each tile were loaded
before the math, and the products waited for the barrier (208 registers at one warp; Triton 96). Triton reads such
tiles straight into the dot-operand layout, computes there and hands the registers to mma.sync, so ptxas
interleaves the reads, the math and the mmas.

This pass does the same with the layouts kernellab has. In the #mma layout over A's [M, K] shape (warps along M
only) a thread holds, per 16x8 block, rows g and g + 8 and columns 2t and 2t + 1 (g = lane / 4, t = lane % 4);
m16n8k8.tf32 wants columns t and t + 4 in its A registers. A dot does not depend on the order of k within a step,
so the lowering feeds column 2t as the instruction's k slot t and 2t + 1 as slot t + 4, and reads B's rows 2t and
2t + 1 for the same slots (one 8-byte ld.shared per n-tile from a K-major stage) instead of ldmatrix. Here the chain
from the A operand back to its leaves is retyped in place: elementwise ops and broadcasts take the #mma layout,
`ttg.local_load`s read straight into it, constants and splats are rebuilt in it, and a row or column vector
broadcast into the chain (`expand_dims`) is converted to the matching slice once (a BLOCK_M-element conversion).
The stages those reads touch get their rows padded so the reads are free of bank conflicts (an M-contiguous math
tile: rows of M + 4 elements; the K-major B stage: rows 8 elements longer, so each half-warp's 8-byte reads cover
32 banks).

Applies where every value of the chain is used only inside it (or as the dot's A), at least one leaf reads shared
memory, the dot's warps lie along M only and it is not a wgmma. `KERNELLAB_REGISTER_DOT_OPERAND=1` turns it on
(default off until it is timed on a GPU); `=2` also sends an A that already is an fp32 accumulator in the #mma
layout to the mma from registers (`accumulators_too`).
"""
from __future__ import annotations

import os

from ..gpu.layouts import Mma, Slice
from ..gpu.scratch import is_wgmma, mma_instr
from ..ir import Module, Op
from ..ops import is_elementwise, is_pure
from ..rewrite import insert_before
from ..types import MemDescType, TensorType

NAME = "register_dot_operand"
DESCRIPTION = "compute a tf32 mma.sync dot's A operand in the accumulator layout: its fragments come from registers"

KNOB = "KERNELLAB_REGISTER_DOT_OPERAND"


def enabled() -> bool:
    return os.environ.get(KNOB, "0") not in ("", "0")


def accumulators_too() -> bool:
    """KERNELLAB_REGISTER_DOT_OPERAND=2: also an A that already is an fp32 accumulator in the #mma layout (a chained
    dot's probabilities or scores) goes to the mma from registers instead of its staging store (fla's
    chunk_bwd_kernel_dqkwg at 2 warps: 460 -> 216 bytes of spills, chunk_bwd_kernel_dv 255 regs / 8 B -> 194 / 0;
    but parallel_attn_fwd_kernel 248 -> 384 bytes)."""
    return os.environ.get(KNOB, "0") == "2"


def _eligible(dot: Op):
    """The #mma layout the dot's A should take, or None."""
    if dot.name != "tt.dot" or "mma" not in dot.attrs or is_wgmma(dot):
        return None
    a = dot.operands[0]
    if not isinstance(a.type, TensorType) or a.type.is_memdesc():
        return None
    instr = mma_instr(dot)
    if instr.k != 8 or a.type.scalar.ir != "f32":
        return None
    wm, wn = dot.attrs["mma"]
    m, k = a.type.shape
    if wn != 1 or m % (16 * wm) or k % 8:
        return None
    return Mma((wm, 1))


def _chain(dot: Op, want):
    """(values to retype [(value, layout)], leaves to rebuild [(value, layout)], vectors to convert
    [(expand_dims op, slice layout)], local_loads) for the dot's A, or None when the chain does not qualify."""
    block = dot.block
    retype, rebuild, vectors, loads = {}, {}, [], []
    todo = [(dot.operands[0], want)]
    while todo:
        v, lay = todo.pop()
        key = id(v)
        if key in retype or key in rebuild:
            if (retype.get(key) or rebuild.get(key))[1] != lay:
                return None
            continue
        op = v.defining_op
        if op is None or op.block is not block or len(op.results) != 1 or op.regions:
            return None
        if op.name in ("arith.constant", "tt.splat"):
            rebuild[key] = (v, lay)
            continue
        retype[key] = (v, lay)
        if op.name == "ttg.local_load":
            loads.append(op)
        elif op.name == "tt.broadcast":
            todo.append((op.operands[0], lay))
        elif op.name == "tt.expand_dims":
            vectors.append((op, Slice(op.attrs["axis"], lay)))
        elif op.name == "ttg.convert_layout" and isinstance(op.operands[0].type, TensorType) \
                and len(op.operands[0].type.shape) == 2:
            todo.append((op.operands[0], lay))  # looked through: becomes a no-op, erased below
        elif is_elementwise(op.name) and is_pure(op):
            todo += [(o, lay) for o in op.operands if isinstance(o.type, TensorType)]
        else:
            return None
    if not loads:
        return None
    inside = {id(v.defining_op) for v, _ in retype.values()}
    for v, _ in retype.values():
        for u in v.uses:
            if u is dot:
                if dot.operands[1] is v or dot.operands[2] is v:
                    return None
            elif id(u) not in inside:
                return None
    return list(retype.values()), list(rebuild.values()), vectors, loads


def _alloc_of(view):
    """The ttg.local_alloc a stage view comes from (through memdesc_index), or None."""
    op = view.defining_op
    while op is not None and op.name == "ttg.memdesc_index":
        op = op.operands[0].defining_op
    return op if op is not None and op.name == "ttg.local_alloc" else None


def _repad(alloc: Op, pad: int) -> None:
    """Give a stage buffer rows `pad` elements longer, and every view of it the same."""
    def retype(v):
        t = v.type
        v.type = MemDescType(t.shape, t.elem, t.order, pad, t.swizzle)
        for u in v.uses:
            for r in u.results:
                if isinstance(r.type, MemDescType):
                    retype(r)

    retype(alloc.result)


def _readers_only(alloc: Op, allowed) -> bool:
    """Whether every op reading the buffer (besides the copies that fill it and the waits) is in `allowed`."""
    def ok(v):
        for u in v.uses:
            if u.name == "ttg.memdesc_index":
                if not ok(u.result):
                    return False
            elif u.name in ("ttg.async_copy", "ttg.async_wait") or id(u) in allowed:
                continue
            else:
                return False
        return True

    return ok(alloc.result)


def _pad_math_stage(ld: Op, loads) -> bool:
    """Rows M + 4 elements long for an fp32 stage contiguous along M read in the #mma layout: lanes t = 0..3 read
    rows 2t apart, 8 banks apart with rows of 4 (mod 16) elements, and lanes g the next 8 banks."""
    alloc = _alloc_of(ld.operands[0])
    t = ld.operands[0].type
    if alloc is None or alloc.attrs.get("operand") != "side" or t.swizzle or t.order[0] != 0 or t.pad:
        return False
    if t.elem.bits != 32 or not _readers_only(alloc, {id(x) for x in loads}):
        return False
    _repad(alloc, (4 - t.shape[0]) % 16)
    return True


def _views(alloc: Op) -> list:
    """Every value viewing the buffer (the allocation and its memdesc_index results, transitively)."""
    out, todo = [], [alloc.result]
    while todo:
        v = todo.pop()
        out.append(v)
        todo += [r for u in v.uses for r in u.results if isinstance(r.type, MemDescType)]
    return out


def _b_stage_in_load_order(dot: Op) -> bool:
    """A K-major fp32 B stage filled one element per cp.async (its tile contiguous along N in global memory: the
    K-major order was for ldmatrix) goes back to the load's order: runs of `run` elements per copy (16 bytes), rows
    of N + pad elements with N + pad = 4 (mod 16), so the lanes' 4-byte reads of rows k0 + 2t (+1) fall on 32
    banks. The dot reads it with two ld.shared a fragment (as Triton) instead of one 8-byte read."""
    bv = dot.operands[1]
    t = bv.type
    if not t.is_memdesc() or t.swizzle or t.order != (0, 1) or t.elem.bits != 32:
        return False
    alloc = _alloc_of(bv)
    if alloc is None or not _readers_only(alloc, {id(dot)}):
        return False
    views = _views(alloc)
    copies = [u for v in views for u in v.uses if u.name == "ttg.async_copy"]
    if not copies or any(v.type.order != (0, 1) for v in views):
        return False
    for c in copies:
        lay = c.operands[0].type.layout
        run = c.attrs.get("run", 1)
        if c.attrs.get("vec", 1) != 1 or run * 4 != 16 or getattr(lay, "order", (0,))[0] != 1 \
                or lay.spt[1] % run:
            return False
    n = t.shape[1]
    for v in views:
        v.type = MemDescType(v.type.shape, v.type.elem, (1, 0), (4 - n) % 16, 0)
    for c in copies:
        c.attrs["vec"] = c.attrs.pop("run")
    return True


def _pad_b_stage(dot: Op) -> bool:
    """Rows K + 8 elements long (for K a multiple of 16) for a K-major fp32 B stage read only by this dot: a
    half-warp's 8-byte reads (rows g = 0..3, columns 2t) then fall on 32 different banks."""
    bv = dot.operands[1]
    t = bv.type
    if not t.is_memdesc() or t.swizzle or t.order[0] != 0 or t.elem.bits != 32:
        return False
    alloc = _alloc_of(bv)
    if alloc is None or not _readers_only(alloc, {id(dot)}):
        return False
    k = t.shape[0]
    pad = 8 if k % 16 == 0 else 0
    if (k + t.pad) % 32 in (8, 24):
        return False
    _repad(alloc, pad)
    return True


def _apply(dot: Op, want, found) -> dict:
    retype, rebuild, vectors, loads = found
    stats = {"operands": 1}
    dot.attrs["a_in_registers"] = True
    for v, lay in rebuild:  # a fresh copy in the wanted layout for the chain's uses (others keep the original)
        op = v.defining_op
        clone = Op(op.name, list(op.operands), [v.type.with_layout(lay)], dict(op.attrs), loc=op.loc,
                   result_hints=[v.hint])
        insert_before(op, clone)
        users = {id(x[0].defining_op) for x in retype} | {id(dot)}
        for u in list({id(u): u for u in v.uses}.values()):
            if id(u) in users:
                for i, o in enumerate(u.operands):
                    if o is v:
                        u.set_operand(i, clone.result)
    for v, lay in retype:
        v.type = v.type.with_layout(lay)
    for ex, lay in vectors:
        src = ex.operands[0]
        if getattr(src.type, "layout", None) == lay:
            continue
        prev = src.defining_op
        conv = Op("ttg.convert_layout", [src], [src.type.with_layout(lay)], loc=ex.loc, result_hints=[src.hint])
        insert_before(ex, conv)
        ex.set_operand(0, conv.result)
        if prev is not None and prev.name == "ttg.convert_layout":  # convert its source instead, once
            conv.set_operand(0, prev.operands[0])
            if not prev.result.uses:
                prev.erase()
            if conv.operands[0].type == conv.result.type:
                conv.result.replace_all_uses_with(conv.operands[0])
                conv.erase()
                continue
        stats["vector_conversions"] = stats.get("vector_conversions", 0) + 1
    for v, _ in retype:  # conversions inside the chain are no-ops now
        op = v.defining_op
        if op is not None and op.name == "ttg.convert_layout" and op.operands[0].type == v.type:
            v.replace_all_uses_with(op.operands[0])
            op.erase()
    padded = sum(_pad_math_stage(ld, loads) for ld in loads)
    if _b_stage_in_load_order(dot):
        stats["b_stages_in_load_order"] = 1
    else:
        padded += _pad_b_stage(dot)
    if padded:
        stats["stages_padded"] = padded
    return stats


def run(module: Module, options=None) -> dict:
    if not enabled():
        return {}
    stats: dict = {}
    for dot in [op for op in module.kernel.walk() if op.name == "tt.dot"]:
        want = _eligible(dot)
        if want is None or getattr(options, "num_warps", want.num_warps) != want.num_warps:
            continue
        if dot.operands[0].type.layout == want:  # already an accumulator in that layout
            if accumulators_too():
                dot.attrs["a_in_registers"] = True
                stats["accumulators"] = stats.get("accumulators", 0) + 1
            continue
        found = _chain(dot, want)
        if found is None:
            continue
        for k, n in _apply(dot, want, found).items():
            stats[k] = stats.get(k, 0) + n
    return stats
