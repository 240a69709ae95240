"""Reductions and scans.

reduce: combine a thread's registers, then butterfly shuffles across the lanes that share the
axis, then (if the axis spans warps) one value per warp through shared memory. Where a layout
holds copies of an element (tiles smaller than the thread grid), only representative copies count.
scan: through shared memory, each thread walking the prefix of its elements (simple, correct).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..gpu.layouts import Slice
from ..gpu.scratch import mem_bytes
from ..switches import switch
from ..types import TensorType
from .lower_shape import _from_mem, _to_mem
from .lowering_core import F32, F64, I1, I32, I64, KernelLowering, _cint, _log2, handles, memty

# From this many warp partials on, the cross-warp step is a butterfly over lanes rather than one load per partial
# (16 warps: fewer registers, one more program per SM; at 8 the loads' shorter latency wins in loops over rows).
_TREE_FROM_PARTIALS = 16

# combines whose value does not depend on the order they are applied in (exact and associative; a float max or min
# of tied +0 and -0 may come out either way, as LLVM's maxnum allows): a thread's registers may be combined pairwise
# instead of one after another
_ORDER_FREE = {"arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf", "arith.maxsi", "arith.minsi",
               "arith.maxui", "arith.minui", "arith.addi", "arith.muli", "arith.andi", "arith.ori", "arith.xori"}


def tree_in_thread() -> bool:
    """KERNELLAB_REDUCE_TREE=1 (default off until timed; part of the disk-cache key): a thread combines its registers
    along the axis pairwise (depth log2 n) where the combine is exact and associative (max, min, integer add ...),
    instead of a chain n - 1 deep. Attention's row max over 64 scores a thread holds (hd128, two warpgroups) is two
    chains of 32 dependent FMNMX between the scores' wgmma wait and the first exponential: the critical path of the
    softmax that the other warpgroup's matrix products must cover."""
    return switch("KERNELLAB_REDUCE_TREE", False)


def scan_lean() -> bool:
    """KERNELLAB_SCAN_LEAN (on by default, `0` turns it off; session 16, H100: selective scan 0.80-0.86 -> 0.91-1.11x
    Triton alone, the idioms' scans 1.00 either way; part of the compile caches' keys through CODEGEN_ENV): a scan
    across warps stores each warp's total from the lane that holds it (a predicated st.shared, as Triton) instead of
    broadcasting it to every lane with shfl.idx first, and where a thread holds one element of a line per repetition
    (sizePerThread 1 along the axis) its result is the earlier warps' prefix combined with its inclusive lane scan,
    without the exclusive shfl.up and the thread's own value kept across the barrier. heldout_texts5's selective
    scan ([64, 16] tile over [16, 2] lanes and 4 warps, two values): 32 of its 96 scan shuffles an iteration go, and
    16 values fewer stay live across the barrier (ptxas: 128 registers against Triton's 80)."""
    return switch("KERNELLAB_SCAN_LEAN", True)


def _order_free(op) -> bool:
    """One operand, and the region is one order-free binary op of its two arguments."""
    region = op.regions[0]
    if len(op.operands) != 1 or len(region.ops) != 2:
        return False
    comb, ret = region.ops
    return (comb.name in _ORDER_FREE and {id(v) for v in comb.operands} == {id(a) for a in region.args}
            and len(region.args) == 2 and list(ret.operands) == [comb.results[0]])


def _combine(lw: KernelLowering, op, a: list, b: list) -> list:
    """Evaluate the reduce/scan region on scalars a (accumulated) and b (incoming)."""
    region = op.regions[0]
    for arg, v in zip(region.args, a + b):
        lw.put(arg, v)
    lw.block_without_terminator(region)
    return [lw.get(v) for v in region.ops[-1].operands]


def _shfl_bfly(lw: KernelLowering, v, lanemask: int):
    return _shfl(lw, v, lanemask, "bfly")


def _shfl(lw: KernelLowering, v, amount: int, mode: str):
    """Exchange a value between lanes: bfly (xor lane id), up (from lane - amount), down (lane + amount)."""
    fn = lw.intrinsic(f"llvm.nvvm.shfl.sync.{mode}.i32", I32, [I32, I32, I32, I32])
    clamp = 0 if mode == "up" else 31
    return _through_i32(lw, v, lambda x: lw.b.call(fn, [_cint(-1), x, _cint(amount), _cint(clamp)]))


def _through_i32(lw: KernelLowering, v, sh32):
    """Apply a 32-bit lane exchange `sh32` to a value of any type (narrow types widen, 64-bit split in two)."""
    b = lw.b
    t = v.type
    if t == I32:
        return sh32(v)
    if t == F32:
        return b.bitcast(sh32(b.bitcast(v, I32)), F32)
    if isinstance(t, ir.IntType) and t.width < 32:
        return b.trunc(sh32(b.zext(v, I32)), t)
    if str(t) in ("half", "bfloat"):
        return b.bitcast(b.trunc(sh32(b.zext(b.bitcast(v, ir.IntType(16)), I32)), ir.IntType(16)), t)
    if t in (I64, F64) or isinstance(t, ir.PointerType):
        x = b.ptrtoint(v, I64) if isinstance(t, ir.PointerType) else (b.bitcast(v, I64) if t == F64 else v)
        lo = sh32(b.trunc(x, I32))
        hi = sh32(b.trunc(b.lshr(x, ir.Constant(I64, 32)), I32))
        y = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
        if isinstance(t, ir.PointerType):
            return b.inttoptr(y, t)
        return b.bitcast(y, F64) if t == F64 else y
    raise NotImplementedError(f"shuffle of {t}")


def _merge(lw, op, acc, acc_ok, x, x_ok):
    """Combine with validity flags: invalid inputs are skipped."""
    b = lw.b
    if acc_ok is None and x_ok is None:
        return _combine(lw, op, acc, x), None
    new = _combine(lw, op, acc, x)
    out = []
    for a_, n_, x_ in zip(acc, new, x):
        take_new = b.select(acc_ok, n_, x_)
        out.append(b.select(x_ok, take_new, a_))
    return out, b.or_(acc_ok, x_ok)


@handles("tt.reduce")
def _reduce(lw: KernelLowering, op):
    b = lw.b
    axis = op.attrs["axis"]
    src = op.operands[0]
    layout, shape = src.type.layout, src.type.shape
    infos = layout.dims_info(shape)
    info = infos[axis]
    inputs = [lw.regs(v) for v in op.operands]
    offsets = layout.registers(shape)
    parts = lw.thread_parts(layout, shape)
    replicated = info.replicated
    groups: dict = {}
    for i, offs in enumerate(offsets):
        key = tuple(o for d, o in enumerate(offs) if d != axis)
        groups.setdefault(key, []).append(i)
    results = {}
    pairwise = not replicated and tree_in_thread() and _order_free(op)
    for key, regs in groups.items():
        acc = [inp[regs[0]] for inp in inputs]
        ok = None
        if pairwise:  # a tree over the thread's registers: the same value (order-free combine), log2 n deep
            level = [[inp[r] for inp in inputs] for r in regs]
            while len(level) > 1:
                nxt = [_combine(lw, op, level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
                level = nxt + ([level[-1]] if len(level) % 2 else [])
            acc, regs = level[0], regs[:1]
        if replicated:
            ok = b.icmp_unsigned("<", b.add(parts[axis], _cint(offsets[regs[0]][axis])), _cint(info.size))
        for r in regs[1:]:
            x = [inp[r] for inp in inputs]
            x_ok = None
            if replicated:
                x_ok = b.icmp_unsigned("<", b.add(parts[axis], _cint(offsets[r][axis])), _cint(info.size))
            acc, ok = _merge(lw, op, acc, ok, x, x_ok)
        # across lanes
        k = info.lanes // 2
        while k >= 1:
            mask = k * info.lane_div
            other = [_shfl_bfly(lw, v, mask) for v in acc]
            other_ok = None
            if ok is not None:
                other_ok = b.trunc(_shfl_bfly(lw, b.zext(ok, I32), mask), I1)
            acc, ok = _merge(lw, op, acc, ok, other, other_ok)
            k //= 2
        results[key] = acc
    out_shape = tuple(s for d, s in enumerate(shape) if d != axis)
    if info.warps > 1:
        # one partial per warp along the axis goes through shared memory
        out_numel = 1
        for s in out_shape:
            out_numel *= s
        elems = [v.type.scalar for v in op.operands]
        sizes = [mem_bytes(e) for e in elems]
        warp_c = b.and_(b.lshr(lw.warp, _cint(_log2(info.warp_div))), _cint(info.warps - 1))
        out_layout = Slice(axis, layout)
        out_idx = lw.reg_indices(out_layout, out_shape) if out_shape else None
        reg_of_key = {k: i for i, k in enumerate(out_layout.registers(out_shape))} if out_shape else {}
        key_order = list(results)
        lin_of = {}
        base = 0
        bases = []
        for s in sizes:
            bases.append(base)
            base += _align16(info.warps * out_numel * s)
        for key in key_order:
            lin = lw.linear_index(out_idx[reg_of_key[key]], out_shape) if out_shape else _cint(0)
            lin_of[key] = lin
            slot = b.add(b.mul(warp_c, _cint(out_numel)), lin)
            store_ok = ok if ok is not None else None
            for j, (v, e) in enumerate(zip(results[key], elems)):
                p = lw.smem_ptr(op, b.mul(slot, _cint(sizes[j])), bases[j])
                if store_ok is not None:
                    with b.if_then(store_ok):
                        b.store(_to_mem(lw, v, e), p)
                else:
                    b.store(_to_mem(lw, v, e), p)
        lw.barrier()
        valid_warps = [w for w in range(info.warps) if w * info.warp_stride < info.size]

        def partial(w, key):
            slot = b.add(b.mul(w, _cint(out_numel)) if isinstance(w, ir.Value) else _cint(w * out_numel),
                         lin_of[key])
            return [_from_mem(lw, b.load(lw.smem_ptr(op, b.mul(slot, _cint(sizes[j])), bases[j]), typ=memty(e)), e)
                    for j, e in enumerate(elems)]

        n = len(valid_warps)
        for key in key_order:
            if n >= _TREE_FROM_PARTIALS and not out_shape:
                # A whole-tile reduction: lane l reads partial l % n and butterflies over n lanes, one load
                # and log2(n) shuffles per thread instead of n loads held in registers at once (16 warps: 46
                # -> 40 registers in a layer norm, one more program per SM). Commutative combines give every
                # lane the same value.
                acc = partial(b.and_(lw.lane, _cint(n - 1)), key)
                k = n // 2
                while k >= 1:
                    acc = _combine(lw, op, acc, [_shfl_bfly(lw, v, k) for v in acc])
                    k //= 2
            else:
                acc = None
                for w in valid_warps:
                    vals = partial(w, key)
                    acc = vals if acc is None else _combine(lw, op, acc, vals)
            results[key] = acc
    # results in the order of the output layout's registers
    for j, r in enumerate(op.results):
        if isinstance(r.type, TensorType):
            keys = r.type.layout.registers(r.type.shape)
            lw.put(r, [results[k][j] for k in keys])
        else:
            lw.put(r, results[()][j])


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


def _guarded(lw, op, flag, prefix, x):
    """combine(prefix, x) where `flag` (i1) says a prefix exists, else x."""
    comb = _combine(lw, op, prefix, x)
    return [lw.b.select(flag, c, v) for c, v in zip(comb, x)]


@handles("tt.scan")
def _scan(lw: KernelLowering, op):
    from ..gpu.scratch import scan_plan

    src = op.operands[0]
    if scan_plan(src.type.layout, src.type.shape, op.attrs["axis"]) is None:
        return _scan_via_smem(lw, op)
    return _scan_hierarchical(lw, op)


def _scan_hierarchical(lw: KernelLowering, op):
    """Inclusive scan: in each thread, then across the lanes of the axis (shfl.up / shfl.down), then
    across warps through one running total per warp in shared memory; repetitions of the layout
    along the axis are chained with a carried total."""
    b = lw.b
    axis = op.attrs["axis"]
    reverse = bool(op.attrs.get("reverse", False))
    src = op.operands[0]
    layout, shape = src.type.layout, src.type.shape
    info = layout.dims_info(shape)[axis]
    inputs = [lw.regs(v) for v in op.operands]
    elems = [v.type.scalar for v in op.operands]
    sizes = [mem_bytes(e) for e in elems]
    offsets = layout.registers(shape)
    n_ops = len(inputs)
    lanes, warps, spt = info.lanes, info.warps, info.spt
    reps = len(info.offsets) // spt
    lines = 1
    for d, s_ in enumerate(shape):
        if d != axis:
            lines *= s_
    lane_c = b.and_(b.lshr(lw.lane, _cint(_log2(info.lane_div))), _cint(lanes - 1))
    warp_c = b.and_(b.lshr(lw.warp, _cint(_log2(info.warp_div))), _cint(warps - 1))
    idx = lw.reg_indices(layout, shape)
    # registers of each line, by repetition, in scan order
    line_regs: dict = {}
    for i, offs in enumerate(offsets):
        key = tuple(o for d, o in enumerate(offs) if d != axis)
        line_regs.setdefault(key, []).append(i)
    line_index = {}
    for key, regs in line_regs.items():
        regs.sort(key=lambda r: offsets[r][axis])
        ix = list(idx[regs[0]])
        ix[axis] = _cint(0)
        line_index[key] = _compact_line(lw, ix, shape, axis)
    out = [[None] * len(offsets) for _ in range(n_ops)]
    carry = {key: None for key in line_regs}
    rep_order = list(range(reps))[::-1] if reverse else list(range(reps))
    bases, base = [], 0
    for s_ in sizes:
        bases.append(base)
        base += _align16(reps * warps * lines * s_)
    # all repetitions' lane scans first, their warp totals into shared memory, then one barrier for them all
    # (Triton's form; a barrier per repetition cost fla's 64-row cumsum 8 where Triton has 1)
    partial = {}
    lean = scan_lean()
    one = lean and spt == 1
    src_lane = 0 if reverse else lanes - 1
    for rep in rep_order:
        for key, regs in line_regs.items():
            chunk = regs[rep * spt:(rep + 1) * spt]
            if reverse:
                chunk = chunk[::-1]
            # 1. within the thread
            acc = None
            local = []
            for r in chunk:
                x = [inp[r] for inp in inputs]
                acc = x if acc is None else _combine(lw, op, acc, x)
                local.append((r, acc))
            total = acc
            # 2. across the lanes along the axis: inclusive scan of thread totals
            incl = total
            d = 1
            while d < lanes:
                mode = "down" if reverse else "up"
                other = [_shfl(lw, v, d * info.lane_div, mode) for v in incl]
                has = b.icmp_unsigned("<", lane_c, _cint(lanes - d)) if reverse else \
                    b.icmp_unsigned(">=", lane_c, _cint(d))
                incl = _guarded(lw, op, has, other, incl)
                d *= 2
            if one:  # the result is combine(earlier warps, incl): no exclusive value needed
                excl, has_excl = None, None
            else:
                mode = "down" if reverse else "up"
                excl = [_shfl(lw, v, info.lane_div, mode) for v in incl]
                has_excl = b.icmp_unsigned("<", lane_c, _cint(lanes - 1)) if reverse else \
                    b.icmp_unsigned(">", lane_c, _cint(0))
            # the warp's total along the axis: the last lane's inclusive value (stored from that lane when lean)
            if lean and warps > 1:
                warp_total = incl
            else:
                warp_total = [_shfl_idx(lw, v, src_lane, info.lane_div, lane_c) for v in incl]
            partial[rep, key] = (local, excl, has_excl, warp_total, incl)
        if warps > 1:
            def store_totals():
                for key in line_regs:
                    wt = partial[rep, key][3]
                    slot = b.add(b.mul(b.add(_cint(rep * warps), warp_c), _cint(lines)), line_index[key])
                    for j, v in enumerate(wt):
                        b.store(_to_mem(lw, v, elems[j]), lw.smem_ptr(op, b.mul(slot, _cint(sizes[j])), bases[j]))
            if lean:
                with b.if_then(b.icmp_unsigned("==", lane_c, _cint(src_lane))):
                    store_totals()
            else:
                store_totals()
    if warps > 1:
        lw.barrier()
    for rep in rep_order:
        for key in line_regs:
            local, excl, has_excl, wt, incl = partial[rep, key]
            # 3. totals of the warps before this one (after, for a reverse scan), and of the whole rep
            warp_prefix, has_wp, rep_total = None, None, wt
            if warps > 1:
                loaded = []
                for w in range(warps):
                    slot = b.add(_cint((rep * warps + w) * lines), line_index[key])
                    loaded.append([_from_mem(lw, b.load(lw.smem_ptr(op, b.mul(slot, _cint(sizes[j])), bases[j]),
                                                       typ=memty(e)), e) for j, e in enumerate(elems)])
                order = list(range(warps))[::-1] if reverse else list(range(warps))
                rep_total = None
                for w in order:
                    rep_total = loaded[w] if rep_total is None else _combine(lw, op, rep_total, loaded[w])
                # prefix over warps strictly before warp_c in scan order, built with selects
                for w in order:
                    before = b.icmp_unsigned(">", warp_c, _cint(w)) if not reverse else \
                        b.icmp_unsigned("<", warp_c, _cint(w))
                    if warp_prefix is None:
                        warp_prefix, has_wp = loaded[w], before
                    else:
                        comb = _combine(lw, op, warp_prefix, loaded[w])
                        warp_prefix = [b.select(before, b.select(has_wp, c, n), p)
                                       for c, n, p in zip(comb, loaded[w], warp_prefix)]
                        has_wp = b.or_(has_wp, before)
            # 4. each element: carry, earlier warps, earlier lanes, then its own in-thread prefix
            prefix, has = carry[key], None
            if warp_prefix is not None:
                if prefix is None:
                    prefix, has = warp_prefix, has_wp
                else:
                    comb = _combine(lw, op, prefix, warp_prefix)
                    prefix = [b.select(has_wp, c, p) for c, p in zip(comb, prefix)]
                    has = ir.Constant(I1, 1)
            if one:
                # one element per thread and repetition: its inclusive lane scan after the earlier warps and reps
                ((r, _),) = local
                if prefix is None:
                    res = incl
                elif has is None:
                    res = _combine(lw, op, prefix, incl)
                else:
                    res = _guarded(lw, op, has, prefix, incl)
                for j in range(n_ops):
                    out[j][r] = res[j]
                carry[key] = rep_total if carry[key] is None else _combine(lw, op, carry[key], rep_total)
                continue
            if prefix is None:
                prefix, has = excl, has_excl
            else:
                prefix, has = _merge(lw, op, prefix, has if has is not None else ir.Constant(I1, 1), excl,
                                     has_excl)
            for r, v in local:
                res = _guarded(lw, op, has, prefix, v) if has is not None else v
                for j in range(n_ops):
                    out[j][r] = res[j]
            # 5. carry the whole repetition's total into the next one
            carry[key] = rep_total if carry[key] is None else _combine(lw, op, carry[key], rep_total)
    for j, res in enumerate(op.results):
        lw.put(res, out[j])


def _shfl_idx(lw, v, src_lane_c, lane_div, lane_c):
    """Broadcast the value of the lane whose axis component is `src_lane_c` (same other components)."""
    b = lw.b
    src = b.add(b.sub(lw.lane, b.mul(lane_c, _cint(lane_div))), _cint(src_lane_c * lane_div))
    fn = lw.intrinsic("llvm.nvvm.shfl.sync.idx.i32", I32, [I32, I32, I32, I32])
    return _through_i32(lw, v, lambda x: b.call(fn, [_cint(-1), x, src, _cint(31)]))


def _compact_line(lw, ix, shape, axis):
    """Row-major index of an element over the shape without `axis`."""
    other = [i for d, i in enumerate(ix) if d != axis]
    oshape = [s for d, s in enumerate(shape) if d != axis]
    return lw.linear_index(other, oshape)


def _scan_via_smem(lw: KernelLowering, op):
    b = lw.b
    axis = op.attrs["axis"]
    reverse = op.attrs.get("reverse", False)
    src = op.operands[0]
    layout, shape = src.type.layout, src.type.shape
    elems = [v.type.scalar for v in op.operands]
    sizes = [mem_bytes(e) for e in elems]
    numel = 1
    for s in shape:
        numel *= s
    bases, base = [], 0
    for s in sizes:
        bases.append(base)
        base += _align16(numel * s)
    idx = lw.reg_indices(layout, shape)
    for j, v in enumerate(op.operands):
        for x, ix in zip(lw.regs(v), idx):
            p = lw.smem_ptr(op, b.mul(lw.linear_index(ix, shape), _cint(sizes[j])), bases[j])
            b.store(_to_mem(lw, x, elems[j]), p)
    lw.barrier()
    stride = 1
    for s in shape[axis + 1:]:
        stride *= s
    n = shape[axis]
    # base index of each register's line (axis index 0)
    line_base = []
    for ix in idx:
        zero_ix = list(ix)
        zero_ix[axis] = _cint(0)
        line_base.append(lw.linear_index(zero_ix, shape))

    def load_at(r, k):
        lin = b.add(line_base[r], b.mul(k, _cint(stride)))
        return [_from_mem(lw, b.load(lw.smem_ptr(op, b.mul(lin, _cint(sizes[j])), bases[j]), typ=memty(e)), e)
                for j, e in enumerate(elems)]

    start = n - 1 if reverse else 0
    accs = [load_at(r, _cint(start)) for r in range(len(idx))]
    pre = b.block
    header = lw.fn.append_basic_block("scan.header")
    body = lw.fn.append_basic_block("scan.body")
    exit_ = lw.fn.append_basic_block("scan.exit")
    b.branch(header)
    b.position_at_end(header)
    k = b.phi(I32)
    k.add_incoming(_cint(start - 1 if reverse else start + 1), pre)
    phis = [[None] * len(elems) for _ in accs]
    for r, acc in enumerate(accs):
        for j, v in enumerate(acc):
            p = b.phi(v.type)
            p.add_incoming(v, pre)
            phis[r][j] = p
    cond = b.icmp_signed(">=", k, _cint(0)) if reverse else b.icmp_signed("<", k, _cint(n))
    b.cbranch(cond, body, exit_)
    b.position_at_end(body)
    new_accs = []
    for r in range(len(idx)):
        x = load_at(r, k)
        comb = _combine(lw, op, list(phis[r]), x)
        inside = b.icmp_signed(">=", k, idx[r][axis]) if reverse else b.icmp_signed("<=", k, idx[r][axis])
        new_accs.append([b.select(inside, c, p) for c, p in zip(comb, phis[r])])
    nk = b.sub(k, _cint(1)) if reverse else b.add(k, _cint(1))
    end = b.block
    k.add_incoming(nk, end)
    for r in range(len(idx)):
        for j in range(len(elems)):
            phis[r][j].add_incoming(new_accs[r][j], end)
    b.branch(header)
    b.position_at_end(exit_)
    for j, res in enumerate(op.results):
        lw.put(res, [phis[r][j] for r in range(len(idx))])
