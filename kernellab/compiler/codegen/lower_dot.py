"""`tl.dot`: on tensor cores (mma.sync m16n8k16, operands through ldmatrix) where accelerate_matmul
chose them, else on CUDA cores (both operands staged in shared memory, each thread accumulating its own
output elements with FMAs)."""
from __future__ import annotations

import llvmlite.ir as ir

from ..gpu.scratch import a_from_registers, is_wgmma, mem_bytes, mma_b_k_contiguous, mma_instr, mma_staging
from .lower_async import store_register_runs, store_tile
from .lower_wgmma import a_fragment_from_accumulator, dot_wgmma, pack_halves, unpack_halves
from .lowering_core import F32, I32, SPTR, KernelLowering, _cint, _log2, handles, llty, memty


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


@handles("tt.dot")
def _dot(lw: KernelLowering, op):
    if is_wgmma(op):
        return dot_wgmma(lw, op)
    if "mma" in op.attrs:
        return _dot_mma(lw, op)
    return _dot_fma(lw, op)


def _stage_tile(lw: KernelLowering, op, v, shape, row_stride: int, base: int, esize: int, transpose=False,
                tf32=False):
    """Write a 2-D tile into the dot's scratch at `base`, row-major with rows `row_stride` elements apart
    ([cols][rows] when `transpose`), fp32 rounded to tf32 when `tf32`."""
    b = lw.b
    regs = lw.regs(v)
    if tf32:
        cvt = ir.FunctionType(I32, [F32])
        regs = [b.asm(cvt, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], side_effect=False) for x in regs]
    start = op.attrs.get("smem_offset", 0) + base
    layout = v.type.layout
    if not any(i.replicated for i in layout.dims_info(shape)):
        _store_linear(lw, v, regs, start, (1, row_stride) if transpose else (row_stride, 1), esize,
                      vectorize=not transpose)
        return

    def offset_of(r, c):
        if transpose:
            r, c = c, r
        return b.add(_cint(start), b.mul(b.add(b.mul(r, _cint(row_stride)), c), _cint(esize)))

    store_tile(lw, v, regs, offset_of, esize, vectorize=not transpose)


def _store_linear(lw: KernelLowering, v, regs, start: int, strides, esize: int, vectorize: bool):
    """Store a 2-D register tile without copies of an element at byte `start + (r * strides[0] + c * strides[1])
    * esize`: one address per thread plus a constant per register (runs of consecutive registers along a row as
    one vector store, as `store_tile`). From per-element indices LLVM turns the register's offset into an `or` that
    ptxas cannot fold into the st.shared immediate: a transposed tf32 B kept 64 address registers live across
    fla's chunk loop."""
    b = lw.b
    layout, shape = v.type.layout, v.type.shape
    parts = lw.thread_parts(layout, shape)
    thread = b.add(b.mul(parts[0], _cint(strides[0])), b.mul(parts[1], _cint(strides[1])))
    addr0 = b.add(lw.smem32, b.add(_cint(start), b.mul(thread, _cint(esize))))
    offsets = layout.registers(shape)

    def pointer_of(i):
        const = (offsets[i][0] * strides[0] + offsets[i][1] * strides[1]) * esize
        return b.inttoptr(b.add(addr0, _cint(const)), SPTR)

    store_register_runs(lw, v, regs, esize, vectorize, pointer_of)


def _ldmatrix(lw: KernelLowering, byte_offset, count: int, trans: bool):
    """ldmatrix m8n8 .x{count}: each lane gives one 16-byte row address (absolute shared-memory byte
    offset); returns `count` b32 fragments."""
    b = lw.b
    # 32-bit address arithmetic on the shared window's base: a stage base plus this lane's offset plus a constant
    # per k-step folds into one register and ldmatrix's immediate ([r+0x800], as Triton's); through a 64-bit gep
    # each address took an add of its own
    addr = b.add(lw.smem32, byte_offset)
    outs = ", ".join(f"${i}" for i in range(count))
    asm = f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 {{{outs}}}, [${count}];"
    ret = ir.LiteralStructType([I32] * count) if count > 1 else I32
    res = b.asm(ir.FunctionType(ret, [I32]), asm, ",".join(["=r"] * count + ["r"]), [addr], side_effect=True)
    return [b.extract_value(res, i) for i in range(count)] if count > 1 else [res]


def _operand_in_smem(lw: KernelLowering, op, index: int, base: int, instr):
    """Where dot operand `index` sits in shared memory: (absolute byte offset (i32), row stride in
    elements, stored k-contiguous). A multi-stage view (`!memdesc`) is already there; a register tile was
    staged by `_dot_mma` into the dot's scratch at `base` (A as [M][K], B as [K][N] or [N][K])."""
    v = op.operands[index]
    t = v.type
    rows, cols = t.shape
    if t.is_memdesc():
        col_major = t.order[0] == 0
        stride = (rows if col_major else cols) + t.pad
        k_contiguous = (index == 0) != col_major  # A row-major or B column-major: rows run along k
        return lw.get(v), stride, k_contiguous
    off = _cint(op.attrs.get("smem_offset", 0) + base)
    if index == 0:
        return off, cols + instr.pad, True
    if mma_b_k_contiguous(instr, cols):
        return off, rows + instr.pad, True
    return off, cols + instr.pad, False


def _dot_mma(lw: KernelLowering, op):
    """Tensor cores: each operand in shared memory (a pipelined stage, or staged from registers now, rows
    padded by 16 bytes so ldmatrix hits 8 different bank groups) or, for A, already in registers as an
    mma accumulator; fragments loaded with ldmatrix (.trans where a 16-bit tile runs along M or N), then
    one mma.sync per 16x8 tile of each warp's block and k-step, accumulating in the #mma layout."""
    b = lw.b
    a_v, b_v, c_v = op.operands
    res = op.results[0]
    M, K = a_v.type.shape
    N = b_v.type.shape[1]
    instr = mma_instr(op)
    es = instr.esize
    tf32 = instr.k == 8
    wm, wn = op.attrs["mma"]
    tm, tn = max(16, M // wm), max(8, N // wn)  # a warp's tile (warps past the edge of a small tile hold copies)
    a_regs = a_from_registers(op)
    b_base = 0 if a_v.type.is_memdesc() or a_regs else mma_staging(M, N, K, instr)[0]
    staged = False
    if not a_v.type.is_memdesc() and not a_regs:
        _stage_tile(lw, op, a_v, (M, K), K + instr.pad, 0, es, tf32=tf32)
        staged = True
    if not b_v.type.is_memdesc():
        if mma_b_k_contiguous(instr, N):
            _stage_tile(lw, op, b_v, (K, N), K + instr.pad, b_base, es, transpose=True, tf32=tf32)
        else:
            _stage_tile(lw, op, b_v, (K, N), N + instr.pad, b_base, es)
        staged = True
    if staged:
        lw.barrier()
    a_off, sa, a_kc = _operand_in_smem(lw, op, 0, 0, instr) if not a_regs else (None, 0, True)
    b_off, sb, b_kc = _operand_in_smem(lw, op, 1, b_base, instr)
    b_bytes = not b_kc and es == 1  # an int8 B stage contiguous along N: ldmatrix cannot transpose bytes
    layout = res.type.layout
    info_m, info_n = layout.dims_info((M, N))
    # which warp tile this warp computes: the warps past the tile's edge wrap onto it (the #mma layout's copies)
    warp_m = b.and_(b.lshr(lw.warp, _cint(_log2(info_m.warp_div))), _cint(min(wm, M // tm) - 1))
    warp_n = b.and_(b.lshr(lw.warp, _cint(_log2(info_n.warp_div))), _cint(min(wn, N // tn) - 1))
    lane = lw.lane
    mat = b.lshr(lane, _cint(3))          # which of the four 8x8 b16 matrices this lane addresses
    row8 = b.and_(lane, _cint(7))         # which row of it
    lo, hi = b.and_(mat, _cint(1)), b.lshr(mat, _cint(1))
    half = instr.k // 2                   # elements of k in one 16-byte matrix row
    # A (x4): matrices (m 0-7, k lo half), (m 8-15, k lo), (m 0-7, k hi), (m 8-15, k hi)
    a_m = b.add(b.mul(warp_m, _cint(16)), b.mul(lo, _cint(8)))  # m-tile i adds 16 * wm * i (interleaved)
    a_k = b.mul(hi, _cint(half))
    # B (x4 over two n-tiles): matrices (k lo, n), (k hi, n), (k lo, n+8), (k hi, n+8)
    b_n = b.add(b.mul(warp_n, _cint(tn)), b.mul(hi, _cint(8)))
    b_k = b.mul(lo, _cint(half))

    def addr(off, stride, r, c):
        return b.add(off, b.mul(b.add(b.mul(r, _cint(stride)), c), _cint(es)))

    def wrap(x, size, instr_size):  # a row (column) past a tile smaller than the instruction's: its copy
        return b.and_(x, _cint(size - 1)) if size < instr_size else x

    acc = list(lw.regs(c_v))
    acc_t, con = (F32, "f") if instr.acc == "f32" else (I32, "r")
    # an fp16 accumulator: each 16x8 tile's four halves in two f16x2 registers (same elements, same order)
    nc = 2 if instr.acc == "f16" else 4
    if nc == 2:
        acc = pack_halves(lw, acc)
    d_ops = ", ".join(f"${i}" for i in range(nc))
    c_ops = ", ".join(f"${nc + 6 + i}" for i in range(nc))
    asm = (f"{instr.ptx} {{{d_ops}}}, {{${nc}, ${nc + 1}, ${nc + 2}, ${nc + 3}}}, {{${nc + 4}, ${nc + 5}}}, "
           f"{{{c_ops}}};")
    fty = ir.FunctionType(ir.LiteralStructType([acc_t] * nc), [I32] * 6 + [acc_t] * nc)
    cons = ",".join([f"={con}"] * nc + ["r"] * 6 + [str(i) for i in range(nc)])
    n_mt, n_nt = tm // 16, tn // 8
    n_k = K // instr.k
    lone = None  # the odd n-tile's fragments of the next k-step, loaded with this one's
    for step, k0 in enumerate(range(0, K, instr.k)):
        a_frags = []
        for i in range(n_mt):
            if a_regs and tf32:
                a_frags.append(_tf32_a_fragment(lw, lw.regs(a_v), i, k0, K))
                continue
            if a_regs:
                a_frags.append(a_fragment_from_accumulator(lw, lw.regs(a_v), i, k0, K))
                continue
            m = b.add(a_m, _cint(i * 16 * wm))
            if a_kc:   # stored [M][K]: lane rows are m
                p = addr(a_off, sa, wrap(b.add(m, row8), M, 16), b.add(a_k, _cint(k0)))
            else:      # stored [K][M] (16-bit): lane rows are k, transposed on load
                p = addr(a_off, sa, b.add(b.add(b.mul(hi, _cint(8)), _cint(k0)), row8),
                         b.add(b.mul(warp_m, _cint(16)), b.add(b.mul(lo, _cint(8)), _cint(i * 16 * wm))))
            a_frags.append(_ldmatrix(lw, p, 4, trans=not a_kc))
        b_frags = []
        if a_regs and tf32:  # k permuted as A's registers are (`_tf32_a_fragment`): rows k0 + 2t, k0 + 2t + 1
            b_frags = [_tf32_b_pair(lw, b_off, sb, b_kc, wrap(b.add(b.add(b.mul(warp_n, _cint(tn)), _cint(j * 8)),
                                                                 b.lshr(lane, _cint(2))), N, 8), k0)
                       for j in range(n_nt)]
        elif b_bytes:
            b_frags = [_b_bytes(lw, b_off, sb, b.add(b.mul(warp_n, _cint(tn)), _cint(j * 8)), k0, N)
                       for j in range(n_nt)]
        for j in range(0, n_nt if not b_bytes and not (a_regs and tf32) else 0, 2):
            n = b.add(b_n, _cint(j * 8))
            if b_kc:   # stored [N][K]: lane rows are n
                p = addr(b_off, sb, wrap(b.add(n, row8), N, 8), b.add(b_k, _cint(k0)))
            else:      # stored [K][N] (16-bit): lane rows are k, transposed on load
                p = addr(b_off, sb, b.add(b.add(b.mul(lo, _cint(8)), _cint(k0)), row8), n)
            if j + 1 < n_nt:
                w = _ldmatrix(lw, p, 4, trans=not b_kc)
                b_frags += [w[0:2], w[2:4]]
            elif step % 2 and lone is not None:
                b_frags.append(lone)
                lone = None
            elif step + 1 < n_k:
                # a lone 8-column tile (a warp 8 columns wide, as 4 warps over BLOCK_N 32): one x4 gives its
                # fragments for this k-step and the next, as Triton loads it: half the ldmatrix count of x2s
                w = _ldmatrix(lw, _lone_b_addr(lw, b_off, sb, b_kc, warp_n, tn, j, k0, N, instr), 4,
                              trans=not b_kc)
                b_frags.append(w[0:2])
                lone = w[2:4]
            else:
                b_frags.append(_ldmatrix(lw, p, 2, trans=not b_kc))
        for i in range(n_mt):
            for j in range(n_nt):
                base = (i * n_nt + j) * nc
                out = b.asm(fty, asm, cons, a_frags[i] + b_frags[j] + acc[base:base + nc], side_effect=False)
                for q in range(nc):
                    acc[base + q] = b.extract_value(out, q)
    lw.put(res, unpack_halves(lw, acc) if nc == 2 else acc)


def _tf32_a_fragment(lw: KernelLowering, regs, i: int, k0: int, K: int):
    """m16n8k8.tf32's four A registers for m-tile i and k-step k0 from a tile held in the #mma layout (fp32): its
    16x8 block (i, k0 / 8) holds rows g, g + 8 and columns 2t, 2t + 1 in registers (g, 2t), (g, 2t + 1), (g + 8,
    2t), (g + 8, 2t + 1). The instruction wants (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4): column 2t is fed as
    k slot t and 2t + 1 as slot t + 4 (B's rows likewise: `_tf32_b_pair`), rounded to tf32 as a staged tile is."""
    b = lw.b
    base = (i * (K // 8) + k0 // 8) * 4
    cvt = ir.FunctionType(I32, [F32])
    q = [b.asm(cvt, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [regs[base + r]], side_effect=False) for r in range(4)]
    return [q[0], q[2], q[1], q[3]]


def _tf32_b_pair(lw: KernelLowering, off, stride: int, k_contiguous: bool, n, k0: int):
    """This lane's two B registers of an m16n8k8.tf32 whose k slots t, t + 4 are rows k0 + 2t, k0 + 2t + 1 (the
    permutation of `_tf32_a_fragment`), column n: from a stage stored [N][K] one 8-byte ld.shared, from [K][N]
    two 4-byte ones."""
    b = lw.b
    k = b.add(b.mul(b.and_(lw.lane, _cint(3)), _cint(2)), _cint(k0))
    if k_contiguous:
        addr = b.add(lw.smem32, b.add(off, b.mul(b.add(b.mul(n, _cint(stride)), k), _cint(4))))
        x = b.load(b.inttoptr(addr, SPTR), typ=ir.VectorType(I32, 2), align=8)
        return [b.extract_element(x, _cint(0)), b.extract_element(x, _cint(1))]
    out = []
    for r in (0, 1):
        addr = b.add(lw.smem32, b.add(off, b.mul(b.add(b.mul(b.add(k, _cint(r)), _cint(stride)), n), _cint(4))))
        out.append(b.load(b.inttoptr(addr, SPTR), typ=I32, align=4))
    return out


def _b_bytes(lw: KernelLowering, off, stride: int, n0, k0: int, N: int):
    """This lane's two B fragment registers of an m16n8k32.s8 for the 8 columns from `n0` and k-step `k0`, from a
    stage stored [K][N] (rows `stride` bytes apart): register q holds B[k0 + 16q + 4(lane % 4) + i][n0 + lane / 4]
    in byte i. Eight ld.shared.u8 packed into two words (Triton reads an N-contiguous int8 B the same way)."""
    b = lw.b
    lane = lw.lane
    n = b.add(n0, b.lshr(lane, _cint(2)))
    if N < 8:
        n = b.and_(n, _cint(N - 1))
    k = b.add(_cint(k0), b.mul(b.and_(lane, _cint(3)), _cint(4)))
    base = b.add(lw.smem32, b.add(off, b.add(b.mul(k, _cint(stride)), n)))
    out = []
    for q in range(2):
        word = None
        for i in range(4):
            ptr = b.inttoptr(b.add(base, _cint((16 * q + i) * stride)), SPTR)
            byte = b.zext(b.load(ptr, typ=ir.IntType(8)), I32)
            byte = byte if i == 0 else b.shl(byte, _cint(8 * i))
            word = byte if word is None else b.or_(word, byte)
        out.append(word)
    return out


def _lone_b_addr(lw: KernelLowering, off, stride: int, k_contiguous: bool, warp_n, tn: int, j: int, k0: int,
                 N: int, instr):
    """This lane's row address for an ldmatrix .x4 of one 8-column B tile over two k-steps: matrix q (lanes
    8q..8q+7) holds k0 + q * (k/2) .. + k/2 - 1, so matrices 0-1 are k-step k0's fragment and 2-3 the next's."""
    b = lw.b
    lane = lw.lane
    mat, row8 = b.lshr(lane, _cint(3)), b.and_(lane, _cint(7))
    half = instr.k // 2
    n = b.add(b.mul(warp_n, _cint(tn)), _cint(j * 8))
    k = b.add(b.mul(mat, _cint(half)), _cint(k0))
    if k_contiguous:  # stored [N][K]: lane rows are n
        n = b.add(n, row8)
        if N < 8:
            n = b.and_(n, _cint(N - 1))
        r, c = n, k
    else:             # stored [K][N] (16-bit): lane rows are k
        r, c = b.add(k, row8), n
    return b.add(off, b.mul(b.add(b.mul(r, _cint(stride)), c), _cint(instr.esize)))


def _dot_fma(lw: KernelLowering, op):
    b = lw.b
    a_v, b_v, c_v = op.operands
    res = op.results[0]
    M, K = a_v.type.shape
    N = b_v.type.shape[1]
    ea, eb_ = a_v.type.scalar, b_v.type.scalar
    sa, sb = mem_bytes(ea), mem_bytes(eb_)
    # stage A (MxK) and B (KxN) row-major in shared memory
    for v, e, s, base, shp in ((a_v, ea, sa, 0, (M, K)), (b_v, eb_, sb, _align16(M * K * sa), (K, N))):
        for x, ix in zip(lw.regs(v), lw.reg_indices(v.type.layout, shp)):
            p = lw.smem_ptr(op, b.mul(lw.linear_index(ix, shp), _cint(s)), base)
            b.store(x, p)
    lw.barrier()
    acc_t = res.type.scalar
    acc_ll = llty(acc_t)
    layout = res.type.layout
    idx = lw.reg_indices(layout, (M, N))
    offsets = layout.registers((M, N))
    rows = {}
    cols = {}
    for i, offs in enumerate(offsets):
        rows.setdefault(offs[0], idx[i][0])
        cols.setdefault(offs[1], idx[i][1])
    init = lw.regs(c_v)
    # a 16-bit float accumulator sums in fp32 within the dot and is rounded once at its end (as the
    # interpreter does, and close to mma's f16 accumulation), not after every one of the K products
    comp_ll = F32 if acc_t.is_floating() and acc_t.bits == 16 else acc_ll
    if comp_ll is not acc_ll:
        init = [b.fpext(v, comp_ll) for v in init]
    if K * len(offsets) <= UNROLLED_FMAS:
        # straight-line, as Triton emits it: constant shared-memory offsets, which LLVM merges into vector
        # loads along K (ld.shared.v4 of a row of A) and ptxas schedules across the whole product; a rolled
        # loop is left to LLVM's unroller, which stops unrolling when the loop around the dot holds more values
        accs = list(init)
        for kk in range(K):
            a_vals, b_vals = _fma_operands(lw, op, rows, cols, _cint(kk), K, N, M, ea, eb_, sa, sb, acc_t, comp_ll)
            accs = _fma_step(lw, offsets, a_vals, b_vals, accs, acc_t, comp_ll)
        lw.put(res, [b.fptrunc(p, acc_ll) for p in accs] if comp_ll is not acc_ll else accs)
        return
    pre = b.block
    header = lw.fn.append_basic_block("dot.header")
    body = lw.fn.append_basic_block("dot.body")
    exit_ = lw.fn.append_basic_block("dot.exit")
    b.branch(header)
    b.position_at_end(header)
    k = b.phi(I32)
    k.add_incoming(_cint(0), pre)
    phis = []
    for v in init:
        p = b.phi(comp_ll)
        p.add_incoming(v, pre)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", k, _cint(K)), body, exit_)
    b.position_at_end(body)

    a_vals, b_vals = _fma_operands(lw, op, rows, cols, k, K, N, M, ea, eb_, sa, sb, acc_t, comp_ll)
    new = _fma_step(lw, offsets, a_vals, b_vals, phis, acc_t, comp_ll)
    end = b.block
    k.add_incoming(b.add(k, _cint(1)), end)
    for p, v in zip(phis, new):
        p.add_incoming(v, end)
    b.branch(header)
    b.position_at_end(exit_)
    lw.put(res, [b.fptrunc(p, acc_ll) for p in phis] if comp_ll is not acc_ll else list(phis))



UNROLLED_FMAS = 2048  # a thread's FMAs in one dot up to which its K loop is written out


def _fma_operands(lw: KernelLowering, op, rows, cols, k, K, N, M, ea, eb_, sa, sb, acc_t, comp_ll):
    """Step k's A values (one a row this thread holds) and B values (one a column) from the staged tiles."""
    b = lw.b

    def widen(x):
        if acc_t.is_floating():
            return b.fpext(x, comp_ll) if x.type != comp_ll else x
        return b.sext(x, comp_ll) if x.type != comp_ll else x

    a_vals = {}
    for o, m in rows.items():
        p = lw.smem_ptr(op, b.mul(b.add(b.mul(m, _cint(K)), k), _cint(sa)), 0)
        a_vals[o] = widen(b.load(p, typ=memty(ea)))
    b_vals = {}
    for o, n in cols.items():
        p = lw.smem_ptr(op, b.mul(b.add(b.mul(k, _cint(N)), n), _cint(sb)), _align16(M * K * sa))
        b_vals[o] = widen(b.load(p, typ=memty(eb_)))
    return a_vals, b_vals


def _fma_step(lw: KernelLowering, offsets, a_vals, b_vals, accs, acc_t, comp_ll):
    """acc += a * b for every output element this thread holds."""
    b = lw.b
    new = []
    for i, offs in enumerate(offsets):
        x, y = a_vals[offs[0]], b_vals[offs[1]]
        if acc_t.is_floating():
            suffix = "f32" if comp_ll == F32 else "f64"
            fma = lw.intrinsic(f"llvm.fma.{suffix}", comp_ll, [comp_ll] * 3)
            new.append(b.call(fma, [x, y, accs[i]]))
        else:
            new.append(b.add(accs[i], b.mul(x, y)))
    return new
