"""`tl.dot` on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a), emitted as inline PTX (LLVM has no
intrinsic for it).

Warpgroup g (warps 4g..4g+3) computes rows 64g..64g+63 of the tile with one m64nNkK instruction per
K elements (32 bytes) of K; each thread's N/2 accumulators are exactly its registers in the #mma layout with
every warp along M. An fp16 accumulator holds the same elements two to a b32 register (N/4 registers),
packed before the instructions and unpacked after the wait. Both operands are read from swizzled shared
memory through 64-bit matrix descriptors: a pipelined stage (`!memdesc`), or a register tile staged here
into the dot's scratch (B K-major for the 8- and 32-bit types, which wgmma cannot transpose; fp32 rounded
to tf32 on the way, as the mma.sync path does). The sequence is wgmma.fence, the k-steps, commit, and a
wait that takes the accumulators as operands so LLVM cannot read them before the tensor cores have
written them.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..gpu.scratch import a_from_registers, is_wgmma, wgmma_kind, wgmma_staging
from ..gpu.smem_layout import descriptor_fields
from ..rewrite import zero_reset
from .lower_async import fence_proxy_async, store_to_stage
from .lowering_core import F16, F32, I32, I64, VOID, KernelLowering, _cint, handles


def _stage_swizzled(lw: KernelLowering, v, t, base: int, tf32: bool = False):
    """Store a register tile into scratch at `base` in the swizzled encoding `t` (runs of up to 16 bytes along the
    encoding's contiguous dimension stay whole; addresses shared where their distances are constant: an fp32
    accumulator staged as attention's probabilities held 64 addresses across the loop, one per element),
    fp32 rounded to tf32 when `tf32`."""
    b = lw.b
    regs = lw.regs(v)
    if tf32:
        cvt = ir.FunctionType(I32, [F32])
        regs = [b.asm(cvt, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], side_effect=False) for x in regs]
    store_to_stage(lw, v.type, regs, t, _cint(base))


def pack_halves(lw: KernelLowering, regs: list) -> list:
    """f16 registers two to a b32 (an fp16 accumulator's form in mma.sync and wgmma)."""
    b = lw.b
    out = []
    for i in range(0, len(regs), 2):
        vec = ir.Constant(ir.VectorType(F16, 2), None)
        vec = b.insert_element(b.insert_element(vec, regs[i], _cint(0)), regs[i + 1], _cint(1))
        out.append(b.bitcast(vec, I32))
    return out


def unpack_halves(lw: KernelLowering, words: list) -> list:
    b = lw.b
    out = []
    for w in words:
        vec = b.bitcast(w, ir.VectorType(F16, 2))
        out += [b.extract_element(vec, _cint(0)), b.extract_element(vec, _cint(1))]
    return out


class _Descriptors:
    """The i64 matrix descriptors of one operand tile. Its low word holds the start address (>> 4, 14 bits) and
    the leading-byte offset; the high word, the stride-byte offset and the swizzle mode, is a constant. Each
    k-step's (and, for A, each 64-row block's) offset >> 4 is added to the low word only: shared memory is below
    256 KB, so the address field never carries into the next one, and the descriptor is the low word paired
    with a constant. (Adding to the 64-bit value made ptxas carry into the high word on the uniform datapath
    every iteration: ncu's dispatch stalls of a 128x256 matmul were 8x Triton's.)"""

    def __init__(self, lw: KernelLowering, tile_off, t, k_major: bool, fixed: bool = False):
        b = lw.b
        self.lw, self.t, self.k_major = lw, t, k_major
        _, lbo, sbo, mode = descriptor_fields(t, k_major, 0, 0)
        smem_addr = b.add(lw.smem32, tile_off)
        if fixed:
            # A tile at a fixed place (staged once, or the dot's own scratch) has loop-invariant descriptors, and
            # LLVM hoisted each k-step's 64-bit one out of the loop, a register pair each for the whole loop
            # (attorch's fp32 flash forward: q's 16 and the probabilities' 16, 64 registers, 120 bytes spilled).
            # Through an opaque copy they are recomputed next to their wgmma, as Triton's are.
            smem_addr = b.asm(ir.FunctionType(I32, [I32]), "mov.b32 $0, $1;", "=r,r", [smem_addr],
                              side_effect=True)
        self.lo = b.or_(b.lshr(b.and_(smem_addr, _cint(0x3FFFF)), _cint(4)), _cint((lbo >> 4) << 16))
        self.hi = ir.Constant(I64, (((sbo >> 4) | (mode << 30)) << 32))
        self.per_64 = descriptor_fields(t, k_major, 0, 64)[0] - descriptor_fields(t, k_major, 0, 0)[0]
        self.blocks = {}

    def at(self, k0: int, first_row=None, key=None):
        """Reading 16 k from k0 (and, for A, the 64 rows from `first_row`, a multiple of 64; `key` names it)."""
        b = self.lw.b
        start = descriptor_fields(self.t, self.k_major, k0, 0)[0]
        lo = self.lo
        if first_row is not None:
            if key not in self.blocks:
                rows = b.mul(b.lshr(first_row, _cint(6)), _cint(self.per_64 >> 4))
                self.blocks[key] = b.add(self.lo, rows)
            lo = self.blocks[key]
        if start:
            lo = b.add(lo, _cint(start >> 4))
        return b.or_(b.zext(lo, I64), self.hi)


def a_fragment_from_accumulator(lw: KernelLowering, regs, i: int, k0: int, K: int):
    """The four b32 registers of A's m16k16 fragment (m-tile i, k from k0) out of a tile held in the #mma
    layout: accumulator n-tiles k0/8 and k0/8 + 1 of m-tile i, each pair of halves packed. mma.sync and
    wgmma with A in registers take the same per-warp fragment."""
    b = lw.b
    per_row = K // 8
    out = []
    for j in (k0 // 8, k0 // 8 + 1):
        base = (i * per_row + j) * 4
        for q in (0, 2):
            lo, hi = regs[base + q], regs[base + q + 1]
            vec = ir.Constant(ir.VectorType(lo.type, 2), None)
            vec = b.insert_element(b.insert_element(vec, lo, _cint(0)), hi, _cint(1))
            out.append(b.bitcast(vec, I32))
    # mma.sync's A order: (rows g, k 0-7), (rows g+8, k 0-7), (rows g, k 8-15), (rows g+8, k 8-15)
    return [out[0], out[1], out[2], out[3]]


def a_fragment_8bit_from_accumulator(lw: KernelLowering, regs, i: int, k0: int, K: int):
    """The four b32 registers of an 8-bit A fragment (m-tile i, k32 from k0) for wgmma, out of a tile in the #mma
    layout. The fragment wants bytes k 4t..4t+3 and 16+4t..16+4t+3 of rows g and g+8 in lane t of each quad; the
    #mma layout gives lane t the pairs k 2t, 2t+1 of each n8 tile (k 8j + 2t). So lane t needs the pairs of n-tiles
    t/2 and 2 + t/2 from lanes 2(t%2) and 2(t%2)+1 of its quad. Each lane packs its pairs of n-tiles (0, 2) and
    (1, 3) into two words; two shuffles give each lane one word from each of its two source lanes (every source
    lane is read by exactly one lane per shuffle, so it offers the word that reader needs), and two byte
    permutes (`prmt`) interleave them: per row half, 2 shuffles and 2 permutes for 2 registers."""
    b = lw.b
    per_row = K // 8
    j0 = k0 // 8
    t = b.and_(lw.lane, _cint(3))
    odd = b.icmp_unsigned("!=", b.and_(t, _cint(1)), _cint(0))
    hi = b.lshr(t, _cint(1))  # which of the two words a lane needs: n-tiles (0, 2) or (1, 3)
    s0 = b.or_(b.and_(lw.lane, _cint(28)), b.shl(b.and_(t, _cint(1)), _cint(1)))
    src_a = b.add(s0, hi)  # reads the word of pairs (t/2, 2 + t/2) from the even or odd lane ...
    src_b = b.sub(b.add(s0, _cint(1)), hi)  # ... and from the other one
    # E = the even lane's word, O = the odd lane's: reg (k 4t..) = E.lo16 | O.lo16 << 16, reg (k 16+4t..) the highs
    sel_lo = b.select(b.icmp_unsigned("!=", hi, _cint(0)), _cint(0x1054), _cint(0x5410))
    sel_hi = b.select(b.icmp_unsigned("!=", hi, _cint(0)), _cint(0x3276), _cint(0x7632))
    shfl = lw.intrinsic("llvm.nvvm.shfl.sync.idx.i32", I32, [I32, I32, I32, I32])
    prmt = ir.FunctionType(I32, [I32, I32, I32])

    def pair(j, h):  # the two bytes (row g + 8h, k 8(j0+j) + 2t, +1) as 16 bits
        base = (i * per_row + j0 + j) * 4 + 2 * h
        vec = ir.Constant(ir.VectorType(regs[base].type, 2), None)
        vec = b.insert_element(b.insert_element(vec, regs[base], _cint(0)), regs[base + 1], _cint(1))
        return b.zext(b.bitcast(vec, ir.IntType(16)), I32)

    out = {}
    for h in (0, 1):
        w02 = b.or_(pair(0, h), b.shl(pair(2, h), _cint(16)))
        w13 = b.or_(pair(1, h), b.shl(pair(3, h), _cint(16)))
        got_a = b.call(shfl, [_cint(-1), b.select(odd, w13, w02), src_a, _cint(31)])
        got_b = b.call(shfl, [_cint(-1), b.select(odd, w02, w13), src_b, _cint(31)])
        out[h, 0] = b.asm(prmt, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [got_a, got_b, sel_lo], False)
        out[h, 1] = b.asm(prmt, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [got_a, got_b, sel_hi], False)
    # the 8-bit A order: (rows g, k 0-15), (rows g+8, k 0-15), (rows g, k 16-31), (rows g+8, k 16-31)
    return [out[0, 0], out[1, 0], out[0, 1], out[1, 1]]


def dot_wgmma(lw: KernelLowering, op):
    b = lw.b
    a_v, b_v, c_v = op.operands
    M, K = a_v.type.shape
    N = b_v.type.shape[1]
    kind = wgmma_kind(op)
    nw, wn = op.attrs["mma"]
    reps = M // (16 * nw)  # m64 instructions per warpgroup and k-step (the layout interleaves warps by 16 rows)
    N = N // wn  # with warpgroups along N, each takes N / wn consecutive columns (one m64n(N/wn) each)
    a_regs = a_from_registers(op)
    sa, sb = wgmma_staging(op)
    base = op.attrs.get("smem_offset", 0)
    tf32 = kind.ptx == "tf32"
    if sa is not None:
        _stage_swizzled(lw, a_v, sa, base, tf32)
    if sb is not None:
        _stage_swizzled(lw, b_v, sb, base + (sa.tile_bytes if sa is not None else 0), tf32)
    if sa is not None or sb is not None:
        fence_proxy_async(lw)  # generic-proxy stores, read next by the async proxy
        lw.barrier()
    a_t = sa or a_v.type
    b_t = sb or b_v.type
    a_off = _cint(base) if sa is not None else (None if a_regs else lw.get(a_v))
    b_off = _cint(base + (sa.tile_bytes if sa is not None else 0)) if sb is not None else lw.get(b_v)
    a_kmajor = a_regs or a_t.order[0] == 1   # A [M][K], K contiguous
    b_kmajor = b_t.order[0] == 0   # B stored [N][K], K contiguous
    assert not kind.k_major_only or (a_kmajor and b_kmajor), "wgmma reads 8/32-bit operands K-major only"
    wg = b.lshr(lw.warp, _cint(2))
    if wn > 1:  # warp = (index along M) + nw * (index along N): warpgroup (wg % (nw/4)) along M, (warp / nw) along N
        wg_n = b.lshr(lw.warp, _cint((nw - 1).bit_length()))
        wg = b.and_(wg, _cint(nw // 4 - 1))
        col0 = descriptor_fields(b_t, b_kmajor, 0, N)[0] - descriptor_fields(b_t, b_kmajor, 0, 0)[0]
        b_off = b.add(b_off, b.mul(wg_n, _cint(col0)))
    half_acc = kind.acc == "f16"
    acc_t, con = {"f32": (F32, "f"), "f16": (I32, "r"), "s32": (I32, "r")}[kind.acc]
    n_acc = N // 4 if half_acc else N // 2  # b32 accumulator registers per thread and instruction
    chunk = imprecise_chunk(op, kind, K)
    reset = zero_reset(c_v)
    scale_d = None
    if reset is not None and not chunk:
        # `select(c, 0, acc)` (a fused loop's tile start): acc's registers, scale-d = !c on the first k-step, so the
        # reset costs no instruction (the select's own lowering is dead)
        c_v = reset[1].operands[2]
        scale_d = b.select(lw.get(reset[0]), _cint(0), _cint(1))
    acc = list(lw.regs(c_v))
    assert len(acc) == reps * N // 2, (len(acc), reps, N)
    zero_acc = _is_zero(c_v)
    if zero_acc:  # the first k-step ignores the accumulator (scale-d = 0): no registers to zero first
        acc = [ir.Constant(acc_t, ir.Undefined)] * (reps * n_acc)
    elif half_acc:
        acc = pack_halves(lw, acc)
    outs = ", ".join(f"${i}" for i in range(n_acc))
    shape = kind.shape(N)
    if kind.k_major_only:  # no transpose operands: both sides are K-major
        tail_a, tail_b = kind.scale_args, kind.scale_args
    else:
        tail_a = f", 1, 1, {0 if b_kmajor else 1}"
        tail_b = f", 1, 1, {0 if a_kmajor else 1}, {0 if b_kmajor else 1}"
    if a_regs:  # A's fragment in four b32 registers per thread, as mma.sync's m16k16 one for this warp's rows
        a_ops = "{" + ", ".join(f"${n_acc + i}" for i in range(4)) + "}"
        asm = (f"{{ .reg .pred p; setp.ne.b32 p, ${n_acc + 5}, 0; "
               f"{shape} {{{outs}}}, {a_ops}, ${n_acc + 4}, p{tail_a}; }}")
        ins = [I32] * 4 + [I64, I32]
        cons = ",".join([f"={con}"] * n_acc + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(n_acc)])
    else:
        asm = (f"{{ .reg .pred p; setp.ne.b32 p, ${n_acc + 2}, 0; "
               f"{shape} {{{outs}}}, ${n_acc}, ${n_acc + 1}, p{tail_b}; }}")
        ins = [I64, I64, I32]
        cons = ",".join([f"={con}"] * n_acc + ["l", "l", "r"] + [str(i) for i in range(n_acc)])
    fty = ir.FunctionType(ir.LiteralStructType([acc_t] * n_acc), ins + [acc_t] * n_acc)
    # A's fragments are packed before the fence: ptxas serializes wgmmas (C7514) when other instructions
    # run between them while a group is being issued
    fragment = a_fragment_8bit_from_accumulator if kind.k == 32 else a_fragment_from_accumulator
    frags = {(k0, r): fragment(lw, lw.regs(a_v), r, k0, K)
             for k0 in range(0, K, kind.k) for r in range(reps)} if a_regs else {}
    b_desc = _Descriptors(lw, b_off, b_t, b_kmajor, sb is not None or _fixed_tile(b_v))
    a_desc = None if a_regs else _Descriptors(lw, a_off, a_t, a_kmajor, sa is not None or _fixed_tile(a_v))
    for c0 in range(0, K, chunk or K):
        # with a chunk (fp8 max_num_imprecise_acc), each chunk's products go into fresh registers (scale-d = 0),
        # which are waited for and added to the fp32 accumulator on the CUDA cores
        into = [ir.Constant(acc_t, ir.Undefined)] * len(acc) if chunk else acc
        b.asm(ir.FunctionType(VOID, []), "wgmma.fence.sync.aligned;", "~{memory}", [], side_effect=True)
        for k0 in range(c0, min(K, c0 + (chunk or K)), kind.k):
            db = b_desc.at(k0)
            for r in range(reps):
                if a_regs:
                    a_in = frags[k0, r]
                else:  # instruction r of warpgroup g: rows 16*nw*r + 64*g .. +63
                    rows = b.add(b.mul(wg, _cint(64)), _cint(16 * nw * r))
                    a_in = [a_desc.at(k0, rows, key=r)]
                part = into[r * n_acc:(r + 1) * n_acc]
                fresh = (k0 == c0) if chunk else (zero_acc and k0 == 0)
                scale = scale_d if scale_d is not None and k0 == c0 and not fresh else _cint(0 if fresh else 1)
                out = b.asm(fty, asm, cons, a_in + [db, scale] + part, side_effect=True)
                into[r * n_acc:(r + 1) * n_acc] = [b.extract_value(out, i) for i in range(n_acc)]
        b.asm(ir.FunctionType(VOID, []), "wgmma.commit_group.sync.aligned;", "~{memory}", [], side_effect=True)
        if not chunk:
            acc = into
            continue
        into = wgmma_wait(lw, into, 0)
        acc = into if (zero_acc and c0 == 0) else [b.fadd(x, y, flags=("contract",)) for x, y in zip(acc, into)]
    if chunk:
        lw.put(op.results[0], acc)
    elif op.attrs.get("wgmma_async"):
        # the group stays in flight: the ttg.dot_wait that the pipeliner put after this dot ties the registers
        assert not half_acc, "an fp16 accumulator is unpacked after its wait: the pipeliner waits at once"
        lw.put(op.results[0], acc)
    else:
        acc = wgmma_wait(lw, acc, 0)
        lw.put(op.results[0], unpack_halves(lw, acc) if half_acc else acc)


def imprecise_chunk(op, kind, K: int) -> int:
    """K elements per promotion of an fp8 dot with `max_num_imprecise_acc` (Triton's semantics on sm_90: the
    tensor cores accumulate fp8 products in reduced precision, so after that many the partial sum is added to
    the fp32 accumulator; 0 promotes after every instruction), or 0 for none (the default)."""
    limit = op.attrs.get("max_num_imprecise_acc")
    if limit is None or kind.ptx not in ("e4m3", "e5m2") or kind.acc != "f32" or limit > K:
        return 0
    return max(kind.k, limit // kind.k * kind.k)


def _fixed_tile(v) -> bool:
    """Whether operand `v` is a view of a one-stage buffer (a tile stored once): its address never changes."""
    d = v.defining_op
    if d is None or d.name != "ttg.memdesc_index":
        return False
    alloc = d.operands[0].defining_op
    return alloc is not None and alloc.name == "ttg.local_alloc" and int(alloc.attrs.get("stages", 0)) == 1


def _is_zero(v) -> bool:
    d = v.defining_op
    return d is not None and d.name == "arith.constant" and d.attrs.get("value") in (0, 0.0)


def wgmma_wait(lw: KernelLowering, acc: list, pending, tie_only: bool = False) -> list:
    """wgmma.wait_group taking the accumulators as tied operands: their values after it are the ones the
    tensor cores wrote, and LLVM cannot move a read of them above the wait. `tie_only`: a wait_group 0 was
    just issued (by the dot before), so only the tie is emitted (an empty asm, ordered after that wait)."""
    b = lw.b
    n = len(acc)
    t = acc[0].type
    con = "f" if t == F32 else "r"
    ty = ir.FunctionType(ir.LiteralStructType([t] * n), [t] * n)
    text = "" if tie_only else f"wgmma.wait_group.sync.aligned {pending};"
    out = b.asm(ty, text, ",".join([f"={con}"] * n + [str(i) for i in range(n)]), acc, side_effect=True)
    return [b.extract_value(out, i) for i in range(n)]


def _after_full_wait(op) -> bool:
    """Whether `op` (a dot_wait for every group) comes right after a wgmma that waited for every group, or
    after another such dot_wait: then the groups are retired already and only the tie is needed (a second
    wait_group 0 would be a second WARPGROUP.DEPBAR in the loop). Attention's first dot retires the last
    accumulation of the iteration before; attention backward's dP^T retires dV."""
    if int(op.attrs.get("pending", 0)) != 0:
        return False
    ops = op.block.ops
    i = ops.index(op)
    prev = ops[i - 1] if i else None
    if prev is None:
        return False
    if prev.name == "tt.dot":
        return is_wgmma(prev) and not prev.attrs.get("wgmma_async")
    return prev.name == "ttg.dot_wait" and _after_full_wait(prev)


def pin_before_wait(lw: KernelLowering, values) -> None:
    """Keep a wgmma wait after the code that computes `values`. ptxas hoists `wgmma.wait_group` (and bar.sync,
    mbarrier arrives) above any register-only math to the first latency bubble, so a wait placed after the softmax
    would retire the p·v wgmma before it and nothing would overlap; a shared-memory store it does keep before the
    wait. So each register of `values` is stored under a predicate that never holds (the dynamic shared memory
    size above 2 GiB) but that ptxas cannot fold: the stores never run (a uniform branch around them) and their
    data dependence keeps the wait after the values."""
    regs = [lw.b.bitcast(r, I32) if r.type == F32 else r for v in values for r in lw.regs(v)]
    regs = [r for r in regs if r.type == I32]
    if not regs:
        return
    stores = " ".join(f"@q st.shared.b32 [${i}], ${i};" for i in range(len(regs)))
    lw.b.asm(ir.FunctionType(VOID, [I32] * len(regs)),
             "{ .reg .pred q; .reg .b32 n; mov.u32 n, %dynamic_smem_size; setp.gt.u32 q, n, 2147483647; "
             f"{stores} }}", ",".join(["r"] * len(regs)) + ",~{memory}", regs, side_effect=True)


def _after_as_deep_wait(op) -> bool:
    """Whether `op` (a dot_wait leaving groups in flight, pending > 0) comes right after another dot_wait that
    left no more groups pending: no wgmma was issued between, so `op`'s wait_group would wait for nothing and only
    its tie is needed (pipeline_dot_operands' sibling accumulations: one wait_group n, then a tie per accumulator).
    Waits for every group (pending 0) are left to `_after_full_wait`: a wait_group 0 right after another one that
    followed no synchronous wgmma stays (attention's warpgroup turns at hd128 have one: dropping it changes an
    existing kernel's SASS, which is not this rule's to do)."""
    pending = int(op.attrs.get("pending", 0))
    ops = op.block.ops
    i = ops.index(op)
    prev = ops[i - 1] if i else None
    return (pending > 0 and prev is not None and prev.name == "ttg.dot_wait"
            and int(prev.attrs.get("pending", 0)) <= pending)


@handles("ttg.dot_wait")
def _dot_wait(lw: KernelLowering, op):
    pin_before_wait(lw, op.operands[1:])
    lw.put(op.result, wgmma_wait(lw, list(lw.regs(op.operands[0])), int(op.attrs.get("pending", 0)),
                                 tie_only=(_after_full_wait(op) or _after_as_deep_wait(op)) and len(op.operands) == 1))
