"""TMA (sm_90's tensor memory accelerator) and the mbarriers its copies complete on.

A `ttg.tensormap` becomes a kernel parameter: a 128-byte CUtensorMap the launcher encodes from the
launch's arguments (see runtime/tensormap.py for the recipe recorded in the argument kinds), passed
`byval` with 64-byte alignment and the "nvvm.grid_constant" attribute, so the kernel uses it where it
lies in parameter space (llvmlite cannot spell that attribute: `patch_params` edits the IR text).
A `ttg.make_tensormap` (a map over values the kernel computes) is built by the kernel in its program's
128-byte slot of a global scratch buffer the launcher allocates (the last parameter, runtime/scratch.py).

One thread starts each stage's copies: `mbarrier.arrive.expect_tx` announces the bytes, then one
`cp.async.bulk.tensor.2d` per 16-byte-chunk-swizzled atom column of the tile (the box is one swizzle
span wide, all rows high), each completing its bytes on the stage's mbarrier. Every thread then waits
with `mbarrier.try_wait.parity` on the phase the stage completes. The TMA swizzle modes (128B: address
bits 4-6 ^= bits 7-9; 64B: 4-5 ^= 7-8; 32B: 4 ^= 7) are the XOR pattern of gpu/smem_layout.py on
1024-byte aligned stages, so a box lands exactly where the wgmma descriptors read.
"""
from __future__ import annotations

import re

import llvmlite.ir as ir

from ..gpu.block_ptr import unwiden
from ..ir import Function
from .lower_async import CP_ASYNC_PROXY_FENCE
from .lowering_core import I8, I32, I64, VOID, KernelLowering, LoweringError, _cint, handles

TENSORMAP_BYTES = 128


def _ref(v, fn_args):
    """A launch-time value: ["arg", index of the kernel argument], ["const", value], or ["muli" / "addi", bits,
    ref, ref] (wrapping at the value's width, as the kernel computes it)."""
    v = unwiden(v)
    d = v.defining_op
    if d is None:
        for i, a in enumerate(fn_args):
            if a is v:
                return ["arg", i]
    elif d.name == "arith.constant":
        return ["const", int(d.attrs["value"])]
    elif d.name in ("arith.muli", "arith.addi"):
        return [d.name[6:], v.type.bits, _ref(d.operands[0], fn_args), _ref(d.operands[1], fn_args)]
    raise LoweringError("a ttg.tensormap operand is neither a kernel argument nor a constant")


def tensormap_recipes(fn: Function) -> tuple[list, dict]:
    """(distinct recipes in parameter order, id(tensormap op) -> index) for a kernel's `ttg.tensormap`s.
    A recipe says how the launcher makes the tensor map: base argument, dims and strides (contiguous dim
    first, strides in elements), box, swizzle bytes and element type."""
    recipes, index = [], {}
    for op in fn.walk():
        if op.name != "ttg.tensormap":
            continue
        base, d0, d1, s1, *outer = op.operands  # then (extent, stride) of each leading unit dim, innermost first
        kind, i = _ref(base, fn.args)
        if kind != "arg":
            raise LoweringError("a ttg.tensormap base must be a kernel argument")
        r = {"base": i, "dims": [_ref(d, fn.args) for d in [d0, d1] + outer[0::2]],
             "strides": [_ref(s, fn.args) for s in [s1] + outer[1::2]],
             "box": [int(b) for b in op.attrs["box"]], "swizzle": int(op.attrs["swizzle"]),
             "dtype": base.type.elem.ir}
        if r not in recipes:
            recipes.append(r)
        index[id(op)] = recipes.index(r)
    return recipes, index


def patch_params(llvm_ir: str, names) -> str:
    """Give the tensor-map parameters their attributes: byval of 128 bytes, align 64, nvvm.grid_constant."""
    for name in names:
        pat = re.compile(r'ptr %"?' + re.escape(name) + r'"?(?=[,)])')
        llvm_ir, n = pat.subn(f'ptr byval([{TENSORMAP_BYTES} x i8]) align 64 "nvvm.grid_constant" %"{name}"',
                              llvm_ir, count=1)
        if n != 1:
            raise LoweringError(f"cannot find the tensor-map parameter {name} in the kernel's signature")
    return llvm_ir


def _saddr(lw: KernelLowering, offset):
    """32-bit shared-memory address of a byte offset in the kernel's shared memory."""
    return lw.b.ptrtoint(lw.b.gep(lw.smem, [offset], source_etype=I8), I32)


def _one_thread(lw: KernelLowering, pred=None):
    """i32 1 in thread 0 (the producer warp's first thread in a warp-specialized producer) where `pred` holds,
    else 0."""
    first = lw.b.icmp_unsigned("==", lw.tid, _cint(lw.leader))
    if pred is not None:
        first = lw.b.and_(first, pred)
    return lw.b.zext(first, I32)


def _asm(lw: KernelLowering, text: str, cons: str, args):
    lw.b.asm(ir.FunctionType(VOID, [a.type for a in args]), text, cons, args, side_effect=True)


@handles("ttg.tensormap")
def _tensormap(lw: KernelLowering, op):
    lw.put(op.result, lw.b.ptrtoint(lw.tensormap_params[lw.tensormap_index[id(op)]], I64))


# tensormap.replace codes (PTX ISA, "tensormap.replace"): element types and swizzle modes
_TMAP_ELEMTYPE = {"u8": 0, "i8": 0, "u16": 1, "i16": 1, "u32": 2, "i32": 3, "u64": 4, "i64": 5, "f16": 6, "f32": 7,
                  "f64": 9, "bf16": 10}
_TMAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}


def _made_dtype(dtype: str) -> int:
    return 0 if dtype.startswith("f8") else _TMAP_ELEMTYPE[dtype]  # fp8 travels as bytes: TMA only copies


@handles("ttg.make_tensormap")
def _make_tensormap(lw: KernelLowering, op):
    """The kernel makes a tensor map whose base, extents or strides it computes (a grouped GEMM's per-group
    pointers), as Triton does on sm_90: the issuing thread's warp zeroes 128 bytes of shared memory, its
    issuing thread writes every field with `tensormap.replace`, the warp copies the object to this program's slot
    of the launch's global scratch with `tensormap.cp_fenceproxy` (a release for the tensor-map proxy) and
    acquires it with `fence.proxy.tensormap::generic.acquire`. Only the issuing thread reads the map (its TMA
    copies), so no block barrier is needed."""
    b = lw.b
    base, d0, d1, s1, *outer = op.operands
    esize = max(base.type.elem.bits // 8, 1)
    dims = [d0, d1] + outer[0::2]
    strides = [s1] + outer[1::2]
    rank = len(dims)
    # this program's slot: scratch + (linear program id * maps + index) * 128
    sreg = [b.call(lw.intrinsic(f"llvm.nvvm.read.ptx.sreg.{r}.{a}", I32, []), []) for r in ("ctaid", "nctaid")
            for a in "xyz"]
    cx, cy, cz, nx, ny, _ = sreg
    pid = b.add(cx, b.mul(nx, b.add(cy, b.mul(ny, cz))))
    n = len(lw.made_tensormaps)
    slot = b.add(b.mul(b.zext(pid, I64), _cint(n * TENSORMAP_BYTES, I64)),
                 _cint(lw.made_tensormaps[id(op)] * TENSORMAP_BYTES, I64))
    gaddr = b.add(b.ptrtoint(lw.scratch_param, I64), slot)
    stage32 = _saddr(lw, _cint(int(op.attrs["smem_offset"])))
    stage = b.zext(stage32, I64)
    warp_go = b.zext(b.icmp_unsigned("==", lw.warp, _cint(lw.leader // 32)), I32)
    _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p st.shared.b32 [$0], 0; }", "r,r,~{memory}",
         [b.add(stage32, b.mul(lw.lane, _cint(4))), warp_go])
    _asm(lw, "bar.warp.sync -1;", "~{memory}", [])
    go = _one_thread(lw)

    def rep(field, value, ty="b32", ordinal=None, imm=False):
        val = str(value) if imm else "$2"
        ordi = f"{ordinal}, " if ordinal is not None else ""
        args = [stage, go] + ([] if imm else [value])
        cons = "l,r" + ("" if imm else ",r" if ty == "b32" else ",l") + ",~{memory}"
        _asm(lw, f"{{ .reg .pred p; setp.ne.b32 p, $1, 0; @p tensormap.replace.tile.{field}.shared::cta.b1024.{ty} "
             f"[$0], {ordi}{val}; }}", cons, args)

    def i32(v):
        x = lw.get(v)
        return x if x.type == I32 else b.trunc(x, I32)

    def i64(v):
        x = lw.get(v)
        if isinstance(x.type, ir.PointerType):
            return b.ptrtoint(x, I64)
        return x if x.type == I64 else b.sext(x, I64)

    rep("global_address", i64(base), "b64")
    rep("rank", rank - 1, imm=True)
    for i, box in enumerate(op.attrs["box"]):
        rep("box_dim", _cint(int(box)), ordinal=i)
    for i, d in enumerate(dims):
        rep("global_dim", i32(d), ordinal=i)
    for i, st in enumerate(strides):
        rep("global_stride", b.mul(i64(st), _cint(esize, I64)), "b64", ordinal=i)
    for i in range(rank):
        rep("element_stride", _cint(1), ordinal=i)
    rep("elemtype", _made_dtype(op.attrs["dtype"]), imm=True)
    rep("interleave_layout", 0, imm=True)
    rep("swizzle_mode", _TMAP_SWIZZLE[int(op.attrs["swizzle"])], imm=True)
    rep("fill_mode", 0, imm=True)
    _asm(lw, "bar.warp.sync -1;", "~{memory}", [])
    _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic"
         f".release.gpu.sync.aligned [$0], [$1], {TENSORMAP_BYTES}; @p fence.proxy.tensormap::generic.acquire.gpu "
         f"[$0], {TENSORMAP_BYTES}; }}", "l,l,r,~{memory}", [gaddr, stage, warp_go])
    lw.put(op.result, gaddr)


@handles("ttg.mbarrier_alloc")
def _mbarrier_alloc(lw: KernelLowering, op):
    base = op.attrs.get("smem_offset", 0)
    lw.put(op.result, _cint(base))
    t = op.result.type
    one = _one_thread(lw)
    for s in range(t.shape[0]):
        bar = _saddr(lw, _cint(base + s * t.tile_bytes))
        _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p mbarrier.init.shared::cta.b64 [$0], "
             f"{int(op.attrs.get('count', 1))}; }}", "r,r", [bar, one])
    # the initialized barriers must be visible to the TMA unit (async proxy) and to every thread
    _asm(lw, "fence.mbarrier_init.release.cluster;", "~{memory}", [])
    _asm(lw, "fence.proxy.async.shared::cta;", "~{memory}", [])
    lw.barrier()


@handles("ttg.mbarrier_expect")
def _mbarrier_expect(lw: KernelLowering, op):
    bar, pred = lw.get(op.operands[0]), lw.get(op.operands[1])
    _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $1, 0; "
         f"@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {int(op.attrs['bytes'])}; }}", "r,r",
         [_saddr(lw, bar), _one_thread(lw, pred)])


@handles("ttg.tma_copy")
def _tma_copy(lw: KernelLowering, op):
    desc_v, bp_v, view_v, bar_v, pred_v = op.operands
    bar, desc = _saddr(lw, lw.get(bar_v)), lw.get(desc_v)
    go = _one_thread(lw, lw.get(pred_v))
    for dst, coords in _boxes(lw, bp_v, view_v):
        n = len(coords)
        c = ", ".join(f"${2 + i}" for i in range(n))
        _asm(lw, f"{{ .reg .pred p; setp.ne.b32 p, ${2 + n}, 0; @p cp.async.bulk.tensor.{n}d.shared::cluster.global"
             f".tile.mbarrier::complete_tx::bytes [$0], [$1, {{{c}}}], [${3 + n}]; }}",
             "r,l," + "r," * n + "r,r,~{memory}", [dst, desc, *coords, go, bar])


def _boxes(lw: KernelLowering, bp_v, view_v):
    """(shared address, tensor coordinates: fast, slow, then each leading unit dim of the block innermost first) of
    each TMA box of a stage's tile: one box per swizzle atom column, w contiguous elements by all the tile's rows
    (loads and stores move the same boxes). The 2-D stage of a `[1, M, K]` block is its last two dims."""
    view = view_v.type
    _, _, _, _, offs = lw.get(bp_v)
    k = len(offs) - 2
    fast, slow = view.order[0] + k, view.order[1] + k
    outer = [offs[d] for d in range(k - 1, -1, -1)]
    z = view.swizzle
    w = z // (view.scalar.bits // 8)
    rows = view.shape[view.order[1]]
    base = lw.get(view_v)
    for j in range(view.shape[view.order[0]] // w):
        c0 = lw.b.add(offs[fast], _cint(j * w)) if j else offs[fast]
        yield _saddr(lw, lw.b.add(base, _cint(j * rows * z))), [c0, offs[slow]] + outer


@handles("ttg.mbarrier_wait")
def _mbarrier_wait(lw: KernelLowering, op):
    bar, phase = lw.get(op.operands[0]), lw.get(op.operands[1])
    if len(op.operands) > 2 or "warpgroup" in op.attrs:
        # only where pred holds (a warp-specialized producer's fill past the loop's end), or only in one consumer
        # warpgroup (passes/pingpong.py: the turns tell the other one)
        go = lw.b.zext(lw.get(op.operands[2]), I32) if len(op.operands) > 2 else _cint(1)
        if "warpgroup" in op.attrs:
            mine = lw.b.zext(lw.b.icmp_unsigned("==", lw.b.lshr(lw.warp, _cint(2)), _cint(op.attrs["warpgroup"])),
                             I32)
            go = lw.b.and_(go, mine)
        _asm(lw, "{ .reg .pred done, go; setp.ne.b32 go, $2, 0; @!go bra.uni skip_wait; wait_phase: "
             "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1; @!done bra.uni wait_phase; skip_wait: }",
             "r,r,r,~{memory}", [_saddr(lw, bar), phase, go])
        return
    _asm(lw, "{ .reg .pred done; wait_phase: mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1; "
         "@!done bra.uni wait_phase; }", "r,r,~{memory}", [_saddr(lw, bar), phase])
    if op.attrs.get("fence_proxy") and CP_ASYNC_PROXY_FENCE:  # cp.async wrote the stage (see lower_async)
        _asm(lw, "fence.proxy.async.shared::cta;", "~{memory}", [])


@handles("ttg.async_arrive")
def _async_arrive(lw: KernelLowering, op):
    bar = _saddr(lw, lw.get(op.operands[0]))
    _asm(lw, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", "r,~{memory}", [bar])


@handles("ttg.mbarrier_arrive")
def _mbarrier_arrive(lw: KernelLowering, op):
    bar, pred = lw.get(op.operands[0]), lw.get(op.operands[1])
    go = lw.b.zext(lw.b.and_(lw.b.icmp_unsigned("==", lw.lane, _cint(0)), pred), I32)
    _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p mbarrier.arrive.shared::cta.b64 _, [$0]; }", "r,r,~{memory}",
         [_saddr(lw, bar), go])


@handles("ttg.warpgroup_turn")
def _warpgroup_turn(lw: KernelLowering, op):
    b = lw.b
    wg = b.lshr(lw.warp, _cint(2))
    own, other = b.add(wg, _cint(1)), b.sub(_cint(2), wg)
    n = lw.opts.num_warps * 32
    kind = op.attrs["kind"]
    if kind == "start":  # warpgroup 1 lets warpgroup 0 take the first turn
        _asm(lw, f"{{ .reg .pred p; setp.eq.u32 p, $0, 1; @p bar.arrive 1, {n}; }}", "r,~{memory}", [wg])
        _asm(lw, f"bar.sync $0, {n};", "r,~{memory}", [own])
    elif kind == "wait":
        if op.operands:  # taken only once these are computed (passes/pingpong.py; ptxas would hoist the bar.sync)
            from .lower_wgmma import pin_before_wait

            pin_before_wait(lw, op.operands)
        _asm(lw, f"bar.sync $0, {n};", "r,~{memory}", [own])
    elif kind == "pass":
        _asm(lw, f"bar.arrive $0, {n};", "r,~{memory}", [other])
    else:  # finish: warpgroup 0 gives back the turn warpgroup 1 still waits for
        _asm(lw, f"{{ .reg .pred p; setp.eq.u32 p, $0, 0; @p bar.arrive 2, {n}; }}", "r,~{memory}", [wg])


@handles("ttg.mbarrier_inval")
def _mbarrier_inval(lw: KernelLowering, op):
    bars = op.operands[0]
    t = bars.type
    base = lw.get(bars)
    one = _one_thread(lw)
    for s in range(t.shape[0]):
        bar = _saddr(lw, lw.b.add(base, _cint(s * t.tile_bytes)))
        _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p mbarrier.inval.shared::cta.b64 [$0]; }", "r,r",
             [bar, one])
    lw.barrier()  # the addresses may be reused by the next buffer only once invalidated



@handles("ttg.tma_store")
def _tma_store(lw: KernelLowering, op):
    """Thread 0 stores the stage's tile, one box per swizzle atom column (as `ttg.tma_copy` loads it), and commits
    the boxes as one bulk group; the buffer may be written again after `cp.async.bulk.wait_group.read`."""
    desc_v, bp_v, view_v = op.operands
    desc = lw.get(desc_v)
    go = _one_thread(lw)
    for src, coords in _boxes(lw, bp_v, view_v):
        n = len(coords)
        c = ", ".join(f"${1 + i}" for i in range(n))
        _asm(lw, f"{{ .reg .pred p; setp.ne.b32 p, ${2 + n}, 0; @p cp.async.bulk.tensor.{n}d.global.shared::cta"
             f".tile.bulk_group [$0, {{{c}}}], [${1 + n}]; }}", "l," + "r," * n + "r,r,~{memory}",
             [desc, *coords, src, go])
    _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $0, 0; @p cp.async.bulk.commit_group; }", "r,~{memory}", [go])


@handles("ttg.tma_store_wait")
def _tma_store_wait(lw: KernelLowering, op):
    """Every thread (only the one that issued TMA stores has groups): at most `pending` groups still reading."""
    _asm(lw, f"cp.async.bulk.wait_group.read {int(op.attrs.get('pending', 0))};", "~{memory}", [])
