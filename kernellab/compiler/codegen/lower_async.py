"""Multi-stage shared-memory buffers and the cp.async copies that fill them (sm_80+), or the st.shared stores of a
register tile (`ttg.local_store`: a tile loaded once, outside any pipelined loop).

A `!memdesc` value lowers to one i32: its absolute byte offset in the kernel's shared memory.
`ttg.async_copy` issues one `cp.async` per run of `vec` contiguous elements a thread holds in the
pointer tile's layout (16-byte runs use the L2-only `.cg` variant), writing them where the buffer's
order and row padding put them; a masked-off or predicated-off run copies 0 source bytes, which
fills the destination with zeros without touching global memory.
"""
from __future__ import annotations

import os

import llvmlite.ir as ir

from ..gpu.layouts import Blocked
from ..gpu.scratch import contiguous_run
from ..gpu.smem_layout import element_byte, linear_delta
from .lowering_core import I8, I32, I64, SPTR, VOID, KernelLowering, _cint, handles, llty

# cp.async fills a stage through the generic proxy and wgmma reads it through the async proxy. NVIDIA's own
# cp.async + GMMA mainloops (CUTLASS's MainloopSm90CpAsyncGmma*: cp.async.mbarrier.arrive, then the consumer's
# mbarrier wait and wgmma) and Triton 3.6 (its proxy fences cover register-to-shared stores only) put no
# fence.proxy.async between them. The fence is a MEMBAR.ALL.CTA per iteration in SASS (a 128x128x64 matmul on
# the H200: 4-7% of its time), so codegen emits none there either. Register-to-shared stores read by wgmma keep
# theirs (lower_wgmma); set this to True to fence after every cp.async wait as well.
CP_ASYNC_PROXY_FENCE = False


def stmatrix_on() -> bool:
    """16-bit accumulator tiles go to shared memory by stmatrix on sm_90 (store_to_stage, layout conversions);
    KERNELLAB_STMATRIX=0 gives one st.shared per register pair instead (kept to measure the two)."""
    return os.environ.get("KERNELLAB_STMATRIX", "1") != "0"


def tile_byte_offset(lw: KernelLowering, t, r, c):
    """Byte offset of element (r, c) inside one stage of `t` (LLVM i32), padded or swizzled as the
    encoding says (see gpu/smem_layout.py for the formula)."""
    b = lw.b
    rows, cols = t.shape[-2:]
    e = t.scalar.bits // 8
    f, s, slow = (r, c, cols) if t.order[0] == 0 else (c, r, rows)
    if not t.swizzle:
        return b.mul(b.add(b.mul(s, _cint((rows if t.order[0] == 0 else cols) + t.pad)), f), _cint(e))
    z = t.swizzle
    w = z // e
    lin = b.add(b.add(b.mul(b.udiv(f, _cint(w)), _cint(slow * z)), b.mul(s, _cint(z))),
                b.mul(b.urem(f, _cint(w)), _cint(e)))
    return b.xor(lin, b.shl(b.and_(b.lshr(lin, _cint(7)), _cint(z // 16 - 1)), _cint(4)))


class _ThreadBytes:
    """The byte offsets of a register's element in a swizzled stage, for every thread of the layout (thread parts
    computed as `KernelLowering.thread_parts` makes them). Two registers whose offsets differ by the same constant
    in every thread share an address: in a swizzle period the XOR mixes the thread's bits and the register's,
    which `linear_delta` (a distance for any element) must refuse, but where they never meet the XOR is an add.
    A K-major tf32 stage filled from an N-contiguous tile (Liger's neighborhood attention) had 16 addresses per
    thread held across the loop, now 4 (Triton, with its linear layouts, finds the same)."""

    def __init__(self, t, layout, shape):
        import numpy as np

        infos = layout.dims_info(shape)
        self.t, self.shape, self._bytes = t, shape, {}
        self.parts = sorted({tuple(((lane // i.lane_div) % i.lanes) * i.lane_stride +
                                   ((warp // i.warp_div) % i.warps) * i.warp_stride for i in infos)
                             for warp in range(32) for lane in range(32)})  # any launch's warps
        # as arrays: bytes() evaluates element_byte's formula on all threads at once (a pipelined matmul asks
        # for thousands of offsets per copy; element by element it was a tenth of the kernel's LLVM IR time)
        self._rows, self._cols = (np.array(v, dtype=np.int64) for v in zip(*self.parts))

    def bytes(self, off):
        if off not in self._bytes:
            rows, cols = self.shape
            self._bytes[off] = element_byte(self.t, (self._rows + off[0]) % rows, (self._cols + off[1]) % cols)
        return self._bytes[off]

    def delta(self, off, base_off):
        a, b = self.bytes(tuple(off)), self.bytes(tuple(base_off))
        d = a - b
        return int(d[0]) if (d == d[0]).all() else None


def register_tile_addresses(lw: KernelLowering, t, layout, shape, groups, base):
    """Per register index in `groups`: the i32 shared-memory address of that register's element in stage
    `base` (a byte offset) of `t`. A register whose element lies a constant distance (see `linear_delta`)
    from an earlier one's reuses that address plus a constant, which ptxas folds into the instruction's
    immediate. The constant is added to the full address, not to the offset: on an offset whose bits LLVM
    knows it would become an `or`, which ptxas does not fold."""
    b = lw.b
    idx = lw.reg_indices(layout, shape)
    offs = layout.registers(shape)
    replicated = [i.replicated for i in layout.dims_info(shape)]
    per_thread = _ThreadBytes(t, layout, shape) if getattr(t, "swizzle", 0) else None
    reps, out = [], {}
    for g in groups:
        for rg, addr in reps:
            d = [offs[g][k] - offs[rg][k] for k in range(2)]
            if any(d[k] and replicated[k] for k in range(2)):
                continue
            delta = linear_delta(t, *d)
            if delta is None and per_thread is not None:
                delta = per_thread.delta(offs[g], offs[rg])
            if delta is not None:
                out[g] = b.add(addr, _cint(delta))
                break
        else:
            r, c = idx[g]
            offset = b.add(base, tile_byte_offset(lw, t, r, c))
            out[g] = b.ptrtoint(b.gep(lw.smem, [offset], source_etype=I8), I32)
            reps.append((g, out[g]))
    return out


def store_tile(lw: KernelLowering, v, regs, offset_of, esize: int, vectorize: bool = True):
    """Store a register tile into shared memory, element (r, c) at byte `offset_of(r, c)` (LLVM i32s), with
    one vector store per run of up to 16 bytes of consecutive registers along a row where the layout holds
    them (and `vectorize`, i.e. the destination keeps such runs contiguous)."""
    idx = lw.reg_indices(v.type.layout, v.type.shape)
    store_register_runs(lw, v, regs, esize, vectorize,
                        lambda i: lw.b.gep(lw.smem, [offset_of(idx[i][0], idx[i][1])], source_etype=I8))


def store_register_runs(lw: KernelLowering, v, regs, esize: int, vectorize: bool, pointer_of):
    """Store register i of `v`'s tile at `pointer_of(i)`, runs of up to 16 bytes of consecutive registers along a
    row (where the layout holds them and `vectorize`) as one vector store at the run's first pointer."""
    b = lw.b
    layout, shape = v.type.layout, v.type.shape
    offsets = layout.registers(shape)
    run = 1
    if vectorize and isinstance(layout, Blocked) and layout.order[0] == 1:
        run = min(layout.spt[1], 16 // esize, shape[1])
    i = 0
    while i < len(regs):
        n = run if (i + run <= len(regs) and offsets[i][1] % run == 0 and
                    all(offsets[i + q] == (offsets[i][0], offsets[i][1] + q) for q in range(run))) else 1
        ptr = pointer_of(i)
        if n == 1:
            b.store(regs[i], ptr)
        else:
            vec = ir.Constant(ir.VectorType(regs[i].type, n), None)
            for q in range(n):
                vec = b.insert_element(vec, regs[i + q], _cint(q))
            b.store(vec, ptr, align=esize * n)
        i += n


@handles("ttg.local_alloc")
def _local_alloc(lw: KernelLowering, op):
    lw.put(op.result, _cint(op.attrs.get("smem_offset", 0)))


@handles("ttg.memdesc_index")
def _memdesc_index(lw: KernelLowering, op):
    buf, slot = op.operands
    stride = buf.type.tile_bytes
    lw.put(op.result, lw.b.add(lw.get(buf), lw.b.mul(lw.get(slot), _cint(stride))))


def _run_starts(t, run: int) -> list:
    """Per register of pointer tile `t`: the register holding the first element of its run of `run` consecutive
    elements along the layout's fast dim (contiguous in memory: the load's proven `vec`), or itself. A copy moving
    one element at a time (into a K-major tf32 stage) then addresses a run from one pointer plus immediates."""
    offs = t.layout.registers(t.shape)
    out = list(range(len(offs)))
    order = getattr(t.layout, "order", None)
    if run <= 1 or order is None or len(offs) % run:
        return out
    fast = order[0]
    for h in range(0, len(offs), run):
        if offs[h][fast] % run == 0 and all(
                offs[h + q][fast] == offs[h][fast] + q and
                all(offs[h + q][d] == offs[h][d] for d in range(len(t.shape)) if d != fast) for q in range(run)):
            out[h:h + run] = [h] * run
    return out


@handles("ttg.async_copy")
def _async_copy(lw: KernelLowering, op):
    b = lw.b
    ptr_v, view_v, pred_v = op.operands[:3]
    mask_v = op.operands[3] if len(op.operands) > 3 else None
    t = ptr_v.type
    view = view_v.type
    esize = view.scalar.bits // 8
    vec = op.attrs.get("vec", 1)
    nbytes = vec * esize
    ptrs = lw.regs(ptr_v)
    masks = lw.regs(mask_v) if mask_v is not None else None
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
    addresses = register_tile_addresses(lw, view, t.layout, t.shape, range(0, len(ptrs), vec), base)
    # the stage predicate (uniform) picks the byte count once; each run's mask then picks it or 0, so no
    # predicate stays live per copy (ptxas has 7 and re-made the uniform one before every select)
    stage_bytes = b.select(pred, _cint(nbytes), _cint(0))
    starts = _run_starts(t, op.attrs.get("run", 1) if vec == 1 else 1)
    for g in range(0, len(ptrs), vec):
        dst = addresses[g]
        src_bytes = stage_bytes if masks is None else b.select(masks[g], stage_bytes, _cint(0))
        h = starts[g]
        src = b.ptrtoint(ptrs[g], I64) if h == g else b.add(b.ptrtoint(ptrs[h], I64), ir.Constant(I64, (g - h) * esize))
        args = [dst, src, src_bytes]
        if valid is not None:
            args.append(b.zext(valid[g], I32))
        b.asm(fty, asm, cons, args, side_effect=True)


@handles("ttg.local_load")
def _local_load(lw: KernelLowering, op):
    """ld.shared of each register's element from a dense stage (no padding, no swizzle: a row vector's), each an
    immediate away from one address per thread where the layout allows (`linear_parts`)."""
    b = lw.b
    view_v, res = op.operands[0], op.results[0]
    t, view = res.type, view_v.type
    if len(view.shape) == 2 and len(t.shape) == 2 and tuple(view.shape) == tuple(t.shape):
        return _local_load_tile(lw, op)
    n = 1
    for s in t.shape:
        n *= s
    m = 1
    for s in view.shape:
        m *= s
    assert view.pad == 0 and not view.swizzle and n == m, f"ttg.local_load from {view}"
    e = t.scalar.bits // 8
    ty = llty(t.scalar)
    base = lw.get(view_v)
    lin = lw.linear_parts(t.layout, t.shape)
    if lin is not None:
        thread, consts = lin
        start = b.add(base, b.mul(thread, _cint(e)))
        addrs = [b.add(start, _cint(c * e)) for c in consts]
    else:
        addrs = [b.add(base, b.mul(lw.linear_index(ix, t.shape), _cint(e))) for ix in lw.reg_indices(t.layout, t.shape)]
    lw.put(res, [b.load(b.gep(lw.smem, [a], source_etype=I8), typ=ty) for a in addrs])


def _local_load_tile(lw: KernelLowering, op):
    """ld.shared of a 2-D register tile from a stage in any order, padding or swizzle (a tile a dot reads after
    math, read back where it was loaded): runs of up to 16 bytes a thread holds along the stage's contiguous dim
    as one vector load, each at its first element's address (`register_tile_addresses`: one per-thread base plus
    immediates where the layout allows)."""
    b = lw.b
    view_v, res = op.operands[0], op.results[0]
    t, view = res.type, view_v.type
    e = t.scalar.bits // 8
    ty = llty(t.scalar)
    offs = t.layout.registers(t.shape)
    fast = view.order[0]
    run = 1
    if isinstance(t.layout, Blocked) and t.layout.order[0] == fast and not view.swizzle:
        run = min(t.layout.spt[fast], 16 // e, t.shape[fast])
        run = 1 << (max(1, run).bit_length() - 1)
    groups, i = [], 0
    while i < len(offs):
        n = run if (i + run <= len(offs) and offs[i][fast] % run == 0 and all(
            offs[i + q][fast] == offs[i][fast] + q and offs[i + q][1 - fast] == offs[i][1 - fast]
            for q in range(run))) else 1
        groups.append((i, n))
        i += n
    addrs = register_tile_addresses(lw, view, t.layout, t.shape, [g for g, _ in groups], lw.get(view_v))
    out = []
    for g, n in groups:
        x = b.load(b.inttoptr(addrs[g], SPTR), typ=ty if n == 1 else ir.VectorType(ty, n), align=e * n)
        out += [x] if n == 1 else [b.extract_element(x, _cint(q)) for q in range(n)]
    lw.put(res, out)


class StmatrixPlan:
    """How `stmatrix.sync.aligned.m8n8.x4` stores a 16-bit register tile: the instruction writes four 8x8
    matrices; lane 8q + r gives the address of row r of matrix q, and register q of lane 4r + w holds that row's
    elements 2w, 2w + 1 (a packed pair). A tile qualifies when each pair of consecutive registers (k, k + 1) is
    such a fragment in every warp (rows R + lane / 4, columns C + 2 (lane % 4), C a multiple of 8: an mma/wgmma
    accumulator, or the Bits layout of its split halves), and each run of four pairs lies at offsets
    o, o + D1, o + D2, o + D1 + D2 with the same D1, D2 for every run: then a lane's row address is one
    per-thread base plus the run's offset `o`. `runs` lists each instruction's first register."""

    def __init__(self, layout, shape):
        self.layout, self.shape = layout, tuple(shape)
        self.infos = layout.dims_info(shape)
        self.offs = layout.registers(shape)
        o = self.offs
        self.d1 = (o[2][0] - o[0][0], o[2][1] - o[0][1])
        self.d2 = (o[4][0] - o[0][0], o[4][1] - o[0][1])
        self.runs = list(range(0, len(o), 8))

    def warp_part(self, warp: int) -> tuple:
        return tuple(((warp // i.warp_div) % i.warps) * i.warp_stride for i in self.infos)

    def thread_part(self, warp: int, lane: int) -> tuple:
        return tuple(((lane // i.lane_div) % i.lanes) * i.lane_stride + ((warp // i.warp_div) % i.warps) *
                     i.warp_stride for i in self.infos)

    def lane_row(self, warp: int, lane: int) -> tuple:
        """(row, column) of the 8-element row `lane` addresses in the first run; run k adds offs[k] - offs[0]."""
        q, wp = lane // 8, self.warp_part(warp)
        return (wp[0] + self.offs[0][0] + lane % 8 + (q & 1) * self.d1[0] + (q >> 1) * self.d2[0],
                wp[1] + self.offs[0][1] + (q & 1) * self.d1[1] + (q >> 1) * self.d2[1])

    def valid(self, warps: int) -> bool:
        o = self.offs
        if len(o) % 8 or any(i.replicated for i in self.infos):
            return False
        for k in range(0, len(o), 2):
            if o[k + 1] != (o[k][0], o[k][1] + 1):
                return False
        for k in self.runs:
            for q in range(4):
                want = (o[k][0] + (q & 1) * self.d1[0] + (q >> 1) * self.d2[0],
                        o[k][1] + (q & 1) * self.d1[1] + (q >> 1) * self.d2[1])
                if o[k + 2 * q] != want:
                    return False
        for w in range(warps):
            for k in range(0, len(o), 2):
                r0, c0 = (a + b for a, b in zip(self.thread_part(w, 0), o[k]))
                if c0 % 8:
                    return False
                for lane in range(32):
                    got = tuple(a + b for a, b in zip(self.thread_part(w, lane), o[k]))
                    if got != (r0 + lane // 4, c0 + 2 * (lane % 4)):
                        return False
        return True


def stmatrix_plan(lw: KernelLowering, t, view):
    """A StmatrixPlan when stmatrix (sm_90) can store a tile of type `t` into `view`, else None: a 16-bit tile
    whose layout holds stmatrix fragments (no element in two threads), into a stage contiguous along its last dim
    whose 8-element rows are 16 aligned bytes (any swizzle keeps a 16-byte chunk whole; a padded pitch must be a
    multiple of 16 bytes)."""
    from ..gpu.layouts import Bits, Mma

    layout = t.layout
    if lw.arch < 90 or not isinstance(layout, (Mma, Bits)) or len(t.shape) != 2 or t.scalar.bits != 16:
        return None
    if view.scalar.bits != 16 or view.order[0] != len(view.shape) - 1 or len(view.shape) != 2:
        return None
    if not view.swizzle and ((view.shape[-1] + view.pad) * 2) % 16:
        return None
    warps = lw.opts.num_warps
    if layout.num_warps != warps:
        return None
    key = ("stmatrix", str(layout), tuple(t.shape), warps)
    if key not in _PLANS:
        try:
            plan = StmatrixPlan(layout, t.shape)
            _PLANS[key] = plan if plan.valid(warps) else None
        except (AssertionError, IndexError):
            _PLANS[key] = None
    return _PLANS[key]


_PLANS: dict = {}


def store_by_stmatrix(lw: KernelLowering, t, regs, view, base, plan: StmatrixPlan) -> None:
    """A 16-bit tile into its stage with `stmatrix.sync.aligned.m8n8.x4` (sm_90), as Triton's epilogue does: each
    instruction stores four of a thread's register pairs (see StmatrixPlan), a quarter of the st.shared.b32 of
    per-pair stores. Runs a constant distance from an earlier one (in every thread) share its address register."""
    b = lw.b
    i0, i1 = plan.infos
    q = b.udiv(lw.lane, _cint(8))
    qlo, qhi = b.and_(q, _cint(1)), b.lshr(q, _cint(1))

    def warp_part(info):
        c = b.and_(b.udiv(lw.warp, _cint(info.warp_div)), _cint(info.warps - 1))
        return b.mul(c, _cint(info.warp_stride))

    row0 = b.add(b.add(warp_part(i0), b.urem(lw.lane, _cint(8))),
                 b.add(b.mul(qlo, _cint(plan.d1[0])), b.mul(qhi, _cint(plan.d2[0]))))
    col0 = b.add(warp_part(i1), b.add(b.mul(qlo, _cint(plan.d1[1])), b.mul(qhi, _cint(plan.d2[1]))))
    lanes = sorted({plan.lane_row(w, ln) for w in range(lw.opts.num_warps) for ln in range(32)})

    def offsets(off):  # (every row a run addresses is an element of the tile: no wrapping)
        return [element_byte(view, r + off[0], c + off[1]) for r, c in lanes]

    pair = ir.VectorType(regs[0].type, 2)

    def packed(k):
        v = b.insert_element(b.insert_element(ir.Constant(pair, None), regs[k], _cint(0)), regs[k + 1], _cint(1))
        return b.bitcast(v, I32)

    fn = ir.FunctionType(VOID, [I32] * 5)
    reps = []  # (byte offsets of the run's rows in every thread, address register)
    for k in plan.runs:
        off = (plan.offs[k][0] - plan.offs[0][0], plan.offs[k][1] - plan.offs[0][1])
        mine = offsets(off)
        addr, imm = None, 0
        for theirs, a in reps:
            d = mine[0] - theirs[0]
            if all(x - y == d for x, y in zip(mine, theirs)):
                addr, imm = a, d  # the distance goes in the instruction's immediate, not in a register
                break
        if addr is None:
            r = b.add(row0, _cint(plan.offs[0][0] + off[0]))
            c = b.add(col0, _cint(plan.offs[0][1] + off[1]))
            addr = b.ptrtoint(b.gep(lw.smem, [b.add(base, tile_byte_offset(lw, view, r, c))], source_etype=I8), I32)
            reps.append((mine, addr))
        at = f"$0+{imm}" if imm > 0 else f"$0{imm}" if imm else "$0"
        b.asm(fn, f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{at}], {{$1, $2, $3, $4}};", "r,r,r,r,r,~{memory}",
              [addr] + [packed(k + 2 * j) for j in range(4)], side_effect=True)


def store_to_stage(lw: KernelLowering, t, regs, view, base):
    """Store the registers `regs` of a tile of type `t` into one stage of encoding `view` that starts at byte
    `base` (an LLVM i32): one st.shared per run of up to 16 bytes the thread holds along the stage's contiguous
    dimension (a 16-byte run stays whole under any swizzle; found from the layout's own register positions, so
    an mma accumulator's pairs are runs too), addressed as one base plus immediates where
    `register_tile_addresses` finds constant distances. A 16-bit accumulator on sm_90 goes by stmatrix."""
    b = lw.b
    plan = stmatrix_plan(lw, t, view) if stmatrix_on() else None
    if plan is not None:
        store_by_stmatrix(lw, t, regs, view, base, plan)
        return
    esize = view.scalar.bits // 8
    layout = t.layout
    offs = layout.registers(t.shape)
    fast = view.order[0]
    run = 1
    if isinstance(layout, Blocked) and layout.order[0] == fast:
        run = min(layout.spt[fast], 16 // esize, t.shape[fast])
    elif fast == len(t.shape) - 1:  # an MMA accumulator or a bit layout: its pairs of adjacent columns, where
        run = contiguous_run(layout, t.shape, esize, t.shape[-1])  # every thread's first one is aligned too
    step = [0, 0]
    step[fast] = 1
    groups, i = [], 0
    while i < len(regs):
        n = run
        while n > 1 and not (i + n <= len(regs) and offs[i][fast] % n == 0 and
                             all(offs[i + q] == tuple(o + q * s for o, s in zip(offs[i], step)) for q in range(n))):
            n //= 2
        groups.append((i, n))
        i += n
    addresses = register_tile_addresses(lw, view, layout, t.shape, [g for g, _ in groups], base)
    for g, n in groups:
        ptr = b.inttoptr(addresses[g], SPTR)
        if n == 1:
            val = regs[g]
        else:
            val = ir.Constant(ir.VectorType(regs[g].type, n), None)
            for q in range(n):
                val = b.insert_element(val, regs[g + q], _cint(q))
        b.store(val, ptr, align=esize * n)  # (threads holding copies of an element all write the same value)


@handles("ttg.local_store")
def _local_store(lw: KernelLowering, op):
    """A register tile into its stage, where the stage's encoding puts each element: one st.shared per run of
    up to 16 bytes a thread holds along the stage's contiguous dimension (a 16-byte run stays whole under any
    swizzle), addressed as one base plus immediates where `register_tile_addresses` finds constant distances.
    A stage wgmma reads (swizzled, sm_90) is then handed to the async proxy (fence.proxy.async); the barrier
    that orders the stores before the reads is a separate `ttg.barrier`, one for all the tiles a dot reads."""
    b = lw.b
    v, view_v = op.operands
    t, view = v.type, view_v.type
    regs = lw.regs(v)
    if view.scalar.ir != t.scalar.ir:
        raise AssertionError(f"ttg.local_store: a {t.scalar} tile into a {view.scalar} stage")
    if op.attrs.get("tf32"):  # fp32 read by a tf32 dot: rounded as a dot staging its registers rounds them
        cvt = ir.FunctionType(I32, [ir.FloatType()])
        regs = [b.asm(cvt, "cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], side_effect=False) for x in regs]
    store_to_stage(lw, t, regs, view, lw.get(view_v))
    if lw.arch >= 90 and view.swizzle:
        fence_proxy_async(lw)


@handles("ttg.async_commit")
def _async_commit(lw: KernelLowering, op):
    lw.b.asm(ir.FunctionType(VOID, []), "cp.async.commit_group;", "", [], side_effect=True)


@handles("ttg.async_wait")
def _async_wait(lw: KernelLowering, op):
    n = int(op.attrs.get("pending", 0))
    lw.b.asm(ir.FunctionType(VOID, []), f"cp.async.wait_group {n};", "~{memory}", [], side_effect=True)
    if lw.arch >= 90 and CP_ASYNC_PROXY_FENCE:
        fence_proxy_async(lw)
    lw.barrier()


def fence_proxy_async(lw: KernelLowering):
    lw.b.asm(ir.FunctionType(VOID, []), "fence.proxy.async.shared::cta;", "~{memory}", [], side_effect=True)

