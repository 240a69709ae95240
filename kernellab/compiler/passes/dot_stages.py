"""Shared-memory stages for the tiles tensor-core dots read: what the four passes that make and fill them share.

`stage_invariant_dot_operands` copies a tile loaded once into a one-stage buffer, `pipeline_dot_operands`
multi-buffers the tiles a loop's dots read and fills the stages with cp.async ahead of the math, and
`fill_stages_with_tma` and `warpgroup_turns` rewrite a loop it pipelined. Here: an op builder, the cp.async copy
of a tile (from a tensor of pointers or a block pointer), the encoding of a stage buffer, and `PipelinedLoop`,
which reads back the structure `pipeline_dot_operands` gives a loop.
"""
from __future__ import annotations

from ..gpu import block_ptr
from ..gpu.axis_info import AxisAnalysis
from ..gpu.layouts import Blocked, default_blocked
from ..gpu.scratch import MMA_PAD, _numel, is_wgmma, mma_instr, wgmma_kind
from ..gpu.smem_layout import swizzled
from ..ir import Module, Op
from ..rewrite import extend_for_iter_args, insert_before
from ..types import DTYPES, MemDescType, PointerType, TensorType, int1

I32 = DTYPES["i32"]
I64 = DTYPES["i64"]


class Builder:
    """Create ops before an anchor, with the loop's location."""

    def __init__(self, anchor: Op, loc):
        self.anchor, self.loc = anchor, loc

    def op(self, name, operands, types, attrs=None, hints=None, loc=None):
        o = Op(name, operands, types, attrs or {}, (), loc or self.loc, hints)
        insert_before(self.anchor, o)
        return o

    def const(self, value, t=I32):
        return self.op("arith.constant", [], [t], {"value": value}).result

    def add(self, a, b):
        return self.op("arith.addi", [a, b], [a.type]).result

    def lt(self, a, b):
        return self.op("arith.cmpi", [a, b], [int1], {"predicate": "slt"}).result


class BlockPtrCopies:
    """Block-pointer loads (`tl.load(block_ptr, boundary_check=...)`): the vector width and layout of their
    cp.async copies, from the axis analysis of the kernel (made once, when a block pointer first asks)."""

    def __init__(self, module: Module, options):
        self.fn = module.kernel
        self.num_warps = getattr(options, "num_warps", 4)
        self._axis = None
        self._vec: dict = {}

    @property
    def axis(self) -> AxisAnalysis:
        if self._axis is None:
            self._axis = AxisAnalysis(self.fn)
        return self._axis

    def vec_and_why(self, ld: Op):
        if id(ld) not in self._vec:
            vec, why = block_ptr.copy_vec(ld, self.axis)
            t = ld.result.type
            vec = min(vec, max(1, _numel(t.shape) // (32 * self.num_warps)))  # no more than a thread holds
            if why is None and vec * t.scalar.bits // 8 < 4:
                why = f"{vec * t.scalar.bits // 8}-byte runs per thread (cp.async moves 4, 8 or 16 bytes)"
            self._vec[id(ld)] = (vec, why)
        return self._vec[id(ld)]

    def why_not(self, ld: Op) -> str | None:
        pad = ld.attrs.get("padding", "zero")
        if pad != "zero":
            return f'padding_option="{pad}" (cp.async and TMA fill out-of-bounds elements with zeros)'
        return self.vec_and_why(ld)[1]

    def copy(self, bld: Builder, ld: Op, bp, view, pred, vec=None):
        """cp.async of a block pointer's tile: its addresses and bounds mask in a layout holding the widest run of
        contiguous elements per thread the block allows, then the copy (out-of-bounds runs become zeros) of `vec`
        elements at a time (default: the whole run). Runs copied element by element (into a K-major tf32 stage)
        keep the wide layout: a run's addresses are then one base plus immediates, not one register pair each."""
        t = ld.result.type
        run = self.vec_and_why(ld)[0]
        vec = vec or run
        layout = default_blocked(t.shape, self.num_warps, order=t.layout.order, spt_fast=run)
        addr = bld.op("ttg.block_ptr_addresses", [bp], [TensorType(t.shape, PointerType(t.scalar), layout),
                                                        TensorType(t.shape, int1, layout)],
                      {"boundary_check": list(ld.attrs.get("boundary_check", []))}, loc=ld.loc)
        attrs = {"vec": vec, "run": run} if vec < run else {"vec": vec}
        bld.op("ttg.async_copy", [addr.results[0], view, pred, addr.results[1]], [], attrs, loc=ld.loc)


def copy_tile(bld: Builder, ld: Op, ptrs, view, pred, bpc: BlockPtrCopies, mask=None):
    """cp.async of the tile `ld` loads, from `ptrs` (its pointers or block pointer, possibly cloned) into `view`:
    runs of the load's `vec` elements, or single elements where the buffer is contiguous along the other
    dimension (a K-major tf32 stage of a tile loaded N-contiguous)."""
    across = view.type.order[0] != ld.result.type.layout.order[0]
    if ld.operands[0].type.is_block_ptr():
        bpc.copy(bld, ld, ptrs, view, pred, 1 if across else None)
        return
    operands = [ptrs, view, pred] + ([mask] if mask is not None else [])
    # across: one element a copy; `run` says the load's runs are contiguous in memory, so a run's source addresses
    # are its first pointer plus immediates (the other pointers of a carried pointer tile then die)
    attrs = {"vec": 1, "run": ld.attrs.get("vec", 1)} if across else {"vec": ld.attrs.get("vec", 1)}
    bld.op("ttg.async_copy", operands, [], attrs, loc=ld.loc)


# element types whose tiles cp.async moves into stages: 16-bit ones for every tensor-core dot; the 8-bit and fp32 (tf32)
# ones where wgmma reads them, fp32 and int8 also for mma.sync (`mma_sync_k_major`, `mma_sync_i8`; fp8 there is upcast
# in registers first). An fp32 stage is read as it is: the tensor cores take the top 19 bits of each element (truncation
# to tf32, as Triton's pipelined tf32 dots), where the register path rounds (cvt.rna.tf32.f32) when it stages.
STAGED_TYPES = ("f16", "bf16")
WGMMA_STAGED_TYPES = STAGED_TYPES + ("f8e4nv", "f8e5", "i8", "f32")


def copyable(ld: Op, bpc: BlockPtrCopies, wgmma: bool = False, k_major: bool = False, i8: bool = False) -> str | None:
    """Why cp.async cannot move this load's tile into shared memory, or None when it can (`wgmma`: every reader
    is a wgmma dot, which also takes 8-bit tiles; `k_major`: every reader is an mma.sync that reads the tile from
    a K-major stage, `mma_sync_k_major`; `i8`: every reader is an int8 mma.sync, `mma_sync_i8`)."""
    if ld.attrs.get("volatile"):
        return "volatile load"
    t = ld.result.type
    if t.scalar.ir not in (WGMMA_STAGED_TYPES if wgmma else STAGED_TYPES) and not k_major and not i8:
        return f"{t.scalar.ir} elements" + ("" if wgmma or t.scalar.ir not in WGMMA_STAGED_TYPES else
                                            " read by mma.sync")
    if ld.operands[0].type.is_block_ptr():
        return bpc.why_not(ld)
    if not isinstance(t.layout, Blocked):
        return "the load has no blocked layout"
    vec = ld.attrs.get("vec", 1)
    nbytes = vec * t.scalar.bits // 8
    if nbytes not in (4, 8, 16):
        return f"{nbytes}-byte accesses (cp.async moves 4, 8 or 16 bytes)"
    if len(ld.operands) > 2:
        other = ld.operands[2].defining_op
        if other is None or other.name != "arith.constant" or other.attrs.get("value") not in (0, 0.0):
            return "a non-zero `other` (cp.async fills masked-off elements with zeros)"
    return None


def k_major_why(dot: Op, index: int, order) -> str | None:
    """Why wgmma cannot read operand `index` of `dot` from a stage filled from a tile with dim `order[0]`
    contiguous in global memory, or None. wgmma transposes 16-bit operands only: 8- and 32-bit ones must be
    K-major in shared memory, A [M][K] with K contiguous and B stored [N][K]. An fp32 (tf32) tile contiguous along
    M or N is copied 4 bytes (one element) at a time into a K-major stage (`copy_tile`, as Triton does); an 8-bit
    one cannot be (cp.async's runs are 4-16 bytes along the global contiguous dim, 4+ elements), so it keeps the
    register path, which stages it K-major every iteration (as Triton 3.6 does: tt.load + local_alloc)."""
    if mma_sync_i8(dot) and index == 0 and order[0] != 1:
        return ("s8 operand a is M-contiguous in global memory; mma.sync reads 8-bit A K-major only (ldmatrix cannot "
                "transpose bytes; kept in registers)")
    kind = wgmma_kind(dot) if is_wgmma(dot) else None
    if kind is None or not kind.k_major_only or order[0] == (1 if index == 0 else 0) or kind.ptx == "tf32":
        return None
    return (f"{kind.ptx} operand {'ab'[index]} is {'MN'[index]}-contiguous in global memory; wgmma reads "
            "8/32-bit operands K-major only (kept in registers, transposed into shared memory each iteration)")


def tf32_wgmma_operand(dot: Op, t) -> bool:
    """An fp32 tile a wgmma reads as tf32. wgmma cannot transpose 32-bit operands: its stage buffer is K-major
    (`buffer_type`), so a tile contiguous along the other dimension is copied 4 bytes at a time (as Triton does);
    the tensor cores read the fp32 bits as tf32 (the low mantissa bits ignored, Triton's pipelined copies too)."""
    return t.scalar.ir == "f32" and is_wgmma(dot) and wgmma_kind(dot).ptx == "tf32"


def mma_sync_k_major(dot: Op, t) -> bool:
    """An fp32 (tf32) tile an mma.sync reads. ldmatrix cannot transpose 32-bit elements, so its stage is K-major
    (A [M][K], B [N][K], rows padded by 16 bytes: ldmatrix reads each k-step's fragments as pairs of b16, as from
    the register path's staging); a tile contiguous along M or N is copied 4 bytes at a time, as for wgmma. The
    tensor cores read the fp32 bits as tf32 (truncated; the register path rounds: Triton's mma.sync operands read
    from its pipelined stages are not rounded either). Staged, the tile is never in registers: the loop keeps 4
    fragment registers per 16x8 k-step instead of the whole tile (fla's chunk_fwd_kernel_h: 240 -> ~100)."""
    return ("mma" in dot.attrs and not is_wgmma(dot) and t.scalar.ir == "f32"
            and mma_instr(dot).name.endswith(".tf32"))


def mma_sync_i8(dot: Op) -> bool:
    """An int8 mma.sync (m16n8k32.s8). Its stages are read as laid out in global memory: A K-contiguous by ldmatrix
    (`k_major_why` keeps an M-contiguous A in registers), B by ldmatrix when K-contiguous, else byte by byte
    (`lower_dot._b_bytes`, as Triton's shared-memory reads of an N-contiguous int8 B); rows padded by 16 bytes."""
    return "mma" in dot.attrs and not is_wgmma(dot) and mma_instr(dot).name.endswith(".s8")


def buffer_type(dot: Op, t, stages: int, index: int | None = None, transposed: bool = False):
    """The shared-memory encoding the dot reads this tile in: swizzled for wgmma, padded rows for ldmatrix
    (None when wgmma cannot read it, or the dot is smaller than one 16x8 mma tile). A 32-bit tile (operand
    `index`, read through a 2-D transpose when `transposed`) is stored K-major for wgmma, else None."""
    shape = (stages,) + tuple(t.shape)
    m, n = dot.operands[0].type.shape[0], dot.operands[1].type.shape[1]
    if m < 16 or n < 8:
        return None  # smaller than one mma.sync tile: the dot stages it itself, rows wrapped onto the tile
    if t.scalar.bits == 32:
        wgmma_tf32 = tf32_wgmma_operand(dot, t)
        if index is None or not (wgmma_tf32 or mma_sync_k_major(dot, t)):
            return None
        order = (1, 0) if index == 0 else (0, 1)  # the view the dot reads: A [M][K], B [K][N], K contiguous
        order = tuple(1 - o for o in order) if transposed else order
        return swizzled(shape, t.scalar, order) if wgmma_tf32 else MemDescType(shape, t.scalar, order,
                                                                               mma_instr(dot).pad)
    if is_wgmma(dot):
        return swizzled(shape, t.scalar, tuple(t.layout.order))
    if t.scalar.bits == 8:
        return MemDescType(shape, t.scalar, tuple(t.layout.order), mma_instr(dot).pad) if mma_sync_i8(dot) else None
    return MemDescType(shape, t.scalar, tuple(t.layout.order), MMA_PAD)


def view_type(tile, transposed: bool):
    """One stage as a dot reads it: the tile, or its 2-D transpose (the same bytes, dims and order swapped)."""
    if not transposed:
        return tile
    return MemDescType(tuple(reversed(tile.shape)), tile.elem, tuple(1 - o for o in tile.order), tile.pad,
                       tile.swizzle)


def mbarrier_ring(bld: Builder, stages: int, hint: str, **attrs):
    """`stages` mbarriers, one per stage."""
    return bld.op("ttg.mbarrier_alloc", [], [MemDescType((stages, 1, 1), I64, (1, 0))], {"stages": stages, **attrs},
                  [hint]).result


class Fill:
    """The copies that fill one stage of every buffer of a pipelined loop: in the prologue (one per stage filled
    ahead) or in the body (the stage refilled each iteration)."""

    def __init__(self, slot, pred):
        self.slot, self.pred = slot, pred
        self.copies: list = []  # (buffer, memdesc_index view op, ttg.block_ptr_addresses op or None, copy op)
        self.commit: Op | None = None


class PipelinedLoop:
    """A loop as `pipeline_dot_operands` leaves it, read back for the passes that rewrite it: its stage buffers
    (in the order of the wait that opens the body), the slots it reads and writes, the fills of the prologue and
    the body, the stage rotation before the yield and the drain after the loop."""

    def __init__(self, for_op: Op):
        self.for_op = for_op
        self.body = body = for_op.regions[0]
        self.stages = for_op.attrs["pipelined_stages"]
        self.top_wait = body.ops[0]
        self.bufs = list(self.top_wait.operands)
        self.allocs = [b.defining_op for b in self.bufs]
        self.reads, fills = {}, {}  # buffer id -> (dot, operand index); slot id -> Fill
        for buf in self.bufs:
            for view in [u for u in buf.uses if u.name == "ttg.memdesc_index"]:
                for user in view.result.uses:
                    if user.name == "tt.dot":
                        self.reads[id(buf)] = (user, user.operands.index(view.result))
                        self.read_slot = view.operands[1]
                    elif user.name == "ttg.async_copy":
                        slot = view.operands[1]
                        fill = fills.setdefault(id(slot), Fill(slot, user.operands[2]))
                        src = user.operands[0].defining_op
                        addr = src if src is not None and src.name == "ttg.block_ptr_addresses" else None
                        fill.copies.append((buf, view, addr, user))
        for fill in fills.values():
            block = fill.copies[-1][3].block
            ops = block.ops
            fill.commit = next(o for o in ops[ops.index(fill.copies[-1][3]):] if o.name == "ttg.async_commit")
        self.body_fill = next(f for f in fills.values() if f.copies[0][3].block is body)
        self.write_slot = self.body_fill.slot
        self.prologue_fills = [f for f in fills.values() if f is not self.body_fill]

    @property
    def loc(self):
        return self.for_op.loc

    @property
    def dots(self) -> list:
        return [op for op in self.body.ops if op.name == "tt.dot" and "mma" in op.attrs]

    def rotation(self, slot):
        """(the select that gives `slot` its next value, the i1 'slot is the last stage', the constant 1)."""
        y = self.body.terminator
        sel = y.operands[self.body.args.index(slot) - 1].defining_op
        return sel, sel.operands[0], sel.operands[2].defining_op.operands[1]

    def drain(self) -> Op:
        """The wait after the loop for every copy still in flight."""
        ops = self.for_op.block.ops
        return next(o for o in ops[ops.index(self.for_op) + 1:] if o.name == "ttg.async_wait" and
                    list(o.operands) == self.bufs)

    def carry(self, inits, nexts) -> None:
        """Carry more values through the loop: the block arguments last added to the body start at `inits` (made
        before the loop) and the body yields `nexts` for them. The loop op is rebuilt: `for_op` is the new one."""
        y = self.body.terminator
        for v in nexts:
            y.operands.append(v)
            v.uses.append(y)
        self.for_op = extend_for_iter_args(self.for_op, inits)


def next_op(op: Op) -> Op:
    """The op that follows `op` in its block: new ops built before it come right after `op`."""
    ops = op.block.ops
    return ops[ops.index(op) + 1]


def pipelined_loops(module: Module) -> list:
    """The loops still as `pipeline_dot_operands` left them: their body opens with the wait for its cp.async copies
    (a loop another pass rewrote already waits on mbarriers instead)."""
    return [PipelinedLoop(op) for op in list(module.kernel.walk())
            if op.name == "scf.for" and op.block is not None and "pipelined_stages" in op.attrs
            and op.regions[0].ops[0].name == "ttg.async_wait"]
