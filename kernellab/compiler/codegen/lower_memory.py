"""Global memory: vectorized (predicated) loads and stores, block pointers, atomics, and the
debugging ops that write to the host (device_print, device_assert)."""
from __future__ import annotations

import llvmlite.ir as ir

from .. import print_format
from ..gpu.scratch import mem_bytes
from ..switches import switch
from ..types import TensorType
from .lowering_core import (
    GPTR,
    I1,
    I8,
    I16,
    I32,
    I64,
    VOID,
    KernelLowering,
    _bf16_bits,
    _cint,
    handles,
    llty,
    memty,
)


def _words64(lw, vals):
    """8-byte elements (f64, i64, pointers) as i64 words: stored as `st.global.v2.b64`, as Triton stores them."""
    b = lw.b
    return [v if v.type == I64 else b.ptrtoint(v, I64) if isinstance(v.type, ir.PointerType) else b.bitcast(v, I64)
            for v in vals]


def _word_plan(nbytes):
    """How to move `nbytes` (1..16) in one instruction: (llvm word type, constraint, ptx type, count)."""
    if nbytes >= 4:
        return I32, "r", "b32", nbytes // 4
    if nbytes == 2:
        return I16, "h", "b16", 1
    return I16, "h", "u8", 1


def _vec_suffix(n):
    return "" if n == 1 else f".v{n}"


def _pack(lw, vals, elem):
    """Element values -> list of words for an asm store."""
    b = lw.b
    mt = memty(elem)
    vals = [b.zext(v, I8) if v.type == I1 else v for v in vals]
    if isinstance(mt, ir.PointerType):
        vals = [b.ptrtoint(v, I64) for v in vals]
        mt = I64
    nbytes = mem_bytes(elem) * len(vals)
    wty, _, _, nwords = _word_plan(nbytes)
    if nbytes < 4:
        if nbytes == 1:
            return [b.zext(vals[0], I16)]
        if len(vals) == 2:  # two bytes in one 16-bit word, the first in the low byte
            lo, hi = (b.zext(v, I16) for v in vals)
            return [b.or_(lo, b.shl(hi, ir.Constant(I16, 8)))]
        v = vals[0]
        return [b.bitcast(v, I16) if v.type != I16 else v]
    vec = ir.VectorType(mt, len(vals))
    acc = ir.Constant(vec, None)
    for i, v in enumerate(vals):
        acc = b.insert_element(acc, v, _cint(i))
    words = b.bitcast(acc, ir.VectorType(wty, nwords))
    return [b.extract_element(words, _cint(i)) for i in range(nwords)]


def _unpack(lw, words, elem, n):
    b = lw.b
    mt = memty(elem)
    is_ptr = isinstance(mt, ir.PointerType)
    if is_ptr:
        mt = I64
    size = mem_bytes(elem)
    if size * n < 4:
        w = words[0]
        if size == 1:
            out = [b.trunc(w, I8)] if n == 1 else [b.trunc(w, I8), b.trunc(b.lshr(w, ir.Constant(I16, 8)), I8)]
        else:
            out = [b.bitcast(w, mt) if w.type != mt else w]
    else:
        wty = words[0].type
        vec = ir.Constant(ir.VectorType(wty, len(words)), None)
        for i, w in enumerate(words):
            vec = b.insert_element(vec, w, _cint(i))
        ev = b.bitcast(vec, ir.VectorType(mt, n))
        out = [b.extract_element(ev, _cint(i)) for i in range(n)]
    if is_ptr:
        out = [b.inttoptr(v, GPTR) for v in out]
    if not elem.is_ptr() and elem.ir == "i1":
        out = [b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) for v in out]
    return out


def _const_words(elem, value, n):
    """The 32/16-bit words of `n` copies of a constant, as masked-off lanes of a load see them."""
    import struct

    if elem.is_ptr():
        return None
    name = elem.ir
    if name == "bf16":
        raw = struct.pack("<H", _bf16_bits(float(value)))
    elif name == "f16":
        raw = struct.pack("<e", float(value))
    elif name == "f32":
        raw = struct.pack("<f", float(value))
    elif name == "f64":
        raw = struct.pack("<d", float(value))
    else:
        nbytes = max(1, elem.bits // 8)
        raw = (int(value) & ((1 << (8 * nbytes)) - 1)).to_bytes(nbytes, "little")
    data = raw * n
    if len(data) >= 4:
        return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
    return [int.from_bytes(data, "little")]


def _cache_qualifier(cache: str, evict: str, volatile: bool) -> str:
    """PTX qualifiers for Triton's cache_modifier / eviction_policy (ld.global.cg, st.global.cs,
    ld.global.L1::evict_last ...). PTX has no form with both a cache operator and an eviction priority, nor with
    .volatile and either: the cache operator, then volatility, wins."""
    if volatile:
        return ""
    if cache:
        return cache
    return f".L1::{evict}" if evict else ""


def l2_evict_hint_enabled() -> bool:
    """KERNELLAB_L2_EVICT_HINT=1 (default off until timed on a GPU; in the compile caches' keys through
    runtime/codegen_env.py): an evict_first / evict_last access without a cache operator also gives L2 that priority,
    as Triton 3.6 does on sm_80+ (`createpolicy.fractional.L2::evict_last.b64 p, 1.0` and
    `ld.global.L1::evict_last.L2::cache_hint ..., p`); without it only L1 hears the policy."""
    return switch("KERNELLAB_L2_EVICT_HINT", False)


def _l2_policy(lw: KernelLowering, cache: str, evict: str, volatile: bool) -> str:
    """The L2 eviction priority an access carries as a cache-hint policy ("" for none): see l2_evict_hint_enabled."""
    if volatile or cache or evict not in ("evict_first", "evict_last") or getattr(lw, "arch", 0) < 80:
        return ""
    return evict if l2_evict_hint_enabled() else ""


def _with_policy(pol: str, pred: str, access: str) -> str:
    """`access` (an ld / st without its `;`, its last operand the policy register) behind a scoped createpolicy."""
    return (f"{{ .reg .b64 %kl_l2pol; createpolicy.fractional.L2::{pol}.b64 %kl_l2pol, 1.0; "
            f"{pred}{access}, %kl_l2pol; }}")


def emit_load(lw: KernelLowering, ptr, mask, elem, n, volatile=False, other_const=None, cache="", evict=""):
    """Load `n` consecutive elements starting at `ptr` (a register value), predicated on `mask`.
    Masked-off lanes read `other_const` (a Python number) when given, else 0."""
    b = lw.b
    mt = memty(elem)
    size = mem_bytes(elem)
    qual = _cache_qualifier(cache, evict, volatile)
    if mask is None and not volatile and not qual:
        if n == 1:
            v = b.load(ptr, typ=mt, align=size)
            out = [v]
        else:
            vt = ir.VectorType(I64 if isinstance(mt, ir.PointerType) else mt, n)
            v = b.load(ptr, typ=vt, align=size * n)
            out = [b.extract_element(v, _cint(i)) for i in range(n)]
            if isinstance(mt, ir.PointerType):
                out = [b.inttoptr(x, GPTR) for x in out]
        if not elem.is_ptr() and elem.ir == "i1":
            out = [b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) for v in out]
        return out
    wty, con, ptx, nwords = _word_plan(size * n)
    outs = ", ".join(f"${i}" for i in range(nwords))
    fill = _const_words(elem, other_const, n) if other_const is not None else None
    if fill is None or len(fill) != nwords:
        fill = [0] * nwords
    init = " ".join(f"mov.{'u32' if con == 'r' else 'u16'} ${i}, {hex(w)};" for i, w in enumerate(fill))
    dst = outs if nwords == 1 else "{ " + outs + " }"
    vol = ".volatile" if volatile else ""
    pred = f"@${nwords + 1} " if mask is not None else ""
    pol = _l2_policy(lw, cache, evict, volatile)
    if pol:
        access = f"ld.global{qual}.L2::cache_hint{_vec_suffix(nwords)}.{ptx} {dst}, [ ${nwords} + 0 ]"
        asm = f"{init} {_with_policy(pol, pred, access)}"
    else:
        asm = f"{init} {pred}ld{vol}.global{qual}{_vec_suffix(nwords)}.{ptx} {dst}, [ ${nwords} + 0 ];"
    constraint = ",".join([f"={con}"] * nwords + ["l"] + (["b"] if mask is not None else []))
    ret = wty if nwords == 1 else ir.LiteralStructType([wty] * nwords)
    args = [b.ptrtoint(ptr, I64)] + ([mask] if mask is not None else [])
    fty = ir.FunctionType(ret, [a.type for a in args])
    res = b.asm(fty, asm, constraint, args, side_effect=True)
    words = [res] if nwords == 1 else [b.extract_value(res, i) for i in range(nwords)]
    return _unpack(lw, words, elem, n)


def emit_store(lw: KernelLowering, ptr, vals, mask, elem, cache="", evict=""):
    b = lw.b
    n = len(vals)
    size = mem_bytes(elem)
    qual = _cache_qualifier(cache, evict, False)
    if mask is None and not qual:
        if n == 1:
            v = vals[0]
            if v.type == I1:
                v = b.zext(v, I8)
            b.store(v, ptr, align=size)
            return
        words = _pack(lw, vals, elem) if size < 8 else _words64(lw, vals)
        wvec = ir.Constant(ir.VectorType(words[0].type, len(words)), None)
        for i, w in enumerate(words):
            wvec = b.insert_element(wvec, w, _cint(i))
        b.store(wvec, ptr, align=size * n)
        return
    if size < 8:
        words = _pack(lw, vals, elem)
        wty, con, ptx, nwords = _word_plan(size * n)
    else:
        words, con, ptx, nwords = _words64(lw, vals), "l", "b64", n
    src = ", ".join(f"${i}" for i in range(nwords))
    src = src if nwords == 1 else "{ " + src + " }"
    if mask is None:
        mask = ir.Constant(I1, 1)
    pol = _l2_policy(lw, cache, evict, False)
    if pol:
        access = f"st.global{qual}.L2::cache_hint{_vec_suffix(nwords)}.{ptx} [ ${nwords} + 0 ], {src}"
        asm = _with_policy(pol, f"@${nwords + 1} ", access)
    else:
        asm = f"@${nwords + 1} st.global{qual}{_vec_suffix(nwords)}.{ptx} [ ${nwords} + 0 ], {src};"
    constraint = ",".join([con] * nwords + ["l", "b"])
    args = words + [b.ptrtoint(ptr, I64), mask]
    b.asm(ir.FunctionType(VOID, [a.type for a in args]), asm, constraint, args, side_effect=True)


def _groups(op, v_type):
    """Register groups moved by one instruction: runs of `vec` registers along the fastest dim."""
    vec = op.attrs.get("vec", 1)
    n = len(v_type.layout.registers(v_type.shape))
    return [list(range(i, min(n, i + vec))) for i in range(0, n, vec)]


@handles("tt.load")
def _load(lw: KernelLowering, op):
    ptr_v = op.operands[0]
    res = op.results[0]
    elem = res.type.scalar
    volatile = bool(op.attrs.get("volatile"))
    cache = dict(cache=op.attrs.get("cache", ""), evict=op.attrs.get("evict", ""))
    if ptr_v.type.is_block_ptr():
        return _load_block_ptr(lw, op)
    if not isinstance(res.type, TensorType):
        mask = lw.get(op.operands[1]) if len(op.operands) > 1 else None
        v = emit_load(lw, lw.get(ptr_v), mask, elem, 1, volatile, **cache)[0]
        if len(op.operands) > 2:
            v = lw.b.select(mask, v, lw.get(op.operands[2]))
        lw.put(res, v)
        return
    ptrs = lw.regs(ptr_v)
    masks = lw.regs(op.operands[1]) if len(op.operands) > 1 else None
    others = lw.regs(op.operands[2]) if len(op.operands) > 2 else None
    other_const = None
    if others is not None:
        producer = op.operands[2].defining_op
        if producer is not None and producer.name == "arith.constant":
            other_const = producer.attrs["value"]
    out = [None] * len(ptrs)
    for g in _groups(op, res.type):
        vals = emit_load(lw, ptrs[g[0]], masks[g[0]] if masks else None, elem, len(g), volatile, other_const,
                         **cache)
        for i, v in zip(g, vals):
            # the mask is uniform across a group, so a constant `other` is already in the masked-off words
            out[i] = lw.b.select(masks[i], v, others[i]) if others is not None and other_const is None else v
    lw.put(res, out)


@handles("tt.store")
def _store(lw: KernelLowering, op):
    ptr_v, val_v = op.operands[0], op.operands[1]
    if ptr_v.type.is_block_ptr():
        return _store_block_ptr(lw, op)
    elem = val_v.type.scalar
    cache = dict(cache=op.attrs.get("cache", ""), evict=op.attrs.get("evict", ""))
    if not isinstance(ptr_v.type, TensorType):
        # a scalar is held by every thread: one thread stores it (as Triton). Were every thread to store, a
        # program that loads a value and stores it back changed could see a faster warp's store and apply
        # its change twice (Triton's test_load_store_same_ptr: 1024 threads doubling x in place)
        mask = lw.get(op.operands[2]) if len(op.operands) > 2 else None
        first = lw.b.icmp_unsigned("==", lw.tid, _cint(0))
        mask = first if mask is None else lw.b.and_(mask, first)
        emit_store(lw, lw.get(ptr_v), [lw.get(val_v)], mask, elem, **cache)
        return
    ptrs, vals = lw.regs(ptr_v), lw.regs(val_v)
    masks = lw.regs(op.operands[2]) if len(op.operands) > 2 else None
    valid = lw.reg_valid(ptr_v.type.layout, ptr_v.type.shape)
    for g in _groups(op, ptr_v.type):
        m = masks[g[0]] if masks else None
        if valid is not None:  # replicated copies don't store twice
            m = valid[g[0]] if m is None else lw.b.and_(m, valid[g[0]])
        emit_store(lw, ptrs[g[0]], [vals[i] for i in g], m, elem, **cache)


@handles("tt.make_block_ptr")
def _make_block_ptr(lw: KernelLowering, op):
    n = len(op.attrs["block_shape"])
    xs = [lw.get(v) for v in op.operands]
    lw.put(op.results[0], ("blockptr", xs[0], xs[1:1 + n], xs[1 + n:1 + 2 * n], xs[1 + 2 * n:1 + 3 * n]))


@handles("tt.advance")
def _advance(lw: KernelLowering, op):
    tag, base, shape, strides, offs = lw.get(op.operands[0])
    deltas = [lw.get(v) for v in op.operands[1:]]
    lw.put(op.results[0], (tag, base, shape, strides, [lw.b.add(o, d) for o, d in zip(offs, deltas)]))


def _dot(b, xs, ys):
    """sum(x * y) over two equally long lists of i64 values."""
    total = None
    for x, y in zip(xs, ys):
        term = b.mul(x, y)
        total = term if total is None else b.add(total, term)
    return total


def _block_ptr_addresses(lw, op, bp_value, layout, shape, checks):
    """Per register: the element's address and, over the `checks` dims, whether it is in bounds. A tile of
    lower rank than the block (pipeline_dot_operands' `[M, K]` load of a `[1, M, K]` block) is the block's
    trailing dims: the dropped leading ones are at index 0.

    The address is split as (base + offsets · strides) + (index in the tile · strides): the first term is one
    scalar per tile, the second does not depend on the offsets, so LLVM hoists it out of a loop that advances
    the block pointer, which then only adds the scalar per tile instead of recomputing every element's position."""
    _, base, bshape, strides, offs = bp_value
    b = lw.b
    elem = memty(op.operands[0].type.elem)
    offs64 = [b.sext(o, I64) for o in offs]
    tile = b.gep(base, [_dot(b, offs64, strides)], source_etype=elem)
    zero = ir.Constant(I64, 0)
    lead = [zero] * (len(offs) - len(shape))  # a tile without the block's leading unit dims: index 0 there
    ptrs, masks = [], []
    for ix in lw.reg_indices(layout, shape):
        ix64 = lead + [b.sext(i, I64) for i in ix]
        m = None
        for d in sorted(checks):
            pos = b.add(offs64[d], ix64[d])
            ok = b.and_(b.icmp_signed(">=", pos, zero), b.icmp_signed("<", pos, bshape[d]))
            m = ok if m is None else b.and_(m, ok)
        ptrs.append(b.gep(tile, [_dot(b, ix64, strides)], source_etype=elem))
        masks.append(m)
    return ptrs, masks


@handles("ttg.block_ptr_addresses")
def _block_ptr_addresses_op(lw: KernelLowering, op):
    ptrs_t = op.results[0].type
    checks = set(op.attrs.get("boundary_check", []))
    ptrs, masks = _block_ptr_addresses(lw, op, lw.get(op.operands[0]), ptrs_t.layout, ptrs_t.shape, checks)
    lw.put(op.results[0], ptrs)
    lw.put(op.results[1], [ir.Constant(I1, 1) if m is None else m for m in masks])


def _load_block_ptr(lw, op):
    res = op.results[0]
    elem = res.type.scalar
    checks = set(op.attrs.get("boundary_check", []))
    ptrs, masks = _block_ptr_addresses(lw, op, lw.get(op.operands[0]), res.type.layout, res.type.shape, checks)
    pad = float("nan") if op.attrs.get("padding") == "nan" else 0
    out = [None] * len(ptrs)
    for g in _groups(op, res.type):  # the mask is uniform over a run (copy_vec checks the extent)
        # out-of-bounds elements read the padding: emit_load writes it into the masked-off words
        for i, v in zip(g, emit_load(lw, ptrs[g[0]], masks[g[0]], elem, len(g), other_const=pad)):
            out[i] = v
    lw.put(res, out)


def _store_block_ptr(lw, op):
    val = op.operands[1]
    elem = val.type.scalar
    checks = set(op.attrs.get("boundary_check", []))
    ptrs, masks = _block_ptr_addresses(lw, op, lw.get(op.operands[0]), val.type.layout, val.type.shape, checks)
    valid = lw.reg_valid(val.type.layout, val.type.shape)
    vals = lw.regs(val)
    for g in _groups(op, val.type):
        m = masks[g[0]]
        if valid is not None:  # replicated copies don't store twice
            m = valid[g[0]] if m is None else lw.b.and_(m, valid[g[0]])
        emit_store(lw, ptrs[g[0]], [vals[i] for i in g], m, elem)


_ATOM_OP = {"add": "add", "fadd": "add", "max": "max", "umax": "max", "min": "min", "umin": "min", "xchg": "exch",
            "and": "and", "or": "or", "xor": "xor"}


def _atom_type(kind, elem):
    bits = 64 if elem.is_ptr() else elem.bits
    if kind == "fadd":
        return {"f32": "f32", "f64": "f64", "f16": "noftz.f16", "bf16": "noftz.bf16"}[elem.ir]
    if kind in ("max", "min"):
        return f"s{bits}"
    if kind in ("umax", "umin", "add"):
        return f"u{bits}"
    return f"b{bits}"


def _qualifiers(sem, scope):
    """PTX's memory-order and scope qualifiers of an atomic (`.acq_rel`, `.gpu`)."""
    return ({"acq_rel": ".acq_rel", "acquire": ".acquire", "release": ".release", "relaxed": ".relaxed"}.get(sem, ""),
            {"gpu": ".gpu", "cta": ".cta", "sys": ".sys"}.get(scope, ".gpu"))


def _emit_atomic(lw, kind, ptr, val, cmp, mask, elem, sem, scope):
    b = lw.b
    ty = llty(elem)
    is_float = elem.is_floating() if not elem.is_ptr() else False
    if is_float and kind in ("max", "min") and elem.bits == 16:
        return _emit_half_min_max(lw, kind, ptr, val, mask, elem, sem, scope)
    if is_float and kind in ("max", "min"):
        # Float max/min through integer atomics: for x >= 0 the int order matches, for x < 0 it reverses.
        ity = ir.IntType(elem.bits)
        bits = b.bitcast(val, ity)
        neg = b.icmp_signed("<", bits, ir.Constant(ity, 0))
        pos_kind, neg_kind = ("max", "umin") if kind == "max" else ("min", "umax")
        m_pos = b.and_(mask, b.not_(neg)) if mask is not None else b.not_(neg)
        m_neg = b.and_(mask, neg) if mask is not None else neg
        idt = {16: "i16", 32: "i32", 64: "i64"}[elem.bits]
        from ..types import DTYPES

        it = DTYPES[idt]
        o1 = _emit_atomic(lw, pos_kind, ptr, bits, None, m_pos, it, sem, scope)
        o2 = _emit_atomic(lw, neg_kind, ptr, bits, None, m_neg, it, sem, scope)
        return b.bitcast(b.select(neg, o2, o1), ty)
    if elem.bits == 16 and kind not in ("fadd", "cas"):
        raise NotImplementedError("16-bit integer atomics")
    con = "l" if (elem.is_ptr() or elem.bits == 64) else ("h" if elem.bits == 16 else ("f" if elem.ir == "f32"
                                                                                          else "r"))
    if elem.ir == "f64":
        con = "d"
    sem_q, scope_q = _qualifiers(sem, scope)
    args = [b.ptrtoint(ptr, I64)]
    if kind == "cas":
        # spelled as Triton's PTX spells it: .gpu (the default scope) left out of cas, kept in rmw
        body = f"atom.global{'' if scope_q == '.gpu' else scope_q}{sem_q}.cas.b{elem.bits} $0, [$1], $2, $3;"
        args += [cmp, val]
        cons = [f"={con}", "l", con, con]
    else:
        body = f"atom.global{scope_q}{sem_q}.{_ATOM_OP[kind]}.{_atom_type(kind, elem)} $0, [$1], $2;"
        args += [val]
        cons = [f"={con}", "l", con]
    if mask is not None:
        k = len(args) + 1
        zero = "mov.b32 $0, 0;" if con in ("r", "f") else ("mov.b64 $0, 0;" if con in ("l", "d") else "mov.b16 $0, 0;")
        body = f"{zero} @${k} {body}"
        args.append(mask)
        cons.append("b")
    fty = ir.FunctionType(ty, [a.type for a in args])
    return b.asm(fty, body, ",".join(cons), args, side_effect=True)


def _emit_half_min_max(lw, kind, ptr, val, mask, elem, sem, scope):
    """16-bit float atomic min/max (descriptor reductions): PTX has no scalar form, so a compare-and-swap
    loop on the 16-bit word; `min`/`max` of PTX return the number when one side is NaN. Returns the old value."""
    b = lw.b
    sem_q, scope_q = _qualifiers(sem, scope)
    cas_scope = "" if scope_q == ".gpu" else scope_q
    t = elem.ir  # f16 / bf16
    body = ("{ .reg .pred %pk, %pm; .reg .b16 %old, %new, %cur; "
            + ("setp.ne.b32 %pm, $3, 0; mov.b16 $0, 0; @!%pm bra DONE${:uid}; " if mask is not None else "")
            + "ld.global.relaxed.gpu.b16 %old, [$1]; "
            + "LOOP${:uid}: "
            + f"{kind}.{t} %new, %old, $2; "
            + f"atom.global{cas_scope}{sem_q}.cas.b16 %cur, [$1], %old, %new; "
            + "setp.ne.b16 %pk, %cur, %old; mov.b16 %old, %cur; @%pk bra LOOP${:uid}; "
            + "mov.b16 $0, %old; "
            + ("DONE${:uid}: " if mask is not None else "") + "}")
    ity = ir.IntType(16)
    args = [b.ptrtoint(ptr, I64), b.bitcast(val, ity)]
    cons = ["=h", "l", "h"]
    if mask is not None:
        args.append(b.zext(mask, I32))
        cons.append("r")
    old = b.asm(ir.FunctionType(ity, [a.type for a in args]), body, ",".join(cons), args, side_effect=True)
    return b.bitcast(old, llty(elem))


def _emit_vector_fadd(lw, ptr, vals, mask, elem, sem, scope):
    """One sm_90 vector atomic add over a run of contiguous elements (`atom...add.v4.f32`, `.noftz.v8.f16`):
    the mask is uniform over the run (the layout pass bounded the run by the mask's constancy)."""
    b = lw.b
    n = len(vals)
    sem_q, scope_q = _qualifiers(sem, scope)
    ty = llty(elem)
    con = "f" if elem.ir == "f32" else "h"
    outs = ", ".join(f"${k}" for k in range(n))
    ins = ", ".join(f"${n + 1 + k}" for k in range(n))
    noftz = "" if elem.ir == "f32" else ".noftz"
    body = f"atom.global{scope_q}{sem_q}.add{noftz}.v{n}.{elem.ir} {{{outs}}}, [${n}], {{{ins}}};"
    args = [b.ptrtoint(ptr, I64)] + list(vals)
    cons = [f"={con}"] * n + ["l"] + [con] * n
    if mask is not None:
        zero = "".join(f"mov.b{elem.bits} ${k}, 0; " for k in range(n))
        body = f"{zero}@${2 * n + 1} {body}"
        args.append(mask)
        cons.append("b")
    st = ir.LiteralStructType([ty] * n)
    res = b.asm(ir.FunctionType(st, [a.type for a in args]), body, ",".join(cons), args, side_effect=True)
    return [b.extract_value(res, k) for k in range(n)]


@handles("tt.atomic_rmw", "tt.atomic_cas")
def _atomic(lw: KernelLowering, op):
    res = op.results[0]
    elem = res.type.scalar
    sem, scope = op.attrs.get("sem", "acq_rel"), op.attrs.get("scope", "gpu")
    is_cas = op.name == "tt.atomic_cas"
    kind = "cas" if is_cas else op.attrs["kind"]
    if not isinstance(res.type, TensorType):
        ptr = lw.get(op.operands[0])
        if is_cas:
            cmp, val, mask = lw.get(op.operands[1]), lw.get(op.operands[2]), None
        else:
            cmp, val = None, lw.get(op.operands[1])
            mask = lw.get(op.operands[2]) if len(op.operands) > 2 else None
        first = lw.b.icmp_unsigned("==", lw.tid, _cint(0))
        mask = first if mask is None else lw.b.and_(mask, first)
        old = _emit_atomic(lw, kind, ptr, val, cmp, mask, elem, sem, scope)
        # broadcast thread 0's old value to every thread through shared memory
        p = lw.smem_ptr(op, 0)
        store_v = lw.b.zext(old, I8) if old.type == I1 else old
        with lw.b.if_then(first):
            lw.b.store(store_v, p)
        lw.barrier()
        lw.put(res, lw.b.load(p, typ=store_v.type) if old.type != I1 else
               lw.b.icmp_unsigned("!=", lw.b.load(p, typ=I8), ir.Constant(I8, 0)))
        return
    layout, shape = res.type.layout, res.type.shape
    valid = lw.reg_valid(layout, shape)
    ptrs = lw.regs(op.operands[0])
    if is_cas:
        cmps, vals, masks = lw.regs(op.operands[1]), lw.regs(op.operands[2]), None
    else:
        cmps, vals = None, lw.regs(op.operands[1])
        masks = lw.regs(op.operands[2]) if len(op.operands) > 2 else None
    out = []
    vector = kind == "fadd" and op.attrs.get("vec", 1) > 1 and lw.arch >= 90
    for g in (_groups(op, res.type) if vector else [[i] for i in range(len(ptrs))]):
        i = g[0]
        m = masks[i] if masks else None
        if valid is not None:
            m = valid[i] if m is None else lw.b.and_(m, valid[i])
        if len(g) > 1:
            out.extend(_emit_vector_fadd(lw, ptrs[i], [vals[j] for j in g], m, elem, sem, scope))
        else:
            out.append(_emit_atomic(lw, kind, ptrs[i], vals[i], cmps[i] if cmps else None, m, elem, sem, scope))
    if valid is not None and res.uses:
        # only the representative copy of each element ran the atomic: it publishes the old value and every
        # copy reads it back, so threads holding replicas see the same result
        idx = lw.reg_indices(layout, shape)
        slots = [lw.smem_ptr(op, lw.b.mul(lw.linear_index(ix, shape), _cint(mem_bytes(res.type)))) for ix in idx]
        for v, p, ok in zip(out, slots, valid):
            with lw.b.if_then(ok):
                lw.b.store(v, p)
        lw.barrier()
        out = [lw.b.load(p, typ=v.type) for v, p in zip(out, slots)]
    lw.put(res, out)


def _cstring(lw: KernelLowering, text: str):
    if text not in lw.strings:
        data = bytearray(text.encode() + b"\0")
        g = ir.GlobalVariable(lw.mod, ir.ArrayType(I8, len(data)), f"str{len(lw.strings)}", addrspace=1)
        g.initializer = ir.Constant(ir.ArrayType(I8, len(data)), data)
        g.global_constant = True
        g.linkage = "internal"
        g.type = GPTR
        lw.strings[text] = g
    return lw.b.addrspacecast(lw.strings[text], ir.PointerType())


def _printf_arg(lw, v, elem, hex_=False):
    """A value as C varargs pass it: pointers generic, floats as double (their bits with hex=True), narrower
    integers widened to 32 bits by their signedness."""
    b = lw.b
    if elem.is_ptr():
        return b.addrspacecast(v, ir.PointerType())
    if elem.is_floating() and hex_:
        v = b.bitcast(v, ir.IntType(elem.bits))
    elif elem.is_floating():
        return b.fpext(v, ir.DoubleType()) if v.type != ir.DoubleType() else v
    if elem.bits < 32:
        return b.sext(v, I32) if elem.kind == "int" else b.zext(v, I32)
    return v


@handles("tt.print")
def _print(lw: KernelLowering, op):
    """Triton's format (compiler/print_format.py): per element this thread holds, one vprintf of
    `pid (x, y, z) idx (...)<prefix>[(operand n) ]<value>`; replicated copies print once."""
    b = lw.b
    vprintf = lw.intrinsic("vprintf", I32, [ir.PointerType(), ir.PointerType()])
    pids = [lw.eb.call(lw.intrinsic(f"llvm.nvvm.read.ptx.sreg.ctaid.{a}", I32, []), []) for a in "xyz"]
    prefix = op.attrs.get("prefix", "")
    hex_ = op.attrs.get("hex", False)

    def printf(fmt, args, cond=None):
        st = ir.LiteralStructType([a.type for a in args])
        buf = lw.eb.alloca(st)
        buf.type = ir.PointerType()  # opaque, so the GEP below is typed by source_etype
        for k, a in enumerate(args):
            b.store(a, b.gep(buf, [_cint(0), _cint(k)], source_etype=st))
        if cond is not None:
            with b.if_then(cond):
                b.call(vprintf, [_cstring(lw, fmt + "\n"), buf])
        else:
            b.call(vprintf, [_cstring(lw, fmt + "\n"), buf])

    if not op.operands:
        printf(print_format.no_operand_format(prefix), pids)
    for n, v in enumerate(op.operands):
        elem = v.type.scalar
        if isinstance(v.type, TensorType):
            layout, shape = v.type.layout, v.type.shape
            idxs = lw.reg_indices(layout, shape)
            valid = lw.reg_valid(layout, shape)
            regs = lw.regs(v)
        else:
            idxs, valid, regs, shape = [[]], None, [lw.get(v)], ()
        fmt = print_format.line_format(prefix, shape, elem, hex_, n, len(op.operands))
        for i, (x, ix) in enumerate(zip(regs, idxs)):
            printf(fmt, pids + list(ix) + [_printf_arg(lw, x, elem, hex_)], valid[i] if valid is not None else None)


@handles("tt.assert")
def _assert(lw: KernelLowering, op):
    b = lw.b
    fail = lw.intrinsic("__assertfail", VOID, [ir.PointerType(), ir.PointerType(), I32, ir.PointerType(), I64])
    v = op.operands[0]
    regs = lw.regs(v)
    ok = regs[0]
    for r in regs[1:]:
        ok = b.and_(ok, r)
    line = op.loc.line if op.loc else 0
    with b.if_then(b.not_(ok), likely=False):
        b.call(fail, [_cstring(lw, op.attrs.get("message", "") or "device_assert failed"),
                      _cstring(lw, lw.ir_fn.source_file), _cint(line), _cstring(lw, lw.ir_fn.name),
                      ir.Constant(I64, 1)])

