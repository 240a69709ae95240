"""Lowering of values that only rearrange registers: constants, ranges, splat, broadcast,
expand_dims, transposes (free: a permuted layout), reshapes and conversions (free where every thread keeps
its elements, through shared memory otherwise)."""
from __future__ import annotations

import llvmlite.ir as ir

from ..gpu.reshape_layout import join_map, register_map, split_map
from ..gpu.scratch import contiguous_run, conversion_layouts, conversion_pitch, mem_bytes
from ..types import MemDescType, TensorType
from .lower_async import stmatrix_on, stmatrix_plan, store_by_stmatrix
from .lowering_core import I8, I32, VOID, KernelLowering, _cint, const_value, handles, llty, memty


@handles("arith.constant")
def _constant(lw: KernelLowering, op):
    r = op.results[0]
    c = const_value(r.type.scalar, op.attrs["value"])
    if isinstance(r.type, TensorType):
        lw.put(r, [c] * len(r.type.layout.registers(r.type.shape)))
    else:
        lw.put(r, c)


@handles("ub.poison")
def _poison(lw: KernelLowering, op):
    """An undefined scalar: LLVM's `poison`."""
    lw.put(op.results[0], ir.FormattedConstant(llty(op.results[0].type), "poison"))


@handles("tt.get_program_id", "tt.get_num_programs")
def _program_id(lw: KernelLowering, op):
    axis = "xyz"[op.attrs["axis"]]
    reg = "ctaid" if op.name == "tt.get_program_id" else "nctaid"
    fn = lw.intrinsic(f"llvm.nvvm.read.ptx.sreg.{reg}.{axis}", I32, [])
    lw.put(op.results[0], lw.eb.call(fn, []))


@handles("tt.make_range")
def _make_range(lw: KernelLowering, op):
    r = op.results[0]
    idx = lw.reg_indices(r.type.layout, r.type.shape)
    start = op.attrs["start"]
    lw.put(r, [i[0] if start == 0 else lw.b.add(i[0], _cint(start)) for i in idx])


@handles("tt.splat")
def _splat(lw: KernelLowering, op):
    r = op.results[0]
    lw.put(r, [lw.get(op.operands[0])] * len(r.type.layout.registers(r.type.shape)))


def _reg_table(layout, shape):
    return {offs: i for i, offs in enumerate(layout.registers(shape))}


@handles("tt.broadcast")
def _broadcast(lw: KernelLowering, op):
    src, res = op.operands[0], op.results[0]
    s_shape, d_shape = src.type.shape, res.type.shape
    if src.type.layout != res.type.layout:
        raise AssertionError("broadcast operand and result must share a layout")
    vals = lw.regs(src)
    table = _reg_table(src.type.layout, s_shape)
    first = [info.offsets[0] for info in src.type.layout.dims_info(s_shape)]
    out = []
    for offs in res.type.layout.registers(d_shape):
        key = tuple(o if s_shape[d] == d_shape[d] else first[d] for d, o in enumerate(offs))
        out.append(vals[table[key]])
    lw.put(res, out)


@handles("tt.expand_dims")
def _expand_dims(lw: KernelLowering, op):
    src, res = op.operands[0], op.results[0]
    axis = op.attrs["axis"]
    if not isinstance(src.type, TensorType):
        lw.put(res, [lw.get(src)] * len(res.type.layout.registers(res.type.shape)))
        return
    vals = lw.regs(src)
    table = _reg_table(src.type.layout, src.type.shape)
    out = []
    for offs in res.type.layout.registers(res.type.shape):
        key = tuple(o for d, o in enumerate(offs) if d != axis)
        out.append(vals[table[key]])
    lw.put(res, out)


@handles("tt.trans")
def _trans(lw: KernelLowering, op):
    src, res = op.operands[0], op.results[0]
    order = op.attrs["order"]
    vals = lw.regs(src)
    table = _reg_table(src.type.layout, src.type.shape)
    out = []
    for offs in res.type.layout.registers(res.type.shape):
        key = [0] * len(offs)
        for i, o in enumerate(order):
            key[o] = offs[i]
        out.append(vals[table[tuple(key)]])
    lw.put(res, out)


def store_linear(lw: KernelLowering, op, vals, layout, shape, elem, base_bytes=0, scale=1, plus=0):
    """Write every register of a tensor to scratch at its row-major index (* scale + plus)."""
    size = mem_bytes(elem)
    idx = lw.reg_indices(layout, shape)
    # Where a layout holds copies of an element, only the representative copy writes: copies are
    # equal except after an atomic, whose old value only the representative lane received.
    valid = lw.reg_valid(layout, shape)
    for r, (v, ix) in enumerate(zip(vals, idx)):
        lin = lw.linear_index(ix, shape)
        if scale != 1:
            lin = lw.b.mul(lin, _cint(scale))
        if plus:
            lin = lw.b.add(lin, _cint(plus))
        p = lw.smem_ptr(op, lw.b.mul(lin, _cint(size)), base_bytes)
        if valid is None:
            lw.b.store(_to_mem(lw, v, elem), p)
        else:
            with lw.b.if_then(valid[r]):
                lw.b.store(_to_mem(lw, v, elem), p)
    return size


def load_linear(lw: KernelLowering, op, layout, shape, elem, base_bytes=0, scale=1, plus=0, index_fn=None):
    ty = memty(elem)
    size = mem_bytes(elem)
    out = []
    for ix in lw.reg_indices(layout, shape):
        lin = index_fn(ix) if index_fn else lw.linear_index(ix, shape)
        if scale != 1:
            lin = lw.b.mul(lin, _cint(scale))
        if plus:
            lin = lw.b.add(lin, _cint(plus))
        p = lw.smem_ptr(op, lw.b.mul(lin, _cint(size)), base_bytes)
        out.append(_from_mem(lw, lw.b.load(p, typ=ty), elem))
    return out


def _to_mem(lw, v, elem):
    if not elem.is_ptr() and elem.ir == "i1":
        return lw.b.zext(v, memty(elem))
    return v


def _from_mem(lw, v, elem):
    if not elem.is_ptr() and elem.ir == "i1":
        return lw.b.icmp_unsigned("!=", v, v.type(0))
    return v


@handles("tt.reshape")
def _reshape(lw: KernelLowering, op):
    src, res = op.operands[0], op.results[0]
    if not res.type.shape:  # .item() of a 1-element tensor: each thread holds (a copy of) that element
        lw.put(res, lw.regs(src)[0])
        return
    if _rename(lw, src, res):
        return
    elem = src.type.scalar
    store_linear(lw, op, lw.regs(src), src.type.layout, src.type.shape, elem)
    lw.barrier()
    lw.put(res, load_linear(lw, op, res.type.layout, res.type.shape, elem))


def _rename(lw: KernelLowering, src, res) -> bool:
    """Where every thread already holds the elements the result's layout gives it, take them from its own
    registers (gpu/reshape_layout.py): no shared memory, no barrier."""
    m = register_map(src.type.layout, src.type.shape, res.type.layout, res.type.shape)
    if m is None:
        return False
    vals = lw.regs(src)
    lw.put(res, [vals[j] for j in m])
    return True


@handles("ttg.convert_layout")
def _convert(lw: KernelLowering, op):
    """Renamed registers where each thread already holds its elements; otherwise through shared memory: rows
    padded (conversion_pitch: 16 bytes, 32 for a 32-bit MMA accumulator) so the rows a warp touches at once
    spread over the banks, and each side moving runs of contiguous registers as one vector of up to 16 bytes
    (a 16-bit accumulator on sm_90: stmatrix). With KERNELLAB_CONVERSION_LDMATRIX=on, a blocked<->blocked tile that
    fits 8x8 matrices with fewer wavefronts goes by 16-byte vectors and ldmatrix(.trans) / stmatrix(.trans) instead
    (gpu/matrix_conversion.py; a transposed 16-bit tile: Triton's st.shared.v4 + ldmatrix.x4.trans)."""
    src, res = op.operands[0], op.results[0]
    if _rename(lw, src, res):
        return
    elem, shape = src.type.scalar, src.type.shape
    size = mem_bytes(elem)
    pitch = conversion_pitch(shape, size, conversion_layouts(op))
    ty = memty(elem)

    def runs(layout):
        """(vector width, [(first register, its shared-memory address)])"""
        v = contiguous_run(layout, shape, size, pitch)
        regs = range(0, len(layout.registers(shape)), v)
        return v, list(zip(regs, lw.smem_places(op, layout, shape, size, regs, pitch)))

    vals = [_to_mem(lw, x, elem) for x in lw.regs(src)]
    mplan = _matrix_plan(lw, src.type.layout, res.type.layout, shape, size, pitch)
    if mplan is not None:
        lw.put(res, [_from_mem(lw, x, elem) for x in _convert_by_matrices(lw, op, mplan, vals, ty)])
        return
    # a 16-bit mma/wgmma accumulator goes in by stmatrix (sm_90): the scratch as a padded row-major stage
    scratch = MemDescType(tuple(shape), elem, (1, 0), pitch - shape[-1]) if len(shape) == 2 else None
    plan = stmatrix_plan(lw, src.type, scratch) if scratch is not None and stmatrix_on() else None
    if plan is not None:
        store_by_stmatrix(lw, src.type, vals, scratch, _cint(int(op.attrs.get("smem_offset", 0))), plan)
    else:
        v, places = runs(src.type.layout)
        for k, p in places:
            vec = vals[k]
            if v > 1:
                vec = ir.Constant(ir.VectorType(ty, v), None)
                for i in range(v):
                    vec = lw.b.insert_element(vec, vals[k + i], _cint(i))
            lw.b.store(vec, p, align=v * size)
    lw.barrier()
    v, places = runs(res.type.layout)
    out = []
    for k, p in places:
        if v == 1:
            out.append(lw.b.load(p, typ=ty))
        else:
            vec = lw.b.load(p, typ=ir.VectorType(ty, v), align=v * size)
            out.extend(lw.b.extract_element(vec, _cint(i)) for i in range(v))
    lw.put(res, [_from_mem(lw, x, elem) for x in out])


@handles("tt.join")
def _join(lw: KernelLowering, op):
    a, b, res = op.operands[0], op.operands[1], op.results[0]
    elem = a.type.scalar
    if not isinstance(a.type, TensorType):  # two scalars: element 0 is a, element 1 is b
        x, y = lw.get(a), lw.get(b)
        lw.put(res, [lw.b.select(lw.b.icmp_unsigned("==", ix[0], _cint(0)), x, y)
                     for ix in lw.reg_indices(res.type.layout, res.type.shape)])
        return
    m = join_map(a.type.layout, a.type.shape, res.type.layout, res.type.shape) \
        if a.type.layout == b.type.layout else None
    if m is not None:  # every thread holds the elements it gets: renamed registers (gpu/reshape_layout.py)
        vals = (lw.regs(a), lw.regs(b))
        lw.put(res, [vals[side][j] for side, j in m])
        return
    store_linear(lw, op, lw.regs(a), a.type.layout, a.type.shape, elem, scale=2, plus=0)
    store_linear(lw, op, lw.regs(b), b.type.layout, b.type.shape, elem, scale=2, plus=1)
    lw.barrier()
    lw.put(res, load_linear(lw, op, res.type.layout, res.type.shape, elem))


@handles("tt.split")
def _split(lw: KernelLowering, op):
    src = op.operands[0]
    elem = src.type.scalar
    maps = [split_map(src.type.layout, src.type.shape, r.type.layout, r.type.shape, k)
            if isinstance(r.type, TensorType) else None for k, r in enumerate(op.results)]
    if all(m is not None for m in maps):  # the halves are registers of the source (gpu/reshape_layout.py)
        vals = lw.regs(src)
        for r, m in zip(op.results, maps):
            lw.put(r, [vals[j] for j in m])
        return
    store_linear(lw, op, lw.regs(src), src.type.layout, src.type.shape, elem)
    lw.barrier()
    for k, r in enumerate(op.results):
        if isinstance(r.type, TensorType):
            lw.put(r, load_linear(lw, op, r.type.layout, r.type.shape, elem, scale=2, plus=k))
        else:
            size = mem_bytes(elem)
            p = lw.smem_ptr(op, k * size)
            lw.put(r, _from_mem(lw, lw.b.load(p, typ=memty(elem)), elem))


@handles("tt.cat")
def _cat(lw: KernelLowering, op):
    a, b, res = op.operands[0], op.operands[1], op.results[0]
    elem = a.type.scalar
    n_a = 1
    for s in a.type.shape:
        n_a *= s
    store_linear(lw, op, lw.regs(a), a.type.layout, a.type.shape, elem)
    store_linear(lw, op, lw.regs(b), b.type.layout, b.type.shape, elem, plus=n_a)
    lw.barrier()
    lw.put(res, load_linear(lw, op, res.type.layout, res.type.shape, elem))


@handles("ttg.barrier", "tt.debug_barrier")
def _barrier(lw: KernelLowering, op):
    lw.barrier()


@handles("tt.grid_dependency")
def _grid_dependency(lw: KernelLowering, op):
    """griddepcontrol (sm_90+): a memory clobber, so no load moves above the wait. Older GPUs have no programmatic
    dependent launch: there the previous grid has always finished, and nothing is emitted."""
    if lw.arch >= 90:
        lw.b.asm(ir.FunctionType(ir.VoidType(), []), f"griddepcontrol.{op.attrs['kind']};", "~{memory}", [],
                 side_effect=True)


def _matrix_plan(lw: KernelLowering, src, dst, shape, size: int, pitch: int):
    """The 8x8-matrix plan of a blocked<->blocked conversion with KERNELLAB_CONVERSION_LDMATRIX=on where it takes
    fewer wavefronts than the padded scratch (gpu/matrix_conversion.py `chosen`); else None."""
    from ..gpu import matrix_conversion as mc

    return mc.chosen(src, dst, tuple(shape), size, lw.opts.num_warps, lw.arch, pitch)


def _xor_of_thread_bits(lw: KernelLowering, basis):
    """The i32 XOR over the thread id's set bits b of basis[b] (`matrix_conversion.address_terms`: bits 0-4 of the
    lane, the rest of the warp; a run of bits landing on a run of address bits is one mask and shift)."""
    from ..gpu.matrix_conversion import address_terms

    b = lw.b
    terms, disjoint = address_terms(basis)
    vals = []
    for kind, warp, bit, arg, shift in terms:
        src = lw.warp if warp else lw.lane
        if kind == "mul":
            vals.append(b.mul(b.and_(b.lshr(src, _cint(bit)), _cint(1)), _cint(arg)))
            continue
        x = b.and_(src, _cint(arg))
        vals.append(b.shl(x, _cint(shift)) if shift > 0 else b.lshr(x, _cint(-shift)) if shift < 0 else x)
    if not vals:
        return _cint(0)
    out = vals[0]
    for v in vals[1:]:
        out = b.or_(out, v) if disjoint else b.xor(out, v)
    return out


class _Addresses:
    """Per access of a matrix plan: an i32 shared-window offset register (the thread's part XOR the access's bits
    that overlap it) and an immediate (its other bits), one register per distinct thread part and overlap."""

    def __init__(self, lw: KernelLowering, op):
        self.lw, self.base = lw, int(op.attrs.get("smem_offset", 0))
        self.parts, self.regs = {}, {}

    def get(self, addrs):
        from ..gpu.matrix_conversion import split_constant, thread_basis

        c, basis = thread_basis(addrs)
        key = tuple(basis)
        if key not in self.parts:
            self.parts[key] = _xor_of_thread_bits(self.lw, basis)
        lo, hi = split_constant(c, basis)
        if (key, lo) not in self.regs:
            t = self.parts[key]
            self.regs[(key, lo)] = self.lw.b.xor(t, _cint(lo)) if lo else t
        return self.regs[(key, lo)], hi


def _convert_by_matrices(lw: KernelLowering, op, plan, vals, ty):
    """A conversion by `plan` (gpu/matrix_conversion.py): the vector side's st/ld.shared of up to 16 bytes and the
    matrix side's ldmatrix / stmatrix (.trans), one barrier between; returns the result's registers."""
    b = lw.b
    addrs = _Addresses(lw, op)
    word = ir.VectorType(ty, plan.word_regs)
    nres = sum(len(a.regs) for a in (plan.matrix if plan.side == "ldmatrix" else plan.vector))
    mname = f"m8n8.x{plan.count}{'.trans' if plan.trans else ''}.shared.b16"

    def vptr(acc):
        reg, imm = addrs.get(acc.addrs)
        p = b.gep(lw.smem, [b.add(reg, _cint(addrs.base))], source_etype=I8)
        return b.gep(p, [_cint(imm)], source_etype=I8) if imm else p

    def matrix_addr(acc):
        reg, imm = addrs.get(acc.addrs)
        return b.add(lw.smem32, b.add(reg, _cint(addrs.base))), imm

    if plan.side == "ldmatrix":
        for acc in plan.vector:
            if plan.vec == 1:
                b.store(vals[acc.regs[0]], vptr(acc))
                continue
            vec = ir.Constant(ir.VectorType(ty, plan.vec), None)
            for i, r in enumerate(acc.regs):
                vec = b.insert_element(vec, vals[r], _cint(i))
            b.store(vec, vptr(acc), align=plan.vec * plan.elem_bytes)
    else:
        fn = ir.FunctionType(VOID, [I32] * (plan.count + 1))
        for acc in plan.matrix:
            words = []
            for j in range(plan.count):
                w = ir.Constant(word, None)
                for h in range(plan.word_regs):
                    w = b.insert_element(w, vals[acc.regs[j * plan.word_regs + h]], _cint(h))
                words.append(b.bitcast(w, I32))
            addr, imm = matrix_addr(acc)
            ops = ", ".join(f"${i + 1}" for i in range(plan.count))
            at = f"$0+{imm}" if imm else "$0"
            b.asm(fn, f"stmatrix.sync.aligned.{mname} [{at}], {{{ops}}};",
                  ",".join(["r"] * (plan.count + 1)) + ",~{memory}", [addr] + words, side_effect=True)
    lw.barrier()
    out = [None] * nres
    if plan.side == "ldmatrix":
        for acc in plan.matrix:
            addr, imm = matrix_addr(acc)
            for j, w in enumerate(_ldmatrix_at(lw, addr, imm, plan.count, plan.trans)):
                w = b.bitcast(w, word)
                for h in range(plan.word_regs):
                    out[acc.regs[j * plan.word_regs + h]] = b.extract_element(w, _cint(h))
    else:
        for acc in plan.vector:
            if plan.vec == 1:
                out[acc.regs[0]] = b.load(vptr(acc), typ=ty)
                continue
            v = b.load(vptr(acc), typ=ir.VectorType(ty, plan.vec), align=plan.vec * plan.elem_bytes)
            for i, r in enumerate(acc.regs):
                out[r] = b.extract_element(v, _cint(i))
    return out


def _ldmatrix_at(lw: KernelLowering, addr, imm: int, count: int, trans: bool):
    """ldmatrix m8n8 .x{count} at the shared-window address `addr` plus the immediate `imm`: count b32 words."""
    outs = ", ".join(f"${i}" for i in range(count))
    at = f"${count}+{imm}" if imm else f"${count}"
    asm = f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 {{{outs}}}, [{at}];"
    ret = ir.LiteralStructType([I32] * count) if count > 1 else I32
    res = lw.b.asm(ir.FunctionType(ret, [I32]), asm, ",".join(["=r"] * count + ["r"]), [addr], side_effect=True)
    return [lw.b.extract_value(res, i) for i in range(count)] if count > 1 else [res]
